import Foundation
import GatewayCore
import HTTPTypes
import Logging
import NIOCore
import ServiceLifecycle

/// An HTTP service elsewhere, served under the gateway's mount: configured in plugins.yaml alone,
/// as many times as there are services (`weather: { type: upstream, config: ... }`), each with
/// the gateway's own auth, scopes, rate limits, response cache and metrics on top.
///
/// Requests and replies stream through (a large download passes in bounded memory). Instances are
/// balanced round robin or by the fewest requests in flight, checked actively and ejected after
/// failures; a circuit breaker stops calls to a failing service for a while. A service that cannot
/// be reached answers 502, one too slow 504, one left alone by the breaker 503 with `Retry-After`.
public struct UpstreamPlugin: ServicePlugin {
    public static let id = "upstream"
    public static let summary = "An HTTP service elsewhere, forwarded with the gateway's auth, limits, cache and metrics"

    let settings: UpstreamSettings
    let pool: UpstreamPool
    let forwarder: UpstreamForwarder
    let context: PluginContext
    public let routes: [GatewayCore.Route]
    public let schemas: [String: JSONValue]
    public let documentedPaths: [String: JSONValue]

    public init(configuration: Configuration, context: PluginContext) async throws {
        let settings = try configuration.settings(
            environment: context.environment,
            readFile: { path in try? String(contentsOf: context.resolve(path: path), encoding: .utf8) },
            checkSecrets: true, pluginID: context.pluginID)
        self.settings = settings
        self.context = context
        pool = UpstreamPool(settings: settings, name: context.pluginID)
        if settings.forwardToken != nil, context.identityTokens == nil {
            throw ConfigurationError(key: "forwardToken", "needs the gateway's signing keys: add auth.signingKeys to plugins.yaml")
        }
        let forwarder = UpstreamForwarder(settings: settings, pool: pool, http: context.http, serviceName: context.pluginID,
                                          identityTokens: context.identityTokens)
        self.forwarder = forwarder
        // Each route forwards its calls; a route whose WebSockets go on to the service is also a
        // WebSocket route, with the route's access rule (the host checks it, and the key's
        // scopes, before it upgrades).
        routes = settings.routes.map { route in
            GatewayCore.Route.define(route.name, route.method, route.path, summary: route.summary)
                .access(route.access).cache(route.cache).cost(route.cost).tags("upstream")
                .forwards { request, operationContext in try await forwarder.forward(route, request, operationContext) }
        } + settings.routes.filter(\.webSocket).map { route in
            GatewayCore.Route.define(.get, route.path, summary: "WebSocket to \(route.summary)")
                .access(route.access)
                .socket { request, connection, operationContext in
                    try await forwarder.forwardWebSocket(route, request, connection, operationContext)
                }
        }
        if let source = configuration.openapi {
            let imported = await UpstreamDocument.load(source, context: context, routes: settings.routes)
            schemas = imported.schemas
            documentedPaths = imported.paths
        } else {
            schemas = [:]
            documentedPaths = [:]
        }
    }

    public var services: [any Service] {
        guard let health = settings.health else { return [] }
        return [HealthChecker(pool: pool, http: context.http, path: health.path, interval: health.interval, timeout: health.timeout,
                              healthyAfter: health.healthyAfter, unhealthyAfter: health.unhealthyAfter, clock: context.clock, logger: context.logger)]
    }

    public func health() async -> PluginHealth { pool.health() }
}

/// Asks each instance's health path, every interval, and tells the pool what it found.
struct HealthChecker: Service {
    let pool: UpstreamPool
    let http: any UpstreamHTTPClient
    let path: String
    let interval: Duration
    let timeout: Duration
    let healthyAfter: Int
    let unhealthyAfter: Int
    let clock: any WallClock
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await checkAll()
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }

    func checkAll() async {
        await withTaskGroup(of: Void.self) { group in
            for (index, base) in pool.bases.enumerated() {
                group.addTask {
                    let up: Bool
                    do {
                        let reply = try await http.send(UpstreamRequest(method: .get, url: base + path, timeout: timeout), maxBodySize: 1 << 16)
                        up = (200..<400).contains(reply.status.code)
                    } catch {
                        up = false
                    }
                    pool.checked(index, up: up, healthyAfter: healthyAfter, unhealthyAfter: unhealthyAfter, at: clock.now())
                }
            }
        }
    }
}
