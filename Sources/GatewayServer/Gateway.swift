import AsyncHTTPClient
import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import OpenAPIKit
import SQLKit
import ServiceLifecycle
import UnixSignals

/// A configured gateway: its database open and migrated, its enabled plugins created, and its
/// request pipeline built. ``run(host:port:onStart:)`` serves it until SIGTERM / SIGINT.
///
/// A `Gateway` owns its database: call ``shutdown()`` once when done (``run`` does it itself).
public final class Gateway: Sendable {
    /// The configuration it was built from.
    public let configuration: GatewayConfiguration
    /// The database every plugin shares.
    public let database: GatewayDatabase
    /// The enabled plugins, in the order of their registration.
    public let plugins: [LoadedPlugin]
    /// Users, sessions and API keys.
    public let accounts: AccountStore
    /// The request pipeline.
    public let responder: GatewayResponder
    /// Metrics of requests and of plugins.
    public let metrics: GatewayMetrics
    /// The OpenAPI document of the enabled plugins.
    public let openAPIDocument: OpenAPI.Document
    /// The event bus plugins publish to.
    public let events: LocalEventBus
    public let logger: Logger
    let webSockets: RouteTable<MountedWebSocket>
    let routeList: [RouteDescription]
    /// The certificate of the TLS listener (`server.tls`), read again on SIGHUP.
    public let certificates: CertificateStore?
    /// The endpoints of the admin listener, by path.
    let adminEndpoints: [String: GatewayEndpoint]
    /// The host's own background services (the cache invalidation listener on PostgreSQL).
    public let hostServices: [any Service]

    /// A plugin as the running gateway holds it.
    public struct LoadedPlugin: Sendable {
        public let id: String
        public let summary: String
        public let mount: String
        public let dialectMount: String
        public let instance: any ServicePlugin
        public let context: PluginContext
    }

    /// One line of `gateway routes`.
    public struct RouteDescription: Sendable, Equatable {
        public var method: String
        public var path: String
        public var name: String
        public var summary: String
    }

    /// How to assemble the gateway; the defaults are what `gateway serve` uses.
    public struct Options: Sendable {
        /// The folder relative paths (SQLite file, plugin data) are resolved against.
        public var baseDirectory: URL
        /// Whether to apply missing migrations (otherwise a pending one is an error).
        public var migrate: Bool = true
        /// The database to open instead of the configuration's `storage`. Commands that only
        /// describe the gateway (`gateway routes`, `gateway openapi`) start it on a throwaway SQLite
        /// file here, so that describing never creates, opens or migrates the configured database.
        public var storage: StorageLocation?
        /// Whether to load plugins' demo data (overrides `demo:` in the file when set).
        public var loadDemoData: Bool?
        /// The principal stage; nil means guests only.
        public var authenticator: (any Authenticator)?
        /// The rate-limit stage; nil means unlimited.
        public var rateLimiter: (any RateLimiter)?
        /// The response-cache stage; nil means no caching.
        public var cache: (any ResponseCacheStore)?
        /// How long a resolved key or session is remembered. Revocations through any instance
        /// reach every instance at once; this bounds only changes made in the database directly.
        public var credentialCacheTTL: Duration = .seconds(5)
        /// The clock plugins see.
        public var clock: any WallClock = SystemClock()
        public var logger: Logger = Logger(label: "gateway")

        public init(baseDirectory: URL) {
            self.baseDirectory = baseDirectory
        }
    }

    /// Ids a plugin may not take: the host's own paths under /v1.
    public static let reservedIDs: Set<String> = ["accounts", "auth", "me", "admin", "plugins", "batch", "composite", "gateway"]

    /// The host's own schema steps (owner `gateway`).
    public static let hostMigrations: [Migration] = UserInbox.migrations + AccountStore.migrations + ClusterRateLimiter.migrations
        + [PasswordResets.migration, LeasedService.migration]

