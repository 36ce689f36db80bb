import Foundation
import GatewayCore

/// The gateway's configuration: the contents of plugins.yaml.
///
/// Every key has a default except `plugins`, so a file may say only what differs. Decoding is
/// strict (see ``YAMLConfigurationDecoder``): an unknown key or a wrong type stops start-up with the
/// line that holds it.
public struct GatewayConfiguration: Decodable, Sendable, Equatable {
    /// Reads and validates a configuration file: strict decoding, then plugin ids checked against
    /// the bundled ones. Throws the first problem with its line.
    public static func load(contentsOf file: URL, knownPlugins: [String], instanceTypes: [String] = [],
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigurationFileError) -> GatewayConfiguration {
        let data: Data
        do {
            data = try Data(contentsOf: file)
        } catch {
            throw ConfigurationFileError(file: file.lastPathComponent, line: nil, column: nil, keyPath: "", message: "cannot be read (\(error.localizedDescription))")
        }
        return try parse(data, file: file.lastPathComponent, knownPlugins: knownPlugins, instanceTypes: instanceTypes, environment: environment,
                         baseDirectory: file.deletingLastPathComponent())
    }

    /// Validates configuration text (see ``load(contentsOf:knownPlugins:environment:)``); relative
    /// `${file:PATH}` paths are read from `baseDirectory`.
    /// `instanceTypes` are the plugin types an entry of any id may name as its `type:`.
    public static func parse(_ data: Data, file: String, knownPlugins: [String], instanceTypes: [String] = [],
                             environment: [String: String] = ProcessInfo.processInfo.environment,
                             baseDirectory: URL = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)) throws(ConfigurationFileError) -> GatewayConfiguration {
        let configuration = try YAMLConfigurationDecoder(environment: environment, baseDirectory: baseDirectory)
            .decode(GatewayConfiguration.self, from: data, file: file)
        for (id, settings) in configuration.plugins.sorted(by: { $0.key < $1.key }) {
            var error = settings.origin ?? ConfigurationFileError(file: file, line: nil, column: nil, keyPath: "plugins.\(id)", message: "")
            error.keyPath = "plugins.\(id)"
            if let type = settings.type, type != id {
                error.keyPath = "plugins.\(id).type"
                if !instanceTypes.contains(type) {
                    error.message = knownPlugins.contains(type)
                        ? "the plugin '\(type)' serves only the id '\(type)' (types that serve ids of your choice: \(instanceTypes.isEmpty ? "none" : instanceTypes.sorted().joined(separator: ", ")))"
                        : "unknown plugin type '\(type)' (types that serve ids of your choice: \(instanceTypes.isEmpty ? "none" : instanceTypes.sorted().joined(separator: ", ")))"
                    throw error
                }
                error.keyPath = "plugins.\(id)"
                if knownPlugins.contains(id) {
                    error.message = "'\(id)' is the id of a plugin of this gateway; give the \(type) another id"
                    throw error
                }
                if !PluginRegistration.isValidID(id) || Gateway.reservedIDs.contains(id) {
                    error.message = "'\(id)' is not a plugin id: lowercase letters, digits and -, starting with a letter, at most 40, not one of \(Gateway.reservedIDs.sorted().joined(separator: ", "))"
                    throw error
                }
            } else if !knownPlugins.contains(id) {
                error.message = "unknown plugin '\(id)' (this gateway has: \(knownPlugins.isEmpty ? "none" : knownPlugins.sorted().joined(separator: ", ")); give an entry of your own id a type: \(instanceTypes.isEmpty ? "none" : instanceTypes.sorted().joined(separator: ", ")))"
                throw error
            }
        }
        return configuration
    }

    public var server: ServerSettings
    /// Where the data lives: `sqlite:<path>` or `postgres://user:password@host:port/database`.
    public var storage: StorageLocation
    public var auth: AuthSettings
    public var limits: LimitSettings
    public var cache: CacheSettings
    /// The database connections: pool size and timeouts.
    public var database: DatabasePoolSettings = .init()
    /// How the gateway sends mail (password reset links); nil: to the log.
    public var mail: MailSettings?
    /// Whether plugins load the demo data they ship on their first start.
    public var demo: Bool
    /// The plugins by id: which are on, where they are mounted, and their settings.
    public var plugins: [String: PluginSettings]
    /// `POST /v1/batch`.
    public var batch = BatchSettings()
    /// Endpoints composed of calls to operations, by name.
    public var composites: [String: CompositeSettings] = [:]

    public init(
        server: ServerSettings = .init(), storage: StorageLocation = .sqlite(path: "data/gateway.sqlite"),
        auth: AuthSettings = .init(), limits: LimitSettings = .init(), cache: CacheSettings = .init(),
        demo: Bool = false, plugins: [String: PluginSettings] = [:]
    ) {
        self.server = server
        self.storage = storage
        self.auth = auth
        self.limits = limits
        self.cache = cache
        self.demo = demo
        self.plugins = plugins
    }

    enum CodingKeys: String, CodingKey { case server, storage, database, auth, limits, cache, mail, demo, plugins, batch, composites }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        server = try container.decodeIfPresent(ServerSettings.self, forKey: .server) ?? .init()
        storage = try container.decodeIfPresent(StorageLocation.self, forKey: .storage) ?? .sqlite(path: "data/gateway.sqlite")
        auth = try container.decodeIfPresent(AuthSettings.self, forKey: .auth) ?? .init()
        limits = try container.decodeIfPresent(LimitSettings.self, forKey: .limits) ?? .init()
        cache = try container.decodeIfPresent(CacheSettings.self, forKey: .cache) ?? .init()
        database = try container.decodeIfPresent(DatabasePoolSettings.self, forKey: .database) ?? .init()
        mail = try container.decodeIfPresent(MailSettings.self, forKey: .mail)
        demo = try container.decodeIfPresent(Bool.self, forKey: .demo) ?? false
        plugins = try container.decodeIfPresent([String: PluginSettings].self, forKey: .plugins) ?? [:]
        batch = try container.decodeIfPresent(BatchSettings.self, forKey: .batch) ?? .init()
        composites = try container.decodeIfPresent([String: CompositeSettings].self, forKey: .composites) ?? [:]
        for name in composites.keys where !PluginRegistration.isValidID(name) {
            throw DecodingError.dataCorruptedError(forKey: .composites, in: container,
                                                   debugDescription: "'\(name)' is not a composite name (lowercase letters, digits and -, starting with a letter)")
        }
        let kinds = auth.credentialKinds
        for (id, settings) in plugins.sorted(by: { $0.key < $1.key }) {
            for kind in settings.accept ?? [] where !kinds.contains(kind) {
                throw DecodingError.dataCorruptedError(forKey: .plugins, in: container,
                    debugDescription: "plugins.\(id).accept: '\(kind)' is not session, key, certificate or a provider of auth.providers")
            }
        }
        for (name, composite) in composites.sorted(by: { $0.key < $1.key }) {
            for kind in composite.accept ?? [] where !kinds.contains(kind) {
                throw DecodingError.dataCorruptedError(forKey: .composites, in: container,
                    debugDescription: "composites.\(name).accept: '\(kind)' is not session, key, certificate or a provider of auth.providers")
            }
        }
    }
}

