import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import OpenAPIKit
import SQLKit
import Synchronization

extension Gateway {
    /// What plugins.yaml decides and a reload replaces, as the gateway serves it now.
    struct LiveState: Sendable {
        var configuration: GatewayConfiguration
        var plugins: [LoadedPlugin]
        var routeList: [RouteDescription]
        var openAPIDocument: LazyOpenAPIDocument
        /// The endpoints of the admin listener, by path.
        var adminEndpoints: [String: GatewayEndpoint]
    }

    /// What the plugins and the pipeline are built from, the same for the gateway's whole life.
    struct Parts: Sendable {
        let registrations: [PluginRegistration]
        let options: Options
        let database: GatewayDatabase
        let metrics: GatewayMetrics
        let cache: any ResponseCacheStore
        let http: AsyncUpstreamClient
        let inbox: UserInbox
        let events: LocalEventBus
        let directory: GatewayAccountDirectory
        let caller: InternalCaller
        /// The principal stage.
        let authenticator: any Authenticator
        let accountsService: AccountsService
        let reloads: ReloadHandle
        /// How plugins check the secrets of plugins.yaml (shipped demo secrets replaced on a
        /// reachable listener), decided at start.
        let secrets: ConfiguredSecrets
        /// The signer of identity tokens (`auth.signingKeys`), when there are keys.
        let signer: GatewaySigner?
        /// The admin console's pages at /admin.
        let console: Console

        /// The context of the plugin `id`.
        func context(_ id: String, configuration: GatewayConfiguration) -> PluginContext {
            var logger = options.logger
            logger[metadataKey: "plugin"] = .string(id)
            return PluginContext(pluginID: id, logger: logger, metrics: metrics.factory, database: database.sql, clock: options.clock, http: http,
                                 notify: { try await inbox.post(userID: $0, plugin: $1, title: $2, body: $3, link: $4) },
                                 recordView: { try await inbox.record(userID: $0, plugin: $1, resource: $2, title: $3) },
                                 lease: { [database = database.sql, logger] name, work in LeasedService(name, database: database, logger: logger, work: work) },
                                 events: events, purgeCache: { [cache] in await cache.invalidate(tags: $0) }, accounts: directory,
                                 baseDirectory: options.baseDirectory, appKeys: Set(configuration.auth.appKeys), secrets: secrets,
                                 environment: options.environment,
                                 identityTokens: signer.map { signer in IdentityTokens { try await signer.token(for: $0, audience: $1, lifetime: $2) } })
        }

        /// Whether a plugins.yaml entry can be created, replaced and removed while the gateway runs:
        /// an instance of a type that serves ids of the file's choice (an upstream service).
        func isReplaceable(_ settings: PluginSettings, id: String) -> Bool {
            registrations.first { $0.id == (settings.type ?? id) }?.multipleInstances == true
        }

        /// The plugins of `configuration`: the host's own, then the enabled ones. Those whose type
        /// and settings are as in `previous` are taken over as they run; the others are created.
        func plugins(for configuration: GatewayConfiguration,
                     previous: (configuration: GatewayConfiguration, plugins: [LoadedPlugin])?) async throws -> (plugins: [LoadedPlugin], created: [LoadedPlugin]) {
            var plugins: [LoadedPlugin] = [
                // The host's own account API, mounted at /v1 like a plugin so it shares the whole pipeline.
                LoadedPlugin(id: AccountsService.id, summary: AccountsService.summary, mount: "/v1", dialectMount: "", instance: accountsService,
                             context: previous?.plugins.first { $0.id == AccountsService.id }?.context ?? context(AccountsService.id, configuration: configuration)),
                // The host's compositions: /v1/batch, and the composite endpoints of plugins.yaml.
                // Their calls go through the pipeline.
                LoadedPlugin(id: BatchService.id, summary: BatchService.summary, mount: "/v1/batch", dialectMount: "",
                             instance: BatchService(caller: caller, maxCalls: configuration.batch.maxCalls), context: context(BatchService.id, configuration: configuration)),
            ]
            var created: [LoadedPlugin] = []
            for plugin in PluginInstance.enabled(registrations, in: configuration) {
                let settings = plugin.settings
                let mount = settings.mount ?? "/v1/\(plugin.id)"
                if let previous, var running = previous.plugins.first(where: { $0.id == plugin.id }),
                   let before = previous.configuration.plugins[plugin.id], before.type == settings.type, before.config == settings.config {
                    running.mount = mount
                    running.dialectMount = settings.dialectMount ?? ""
                    plugins.append(running)
                    continue
                }
                let context = context(plugin.id, configuration: configuration)
                let instance: any ServicePlugin
                do {
                    instance = try await plugin.registration.make(settings.config, context)
                } catch let error as ConfigurationFileError {
                    throw error
                } catch {
                    throw StartupStepError(step: "starting plugin \(plugin.id)", cause: error)
                }
                let loaded = LoadedPlugin(id: plugin.id, summary: plugin.registration.summary, mount: mount, dialectMount: settings.dialectMount ?? "",
                                          instance: instance, context: context, reloadable: plugin.registration.multipleInstances)
                plugins.append(loaded)
                created.append(loaded)
            }
            if !configuration.composites.isEmpty {
                // Last, so that the composites can document their parameters as the operations they feed do.
                var named: [String: Route] = [:]
                for plugin in plugins { for operation in plugin.instance.operations { named[operation.name] = operation } }
                plugins.append(LoadedPlugin(id: CompositeService.id, summary: CompositeService.summary, mount: "", dialectMount: "",
                                            instance: CompositeService(caller: caller, composites: configuration.composites, documenting: named),
                                            context: context(CompositeService.id, configuration: configuration)))
            }
            return (plugins, created)
        }