    /// Opens the database, applies migrations, creates every enabled plugin and builds the pipeline.
    public static func start(configuration: GatewayConfiguration, registrations: [PluginRegistration], options: Options) async throws -> Gateway {
        let logger = options.logger
        for registration in registrations where !PluginRegistration.isValidID(registration.id) || reservedIDs.contains(registration.id) {
            throw GatewayStartupError("plugin id '\(registration.id)' is not valid (lowercase letters, digits and -; not one of \(reservedIDs.sorted().joined(separator: ", ")))")
        }
        let enabled = PluginInstance.enabled(registrations, in: configuration)
        // Read before the database opens: a bad certificate file stops the start at once.
        let certificates = try configuration.server.tls.map { try CertificateStore($0, baseDirectory: options.baseDirectory) }
        let database = try await openDatabase(options.storage ?? configuration.storage, baseDirectory: options.baseDirectory, logger: logger,
                                              pool: configuration.database)
        do {
            return try await assemble(configuration: configuration, enabled: enabled, database: database, options: options, certificates: certificates)
        } catch {
            await database.shutdown()
            throw error
        }
    }

    /// Opens (and for SQLite, creates) the database at `location`; a failure names the location
    /// (its password hidden) and the database's own reason, never PostgreSQL's generic description.
    public static func openDatabase(_ location: StorageLocation, baseDirectory: URL, logger: Logger,
                                    pool: DatabasePoolSettings = .init()) async throws -> GatewayDatabase {
        do {
            return try await GatewayDatabase.open(location, baseDirectory: baseDirectory, logger: logger, pool: pool)
        } catch {
            throw StartupStepError(step: "opening the database \(location)", cause: error)
        }
    }

    /// The schema steps of the enabled plugins: once per plugin type, under the type's id.
    public static func pluginMigrations(_ instances: [PluginInstance]) -> [(owner: String, steps: [Migration])] {
        var seen = Set<String>()
        return instances.compactMap { instance in
            seen.insert(instance.registration.id).inserted ? (owner: instance.registration.id, steps: instance.registration.migrations) : nil
        }
    }