/// `server:` — the listener and request limits.
public struct ServerSettings: Decodable, Sendable, Equatable {
    public var host: String = "127.0.0.1"
    public var port: Int = 8080
    /// The largest request body accepted (413 beyond). Default 1 MiB.
    public var maxBodySize: ByteSize = ByteSize(bytes: 1 << 20)
    /// Cross-origin settings; absent means no CORS headers are sent.
    public var cors: CORSSettings?
    /// Whether every request is logged at info level (otherwise at debug).
    public var accessLog: Bool = false
    /// The base URL the gateway is reached at, used in the OpenAPI document and in the links of
    /// password-reset and verification mail.
    public var publicURL: String?
    /// Extra listeners whose every WebSocket upgrade reaches one WebSocket route, for old clients
    /// that connect to a bare host and port (`ws://host:8081/`).
    public var socketListeners: [SocketListenerSettings] = []
    /// Load balancers and proxies (IPv4 addresses or CIDRs, IPv6 addresses) whose `Forwarded`,
    /// `X-Forwarded-For`, `X-Forwarded-Host` and `X-Forwarded-Proto` are believed; from any other
    /// peer they are ignored. Empty (the default): the socket's peer is the client.
    public var trustedProxies: [String] = []
    /// Whether `/metrics` answers anyone; by default only administrators (a key sent as
    /// `X-Api-Key` or `Authorization: Bearer gk_...`, as Prometheus can).
    public var publicMetrics = false
    /// gzip and deflate for replies of text-like types, by the request's `Accept-Encoding`.
    public var compression = CompressionSettings()
    /// A listener of its own for `/healthz`, `/readyz`, `/metrics` and `/v1/plugins`, everything
    /// shown to whoever reaches it (bind it to loopback or a private network). Absent: none.
    public var admin: AdminListenerSettings?
    /// HTTPS on the main listener, with HTTP/2 by ALPN (see ``TLSSettings``).
    public var tls: TLSSettings?
    /// `text` (the default) or `json`: one JSON object per log line, for log collectors.
    public var logFormat: LogFormat = .text
    /// OpenTelemetry spans sent by OTLP/HTTP (see ``TracingSettings``); absent: no tracing.
    public var tracing: TracingSettings?
    /// How long a request head, an idle connection and a pause in a body may last (see ``ServerTimeouts``).
    public var timeouts = ServerTimeouts()
    /// The most connections each listener holds open at once; one more is answered 503 and closed.
    /// Keep it under the process's descriptor limit (`ulimit -n`).
    public var maxConnections = 4096
    /// The most connections one client address holds open on a listener (IPv6 addresses count by
    /// their `limits.ipv6Prefix`); a trusted proxy counts only against `maxConnections`.
    public var maxConnectionsPerAddress = 128

