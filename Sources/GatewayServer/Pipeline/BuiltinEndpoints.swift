import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore
import NIOFoundationCompat
import SQLKit

extension Gateway {
    /// The gateway's own endpoints: liveness, readiness with per-plugin health, Prometheus
    /// metrics, the OpenAPI document and the plugin list.
    /// `/metrics` answers administrators only, whose credential `metricsReader` resolves (nil:
    /// anyone, with `server.publicMetrics`). The reasons a plugin gives for its health (which may
    /// name hosts, files or upstream errors) are shown to administrators only, found by
    /// `administrators`. `trusted`: the endpoints of the admin listener (`server.admin`), where
    /// the listener's address is the boundary and everything is shown to anyone who reaches it.
    static func builtinEndpoints(plugins: [LoadedPlugin], metrics: GatewayMetrics, openAPIJSON: LazyOpenAPIDocument,
                                 database: GatewayDatabase, metricsReader: (any Authenticator)?, administrators: any Authenticator,
                                 identities: IdentityProviders? = nil, signer: GatewaySigner? = nil, trusted: Bool = false) -> [(path: String, endpoint: GatewayEndpoint)] {
        let metricsReader = trusted ? nil : metricsReader
        /// Whether the caller may see health reasons: on the admin listener, or an administrator's
        /// valid credential. No credential or a bad one only hides the reasons (load balancers'
        /// health checks send none).
        @Sendable func showsReasons(_ request: Request, _ context: GatewayRequestContext) async -> Bool {
            if trusted { return true }
            guard NativeCredentials.refusal(in: request.headers) == nil, let credentials = NativeCredentials.extract(from: request.headers),
                  let principal = try? await administrators.principal(for: credentials, address: context.remoteAddress) else { return false }
            return principal.isAdmin
        }
        @Sendable func json(_ value: some Encodable & Sendable, status: HTTPResponse.Status = .ok) throws -> Response {
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            headers[.cacheControl] = "no-store"
            return Response(status: status, headers: headers, body: .init(byteBuffer: try JSONStreamEncoder.encodeBuffer(value)))
        }
        struct PluginStatus: Encodable, Sendable {
            var id: String
            var summary: String
            var mount: String
            var status: String
            var reason: String?
            var operations: Int
            var dialects: [String]
        }
        struct Readiness: Encodable, Sendable {
            var status: String
            var database: String
            var plugins: [PluginStatus]
            var providers: [IdentityProviders.State]?
        }
        /// Identity providers: degraded while a provider's keys cannot be fetched (the keys
        /// fetched before stay in use; a provider with none refuses its tokens with 503).
        @Sendable func providerStatuses(reasons: Bool) -> [IdentityProviders.State]? {
            identities?.states(reasons: reasons)
        }
        @Sendable func statuses(reasons: Bool) async -> [PluginStatus] {
            var result: [PluginStatus] = []
            for plugin in plugins where !hostPluginIDs.contains(plugin.id) {
                let health = await plugin.instance.health()
                result.append(PluginStatus(id: plugin.id, summary: plugin.summary, mount: plugin.mount, status: health.status.rawValue,
                                           reason: reasons ? health.reason : nil, operations: plugin.instance.operations.count,
                                           dialects: plugin.instance.dialects.map(\.name)))
            }
            return result
        }
        let healthz = ByteBuffer(string: #"{"status":"ok"}"#)
        // The public keys of the gateway's identity tokens, for upstream services to verify them.
        let keySet: [(path: String, endpoint: GatewayEndpoint)] = signer.map { signer in
            let body = ByteBuffer(data: signer.jwksJSON)
            return [("/.well-known/jwks.json", GatewayEndpoint(name: "gateway.jwks", summary: "The public keys of the gateway's identity tokens (JWKS)", metrics: metrics) { _, _ in
                var headers = HTTPFields()
                headers[.contentType] = "application/jwk-set+json"
                headers[.cacheControl] = "public, max-age=300"
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
            })]
        } ?? []
        return keySet + [
            ("/healthz", GatewayEndpoint(name: "gateway.healthz", summary: "Liveness: the process answers", metrics: metrics) { _, _ in
                var headers = HTTPFields()
                headers[.contentType] = "application/json"
                headers[.cacheControl] = "no-store"
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: healthz))
            }),
            ("/readyz", GatewayEndpoint(name: "gateway.readyz", summary: "Readiness: the database and every plugin's health", metrics: metrics) { request, context in
                let reasons = await showsReasons(request, context)
                let plugins = await statuses(reasons: reasons)
                let providers = providerStatuses(reasons: reasons)
                let databaseOK = (try? await database.sql.raw("SELECT 1").run()) != nil
                let failing = !databaseOK || plugins.contains { $0.status == PluginHealth.Status.failing.rawValue }
                let degraded = plugins.contains { $0.status == PluginHealth.Status.degraded.rawValue } || providers?.contains { $0.status == "degraded" } == true
                return try json(Readiness(status: failing ? "failing" : (degraded ? "degraded" : "ok"),
                                          database: databaseOK ? "ok" : "failing", plugins: plugins, providers: providers),
                                status: failing ? .serviceUnavailable : .ok)
            }),
            ("/metrics", GatewayEndpoint(name: "gateway.metrics", summary: "Prometheus metrics (administrators)", metrics: metrics) { request, context in
                if let metricsReader {
                    if let refusal = NativeCredentials.refusal(in: request.headers) { throw refusal }
                    let principal = try await metricsReader.principal(for: NativeCredentials.extract(from: request.headers), address: context.remoteAddress)
                    guard !principal.isAnonymous else { throw GatewayError.unauthorized("Metrics are for administrators: send an administrator's key or session.") }
                    guard principal.isAdmin else { throw GatewayError.forbidden("Metrics are for administrators.") }
                }
                var headers = HTTPFields()
                headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: metrics.render())))
            }),
            ("/openapi.json", GatewayEndpoint(name: "gateway.openapi", summary: "The OpenAPI 3.1 document of the enabled plugins", metrics: metrics) { _, _ in
                var headers = HTTPFields()
                headers[.contentType] = "application/json"
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: try openAPIJSON.json))
            }),
            ("/v1/plugins", GatewayEndpoint(name: "gateway.plugins", summary: "The enabled plugins, their mounts and health", metrics: metrics) { request, context in
                struct List: Encodable, Sendable { var items: [PluginStatus] }
                return try json(List(items: await statuses(reasons: await showsReasons(request, context))))
            }),
        ]
    }
}