    private static func assemble(configuration: GatewayConfiguration, enabled: [PluginInstance], database: GatewayDatabase, options: Options,
                                 certificates: CertificateStore?) async throws -> Gateway {
        let logger = options.logger
        let db = database.sql
        let migrations = [(owner: "gateway", steps: hostMigrations)] + pluginMigrations(enabled)
        if options.migrate {
            try await MigrationRunner(database: db, logger: logger).migrate(migrations)
        }
        let metrics = GatewayMetrics()
        // With PostgreSQL, cache invalidations and events travel to every instance on the database.
        var channels: [PostgresChannel] = []
        var invalidations: PostgresChannel?
        var eventChannel: PostgresChannel?
        var authChannel: PostgresChannel?
        if case .postgres(let url) = database.location {
            invalidations = PostgresChannel(channel: "gateway_cache", url: url, database: db, logger: logger)
            eventChannel = PostgresChannel(channel: "gateway_events", url: url, database: db, logger: logger)
            authChannel = PostgresChannel(channel: "gateway_auth", url: url, database: db, logger: logger)
            channels = [invalidations!, eventChannel!, authChannel!]
        }
        var eventBroadcast: (@Sendable (String) async -> Void)?
        if let eventChannel { eventBroadcast = { message in await eventChannel.publish(message) } }
        let events = LocalEventBus(broadcast: eventBroadcast)
        eventChannel?.onMessage { message in events.deliverRemote(message) }
        let cache: any ResponseCacheStore
        if let given = options.cache {
            cache = given
        } else {
            var broadcast: (@Sendable ([String]) async -> Void)?
            if let channel = invalidations {
                broadcast = { tags in
                    // One message per batch of tags that fits a notification.
                    var batch: [String] = []
                    var size = 0
                    for tag in tags where tag.utf8.count < 4000 {
                        if size + tag.utf8.count > 7000 {
                            await channel.publish(batch.joined(separator: "\n"))
                            batch.removeAll()
                            size = 0
                        }
                        batch.append(tag)
                        size += tag.utf8.count + 1
                    }
                    if !batch.isEmpty { await channel.publish(batch.joined(separator: "\n")) }
                }
            }
            let memory = MemoryResponseCache(maxEntries: configuration.cache.maxEntries, maxBytes: configuration.cache.maxBytes.bytes,
                                             broadcast: broadcast)
            invalidations?.onMessage { message in
                memory.purgeLocally(tags: message.split(separator: "\n", omittingEmptySubsequences: false).map(String.init))
            }
            cache = memory
            metrics.observe(memory)
        }
        let inbox = UserInbox(database: db, clock: options.clock)
        let http = AsyncUpstreamClient()
        let accounts = AccountStore(database: db, clock: options.clock, bcryptCost: configuration.auth.bcryptCost,
                                    sessionTTL: configuration.auth.sessionTTL.seconds)
        let accountAuthenticator = AccountAuthenticator(store: accounts, cacheTTL: options.credentialCacheTTL)
        if let authChannel {
            // Revocations reach every instance at once, not after the credential cache's few seconds.
            accountAuthenticator.broadcast { message in Task { await authChannel.publish(message) } }
            authChannel.onMessage { message in accountAuthenticator.forget(message: message) }
        }
        let loginThrottle = LoginThrottle()
        var mailLogger = logger
        mailLogger[metadataKey: "component"] = "mail"
        let mailer: any Mailer = configuration.mail.map { SMTPMailer(settings: $0, logger: mailLogger) } ?? LogMailer(logger: mailLogger)
        let resets = PasswordResets(store: accounts, authenticator: accountAuthenticator, settings: configuration.auth.passwordReset, mailer: mailer,
                                    baseURL: configuration.server.publicURL ?? "http://\(configuration.server.host):\(configuration.server.port)")
        let directory = GatewayAccountDirectory(store: accounts, authenticator: accountAuthenticator, throttle: loginThrottle,
                                                registration: configuration.auth.registration, resets: resets)
        let policies = RateLimitPolicies(defaults: configuration.limits,
                                         plugins: configuration.plugins.compactMapValues { $0.enabled ? $0.limits : nil })
        let rateLimiter: any RateLimiter
        if let given = options.rateLimiter {
            rateLimiter = given
        } else if configuration.limits.policy == .cluster {
            guard case .postgres = configuration.storage else { throw GatewayStartupError("limits.policy: cluster needs PostgreSQL storage (instances share their buckets there)") }
            rateLimiter = ClusterRateLimiter(policies: policies, database: db, clock: options.clock)
        } else {
            rateLimiter = LocalRateLimiter(policies: policies)
        }

        var plugins: [LoadedPlugin] = []
        // The host's own account API, mounted at /v1 like a plugin so it shares the whole pipeline.
        var accountsLogger = logger
        accountsLogger[metadataKey: "plugin"] = "accounts"
        let accountsContext = PluginContext(
            pluginID: AccountsService.id, logger: accountsLogger, metrics: metrics.factory, database: db, clock: options.clock,
            http: http, notifier: inbox, history: inbox, events: events, cache: cache, accounts: directory, baseDirectory: options.baseDirectory,
            appKeys: Set(configuration.auth.appKeys))
        plugins.append(LoadedPlugin(
            id: AccountsService.id, summary: AccountsService.summary, mount: "/v1", dialectMount: "",
            instance: AccountsService(store: accounts, authenticator: accountAuthenticator, throttle: loginThrottle,
                                      registration: configuration.auth.registration, cache: cache, resets: resets),
            context: accountsContext))
        // The host's compositions: /v1/batch, and the composite endpoints of plugins.yaml. Their
        // calls go through the pipeline, attached below once it is built.
        let caller = InternalCaller()
        func hostContext(_ id: String) -> PluginContext {
            var hostLogger = logger
            hostLogger[metadataKey: "plugin"] = .string(id)
            return PluginContext(pluginID: id, logger: hostLogger, metrics: metrics.factory, database: db, clock: options.clock, http: http, notifier: inbox,
                                 history: inbox, events: events, cache: cache, accounts: directory, baseDirectory: options.baseDirectory,
                                 appKeys: Set(configuration.auth.appKeys))
        }
        plugins.append(LoadedPlugin(id: BatchService.id, summary: BatchService.summary, mount: "/v1/batch", dialectMount: "",
                                    instance: BatchService(caller: caller, maxCalls: configuration.batch.maxCalls), context: hostContext(BatchService.id)))
        let composites = CompositeService(caller: caller, composites: configuration.composites)
        if !configuration.composites.isEmpty {
            plugins.append(LoadedPlugin(id: CompositeService.id, summary: CompositeService.summary, mount: "", dialectMount: "",
                                        instance: composites, context: hostContext(CompositeService.id)))
        }
        for plugin in enabled {
            let registration = plugin.registration
            let settings = plugin.settings
            var pluginLogger = logger
            pluginLogger[metadataKey: "plugin"] = .string(plugin.id)
            let context = PluginContext(
                pluginID: plugin.id, logger: pluginLogger, metrics: metrics.factory, database: db, clock: options.clock,
                http: http, notifier: inbox, history: inbox, events: events, cache: cache, accounts: directory, baseDirectory: options.baseDirectory,
            appKeys: Set(configuration.auth.appKeys))
            let instance: any ServicePlugin
            do {
                instance = try await registration.make(settings.config, context)
            } catch let error as ConfigurationFileError {
                throw error
            } catch {
                throw StartupStepError(step: "starting plugin \(plugin.id)", cause: error)
            }
            plugins.append(LoadedPlugin(
                id: plugin.id, summary: registration.summary, mount: settings.mount ?? "/v1/\(plugin.id)",
                dialectMount: settings.dialectMount ?? "", instance: instance, context: context))
        }

        if options.loadDemoData ?? configuration.demo {
            try await loadDemoData(plugins, database: db, logger: logger)
        }

        // Routes: operations under their mounts, dialect routes, and the gateway's own endpoints.
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
            // plugins.yaml may switch a plugin's caching off or change its time to live.
            func overridden(_ policy: CachePolicy) -> CachePolicy {
                var policy = policy
                if overrides?.enabled == false { policy.ttl = nil }
                if let ttl = overrides?.ttl, policy.ttl != nil { policy.ttl = ttl.duration }
                return policy
            }
            for operation in plugin.instance.operations {
                guard operation.name.hasPrefix(plugin.id + ".") else {
                    throw GatewayStartupError("operation '\(operation.name)' of plugin \(plugin.id) must be named '\(plugin.id).<verb>'")
                }
                guard names.insert(operation.name).inserted else {
                    throw GatewayStartupError("operation '\(operation.name)' is declared twice")
                }
                let template = joinPath(plugin.mount, operation.path)
                try add(operation.method, template, .route(MountedRoute(
                    pluginID: plugin.id, handler: .operation(operation), plugin: plugin.context, template: template,
                    cache: overridden(operation.cache), instance: plugin.instance, metrics: metrics)))
            }
            // Native WebSockets: under the mount, with the native credentials and problem details.
            let native = Dialect(name: "native", routes: [], credentials: CredentialExtractor(NativeCredentials.extract(from:))) { error in
                let problem = JSONValue.object(["type": .string(error.type), "title": .string(error.title), "status": .number(Double(error.status)),
                                                "detail": .string(error.detail)])
                return .json(problem, status: error.httpStatus, contentType: "application/problem+json")
            }
            func mount(_ socket: WebSocketRoute, under prefix: String, dialect: Dialect) throws {
                let template = joinPath(prefix, socket.path)
                do {
                    try sockets.add(.get, template, MountedWebSocket(pluginID: plugin.id, dialect: dialect, route: socket, plugin: plugin.context))
                } catch {
                    throw GatewayStartupError("route conflict: \(error)")
                }
                routeList.append(RouteDescription(method: "WS", path: template, name: "\(plugin.id).\(dialect.name)", summary: socket.summary))
            }
            for socket in plugin.instance.webSockets { try mount(socket, under: plugin.mount, dialect: native) }
            for dialect in plugin.instance.dialects {
                for route in dialect.routes {
                    let template = joinPath(plugin.dialectMount, route.path)
                    try add(route.method, template, .route(MountedRoute(
                        pluginID: plugin.id, handler: .dialect(dialect, route), plugin: plugin.context, template: template,
                        cache: overridden(route.cache), instance: plugin.instance, metrics: metrics)))
                }
                for socket in dialect.webSockets { try mount(socket, under: plugin.dialectMount, dialect: dialect) }
            }
        }