    public init() {}

    enum CodingKeys: String, CodingKey {
        case host, port, maxBodySize, cors, accessLog, publicURL, socketListeners, trustedProxies, publicMetrics, compression, admin, tls, logFormat, tracing
        case timeouts, maxConnections, maxConnectionsPerAddress
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        host = try container.decodeIfPresent(String.self, forKey: .host) ?? host
        port = try container.decodeIfPresent(Int.self, forKey: .port) ?? port
        guard (0...65535).contains(port) else {
            throw DecodingError.dataCorruptedError(forKey: .port, in: container, debugDescription: "\(port) is not a port (0 to 65535)")
        }
        maxBodySize = try container.decodeIfPresent(ByteSize.self, forKey: .maxBodySize) ?? maxBodySize
        cors = try container.decodeIfPresent(CORSSettings.self, forKey: .cors)
        accessLog = try container.decodeIfPresent(Bool.self, forKey: .accessLog) ?? false
        publicURL = try container.decodeIfPresent(String.self, forKey: .publicURL)
        socketListeners = try container.decodeIfPresent([SocketListenerSettings].self, forKey: .socketListeners) ?? []
        trustedProxies = try container.decodeIfPresent([String].self, forKey: .trustedProxies) ?? []
        publicMetrics = try container.decodeIfPresent(Bool.self, forKey: .publicMetrics) ?? false
        compression = try container.decodeIfPresent(CompressionSettings.self, forKey: .compression) ?? compression
        admin = try container.decodeIfPresent(AdminListenerSettings.self, forKey: .admin)
        tls = try container.decodeIfPresent(TLSSettings.self, forKey: .tls)
        logFormat = try container.decodeIfPresent(LogFormat.self, forKey: .logFormat) ?? .text
        tracing = try container.decodeIfPresent(TracingSettings.self, forKey: .tracing)
        timeouts = try container.decodeIfPresent(ServerTimeouts.self, forKey: .timeouts) ?? timeouts
        maxConnections = try container.decodeIfPresent(Int.self, forKey: .maxConnections) ?? maxConnections
        guard (1...1_000_000).contains(maxConnections) else {
            throw DecodingError.dataCorruptedError(forKey: .maxConnections, in: container, debugDescription: "\(maxConnections) is outside 1 to 1000000")
        }
        maxConnectionsPerAddress = try container.decodeIfPresent(Int.self, forKey: .maxConnectionsPerAddress) ?? maxConnectionsPerAddress
        guard (1...maxConnections).contains(maxConnectionsPerAddress) else {
            throw DecodingError.dataCorruptedError(forKey: .maxConnectionsPerAddress, in: container,
                                                   debugDescription: "\(maxConnectionsPerAddress) is outside 1 to maxConnections (\(maxConnections))")
        }
        if let admin, admin.port != 0, admin.port == port {
            throw DecodingError.dataCorruptedError(forKey: .admin, in: container, debugDescription: "the admin listener needs a port of its own, not \(port)")
        }
        if let bad = trustedProxies.first(where: { AddressMatcher($0) == nil }) {
            throw DecodingError.dataCorruptedError(forKey: .trustedProxies, in: container,
                                                   debugDescription: "'\(bad)' is not an address or CIDR (10.0.0.0/8, 192.0.2.7, 2001:db8::1)")
        }
    }
}

