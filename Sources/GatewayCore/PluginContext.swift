import Foundation
import HTTPTypes
import Logging
import Metrics
import NIOCore
import SQLKit
import ServiceLifecycle

/// What the host shares with a plugin: given to ``ServicePlugin/init(configuration:context:)`` and
/// valid for the plugin's whole life.
///
/// Every member is safe to use from any task. Plugins reach shared concerns only through it —
/// never through the host's types — so the same plugin runs unchanged on SQLite or PostgreSQL,
/// in a test or in production.
public struct PluginContext: Sendable {
    /// The members, in one shared object: a context is copied into every request's
    /// ``OperationContext``, and copying one reference is one reference count, where copying a
    /// dozen members would be a dozen counts that every thread serving the plugin contends for.
    private final class Storage: Sendable {
        let pluginID: String
        let logger: Logger
        let metrics: any MetricsFactory
        let database: any SQLDatabase
        let clock: any WallClock
        let http: any UpstreamHTTPClient
        let notify: @Sendable (_ userID: String, _ plugin: String, _ title: String, _ body: String, _ link: String?) async throws -> Void
        let recordView: @Sendable (_ userID: String, _ plugin: String, _ resource: String, _ title: String) async throws -> Void
        let lease: @Sendable (String, any Service) -> any Service
        let events: any EventBus
        let purgeCache: @Sendable ([String]) async -> Void
        let accounts: any AccountDirectory
        let baseDirectory: URL
        let appKeys: Set<String>
        let secrets: ConfiguredSecrets
        let environment: [String: String]
        let identityTokens: IdentityTokens?

        init(pluginID: String, logger: Logger, metrics: any MetricsFactory, database: any SQLDatabase, clock: any WallClock,
             http: any UpstreamHTTPClient, notify: @escaping @Sendable (String, String, String, String, String?) async throws -> Void,
             recordView: @escaping @Sendable (String, String, String, String) async throws -> Void,
             lease: @escaping @Sendable (String, any Service) -> any Service, events: any EventBus,
             purgeCache: @escaping @Sendable ([String]) async -> Void, accounts: any AccountDirectory, baseDirectory: URL, appKeys: Set<String>,
             secrets: ConfiguredSecrets, environment: [String: String], identityTokens: IdentityTokens?) {
            self.identityTokens = identityTokens
            self.appKeys = appKeys
            self.secrets = secrets
            self.environment = environment
            self.pluginID = pluginID
            self.logger = logger
            self.metrics = metrics
            self.database = database
            self.clock = clock
            self.http = http
            self.notify = notify
            self.recordView = recordView
            self.lease = lease
            self.events = events
            self.purgeCache = purgeCache
            self.accounts = accounts
            self.baseDirectory = baseDirectory
        }
    }

    private let storage: Storage

    /// The plugin's id (its key in plugins.yaml).
    public var pluginID: String { storage.pluginID }
    /// A logger labelled with the plugin's id.
    public var logger: Logger { storage.logger }
    /// Where the plugin's metrics go (the host's Prometheus registry).
    public var metrics: any MetricsFactory { storage.metrics }
    /// The gateway's database. A plugin owns the tables whose names start with its id and creates
    /// them with ``ServicePlugin/migrations``.
    public var database: any SQLDatabase { storage.database }
    /// The wall clock; tests may replace it.
    public var clock: any WallClock { storage.clock }
    /// The HTTP client for upstream services, with timeouts.
    public var http: any UpstreamHTTPClient { storage.http }
    /// Posts a message to the inbox of user `userID`, from this plugin: a title, a body and a
    /// plugin-defined link or resource id the client can open. Durable once the call returns.
    public func notify(userID: String, title: String, body: String, link: String? = nil) async throws {
        try await storage.notify(userID, pluginID, title, body, link)
    }

    /// Records in `userID`'s history ("recently viewed") that they viewed `resource`, titled `title`
    /// (``OperationContext/recordView(of:title:)`` does it for the caller).
    public func recordView(userID: String, resource: String, title: String) async throws {
        try await storage.recordView(userID, pluginID, resource, title)
    }

