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
import Synchronization
import ServiceLifecycle
import UnixSignals

/// A configured gateway: its database open and migrated, its enabled plugins created, and its
/// request pipeline built. ``run(host:port:onStart:)`` serves it until SIGTERM / SIGINT.
///
/// A `Gateway` owns its database: call ``shutdown()`` once when done (``run`` does it itself).
public final class Gateway: Sendable {
    /// The configuration it serves: the file's as last loaded or reloaded, with the settings that
    /// need a restart as they were at start.
    public var configuration: GatewayConfiguration { live.withLock { $0.configuration } }
    /// The database every plugin shares.
    public let database: GatewayDatabase
    /// The enabled plugins, in the order of their registration, after the host's own services.
    public var plugins: [LoadedPlugin] { live.withLock { $0.plugins } }
    /// Users, sessions and API keys.
    public let accounts: AccountStore
    /// The request pipeline.
    public let responder: GatewayResponder
    /// Metrics of requests and of plugins.
    public let metrics: GatewayMetrics
    /// The OpenAPI document of the enabled plugins.
    public var openAPIDocument: OpenAPI.Document { get throws { try live.withLock { $0.openAPIDocument }.document } }
    /// The event bus plugins publish to.
    public let events: LocalEventBus
    public let logger: Logger
    /// The certificate of the TLS listener (`server.tls`), read again on SIGHUP.
    public let certificates: CertificateStore?
    /// The host's own background services (the cache invalidation listener on PostgreSQL).
    public let hostServices: [any Service]
    /// What the plugins and routes are built from, at start and on each reload.
    let parts: Parts
    /// What plugins.yaml decides, as served now.
    let live: Mutex<LiveState>
    /// The background services of plugins a reload may add or remove.
    let pluginServices: PluginServiceRunner
    let reloadQueue = ReloadQueue()
    /// Where a reload is announced to the other instances on the same PostgreSQL database.
    let reloadChannel: PostgresChannel?

    /// A plugin as the running gateway holds it.
    public struct LoadedPlugin: Sendable {
        public let id: String
        public let summary: String
        public internal(set) var mount: String
        public internal(set) var dialectMount: String
        public let instance: any ServicePlugin
        public let context: PluginContext
        /// Whether a reload may replace or remove it (an instance of a type serving ids of the
        /// file's choice); its background services then run apart from the others'.
        var reloadable = false
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
        /// The environment variables plugins read secrets from (``PluginContext/environment``).
        public var environment: [String: String] = ProcessInfo.processInfo.environment
        public var logger: Logger = Logger(label: "gateway")
        /// Reads the configuration again for a reload (SIGHUP, `gateway reload`, `POST
        /// /v1/admin/reload`), throwing its located error when the file cannot be used; nil:
        /// only ``Gateway/reload(to:)`` reloads.
        public var configurationSource: (@Sendable () throws -> GatewayConfiguration)?
        /// plugins.yaml for the admin API and the console to show (secrets masked), check and
        /// change (written, then reloaded); nil: they cannot (409). A reload without a
        /// ``configurationSource`` reads this file.
        public var configurationFile: EditableConfiguration?
        /// How the host names of URLs callers set (trigger targets) are resolved before their
        /// addresses are checked (``EgressPolicy``); nil: the system's resolver.
        package var egressResolver: (any EgressResolver)?
        /// Where the replacement of a shipped demo secret goes, the one time it is shown (on a
        /// reachable listener's first start; see ``ShippedSecrets``): standard output by default.
        public var announceSecret: @Sendable (String) -> Void = { text in
            // Written at once: `print` buffers when standard output is not a terminal (a container's log).
            FileHandle.standardOutput.write(Data((text + "\n").utf8))
        }
        /// The throttle of password checks; nil: the default (five free attempts, then delays
        /// doubling from 1 s). Tests give one with longer delays, which a busy machine cannot outlast.
        public var loginThrottle: LoginThrottle?

        public init(baseDirectory: URL) {
            self.baseDirectory = baseDirectory
        }
    }