/// `database:` — the connection pool of this instance. `maxConnections` is the most connections
/// it opens (default 8 per event loop on PostgreSQL, 4 readers per event loop on SQLite, whose one
/// writer is apart), spread over the event loops; `acquireTimeout` how long a query waits for a
/// free connection before failing (503); `connectTimeout` how long opening one may take
/// (PostgreSQL); `statementTimeout` the longest one statement may run (default 5 s) before it is
/// stopped and its request answered 503: PostgreSQL's `statement_timeout` on every connection, and
/// on SQLite the gateway interrupts it. Migrations and the command line's `import` and `migrate`
/// are not bounded by it (see `StatementBudget`). With several instances, keep the sum of their
/// `maxConnections` under the server's `max_connections`.
public struct DatabasePoolSettings: Decodable, Sendable, Equatable {
    public var maxConnections: Int?
    public var acquireTimeout = ConfigDuration(seconds: 30)
    public var connectTimeout = ConfigDuration(seconds: 10)
    /// nil: no limit (only for operator work, such as the command line's `import`; the file always sets one).
    public var statementTimeout: ConfigDuration? = ConfigDuration(seconds: 5)

    public init(maxConnections: Int? = nil, acquireTimeout: ConfigDuration = ConfigDuration(seconds: 30),
                statementTimeout: ConfigDuration? = ConfigDuration(seconds: 5)) {
        self.maxConnections = maxConnections
        self.acquireTimeout = acquireTimeout
        self.statementTimeout = statementTimeout
    }

    enum CodingKeys: String, CodingKey { case maxConnections, acquireTimeout, connectTimeout, statementTimeout }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        maxConnections = try container.decodeIfPresent(Int.self, forKey: .maxConnections)
        acquireTimeout = try container.decodeIfPresent(ConfigDuration.self, forKey: .acquireTimeout) ?? acquireTimeout
        connectTimeout = try container.decodeIfPresent(ConfigDuration.self, forKey: .connectTimeout) ?? connectTimeout
        statementTimeout = try container.decodeIfPresent(ConfigDuration.self, forKey: .statementTimeout) ?? statementTimeout
        if let maxConnections, !(1...10_000).contains(maxConnections) {
            throw DecodingError.dataCorruptedError(forKey: .maxConnections, in: container, debugDescription: "\(maxConnections) is not a pool size (1 to 10000)")
        }
        for (key, value) in [(CodingKeys.acquireTimeout, acquireTimeout), (.connectTimeout, connectTimeout)] + (statementTimeout.map { [(CodingKeys.statementTimeout, $0)] } ?? [])
        where value.seconds < 0.001 {
            throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "must be at least 1ms")
        }
    }

    /// Connections per event loop for `loops` loops: `maxConnections` spread (at least one each), or `fallback`.
    func perEventLoop(_ loops: Int, fallback: Int) -> Int {
        guard let maxConnections else { return fallback }
        return max(1, maxConnections / max(loops, 1))
    }
}

/// `server.admin`: `{host, port}` of the admin listener; `host` defaults to 127.0.0.1, never to
/// `server.host`, so that opening the main port to the world does not open this one.
public struct AdminListenerSettings: Decodable, Sendable, Equatable {
    public var host: String = "127.0.0.1"
    public var port: Int

    public init(host: String = "127.0.0.1", port: Int) {
        self.host = host
        self.port = port
    }