        let document = OpenAPIDocumentBuilder.document(
            title: "Gateway", version: GatewayVersion.current, serverURL: configuration.server.publicURL,
            plugins: plugins.map { PluginDescription(id: $0.id, summary: $0.summary, mount: $0.mount, operations: $0.instance.operations,
                                                     schemas: $0.instance.schemas, documentedPaths: $0.instance.documentedPaths) })
        let openAPIJSON = ByteBuffer(bytes: try OpenAPIDocumentBuilder.json(document))
        let metricsReader: (any Authenticator)? = configuration.server.publicMetrics ? nil : (options.authenticator ?? accountAuthenticator)
        let administrators = options.authenticator ?? accountAuthenticator
        for endpoint in builtinEndpoints(plugins: plugins, metrics: metrics, openAPIJSON: openAPIJSON, database: database,
                                         metricsReader: metricsReader, administrators: administrators) {
            try add(.get, endpoint.path, .gateway(endpoint.endpoint))
        }
        let adminEndpoints = builtinEndpoints(plugins: plugins, metrics: metrics, openAPIJSON: openAPIJSON, database: database,
                                              metricsReader: nil, administrators: administrators, trusted: true)

        for (index, listener) in configuration.server.socketListeners.enumerated() {
            guard case .found = try? sockets.resolve(.get, path: Substring(listener.route)) else {
                throw GatewayStartupError("server.socketListeners[\(index)].route: no WebSocket route at \(listener.route) (`gateway routes` lists the WS routes)")
            }
        }