        /// The rate limiter for `configuration`: `previous` when its limits are the same.
        func rateLimiter(for configuration: GatewayConfiguration, previous: (any RateLimiter)?) -> any RateLimiter {
            if let given = options.rateLimiter { return given }
            let policies = RateLimitPolicies(defaults: configuration.limits,
                                             plugins: configuration.plugins.compactMapValues { $0.enabled ? $0.limits : nil })
            if configuration.limits.policy == .cluster {
                if let previous = previous as? ClusterRateLimiter, previous.policies == policies { return previous }
                return ClusterRateLimiter(policies: policies, database: database.sql, clock: options.clock)
            }
            if let previous = previous as? LocalRateLimiter, previous.policies == policies { return previous }
            let quotas = configuration.limits.groups.values.contains { $0.quota != nil } ? QuotaLedger(database: database.sql, clock: options.clock) : nil
            return LocalRateLimiter(policies: policies, quotas: quotas)
        }

        /// The routes of `plugins` under their mounts, their dialect and WebSocket routes and the
        /// gateway's own endpoints; the OpenAPI document; the operations callable by name.
        func pipeline(for configuration: GatewayConfiguration, plugins: [LoadedPlugin], rateLimiter: any RateLimiter) throws
            -> (live: LiveState, pipeline: PipelineState, callable: [String: (operation: GatewayCore.Route, mount: String)]) {
            var routes = RouteTable<Endpoint>()
            var sockets = RouteTable<MountedWebSocket>()
            var names = Set<String>()
            var routeList: [RouteDescription] = []
            func add(_ method: HTTPRequest.Method, _ path: String, _ endpoint: Endpoint) throws {
                do {
                    try routes.add(method, path, endpoint)
                } catch {
                    throw GatewayStartupError("route conflict: \(error)")
                }
                routeList.append(RouteDescription(method: method.rawValue, path: path, name: endpoint.name, summary: endpoint.summary))
            }
            for plugin in plugins {
                let overrides = configuration.plugins[plugin.id]?.cache
                let accept = configuration.plugins[plugin.id]?.accept.map(Set.init)
                // plugins.yaml may switch a plugin's caching off or change its time to live.
                func overridden(_ policy: CachePolicy) -> CachePolicy {
                    var policy = policy
                    if overrides?.enabled == false { policy.ttl = nil }
                    if let ttl = overrides?.ttl, policy.ttl != nil { policy.ttl = ttl.duration }
                    return policy
                }
                // Native WebSockets: under the mount, with the native credentials and problem details.
                let native = Dialect(name: "native", routes: [], credentials: CredentialExtractor(NativeCredentials.extract(from:))) { error in
                    let problem = JSONValue.object(["type": .string(error.type), "title": .string(error.title), "status": .number(Double(error.status.code)),
                                                    "detail": .string(error.detail)])
                    return .json(problem, status: error.status, contentType: "application/problem+json")
                }
                func mount(_ route: Route, under prefix: String, dialect: Dialect?) throws {
                    let template = Gateway.joinPath(prefix, route.path)
                    if route.isWebSocket {
                        let dialect = dialect ?? native
                        do {
                            try sockets.add(.get, template, MountedWebSocket(pluginID: plugin.id, dialect: dialect, route: route, plugin: plugin.context,
                                                                             instance: plugin.instance, accept: accept))
                        } catch {
                            throw GatewayStartupError("route conflict: \(error)")
                        }
                        routeList.append(RouteDescription(method: "WS", path: template, name: "\(plugin.id).\(dialect.name)", summary: route.summary))
                        return
                    }
                    if dialect == nil {
                        guard route.name.hasPrefix(plugin.id + ".") else {
                            throw GatewayStartupError("operation '\(route.name)' (\(route.method) \(route.path)) of plugin \(plugin.id) must be named '\(plugin.id).<verb>'")
                        }
                        guard names.insert(route.name).inserted else {
                            throw GatewayStartupError("operation '\(route.name)' is declared twice")
                        }
                    }
                    // A composite takes the credentials its own `accept` names.
                    let routeAccept = plugin.id == CompositeService.id
                        ? configuration.composites[String(route.name.dropFirst(CompositeService.id.count + 1))]?.accept.map(Set.init) : accept
                    try add(route.method, template, .route(MountedRoute(
                        pluginID: plugin.id, route: route, dialect: dialect, plugin: plugin.context, template: template,
                        cache: overridden(route.cache), instance: plugin.instance, metrics: metrics, accept: routeAccept)))
                }
                for route in plugin.instance.routes { try mount(route, under: plugin.mount, dialect: nil) }
                for dialect in plugin.instance.dialects {
                    for route in dialect.routes { try mount(route, under: plugin.dialectMount, dialect: dialect) }
                }
            }

            let publicURL = configuration.server.publicURL
            let descriptions = plugins.map { PluginDescription(id: $0.id, summary: $0.summary, mount: $0.mount, operations: $0.instance.operations,
                                                               schemas: $0.instance.schemas, documentedPaths: $0.instance.documentedPaths) }
            let document = LazyOpenAPIDocument {
                OpenAPIDocumentBuilder.document(title: "Gateway", version: GatewayVersion.current, serverURL: publicURL, plugins: descriptions)
            }
            let openAPIJSON = document
            let metricsReader: (any Authenticator)? = configuration.server.publicMetrics ? nil : authenticator
            for endpoint in Gateway.builtinEndpoints(plugins: plugins, metrics: metrics, openAPIJSON: openAPIJSON, database: database,
                                                     metricsReader: metricsReader, administrators: authenticator,
                                                     identities: accountsService.authenticator.identities, signer: signer) {
                try add(.get, endpoint.path, .gateway(endpoint.endpoint))
            }
            for page in console.endpoints(metrics: metrics) {
                try add(page.method, page.path, .gateway(page.endpoint))
            }
            let adminEndpoints = Gateway.builtinEndpoints(plugins: plugins, metrics: metrics, openAPIJSON: openAPIJSON, database: database,
                                                          metricsReader: nil, administrators: authenticator,
                                                          identities: accountsService.authenticator.identities, signer: signer, trusted: true)

            for (index, listener) in configuration.server.socketListeners.enumerated() {
                guard case .found = try? sockets.resolve(.get, path: Substring(listener.route)) else {
                    throw GatewayStartupError("server.socketListeners[\(index)].route: no WebSocket route at \(listener.route) (`gateway routes` lists the WS routes)")
                }
            }
            var callable: [String: (operation: GatewayCore.Route, mount: String)] = [:]
            for plugin in plugins {
                for operation in plugin.instance.operations { callable[operation.name] = (operation, plugin.mount) }
            }
            if let composites = plugins.first(where: { $0.id == CompositeService.id })?.instance as? CompositeService {
                let unknown = composites.unknownOperations(among: callable)
                guard unknown.isEmpty else { throw GatewayStartupError(unknown.joined(separator: "; ")) }
            }
            let settings = GatewayResponder.PipelineSettings(
                maxBodySize: configuration.server.maxBodySize.bytes, cors: configuration.server.cors, accessLog: configuration.server.accessLog,
                proxies: ProxyTrust(configuration.server.trustedProxies), compression: ResponseCompression(configuration.server.compression),
                certificateRules: configuration.auth.certificates)
            let live = LiveState(configuration: configuration, plugins: plugins,
                                 routeList: routeList.sorted { ($0.path, $0.method) < ($1.path, $1.method) }, openAPIDocument: document,
                                 adminEndpoints: Dictionary(adminEndpoints.map { ($0.path, $0.endpoint) }, uniquingKeysWith: { first, _ in first }))
            return (live, PipelineState(routes: routes, webSockets: sockets, settings: settings, rateLimiter: rateLimiter), callable)
        }
    }