    enum CodingKeys: String, CodingKey { case host, port }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        host = try container.decodeIfPresent(String.self, forKey: .host) ?? host
        port = try container.decode(Int.self, forKey: .port)
        guard (0...65535).contains(port) else {
            throw DecodingError.dataCorruptedError(forKey: .port, in: container, debugDescription: "\(port) is not a port (0 to 65535)")
        }
    }
}

/// `server.socketListeners[i]`: `{host, port, route}` — a listener on `host:port` (host defaults
/// to `server.host`) whose WebSocket upgrades, at `/` or any path, reach the WebSocket route `route`
/// (a full path such as `/v2/socket`; `gateway routes` lists them). Plain HTTP requests there get 426.
public struct SocketListenerSettings: Decodable, Sendable, Equatable {
    public var host: String?
    public var port: Int
    public var route: String

    public init(host: String? = nil, port: Int, route: String) {
        self.host = host
        self.port = port
        self.route = route
    }

    enum CodingKeys: String, CodingKey { case host, port, route }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        host = try container.decodeIfPresent(String.self, forKey: .host)
        port = try container.decode(Int.self, forKey: .port)
        guard (0...65535).contains(port) else {
            throw DecodingError.dataCorruptedError(forKey: .port, in: container, debugDescription: "\(port) is not a port (0 to 65535)")
        }
        route = try container.decode(String.self, forKey: .route)
        guard route.hasPrefix("/") else {
            throw DecodingError.dataCorruptedError(forKey: .route, in: container, debugDescription: "'\(route)' is not a path: give the WebSocket route, such as /v2/socket")
        }
    }
}

/// `server.cors:` — which browser origins may call the gateway.
public struct CORSSettings: Decodable, Sendable, Equatable {
    /// Allowed origins; `*` allows any.
    public var allowOrigins: [String]
    public var allowHeaders: [String]
    public var exposeHeaders: [String]
    public var maxAge: ConfigDuration
    public var allowCredentials: Bool

    enum CodingKeys: String, CodingKey { case allowOrigins, allowHeaders, exposeHeaders, maxAge, allowCredentials }

    public init(allowOrigins: [String] = ["*"]) {
        self.allowOrigins = allowOrigins
        allowHeaders = ["Authorization", "Content-Type", "X-Api-Key", "If-Match", "If-None-Match", "X-Request-Id"]
        exposeHeaders = ["ETag", "Location", "X-Request-Id", "RateLimit", "RateLimit-Policy", "Retry-After", "X-Cache"]
        maxAge = ConfigDuration(seconds: 600)
        allowCredentials = false
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(allowOrigins: try container.decodeIfPresent([String].self, forKey: .allowOrigins) ?? ["*"])
        allowHeaders = try container.decodeIfPresent([String].self, forKey: .allowHeaders) ?? allowHeaders
        exposeHeaders = try container.decodeIfPresent([String].self, forKey: .exposeHeaders) ?? exposeHeaders
        maxAge = try container.decodeIfPresent(ConfigDuration.self, forKey: .maxAge) ?? maxAge
        allowCredentials = try container.decodeIfPresent(Bool.self, forKey: .allowCredentials) ?? false
    }
}

/// `auth:` — accounts and sessions.
public struct AuthSettings: Decodable, Sendable, Equatable {
    public enum Registration: String, Decodable, Sendable, Equatable { case open, closed }
    public var sessionTTL: ConfigDuration = ConfigDuration(seconds: 30 * 86_400)
    public var registration: Registration = .open
    /// bcrypt cost for stored passwords (10 to 16).
    public var bcryptCost: Int = 12
    /// The app keys legacy COIMOTION clients send as `_key`; a call with another key is refused.
    public var appKeys: [String] = []
    /// How password reset links behave.
    public var passwordReset = PasswordResetSettings()
    /// Development only: without `mail:`, write the text of each message (reset and verification
    /// links included) to the log. Off by default, so that no link that grants an account is logged.
    public var developmentMail = false
    /// Keep a user's API keys when they reset a forgotten password (by default a reset revokes
    /// them: whoever took the account may have made some).
    public var keepKeysOnReset = false
    /// Live API keys one user may hold (an administrator's keys from the CLI are not counted).
    public var maxKeysPerUser = 20
    /// Identity providers whose tokens the gateway accepts, by name (see ``ProviderSettings``).
    public var providers: [String: ProviderSettings] = [:]
    /// Which callers verified client certificates name (see ``CertificateRule``).
    public var certificates: [CertificateRule] = []
    /// The keys the gateway signs identity tokens for upstream services with (see ``SigningKeySettings``).
    public var signingKeys: [SigningKeySettings] = []