    /// Background work that must run on one instance of the cluster at a time (retention,
    /// schedules, polling a source whose result goes to the shared database), for
    /// ``ServicePlugin/services``: `work` runs only while this instance holds the lease `name`
    /// (unique in the cluster: `feeds.retention`) in the shared database. The holder renews it
    /// every few seconds; when an instance stops or dies, another takes the work over within
    /// about 15 seconds, and when a renewal fails the work is cancelled, so that two instances
    /// never both run it for longer than a renewal interval. On SQLite there is one instance,
    /// which takes the lease at once.
    public func leased(_ name: String, work: any Service) -> any Service { storage.lease(name, work) }
    /// Publishes changes for live subscribers, on this instance and (with PostgreSQL) on every instance.
    public var events: any EventBus { storage.events }
    /// Removes every cached reply carrying any of `tags` (on every instance sharing the database).
    public func purgeCache(tags: [String]) async {
        await storage.purgeCache(tags)
    }
    /// The gateway's accounts, for dialects that register users and sign them in.
    public var accounts: any AccountDirectory { storage.accounts }
    /// The folder relative paths in the plugin's configuration are resolved against (the folder of plugins.yaml).
    public var baseDirectory: URL { storage.baseDirectory }
    /// The application keys legacy clients may present (`auth.appKeys` in plugins.yaml): the
    /// COIMOTION `_key`, checked by the COIMOTION dialects.
    public var appKeys: Set<String> { storage.appKeys }
    /// Whether a key a client presented is the secret `configured` in plugins.yaml: compared in
    /// constant time, and, for a demo secret that ships with the gateway, against the secret that
    /// replaced it on a reachable listener. Compare presented keys with configured ones only so.
    public func secretMatches(_ presented: String, configured: String) -> Bool {
        storage.secrets.matches(presented, configured: configured)
    }
    /// The environment variables a plugin reads secrets from (`env:` settings): the process's, or
    /// the ones a test gives (changing the process's own with `setenv` while other tests start
    /// processes is a data race).
    public var environment: [String: String] { storage.environment }
    /// The gateway's signed statements of who a caller is, for upstream services (nil when
    /// plugins.yaml gives no `auth.signingKeys`).
    public var identityTokens: IdentityTokens? { storage.identityTokens }

    package init(
        pluginID: String, logger: Logger, metrics: any MetricsFactory, database: any SQLDatabase,
        clock: any WallClock, http: any UpstreamHTTPClient,
        notify: @escaping @Sendable (_ userID: String, _ plugin: String, _ title: String, _ body: String, _ link: String?) async throws -> Void,
        recordView: @escaping @Sendable (_ userID: String, _ plugin: String, _ resource: String, _ title: String) async throws -> Void,
        lease: @escaping @Sendable (_ name: String, _ work: any Service) -> any Service, events: any EventBus,
        purgeCache: @escaping @Sendable (_ tags: [String]) async -> Void, accounts: any AccountDirectory, baseDirectory: URL, appKeys: Set<String> = [],
        secrets: ConfiguredSecrets = .asWritten, environment: [String: String] = ProcessInfo.processInfo.environment,
        identityTokens: IdentityTokens? = nil
    ) {
        storage = Storage(pluginID: pluginID, logger: logger, metrics: metrics, database: database, clock: clock, http: http,
                          notify: notify, recordView: recordView, lease: lease, events: events, purgeCache: purgeCache, accounts: accounts,
                          baseDirectory: baseDirectory, appKeys: appKeys, secrets: secrets, environment: environment, identityTokens: identityTokens)
    }

    /// A path from the configuration, made absolute against ``baseDirectory``.
    public func resolve(path: String) -> URL {
        path.hasPrefix("/") ? URL(fileURLWithPath: path) : baseDirectory.appendingPathComponent(path)
    }
}

/// A source of the current time.
public protocol WallClock: Sendable {
    /// Now.
    func now() -> Date
}

/// Signs short-lived JWTs that tell an upstream service who the caller is, verifiable with the
/// gateway's keys at `/.well-known/jwks.json` (`auth.signingKeys`).
public struct IdentityTokens: Sendable {
    private let sign: @Sendable (_ principal: Principal, _ audience: String, _ lifetime: Double) async throws -> String?

    package init(sign: @escaping @Sendable (_ principal: Principal, _ audience: String, _ lifetime: Double) async throws -> String?) {
        self.sign = sign
    }