    /// Reads plugins.yaml again and applies it (see ``reload(to:)``), then has every other
    /// instance on the same PostgreSQL database read its own.
    public func reload() async -> ReloadReport {
        await reloadFromSource(announce: true, trigger: "request")
    }

    func reloadFromSource(announce: Bool, trigger: String) async -> ReloadReport {
        let file = parts.options.configurationFile.map { file in { @Sendable () throws -> GatewayConfiguration in try file.parse(try Data(contentsOf: file.url)) } }
        guard let source = parts.options.configurationSource ?? file else {
            return .refused("This gateway was not started from a configuration file.")
        }
        let configuration: GatewayConfiguration
        do {
            configuration = try source()
        } catch {
            logger.error("plugins.yaml not reloaded; the running configuration stays", metadata: ["error": .string("\(error)"), "trigger": .string(trigger)])
            return .refused("\(error)")
        }
        return await reload(to: configuration, announce: announce, trigger: trigger)
    }

    /// Serves `configuration` from now on, as far as it can change live: routes and mounts,
    /// upstream services (created, replaced, removed), composites and batches, rate limits,
    /// cache overrides and the request pipeline's settings. Requests already running finish with
    /// what they started with. What needs a restart keeps its running value and is reported.
    /// A configuration that cannot be assembled (a route conflict, an upstream that cannot start)
    /// is refused whole.
    public func reload(to configuration: GatewayConfiguration) async -> ReloadReport {
        await reload(to: configuration, announce: false, trigger: "request")
    }