    /// Ids a plugin may not take: the host's own paths under /v1.
    public static let reservedIDs: Set<String> = ["accounts", "auth", "me", "admin", "plugins", "batch", "composite", "gateway"]

    /// The host's own schema steps (owner `gateway`).
    public static var hostMigrations: [Migration] { HostMigrations.all }

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
            return try await assemble(configuration: configuration, enabled: enabled, database: database, options: options, certificates: certificates,
                                      registrations: registrations)
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
                                 certificates: CertificateStore?, registrations: [PluginRegistration]) async throws -> Gateway {
        let logger = options.logger
        let db = database.sql
        let migrations = [(owner: "gateway", steps: hostMigrations)] + pluginMigrations(enabled)
        if options.migrate {
            try await MigrationRunner(database: db, logger: logger).migrate(migrations)
        }
        // Demo secrets that ship with the gateway work on loopback only; elsewhere they are replaced.
        for line in configuration.shippedSecretWarnings {
            logger.notice("\(line)")
        }
        let secrets = try await ShippedSecrets.secrets(for: configuration, database: db, clock: options.clock) { value, replacement, uses in
            options.announceSecret("""
                The demo secret '\(value)' that ships with the gateway does not work on server.host \(configuration.server.host). \
                Where plugins.yaml names it (\(uses.map { [$0.location, $0.path].compactMap { $0 }.joined(separator: " ") }.joined(separator: "; "))), \
                clients now send: \(replacement)
                (shown this once; only its SHA-256 is stored. Set a key of your own in plugins.yaml to replace it.)
                """)
        }
        let metrics = GatewayMetrics()
        metrics.observe(database)
        // With PostgreSQL, cache invalidations, events, revocations and reloads travel to every
        // instance on the database.
        var messaging: [PostgresMessaging] = []
        var invalidations: PostgresChannel?
        var eventChannel: PostgresChannel?
        var authChannel: PostgresChannel?
        var reloadChannel: PostgresChannel?
        if case .postgres(let url) = database.location {
            let shared = PostgresMessaging(url: url, database: db, logger: logger)
            invalidations = shared.channel("gateway_cache", merging: true)
            eventChannel = shared.channel("gateway_events")
            authChannel = shared.channel("gateway_auth")
            reloadChannel = shared.channel("gateway_reload", merging: true)
            messaging = [shared]
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
        let http = AsyncUpstreamClient(resolver: options.egressResolver ?? SystemEgressResolver())
        let accounts = AccountStore(database: db, clock: options.clock, bcryptCost: configuration.auth.bcryptCost,
                                    sessionTTL: configuration.auth.sessionTTL.seconds)
        if configuration.limits.policy == .cluster && options.rateLimiter == nil {
            guard case .postgres = configuration.storage else { throw GatewayStartupError("limits.policy: cluster needs PostgreSQL storage (instances share their buckets there)") }
        }
        // Identity providers load their keys now; one that cannot be reached is reported by /readyz.
        let identities = configuration.auth.providers.isEmpty ? nil : try IdentityProviders(configuration.auth.providers, baseDirectory: options.baseDirectory)
        do {
            try await identities?.prepare()
        } catch {
            await identities?.shutdown()
            throw GatewayStartupError("\(error)")
        }
        let signer: GatewaySigner?
        do {
            signer = configuration.auth.signingKeys.isEmpty ? nil
                : try await GatewaySigner.make(configuration.auth.signingKeys, issuer: configuration.server.publicURL ?? "gateway", baseDirectory: options.baseDirectory)
        } catch {
            await identities?.shutdown()
            throw error
        }
        let accountAuthenticator = AccountAuthenticator(store: accounts, cacheTTL: options.credentialCacheTTL, identities: identities)
        if let authChannel {
            // Revocations reach every instance at once, not after the credential cache's few seconds.
            accountAuthenticator.broadcast { message in Task { await authChannel.publish(message) } }
            authChannel.onMessage { message in accountAuthenticator.forget(message: message) }
        }
        let loginThrottle = options.loginThrottle ?? LoginThrottle()
        var mailLogger = logger
        mailLogger[metadataKey: "component"] = "mail"
        let mailer: any Mailer = configuration.mail.map { SMTPMailer(settings: $0, logger: mailLogger) }
            ?? LogMailer(logger: mailLogger, development: configuration.auth.developmentMail)
        let resets = PasswordResets(store: accounts, authenticator: accountAuthenticator, settings: configuration.auth.passwordReset, mailer: mailer,
                                    baseURL: configuration.server.publicURL ?? "http://\(configuration.server.host):\(configuration.server.port)",
                                    delivers: configuration.mail != nil || configuration.auth.developmentMail,
                                    keepKeys: configuration.auth.keepKeysOnReset, logger: mailLogger)
        let directory = GatewayAccountDirectory(store: accounts, authenticator: accountAuthenticator, throttle: loginThrottle,
                                                registration: configuration.auth.registration, resets: resets)
        let reloads = ReloadHandle()
        let instances = InstanceRegistry(database: db, clock: options.clock, live: metrics.live, logger: logger)
        let admin = AdminHandle(live: metrics.live, instances: instances, configurationFile: options.configurationFile,
                                cacheLimits: (configuration.cache.maxEntries, configuration.cache.maxBytes.bytes), startedAt: options.clock.now())
        let caller = InternalCaller()
        let resources = try Console.resources()
        let tls = configuration.server.tls != nil || configuration.server.publicURL?.lowercased().hasPrefix("https:") == true
        let console = Console(templates: resources.templates, assets: resources.assets, caller: caller, admin: admin, secure: tls,
                              publicURL: configuration.server.publicURL)
        let parts = Parts(
            registrations: registrations, options: options, database: database, metrics: metrics, cache: cache, http: http, inbox: inbox, events: events,
            directory: directory, caller: caller, authenticator: options.authenticator ?? accountAuthenticator,
            accountsService: AccountsService(store: accounts, authenticator: accountAuthenticator, throttle: loginThrottle,
                                             registration: configuration.auth.registration, cache: cache, resets: resets, reloads: reloads, admin: admin,
                                             keyRules: .init(maxPerUser: configuration.auth.maxKeysPerUser, maxRate: configuration.limits.key)),
            reloads: reloads, secrets: secrets, signer: signer, console: console)
        let built: (plugins: [LoadedPlugin], created: [LoadedPlugin])
        let assembled: (live: LiveState, pipeline: PipelineState, callable: [String: (operation: GatewayCore.Route, mount: String)])
        do {
            built = try await parts.plugins(for: configuration, previous: nil)
            if options.loadDemoData ?? configuration.demo {
                try await loadDemoData(built.plugins, database: db, logger: logger)
            }
            assembled = try parts.pipeline(for: configuration, plugins: built.plugins, rateLimiter: parts.rateLimiter(for: configuration, previous: nil))
        } catch {
            // The providers' HTTP clients are shut down, as a gateway that started would at its end.
            await identities?.shutdown()
            throw error
        }
        let responder = GatewayResponder(state: assembled.pipeline, authenticator: parts.authenticator, cache: cache, metrics: metrics, logger: logger,
                                         messaging: messaging.first)
        parts.caller.attach(responder, operations: assembled.callable)
        let gateway = Gateway(parts: parts, live: assembled.live, accounts: accounts, responder: responder, hostServices: messaging as [any Service] + [instances],
                              certificates: certificates, reloadChannel: reloadChannel)
        for plugin in built.plugins where plugin.reloadable {
            gateway.pluginServices.add(plugin.id, services: plugin.instance.services)
        }
        admin.attach(AdminHandle.Views(
            plugins: { [weak gateway] in await gateway?.pluginStatuses() ?? [] },
            running: { [weak gateway] in gateway?.configuration ?? configuration },
            plan: { [weak gateway] new in
                guard let gateway else { return ([], []) }
                let plan = ReloadPlan(running: gateway.configuration, read: new) { gateway.parts.isReplaceable($0, id: $1) }
                return (plan.changes, plan.restartNeeded)
            },
            pluginViews: { [weak gateway] in
                gateway?.servicePlugins.flatMap { plugin in plugin.instance.adminViews.map { AdminHandle.PluginView(plugin: plugin.id, view: $0) } } ?? []
            }))
        reloads.attach { [weak gateway] in
            await gateway?.reloadFromSource(announce: true, trigger: "POST /v1/admin/reload") ?? .refused("The gateway is stopping.")
        }
        reloadChannel?.onMessage { [weak gateway] _ in
            guard let gateway else { return }
            Task { await gateway.reloadFromSource(announce: false, trigger: "another instance") }
        }
        return gateway
    }

    private init(parts: Parts, live: LiveState, accounts: AccountStore, responder: GatewayResponder, hostServices: [any Service],
                 certificates: CertificateStore?, reloadChannel: PostgresChannel?) {
        self.parts = parts
        self.live = Mutex(live)
        self.database = parts.database
        self.accounts = accounts
        self.responder = responder
        self.metrics = parts.metrics
        self.events = parts.events
        self.logger = parts.options.logger
        self.hostServices = hostServices
        self.certificates = certificates
        self.reloadChannel = reloadChannel
        self.pluginServices = PluginServiceRunner(logger: parts.options.logger)
    }

    /// The enabled plugins, without the host's own services.
    public var servicePlugins: [LoadedPlugin] { plugins.filter { !Self.hostPluginIDs.contains($0.id) } }

    /// The host's own services, mounted like plugins: accounts, batches and composites.
    static let hostPluginIDs: Set<String> = [AccountsService.id, BatchService.id, CompositeService.id]

    /// Every route the gateway serves: operations, dialect routes, WebSocket routes and its own endpoints.
    public var routes: [RouteDescription] { live.withLock { $0.routeList } }

    /// Each plugin's health.
    public func health() async -> [(id: String, health: PluginHealth)] {
        var result: [(String, PluginHealth)] = []
        for plugin in plugins { result.append((plugin.id, await plugin.instance.health())) }
        return result
    }

    /// The plugins as the admin API shows them: health (with reasons), mounts, dialects and what
    /// this instance served of each.
    func pluginStatuses() async -> [AdminHandle.PluginStatus] {
        let served = metrics.live.totals
        let configuration = configuration
        var result: [AdminHandle.PluginStatus] = []
        for plugin in servicePlugins {
            let health = await plugin.instance.health()
            result.append(AdminHandle.PluginStatus(
                id: plugin.id, type: configuration.plugins[plugin.id]?.type ?? plugin.id, summary: plugin.summary, mount: plugin.mount,
                status: health.status.rawValue, reason: health.reason, operations: plugin.instance.operations.count,
                dialects: plugin.instance.dialects.map { .init(name: $0.name, mount: plugin.dialectMount.isEmpty ? "/" : plugin.dialectMount) },
                served: served[plugin.id] ?? LiveTraffic.Totals()))
        }
        return result
    }

    /// Whether cache invalidations and events from other instances are being received (always true without PostgreSQL).
    public var isListeningForInvalidations: Bool {
        hostServices.compactMap { $0 as? PostgresMessaging }.allSatisfy(\.isListening)
    }

    /// Forgets every remembered credential, so the next request of each asks the database again.
    public func forgetCredentials() {
        (responder.authenticator as? AccountAuthenticator)?.forget(userID: nil)
    }

    /// Closes the database. Call once, after serving has stopped.
    public func shutdown() async {
        await pluginServices.stop()
        await parts.accountsService.resets.outbox.close()
        await parts.accountsService.authenticator.identities?.shutdown()
        await database.shutdown()
    }

    /// Forgets what this gateway (and, on PostgreSQL, every instance) remembers of `userID`'s
    /// credentials, so that a change to the account (disabled, demoted) applies to its next request.
    public func forgetCredentials(userID: String) {
        parts.accountsService.authenticator.forget(userID: userID)
    }

    /// The Hummingbird application serving this gateway (HTTP/1.1 with WebSocket upgrades).
    public func makeApplication(host: String, port: Int, onStart: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let authenticator = responder.authenticator
        let responder = self.responder
        let limit: @Sendable (Principal, String, Int) async throws -> Void = { principal, plugin, cost in
            _ = try await responder.current().limit(principal, plugin: plugin, cost: cost)
        }
        let logger = self.logger
        let shouldUpgrade: @Sendable (HTTPRequest, any Channel, Logger) async throws
            -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> = { head, channel, _ in
            // The WebSocket routes and trusted proxies as they are when the upgrade arrives.
            let current = responder.current()
            return try await Gateway.upgrade(head, channel: channel, sockets: current.webSockets, authenticator: authenticator, proxies: current.settings.proxies,
                                             limit: limit, logger: logger)
        }
        let webSockets = HTTP1WebSocketUpgradeChannel.Configuration(http1: Self.observedHTTP1, ws: WebSocketServerConfiguration(maxFrameSize: 1 << 20))
        // Every connection is counted and timed (`server.maxConnections`, `server.timeouts`).
        let connections = connectionGuard()
        let timeouts = configuration.server.timeouts
        let server: HTTPServerBuilder
        if let certificates {
            // Built when the application runs: a failure of NIOSSL's (the pair was checked when
            // read) makes `run` throw rather than serve plain HTTP.
            let tls = certificates.configuration()
            let clientCertificates = certificates.settings.clientCertificates != nil
            if certificates.settings.http2 {
                server = Self.bounded(connections, timeouts: timeouts, canReply: false, clientCertificates: clientCertificates) { responder in
                    try HTTP2UpgradeChannel(tlsConfiguration: tls, configuration: Self.http2Configuration(timeouts), responder: responder)
                }
            } else {
                server = Self.bounded(connections, timeouts: timeouts, canReply: false, clientCertificates: clientCertificates) { responder in
                    try TLSChannel(HTTP1WebSocketUpgradeChannel(responder: responder, configuration: webSockets, shouldUpgrade: shouldUpgrade), tlsConfiguration: tls)
                }
            }
        } else {
            server = Self.bounded(connections, timeouts: timeouts, canReply: true) { responder in
                HTTP1WebSocketUpgradeChannel(responder: responder, configuration: webSockets, shouldUpgrade: shouldUpgrade)
            }
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
        let authenticator = responder.authenticator
        let responder = self.responder
        let limit: @Sendable (Principal, String, Int) async throws -> Void = { principal, plugin, cost in
            _ = try await responder.current().limit(principal, plugin: plugin, cost: cost)
        }
        let logger = self.logger
        let refusal = CallbackResponder { (_: Request, _: GatewayRequestContext) in
            let problem = JSONValue.object(["type": .string("https://gateway.dev/problems/upgrade-required"), "title": .string("Upgrade required"),
                                            "status": .number(426), "detail": .string("This listener only serves WebSocket upgrades.")])
            return Response(status: .upgradeRequired, headers: [.upgrade: "websocket", .contentType: "application/problem+json"],
                            body: .init(byteBuffer: problem.serialized()))
        }
        let shouldUpgrade: @Sendable (HTTPRequest, any Channel, Logger) async throws
            -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> = { head, channel, _ in
            var rewritten = head
            let query = head.path?.split(separator: "?", maxSplits: 1).dropFirst().first.map { "?" + $0 } ?? ""
            rewritten.path = route + query
            let current = responder.current()
            return try await Gateway.upgrade(rewritten, channel: channel, sockets: current.webSockets, authenticator: authenticator,
                                             proxies: current.settings.proxies, limit: limit, logger: logger)
        }
        let webSockets = HTTP1WebSocketUpgradeChannel.Configuration(http1: Self.observedHTTP1, ws: WebSocketServerConfiguration(maxFrameSize: 1 << 20))
        return Application(
            responder: refusal,
            server: Self.bounded(connectionGuard(), timeouts: configuration.server.timeouts, canReply: true) { responder in
                HTTP1WebSocketUpgradeChannel(responder: responder, configuration: webSockets, shouldUpgrade: shouldUpgrade)
            },
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in await onStart(channel.localAddress?.port ?? port) },
            logger: logger)
    }

    /// The admin listener (`server.admin`): `/healthz`, `/readyz` and `/v1/plugins` with every
    /// plugin's health reason, `/metrics` without a credential, and `POST /v1/admin/reload`.
    /// Anything else is a 404.
    public func makeAdminListener(host: String, port: Int, onStart: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let reloadPath = "/v1/admin/reload"
        let responder = CallbackResponder { [weak self] (request: Request, context: GatewayRequestContext) in
            let requestID = RequestID.of(request.headers)
            guard let self else { return ProblemResponse.make(.unavailable("The gateway is stopping."), path: request.uri.path, requestID: requestID) }
            if request.uri.path == reloadPath {
                guard request.method == .post else {
                    return ProblemResponse.make(.methodNotAllowed(request.method.rawValue, allowed: ["POST"]), path: request.uri.path, requestID: requestID)
                }
                do {
                    return try Self.reloadResponse(await self.reloadFromSource(announce: true, trigger: "admin listener"))
                } catch {
                    return ProblemResponse.make(error as? GatewayError ?? .internalError(), path: request.uri.path, requestID: requestID)
                }
            }
            // The endpoints as the last reload left them.
            let endpoints = self.live.withLock { $0.adminEndpoints }
            guard let endpoint = endpoints[request.uri.path] else {
                return ProblemResponse.make(.notFound("The admin listener serves \((endpoints.keys + [reloadPath]).sorted().joined(separator: ", ")) only."),
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
            server: Self.bounded(connectionGuard(), timeouts: configuration.server.timeouts, canReply: true) { responder in
                HTTP1Channel(responder: responder, configuration: Self.observedHTTP1)
            },
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
        // SIGHUP reads the TLS certificate and plugins.yaml again.
        let reloader = SignalReloader(logger: logger) { [self] in
            if let certificates {
                do {
                    try certificates.reload()
                    logger.notice("TLS certificate read again", metadata: ["serial": .string(certificates.serialNumber)])
                } catch {
                    logger.error("TLS certificate not reloaded; the one in use stays", metadata: ["error": .string("\(error)")])
                }
            }
            if parts.options.configurationSource != nil || parts.options.configurationFile != nil {
                _ = await reloadFromSource(announce: true, trigger: "SIGHUP")
            }
        }
        if let certificates, certificates.settings.http2 && !routes.filter({ $0.method == "WS" }).isEmpty {
            logger.warning("server.tls.http2 is on: WebSocket routes are not served on the main listener (they need HTTP/1.1); set http2: false or use server.socketListeners")
        }
        // Spans go out through the process's one tracer, set up by the first gateway that traces.
        var tracing: [any Service] = []
        if let settings = configuration.server.tracing, let exporter = try GatewayTracing.bootstrap(settings, logger: logger) {
            tracing.append(exporter)
            logger.info("tracing: spans go to \(settings.otlp) (\(settings.protocol))")
        }
        // The services of plugins a reload may replace run apart, so that a reload can stop them.
        // A group stops its services last to first: the exporter, first, sends the last spans.
        let services: [any Service] = tracing + [app] + listeners + admin + [reloader, pluginServices] + hostServices
            + plugins.filter { !$0.reloadable }.flatMap(\.instance.services)
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
                .values(SQLBind(plugin.id), SQLBind(UTCTimestamp.format(Date()))).run()
        }
    }
}

extension Gateway {
    /// The reply to a reload request: its report, or the refusal as a 422 problem.
    static func reloadResponse(_ report: ReloadReport) throws -> Response {
        guard report.status != .refused else {
            throw GatewayError.invalid("The configuration was not reloaded; the running one stays. \(report.error ?? "")")
        }
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: try JSONStreamEncoder.encodeBuffer(report)))
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
    /// A few `curl` lines that answer something worth seeing on this gateway: the example of the
    /// first public GET operation of each plugin that declares one.
    public func exampleRequests(base: String) -> [String] {
        var lines: [String] = []
        for plugin in plugins {
            let operations = plugin.instance.operations
            if let operation = operations.first(where: { $0.method == .get && $0.access == .public && $0.example != nil }), let example = operation.example {
                let path = example.hasPrefix("?") ? Gateway.joinPath(plugin.mount, "") + example : Gateway.joinPath(plugin.mount, example)
                lines.append("curl '\(base)\(path)'   # \(operation.summary)")
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