    /// What a plugin's `accept` may name: `session`, `key` and each provider.
    public var credentialKinds: Set<String> { Set(["session", "key", Principal.certificateKind] + providers.keys) }

    public init() {}

    enum CodingKeys: String, CodingKey {
        case sessionTTL, registration, bcryptCost, appKeys, passwordReset, developmentMail, keepKeysOnReset, maxKeysPerUser, providers, signingKeys, certificates
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sessionTTL = try container.decodeIfPresent(ConfigDuration.self, forKey: .sessionTTL) ?? sessionTTL
        if let text = try container.decodeIfPresent(String.self, forKey: .registration) {
            guard let value = Registration(rawValue: text) else {
                throw DecodingError.dataCorruptedError(forKey: .registration, in: container, debugDescription: "\"\(text)\" is not one of open, closed")
            }
            registration = value
        }
        appKeys = try container.decodeIfPresent([String].self, forKey: .appKeys) ?? []
        passwordReset = try container.decodeIfPresent(PasswordResetSettings.self, forKey: .passwordReset) ?? passwordReset
        developmentMail = try container.decodeIfPresent(Bool.self, forKey: .developmentMail) ?? false
        keepKeysOnReset = try container.decodeIfPresent(Bool.self, forKey: .keepKeysOnReset) ?? false
        maxKeysPerUser = try container.decodeIfPresent(Int.self, forKey: .maxKeysPerUser) ?? maxKeysPerUser
        guard (1...10_000).contains(maxKeysPerUser) else {
            throw DecodingError.dataCorruptedError(forKey: .maxKeysPerUser, in: container, debugDescription: "\(maxKeysPerUser) is outside 1 to 10000")
        }
        bcryptCost = try container.decodeIfPresent(Int.self, forKey: .bcryptCost) ?? bcryptCost
        guard (10...16).contains(bcryptCost) else {
            throw DecodingError.dataCorruptedError(forKey: .bcryptCost, in: container, debugDescription: "\(bcryptCost) is outside 10 to 16")
        }
        signingKeys = try container.decodeIfPresent([SigningKeySettings].self, forKey: .signingKeys) ?? []
        certificates = try container.decodeIfPresent([CertificateRule].self, forKey: .certificates) ?? []
        providers = try container.decodeIfPresent([String: ProviderSettings].self, forKey: .providers) ?? [:]
        for name in providers.keys where !PluginRegistration.isValidID(name) || ["session", "key", Principal.certificateKind].contains(name) {
            throw DecodingError.dataCorruptedError(forKey: .providers, in: container,
                debugDescription: "'\(name)' is not a provider name (lowercase letters, digits and -, starting with a letter; not session, key or certificate)")
        }
    }
}

/// `limits:` — default rate limits per kind of caller.
public struct LimitSettings: Decodable, Sendable, Equatable {
    public enum Policy: String, Decodable, Sendable, Equatable { case local, cluster }
    public var policy: Policy = .local
    public var anonymous: RateSpec = RateSpec(count: 60, period: 60)
    public var user: RateSpec = RateSpec(count: 600, period: 60)
    public var key: RateSpec = RateSpec(count: 6000, period: 60)
    /// Guests with an IPv6 address share a bucket (and a connection count) per network of this
    /// many leading bits (default 64, one customer's network); IPv4 guests count per address.
    public var ipv6Prefix = 64
    /// Consumer groups (`limits.groups.<name>`): a caller in a group is limited by the group's
    /// rate (in every plugin, instead of its kind's) and its quota per day or month on top.
    public var groups: [String: GroupLimits] = [:]

    public init() {}