    func reload(to configuration: GatewayConfiguration, announce: Bool, trigger: String) async -> ReloadReport {
        let report = await reloadQueue.run { await self.apply(configuration) }
        var metadata: Logger.Metadata = ["trigger": .string(trigger)]
        if !report.changes.isEmpty { metadata["changes"] = .string(report.changes.joined(separator: ", ")) }
        if !report.restartNeeded.isEmpty { metadata["restart.needed"] = .string(report.restartNeeded.joined(separator: ", ")) }
        switch report.status {
        case .applied:
            logger.notice("plugins.yaml reloaded", metadata: metadata)
            if announce, let reloadChannel { _ = await reloadChannel.publish("reload") }
        case .unchanged:
            logger.info("plugins.yaml read again: nothing to change live", metadata: metadata)
        case .refused:
            metadata["error"] = .string(report.error ?? "")
            logger.error("plugins.yaml not reloaded; the running configuration stays", metadata: metadata)
        }
        return report
    }

    private func apply(_ configuration: GatewayConfiguration) async -> ReloadReport {
        let running = live.withLock { $0 }
        let plan = ReloadPlan(running: running.configuration, read: configuration) { settings, id in parts.isReplaceable(settings, id: id) }
        guard !plan.changes.isEmpty else {
            return ReloadReport(status: .unchanged, changes: [], restartNeeded: plan.restartNeeded)
        }
        do {
            let instances = PluginInstance.enabled(parts.registrations, in: plan.effective)
            if parts.options.migrate {
                try await MigrationRunner(database: database.sql, logger: logger).migrate(Gateway.pluginMigrations(instances))
            }
            let built = try await parts.plugins(for: plan.effective, previous: (running.configuration, running.plugins))
            let previousLimiter = responder.current().rateLimiter
            let limiter = parts.rateLimiter(for: plan.effective, previous: previousLimiter)
            let assembled = try parts.pipeline(for: plan.effective, plugins: built.plugins, rateLimiter: limiter)
            // The swap: requests from here on see the new routes; running ones finish with theirs.
            responder.live.store(assembled.pipeline)
            parts.caller.attach(responder, operations: assembled.callable)
            live.withLock { $0 = assembled.live }
            if let limiter = limiter as? LocalRateLimiter, let previous = previousLimiter as? LocalRateLimiter, limiter !== previous {
                limiter.absorb(previous)
            }
            // Background services: those of replaced and removed plugins stop, new ones start.
            let kept = Set(built.plugins.map(\.id)).subtracting(built.created.map(\.id))
            for plugin in running.plugins where plugin.reloadable && !kept.contains(plugin.id) {
                await pluginServices.remove(plugin.id)
            }
            for plugin in built.created where plugin.reloadable {
                pluginServices.add(plugin.id, services: plugin.instance.services)
            }
            // Replies cached under the old routes and policies are not served under the new ones.
            await parts.cache.invalidate(tags: [ResponseCacheTags.all])
            return ReloadReport(status: .applied, changes: plan.changes, restartNeeded: plan.restartNeeded)
        } catch {
            return .refused("\(error)")
        }
    }
}

/// The OpenAPI document of one assembly of the gateway, made on first use and kept: reflecting
/// every operation's types is work that most starts (a test's, a reload's) never need.
final class LazyOpenAPIDocument: Sendable {
    private let make: @Sendable () -> OpenAPI.Document
    private let made = Mutex<(document: OpenAPI.Document, json: ByteBuffer)?>(nil)

    init(_ make: @escaping @Sendable () -> OpenAPI.Document) {
        self.make = make
    }

    var document: OpenAPI.Document { get throws { try value().document } }
    var json: ByteBuffer { get throws { try value().json } }

    private func value() throws -> (document: OpenAPI.Document, json: ByteBuffer) {
        try made.withLock { made in
            if let made { return made }
            let document = make()
            let value = (document: document, json: ByteBuffer(bytes: try OpenAPIDocumentBuilder.json(document)))
            made = value
            return value
        }
    }
}

extension ServicePlugin {
    /// The operations of the native API: its routes that are not WebSockets.
    package var operations: [Route] { routes.filter { !$0.isWebSocket } }
}