    /// A token naming `principal` (`sub`: its account, else its key or provider subject; with its
    /// scopes, credential kind, admin flag and groups) for `audience`, valid for `lifetime`
    /// seconds; nil for a guest, who has no identity to state.
    public func token(for principal: Principal, audience: String, lifetime: Double) async throws -> String? {
        try await sign(principal, audience, lifetime)
    }
}

/// A request to an upstream HTTP service.
public struct UpstreamRequest: Sendable {
    public var method: HTTPRequest.Method
    public var url: String
    public var headers: HTTPFields
    public var body: ByteBuffer?
    /// How long to wait for the whole reply.
    public var timeout: Duration
    /// At most this many connections open to the URL's host and port at once (a call finding them
    /// all busy waits for one, within its timeout); nil: the gateway's default, 512.
    public var maxConnections: Int?
    /// Which addresses the URL may lead to: ``EgressPolicy/operatorConfigured`` (the default) for
    /// a URL from plugins.yaml, ``EgressPolicy/callerSupplied(allowingInternalAddresses:)`` for
    /// one a caller set, which the client then sends to a checked public address only, without
    /// following redirects.
    public var egress: EgressPolicy

    public init(method: HTTPRequest.Method = .get, url: String, headers: HTTPFields = [:], body: ByteBuffer? = nil, timeout: Duration = .seconds(5),
                maxConnections: Int? = nil, egress: EgressPolicy = .operatorConfigured) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.maxConnections = maxConnections
        self.egress = egress
    }
}

/// An upstream's reply: its body whole (a `ByteBuffer`, from ``UpstreamHTTPClient/send(_:maxBodySize:)``)
/// or still arriving (a ``ByteStream``, from ``UpstreamHTTPClient/open(_:body:)``: read it, or the
/// connection stays busy until the reply is dropped).
public struct UpstreamResponse<Body: Sendable>: Sendable {
    public var status: HTTPResponse.Status
    public var headers: HTTPFields
    public var body: Body

    public init(status: HTTPResponse.Status, headers: HTTPFields = [:], body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Sends requests to upstream services.
///
/// Implementations must honour ``UpstreamRequest/timeout`` and ``UpstreamRequest/egress`` (a
/// request its policy refuses is a 502 that names the reason) and report failures as
/// ``GatewayError`` 502 (unusable reply) or 504 (timeout), so a plugin can let them propagate.
public protocol UpstreamHTTPClient: Sendable {
    /// Sends `request`, reading at most `maxBodySize` bytes of the reply.
    func send(_ request: UpstreamRequest, maxBodySize: Int) async throws -> UpstreamResponse<ByteBuffer>
    /// Sends `request` and answers once the reply's head has arrived, its body still to read
    /// (a proxy's way: neither body is ever held whole). See the default in ``ByteStream``'s file.
    func open(_ request: UpstreamRequest, body: ByteStream?) async throws -> UpstreamResponse<ByteStream>
    /// Opens a WebSocket to `url` (`ws://` or `wss://`) with `headers`, runs `session` with it, and
    /// closes it when `session` returns. Fails with a 502 problem when the upstream refuses it.
    func webSocket(_ url: String, headers: HTTPFields, session: @escaping @Sendable (any WebSocketConnection) async throws -> Void) async throws
}

extension UpstreamHTTPClient {
    public func webSocket(_ url: String, headers: HTTPFields, session: @escaping @Sendable (any WebSocketConnection) async throws -> Void) async throws {
        throw GatewayError.badGateway("This client cannot open WebSockets.")
    }
}

/// A change published on the event bus.
public struct GatewayEvent: Sendable {
    /// The topic, such as `feeds/504/datastreams/temp`.
    public var topic: String
    /// The payload, usually JSON.
    public var payload: ByteBuffer

    public init(topic: String, payload: ByteBuffer) {
        self.topic = topic
        self.payload = payload
    }
}

/// Publishes changes and delivers them to live subscribers.
///
/// Delivery is at most once and in publish order per topic; a slow subscriber loses the oldest
/// events rather than slowing publishers down.
public protocol EventBus: Sendable {
    func publish(_ event: GatewayEvent) async
    /// Events whose topic equals `topic` or starts with `topic/`, from now on, until the stream is dropped.
    func subscribe(to topic: String) -> AsyncStream<GatewayEvent>
}