    enum CodingKeys: String, CodingKey { case policy, anonymous, user, key, ipv6Prefix, groups }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let text = try container.decodeIfPresent(String.self, forKey: .policy) {
            guard let value = Policy(rawValue: text) else {
                throw DecodingError.dataCorruptedError(forKey: .policy, in: container, debugDescription: "\"\(text)\" is not one of local, cluster")
            }
            policy = value
        }
        anonymous = try container.decodeIfPresent(RateSpec.self, forKey: .anonymous) ?? anonymous
        user = try container.decodeIfPresent(RateSpec.self, forKey: .user) ?? user
        key = try container.decodeIfPresent(RateSpec.self, forKey: .key) ?? key
        ipv6Prefix = try container.decodeIfPresent(Int.self, forKey: .ipv6Prefix) ?? ipv6Prefix
        guard (8...128).contains(ipv6Prefix) else {
            throw DecodingError.dataCorruptedError(forKey: .ipv6Prefix, in: container, debugDescription: "\(ipv6Prefix) is outside 8 to 128 (bits)")
        }
        groups = try container.decodeIfPresent([String: GroupLimits].self, forKey: .groups) ?? [:]
        if let bad = groups.keys.sorted().first(where: { !GroupLimits.isValidName($0) }) {
            throw DecodingError.dataCorruptedError(forKey: .groups, in: container, debugDescription:
                "'\(bad.prefix(60))' is not a group name (lowercase letters, digits, - and _, at most 64, starting with a letter; not anonymous, user or key)")
        }
    }
}

/// `limits.groups.<name>`: a consumer group's rate (per plugin, as every rate) and quota (per
/// caller across the gateway, per UTC day or month). A caller belongs to a group by its key, its
/// account, or its provider's group claim (`auth.providers.<name>.claims.group`).
public struct GroupLimits: Decodable, Sendable, Equatable {
    public var rate: RateSpec?
    public var quota: QuotaSpec?

    public init(rate: RateSpec? = nil, quota: QuotaSpec? = nil) {
        self.rate = rate
        self.quota = quota
    }

    enum CodingKeys: String, CodingKey { case rate, quota }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        rate = try container.decodeIfPresent(RateSpec.self, forKey: .rate)
        quota = try container.decodeIfPresent(QuotaSpec.self, forKey: .quota)
        guard rate != nil || quota != nil else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a group needs a rate, a quota or both"))
        }
    }

    /// Lowercase letters, digits, `-` and `_`, starting with a letter, at most 64; not a caller
    /// kind's policy name.
    public static func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, ("a"..."z").contains(first), name.unicodeScalars.count <= 64,
              !["anonymous", "user", "key"].contains(name), !name.hasPrefix("key-") else { return false }
        return name.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }
    }
}

/// A plugin's overrides of the default limits.
public struct LimitOverrides: Decodable, Sendable, Equatable {
    public var anonymous: RateSpec?
    public var user: RateSpec?
    public var key: RateSpec?
}

/// `cache:` — the response cache's bounds.
public struct CacheSettings: Decodable, Sendable, Equatable {
    public var maxEntries: Int = 50_000
    public var maxBytes: ByteSize = ByteSize(bytes: 64 << 20)

    public init() {}

    enum CodingKeys: String, CodingKey { case maxEntries, maxBytes }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        maxEntries = try container.decodeIfPresent(Int.self, forKey: .maxEntries) ?? maxEntries
        guard maxEntries >= 0 else {
            throw DecodingError.dataCorruptedError(forKey: .maxEntries, in: container, debugDescription: "must not be negative")
        }
        maxBytes = try container.decodeIfPresent(ByteSize.self, forKey: .maxBytes) ?? maxBytes
    }
}

/// `batch:` — `POST /v1/batch`.
public struct BatchSettings: Decodable, Sendable, Equatable {
    /// The most calls one batch may hold (default 20).
    public var maxCalls = 20

    public init() {}

    enum CodingKeys: String, CodingKey { case maxCalls }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        maxCalls = try container.decodeIfPresent(Int.self, forKey: .maxCalls) ?? maxCalls
        guard (1...1000).contains(maxCalls) else {
            throw DecodingError.dataCorruptedError(forKey: .maxCalls, in: container, debugDescription: "must be between 1 and 1000")
        }
    }
}

