import HTTPTypes
import ServiceLifecycle

/// A service the gateway hosts: the one protocol a plugin implements.
///
/// A plugin says what it offers — operations, dialect routes, tables, background services,
/// importers — and the host does the rest: routing, auth, caching, rate limits, errors, metrics,
/// the OpenAPI document and the CLI. Plugins are compiled in and listed in `BundledPlugins.swift`;
/// plugins.yaml switches them on and configures them.
///
/// A conforming type guarantees:
/// - ``id`` is lowercase ASCII letters, digits and `-`, and never changes (it keys plugins.yaml,
///   the default mount `/v1/<id>`, table prefixes and metrics);
/// - every operation name starts with `<id>.`;
/// - every table it creates starts with `<id>_`.
public protocol ServicePlugin: Sendable {
    /// The plugin's settings: the `config:` block of its plugins.yaml entry, decoded strictly
    /// (unknown keys are errors). Throw ``ConfigurationError`` from `init` for values that decode but
    /// make no sense; the host reports them with their YAML line.
    associatedtype Configuration: Decodable & Sendable = NoConfiguration

    /// The stable id.
    static var id: String { get }
    /// One line saying what the plugin is for (OpenAPI tag, `gateway plugins`).
    static var summary: String { get }
    /// Versioned schema steps for the plugin's tables, run in order before the plugin starts.
    /// Never edit a shipped migration: add a new one.
    static var migrations: [Migration] { get }

    /// Creates the plugin. Runs after its migrations, once per gateway process.
    init(configuration: Configuration, context: PluginContext) async throws

    /// The native API: its operations (each named `<id>.<verb>`) and WebSockets, under the
    /// plugin's mount (`/live` → `/v1/<id>/live`). A WebSocket's callers identify themselves as in
    /// any native request (`Authorization`, `X-Api-Key`) or, since browsers cannot set headers on
    /// a WebSocket, with `?access_token=` or `?api_key=`.
    var routes: [Route] { get }
    /// The legacy APIs served beside the native one.
    var dialects: [Dialect] { get }
    /// Long-running work (pollers, evaluators), run in the gateway's service group and stopped gracefully.
    var services: [any Service] { get }
    /// The file formats `gateway import <id> FILE` can load.
    var importers: [any Importer] { get }
    /// Named JSON Schemas for the OpenAPI document's components, which operations' documented
    /// bodies and outputs refer to as `#/components/schemas/<name>` (a bucket's object schema).
    /// Names should start with the plugin's id.
    var schemas: [String: JSONValue] { get }
    /// OpenAPI 3.1 path items, by path relative to the mount, for routes the plugin serves but its
    /// operations cannot describe (an upstream service's own document). The host puts them in
    /// /openapi.json in place of the generic description of operations whose path ends in
    /// `{name...}`; schemas they refer to belong in ``schemas``.
    var documentedPaths: [String: JSONValue] { get }

    /// Whether a cached reply may answer `principal` (by default, yes). The response cache answers
    /// from the operation, the caller, the path and the query alone; a plugin whose own checks
    /// depend on more (the client's address, a header, the time since the caller's last request)
    /// answers no for the callers those checks bind, and each of their requests then reaches the
    /// handler, neither served from the cache nor stored in it. Called for cacheable reads only;
    /// must answer quickly.
    func cacheAdmits(_ principal: Principal) async -> Bool

    /// The plugin's current health, for `/readyz` and `gateway plugins`. Must answer quickly.
    func health() async -> PluginHealth
    /// Pages the plugin adds to the admin console (none by default).
    var adminViews: [AdminView] { get }
    /// Loads the demo data the plugin ships. Called once per database, on a start with `demo: true`.
    func loadDemoData() async throws
}

extension ServicePlugin {
    public static var summary: String { id }
    public static var migrations: [Migration] { [] }
    public var dialects: [Dialect] { [] }
    public var services: [any Service] { [] }
    public var importers: [any Importer] { [] }
    public var schemas: [String: JSONValue] { [:] }
    public var documentedPaths: [String: JSONValue] { [:] }
    public var adminViews: [AdminView] { [] }
    public func cacheAdmits(_ principal: Principal) async -> Bool { true }
    public func health() async -> PluginHealth { .ok }
    public func loadDemoData() async throws {}
}

/// The configuration of a plugin that takes none: only an empty (or absent) `config:` decodes.
public struct NoConfiguration: Decodable, Sendable, Equatable {
    public init() {}
    public init(from decoder: any Decoder) throws {
        _ = try? decoder.container(keyedBy: AnyKey.self)
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}

/// A configuration value that decoded but cannot be used. `key` is relative to the plugin's
/// `config:` block (`dictionaries[0]`); the host adds the file, line and full key path.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public var key: String
    public var message: String

    public init(key: String, _ message: String) {
        self.key = key
        self.message = message
    }

    public var description: String { "\(key): \(message)" }
}

/// A plugin's health.
public struct PluginHealth: Sendable, Equatable, Codable {
    public enum Status: String, Sendable, Codable {
        case ok, degraded, failing
    }

    public var status: Status
    /// Why it is not ok.
    public var reason: String?

    public init(_ status: Status, reason: String? = nil) {
        self.status = status
        self.reason = reason
    }

    public static let ok = PluginHealth(.ok)
    public static func degraded(_ reason: String) -> PluginHealth { PluginHealth(.degraded, reason: reason) }
    public static func failing(_ reason: String) -> PluginHealth { PluginHealth(.failing, reason: reason) }
}

/// A plugin with resource-level checks beyond the access rules (a legacy key restricted to one
/// feed, an application key of a tenant).
///
/// The host calls ``authorize(_:)`` for every operation and dialect route of the plugin, after the
/// route's access rule, the key's scopes and its resource restrictions have passed and before
/// input is decoded, a cached reply is served or the handler runs. No handler calls it itself:
/// that the host does so for every route is what makes an authorization matrix test meaningful.
/// (A plugin without such checks does not conform, and its requests pay nothing for the hook.)
public protocol AuthorizingPlugin: ServicePlugin {
    /// Refuses a call by throwing a ``GatewayError``: a 404 for a resource the caller may not know
    /// of, a 403 otherwise.
    func authorize(_ request: AuthorizationRequest) async throws
}

/// A call the host is about to run, as an ``AuthorizingPlugin``'s hook sees it.
public struct AuthorizationRequest: Sendable {
    /// The caller.
    public let principal: Principal
    /// The operation's name (`feeds.read`) or the dialect route's (`feeds.xively-v2 GET /v2/feeds/{feed}`).
    public let route: String
    /// The dialect the route belongs to; nil for an operation of the native API.
    public let dialect: String?
    public let method: HTTPRequest.Method
    /// The route's tags (``Route/tags``).
    public let tags: [String]
    /// The percent-decoded path parameters.
    public let pathParameters: [String: String]
    /// The request's header fields.
    public let headers: HTTPFields

    public init(principal: Principal, route: String, dialect: String?, method: HTTPRequest.Method, tags: [String],
                pathParameters: [String: String], headers: HTTPFields) {
        self.principal = principal
        self.route = route
        self.dialect = dialect
        self.method = method
        self.tags = tags
        self.pathParameters = pathParameters
        self.headers = headers
    }

    /// Whether the route carries `tag`.
    public func has(tag: String) -> Bool { tags.contains(tag) }
}