        let responder = GatewayResponder(
            routes: routes,
            settings: .init(maxBodySize: configuration.server.maxBodySize.bytes, cors: configuration.server.cors, accessLog: configuration.server.accessLog,
                            proxies: ProxyTrust(configuration.server.trustedProxies),
                            compression: ResponseCompression(configuration.server.compression)),
            authenticator: options.authenticator ?? accountAuthenticator,
            rateLimiter: rateLimiter,
            cache: cache, metrics: metrics, logger: logger)
        var callable: [String: (operation: GatewayCore.ServiceOperation, mount: String)] = [:]
        for plugin in plugins {
            for operation in plugin.instance.operations { callable[operation.name] = (operation, plugin.mount) }
        }
        caller.attach(responder, operations: callable)
        let unknown = composites.unknownOperations()
        guard unknown.isEmpty else { throw GatewayStartupError(unknown.joined(separator: "; ")) }
        return Gateway(configuration: configuration, database: database, plugins: plugins, accounts: accounts, responder: responder, metrics: metrics,
                       openAPIDocument: document, events: events, logger: logger, webSockets: sockets,
                       hostServices: channels, adminEndpoints: adminEndpoints, certificates: certificates,
                       routeList: routeList.sorted { ($0.path, $0.method) < ($1.path, $1.method) })
    }

    private init(configuration: GatewayConfiguration, database: GatewayDatabase, plugins: [LoadedPlugin], accounts: AccountStore, responder: GatewayResponder,
                 metrics: GatewayMetrics, openAPIDocument: OpenAPI.Document, events: LocalEventBus, logger: Logger,
                 webSockets: RouteTable<MountedWebSocket>, hostServices: [any Service], adminEndpoints: [(path: String, endpoint: GatewayEndpoint)],
                 certificates: CertificateStore?, routeList: [RouteDescription]) {
        self.hostServices = hostServices
        self.certificates = certificates
        self.adminEndpoints = Dictionary(adminEndpoints.map { ($0.path, $0.endpoint) }, uniquingKeysWith: { first, _ in first })
        self.configuration = configuration
        self.database = database
        self.plugins = plugins
        self.accounts = accounts
        self.responder = responder
        self.metrics = metrics
        self.openAPIDocument = openAPIDocument
        self.events = events
        self.logger = logger
        self.webSockets = webSockets
        self.routeList = routeList
    }

    /// The enabled plugins, without the host's own services.
    public var servicePlugins: [LoadedPlugin] { plugins.filter { !Self.hostPluginIDs.contains($0.id) } }

    /// The host's own services, mounted like plugins: accounts, batches and composites.
    static let hostPluginIDs: Set<String> = [AccountsService.id, BatchService.id, CompositeService.id]

    /// Every route the gateway serves: operations, dialect routes, WebSocket routes and its own endpoints.
    public var routes: [RouteDescription] { routeList }

    /// Each plugin's health.
    public func health() async -> [(id: String, health: PluginHealth)] {
        var result: [(String, PluginHealth)] = []
        for plugin in plugins { result.append((plugin.id, await plugin.instance.health())) }
        return result
    }

    /// Whether cache invalidations and events from other instances are being received (always true without PostgreSQL).
    public var isListeningForInvalidations: Bool {
        hostServices.compactMap { $0 as? PostgresChannel }.allSatisfy(\.isListening)
    }

    /// Forgets every remembered credential, so the next request of each asks the database again.
    public func forgetCredentials() {
        (responder.authenticator as? AccountAuthenticator)?.forget(userID: nil)
    }

    /// Closes the database. Call once, after serving has stopped.
    public func shutdown() async {
        await database.shutdown()
    }

    /// The Hummingbird application serving this gateway (HTTP/1.1 with WebSocket upgrades).
    public func makeApplication(host: String, port: Int, onStart: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let sockets = webSockets
        let proxies = responder.settings.proxies
        let authenticator = responder.authenticator
        let responder = self.responder
        let limit: @Sendable (Principal, String, Int) async throws -> Void = { principal, plugin, cost in
            _ = try await responder.limit(principal, plugin: plugin, cost: cost)
        }
        let logger = self.logger
        let http1: HTTPServerBuilder = .http1WebSocketUpgrade(configuration: .init(ws: WebSocketServerConfiguration(maxFrameSize: 1 << 20))) { head, channel, _ in
            try await Gateway.upgrade(head, channel: channel, sockets: sockets, authenticator: authenticator, proxies: proxies, limit: limit, logger: logger)
        }
        let server: HTTPServerBuilder
        if let certificates {
            // Built when the application runs: a failure of NIOSSL's (the pair was checked when
            // read) makes `run` throw rather than serve plain HTTP.
            do {
                let tls = certificates.configuration()
                server = certificates.settings.http2 ? try .http2Upgrade(tlsConfiguration: tls) : try .tls(http1, tlsConfiguration: tls)
            } catch {
                server = HTTPServerBuilder { _ in throw error }
            }
        } else {
            server = http1
        }
        return Application(
            responder: responder,
            server: server,
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in await onStart(channel.localAddress?.port ?? port) },
            logger: logger)
    }

    /// A listener for old clients that connect to a bare host and port: every WebSocket upgrade,
    /// at `/` or any path (its query kept), reaches the WebSocket route at `route`; a plain HTTP
    /// request gets 426 Upgrade Required.
    public func makeSocketListener(host: String, port: Int, route: String,
                                   onStart: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let sockets = webSockets
        let proxies = responder.settings.proxies
        let authenticator = responder.authenticator
        let responder = self.responder
        let limit: @Sendable (Principal, String, Int) async throws -> Void = { principal, plugin, cost in
            _ = try await responder.limit(principal, plugin: plugin, cost: cost)
        }
        let logger = self.logger
        let refusal = CallbackResponder { (_: Request, _: GatewayRequestContext) in
            let problem = JSONValue.object(["type": .string("https://gateway.dev/problems/upgrade-required"), "title": .string("Upgrade required"),
                                            "status": .number(426), "detail": .string("This listener only serves WebSocket upgrades.")])
            return Response(status: .upgradeRequired, headers: [.upgrade: "websocket", .contentType: "application/problem+json"],
                            body: .init(byteBuffer: problem.serialized()))
        }
        return Application(
            responder: refusal,
            server: .http1WebSocketUpgrade(configuration: .init(ws: WebSocketServerConfiguration(maxFrameSize: 1 << 20))) { head, channel, _ in
                var rewritten = head
                let query = head.path?.split(separator: "?", maxSplits: 1).dropFirst().first.map { "?" + $0 } ?? ""
                rewritten.path = route + query
                return try await Gateway.upgrade(rewritten, channel: channel, sockets: sockets, authenticator: authenticator, proxies: proxies, limit: limit, logger: logger)
            },
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in await onStart(channel.localAddress?.port ?? port) },
            logger: logger)
    }

    /// The admin listener (`server.admin`): `/healthz`, `/readyz` and `/v1/plugins` with every
    /// plugin's health reason, `/metrics` without a credential. Anything else is a 404.
    public func makeAdminListener(host: String, port: Int, onStart: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let endpoints = adminEndpoints
        let responder = CallbackResponder { (request: Request, context: GatewayRequestContext) in
            let requestID = GatewayResponder.requestID(from: request.headers)
            guard let endpoint = endpoints[request.uri.path] else {
                return ProblemResponse.make(.notFound("The admin listener serves \(endpoints.keys.sorted().joined(separator: ", ")) only."),
                                            path: request.uri.path, requestID: requestID)
            }
            guard request.method == .get || request.method == .head else {
                return ProblemResponse.make(.methodNotAllowed(request.method.rawValue, allowed: ["GET", "HEAD"]), path: request.uri.path, requestID: requestID)
            }
            do {
                var response = try await endpoint.handler(request, context)
                if request.method == .head { response.body = .init() }
                return response
            } catch {
                return ProblemResponse.make(error as? GatewayError ?? .internalError(), path: request.uri.path, requestID: requestID)
            }
        }
        return Application(
            responder: responder,
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in await onStart(channel.localAddress?.port ?? port) },
            logger: logger)
    }

    /// Serves until SIGTERM or SIGINT, then stops accepting, lets in-flight requests finish, stops
    /// plugin services and closes the database.
    public func run(host: String? = nil, port: Int? = nil, onStart: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let app = makeApplication(host: host ?? configuration.server.host, port: port ?? configuration.server.port, onStart: onStart)
        let listeners: [any Service] = configuration.server.socketListeners.map { listener in
            makeSocketListener(host: listener.host ?? host ?? configuration.server.host, port: listener.port, route: listener.route) { port in
                self.logger.info("socket listener started", metadata: ["port": "\(port)", "route": .string(listener.route)])
            }
        }
        var admin: [any Service] = []
        if let settings = configuration.server.admin {
            admin.append(makeAdminListener(host: settings.host, port: settings.port) { port in
                self.logger.info("admin listener started", metadata: ["host": .string(settings.host), "port": "\(port)"])
            })
        }
        var reloads: [any Service] = []
        if let certificates {
            reloads.append(SignalReloader(logger: logger) { [logger] in
                do {
                    try certificates.reload()
                    logger.notice("TLS certificate read again", metadata: ["serial": .string(certificates.serialNumber)])
                } catch {
                    logger.error("TLS certificate not reloaded; the one in use stays", metadata: ["error": .string("\(error)")])
                }
            })
            if certificates.settings.http2 && !routeList.filter({ $0.method == "WS" }).isEmpty {
                logger.warning("server.tls.http2 is on: WebSocket routes are not served on the main listener (they need HTTP/1.1); set http2: false or use server.socketListeners")
            }
        }
        let services: [any Service] = [app] + listeners + admin + reloads + hostServices + plugins.flatMap(\.instance.services)
        let group = ServiceGroup(configuration: .init(services: services.map { .init(service: $0) },
                                                      gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            await shutdown()
            throw error
        }
        await shutdown()
    }

    /// `prefix` and `path` joined by one `/`. A path that starts with `.` extends the prefix's last
    /// segment instead: a file-like sibling of the mount (`/v1/events` and `.ics` → `/v1/events.ics`).
    static func joinPath(_ prefix: String, _ path: String) -> String {
        let trimmedPrefix = prefix.hasSuffix("/") ? String(prefix.dropLast()) : prefix
        let suffix = path.isEmpty || path == "/" ? "" : (path.hasPrefix("/") || path.hasPrefix(".") ? path : "/" + path)
        let joined = trimmedPrefix + suffix
        return joined.isEmpty ? "/" : joined
    }

    private static func loadDemoData(_ plugins: [LoadedPlugin], database: any SQLDatabase, logger: Logger) async throws {
        struct Row: Decodable { var plugin: String }
        let loaded = Set(try await database.select().column("plugin").from("gateway_demo_data").all(decoding: Row.self).map(\.plugin))
        for plugin in plugins where !loaded.contains(plugin.id) {
            logger.info("loading demo data", metadata: ["plugin": .string(plugin.id)])
            do {
                try await plugin.instance.loadDemoData()
            } catch {
                throw StartupStepError(step: "loading the demo data of plugin \(plugin.id)", cause: error)
            }
            try await database.insert(into: "gateway_demo_data").columns("plugin", "loaded_at")
                .values(SQLBind(plugin.id), SQLBind(Timestamp.format(Date()))).run()
        }
    }
}

/// A reason the gateway cannot start that is not tied to a line of plugins.yaml.
public struct GatewayStartupError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The gateway's version, shown in the OpenAPI document and `--version`.
public enum GatewayVersion {
    public static let current = "0.1.0"
}

extension Gateway {
    /// A few `curl` lines that work against this gateway: its GET operations that need no path
    /// parameter, one per plugin first.
    public func exampleRequests(base: String) -> [String] {
        var lines: [String] = []
        for plugin in plugins {
            for operation in plugin.instance.operations where operation.method == .get && operation.pathParameterNames.isEmpty && operation.access == .public {
                lines.append("curl '\(base)\(Gateway.joinPath(plugin.mount, operation.path))'   # \(operation.summary)")
                break
            }
        }
        return lines
    }
}

/// Runs `reload` on every SIGHUP until the gateway stops.
struct SignalReloader: Service {
    let logger: Logger
    let reload: @Sendable () async -> Void

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in signals {
                logger.info("SIGHUP: reloading")
                await reload()
            }
        }
    }
}