/// A plugin's cache overrides.
public struct PluginCacheSettings: Decodable, Sendable, Equatable {
    /// Replaces the TTL of every cacheable operation of the plugin.
    public var ttl: ConfigDuration?
    /// `false` turns caching off for the plugin.
    public var enabled: Bool?
}

/// One entry under `plugins:`.
public struct PluginSettings: Decodable, Sendable, Equatable {
    /// The plugin type serving the entry, for a type that serves ids of the file's choice
    /// (`weather: { type: upstream }`); absent, the entry's id names its plugin.
    public var type: String?
    public var enabled: Bool
    /// Where its native API is mounted; default `/v1/<id>`.
    public var mount: String?
    /// A prefix for its dialect routes; default none (they keep their legacy paths).
    public var dialectMount: String?
    public var limits: LimitOverrides?
    public var cache: PluginCacheSettings?
    /// The credential kinds its routes take: `session`, `key`, provider names of `auth.providers`
    /// (default: all). A caller presenting another kind is refused (401); guests are unaffected.
    public var accept: [String]?
    /// Its own settings, decoded by the plugin's `Configuration` type.
    public var config: ConfigurationNode?
    /// Where the entry stands in the file, for errors about the entry as a whole.
    var origin: ConfigurationFileError?

    enum CodingKeys: String, CodingKey { case type, enabled, mount, dialectMount, limits, cache, accept, config }

    public init(enabled: Bool = true, mount: String? = nil) {
        self.enabled = enabled
        self.mount = mount
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let yaml = decoder as? YAMLNodeDecoder {
            origin = yaml.fail("")
        }
        type = try container.decodeIfPresent(String.self, forKey: .type)
        enabled = try container.decodeIfPresent(Bool.self, forKey: .enabled) ?? true
        mount = try container.decodeIfPresent(String.self, forKey: .mount)
        for key in [CodingKeys.mount, .dialectMount] {
            if let path = try container.decodeIfPresent(String.self, forKey: key), !PluginSettings.isValidMount(path) {
                throw DecodingError.dataCorruptedError(forKey: key, in: container,
                    debugDescription: "\"\(path)\" is not a mount path (start with /, letters, digits, -, _ and / only)")
            }
        }
        dialectMount = try container.decodeIfPresent(String.self, forKey: .dialectMount)
        limits = try container.decodeIfPresent(LimitOverrides.self, forKey: .limits)
        cache = try container.decodeIfPresent(PluginCacheSettings.self, forKey: .cache)
        accept = try container.decodeIfPresent([String].self, forKey: .accept)
        config = try container.decodeIfPresent(ConfigurationNode.self, forKey: .config)
    }

    /// Equal when they say the same, wherever they stand in the file.
    public static func == (left: PluginSettings, right: PluginSettings) -> Bool {
        left.type == right.type && left.enabled == right.enabled && left.mount == right.mount && left.dialectMount == right.dialectMount
            && left.limits == right.limits && left.cache == right.cache && left.config == right.config
    }

    static func isValidMount(_ path: String) -> Bool {
        path.hasPrefix("/") && path.count < 200 && !path.contains("//")
            && path.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "-_/.".unicodeScalars.contains($0) }
    }
}

/// Where the gateway stores its data.
public enum StorageLocation: Decodable, Sendable, Equatable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(url: String)

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let location = StorageLocation(text) else {
            throw ConfigurationValueError(message: "\"\(text.prefix(80))\" is not a storage location (use sqlite:data/gateway.sqlite or postgres://user@host/db)")
        }
        self = location
    }

    public init?(_ text: String) {
        if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            // An in-memory database would be a different, empty one on each pooled connection.
            guard !path.isEmpty, path != ":memory:" else { return nil }
            self = .sqlite(path: path)
        } else if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") {
            guard URL(string: text)?.host != nil else { return nil }
            self = .postgres(url: text)
        } else {
            return nil
        }
    }

    /// The location with any password hidden, for logs.
    public var description: String {
        switch self {
        case .sqlite(let path): return "sqlite:\(path)"
        case .postgres(let url):
            guard var components = URLComponents(string: url) else { return "postgres://…" }
            if components.password != nil { components.password = "***" }
            return components.string ?? "postgres://…"
        }
    }
}

