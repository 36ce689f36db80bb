import Foundation
import HTTPTypes
import NIOCore

/// A legacy API served beside a plugin's native one: routes that keep old clients working.
///
/// A dialect translates the old shapes and calls the same service code as the plugin's
/// operations. Its routes are declared like operations — access rule, cost, cache policy, tags,
/// optional typed input — and the host runs them through the same pipeline: principal → rate
/// limit → cache → authorization (the access rule, the key's scopes and resources, the plugin's
/// ``AuthorizingPlugin/authorize(_:)`` hook) → handler. A dialect adds only two things of its own:
///
/// - a ``CredentialExtractor``: how its old clients present credentials (`X-ApiKey`, a token in
///   the body, ...). The host resolves what it returns to a principal;
/// - an ``ErrorRenderer``: its legacy error shape. Every ``GatewayError`` on the way — a refused
///   credential, a 429, a 422 from decoding, a handler's error — is rendered through it.
///
/// No handler checks credentials or access itself.
public struct Dialect: Sendable {
    /// A short name (`kkbox`, `xively-v2`), used in logs, metrics and `gateway routes`.
    public let name: String
    /// The HTTP routes. Paths are absolute (`/ajax/ac_search.php`); plugins.yaml may put them under a prefix.
    public let routes: [DialectRoute]
    /// The WebSocket routes.
    public let webSockets: [WebSocketRoute]
    /// How old clients present credentials.
    public let credentials: CredentialExtractor
    /// Renders an error in the legacy shape.
    public let renderError: ErrorRenderer

    public init(
        name: String,
        routes: [DialectRoute],
        webSockets: [WebSocketRoute] = [],
        credentials: CredentialExtractor = .none,
        renderError: @escaping ErrorRenderer
    ) {
        self.name = name
        self.routes = routes
        self.webSockets = webSockets
        self.credentials = credentials
        self.renderError = renderError
    }
}

/// Renders a ``GatewayError`` in a dialect's legacy shape. The host adds the error's own header
/// fields (`Retry-After`, `Allow`) to what it returns, unless the rendering sets them itself.
public typealias ErrorRenderer = @Sendable (GatewayError) -> DialectResponse

/// How a dialect's old clients present their credential. The host calls it once per request,
/// after the body is read, and resolves the result to a ``Principal`` (nil: a guest). A
/// credential that does not resolve (unknown, expired, revoked) is a 401 in the dialect's shape,
/// unless the extractor says such callers are guests (``InvalidCredential/guest``).
public struct CredentialExtractor: Sendable {
    /// What becomes of a caller whose credential does not resolve.
    public enum InvalidCredential: Sendable {
        /// A 401.
        case refuse
        /// A guest; the handler sees ``OperationContext/credentialRefused``.
        case guest
    }

    let extract: @Sendable (DialectRequest) -> Credential?
    /// What becomes of a caller whose credential does not resolve.
    public let invalid: InvalidCredential

    /// An extractor that reads the request with `extract`.
    public init(invalid: InvalidCredential = .refuse, _ extract: @escaping @Sendable (DialectRequest) -> Credential?) {
        self.invalid = invalid
        self.extract = extract
    }

    /// The credential `request` presents, if any.
    public func callAsFunction(_ request: DialectRequest) -> Credential? {
        extract(request)
    }

    /// No credential: every caller is a guest.
    public static let none = CredentialExtractor { _ in nil }

    /// The first extractor that finds a credential.
    public static func firstOf(_ extractors: CredentialExtractor...) -> CredentialExtractor {
        CredentialExtractor { request in
            for extractor in extractors { if let found = extractor(request) { return found } }
            return nil
        }
    }

    /// An API key in header `name` (`X-ApiKey`).
    public static func apiKeyHeader(_ name: String) -> CredentialExtractor {
        let field = HTTPField.Name(name)
        return CredentialExtractor { request in
            guard let field, let key = request.headers[field], !key.isEmpty else { return nil }
            return .apiKey(key)
        }
    }

    /// An API key in query parameter `name` (`?key=`).
    public static func apiKeyQuery(_ name: String) -> CredentialExtractor {
        CredentialExtractor { request in
            guard let key = request.query(name), !key.isEmpty else { return nil }
            return .apiKey(key)
        }
    }

    /// A session token in header `name` (`X-Session-Token`).
    public static func sessionHeader(_ name: String) -> CredentialExtractor {
        let field = HTTPField.Name(name)
        return CredentialExtractor { request in
            guard let field, let token = request.headers[field], !token.isEmpty else { return nil }
            return .sessionToken(token)
        }
    }

    /// The gateway's own `Authorization: Bearer <session token>`.
    public static let bearer = CredentialExtractor { request in
        guard let authorization = request.headers[.authorization], authorization.count > 7,
              authorization.prefix(7).lowercased() == "bearer " else { return nil }
        let token = authorization.dropFirst(7).trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : .sessionToken(token)
    }
}

/// A credential a client presented.
public enum Credential: Sendable, Equatable {
    /// A session token.
    case sessionToken(String)
    /// An API key.
    case apiKey(String)

    /// The query parameters the gateway reads a native credential from where a client cannot set
    /// header fields (a browser's WebSocket): `access_token` (a session) and `api_key`. They are
    /// the gateway's, never to be passed on to a service behind it.
    public static let queryParameters: Set<String> = ["access_token", "api_key"]
}

/// One HTTP route of a dialect, declared like an operation.
///
/// ```swift
/// DialectRoute.define(.get, "/v2/feeds/{feed}", summary: "Read a feed")
///     .access(.public)
///     .cache(.shared(ttl: .seconds(30), tags: ["feeds:{feed}"]))
///     .handle { request, context in ... }
/// ```
public struct DialectRoute: Sendable {
    public let method: HTTPRequest.Method
    /// The path template, `{name}` marking a parameter segment.
    public let path: String
    /// One line for `gateway routes`.
    public let summary: String
    /// Longer prose.
    public var details: String?
    /// Who may call it; enforced by the host as for operations (default public).
    public var access: AccessRule
    /// Whether replies may be cached, and which cached replies a call invalidates.
    public var cache: CachePolicy
    /// Units of rate limit one call consumes.
    public var cost: Int
    /// The path parameter naming the resource a key may be restricted to, if any.
    public var resourceParameter: String?
    /// Labels the plugin's ``AuthorizingPlugin/authorize(_:)`` hook and `gateway routes` see.
    public var tags: [String]
    /// The declared input types (``NoInput`` for a part it reads raw).
    public let io: OperationIO
    public let handler: @Sendable (DialectRequest, OperationContext) async throws -> DialectResponse

    /// A route whose handler reads the request raw.
    public init(
        _ method: HTTPRequest.Method, _ path: String, summary: String, details: String? = nil, access: AccessRule = .public,
        cache: CachePolicy = .none, cost: Int = 1, resource: String? = nil, tags: [String] = [],
        handler: @escaping @Sendable (DialectRequest, OperationContext) async throws -> DialectResponse
    ) {
        self.init(method, path, summary: summary, details: details, access: access, cache: cache, cost: cost, resource: resource, tags: tags,
                  io: OperationIO(path: NoInput.self, query: NoInput.self, body: NoInput.self, output: NoContent.self), handler: handler)
    }

    @usableFromInline
    init(
        _ method: HTTPRequest.Method, _ path: String, summary: String, details: String?, access: AccessRule, cache: CachePolicy, cost: Int,
        resource: String?, tags: [String], io: OperationIO,
        handler: @escaping @Sendable (DialectRequest, OperationContext) async throws -> DialectResponse
    ) {
        self.method = method
        self.path = path
        self.summary = summary
        self.details = details
        self.access = access
        self.cache = cache
        self.cost = max(0, cost)
        self.resourceParameter = resource
        self.tags = tags
        self.io = io
        self.handler = handler
    }

    /// Starts declaring a route; add its settings and input types, then finish with
    /// ``DialectRouteBuilder/handle(_:)`` (the raw request) or ``DialectRouteBuilder/handleDecoded(_:)`` (typed input).
    public static func define(_ method: HTTPRequest.Method, _ path: String, summary: String) -> DialectRouteBuilder<NoInput, NoInput, NoInput> {
        DialectRouteBuilder(method: method, path: path, summary: summary)
    }
}

/// Declares a ``DialectRoute`` step by step, as ``OperationBuilder`` declares an operation.
/// Typed input parts are decoded before the handler runs; a decoding failure reaches the client
/// in the dialect's error shape.
public struct DialectRouteBuilder<Path: Decodable & Sendable, Query: Decodable & Sendable, Body: Decodable & Sendable> {
    @usableFromInline var settings: RouteSettings

    init(method: HTTPRequest.Method, path: String, summary: String) {
        settings = RouteSettings(method: method, path: path, summary: summary)
    }

    @usableFromInline
    init(settings: RouteSettings) {
        self.settings = settings
    }

    /// The type the path parameters decode into.
    public func path<T: Decodable & Sendable>(_: T.Type) -> DialectRouteBuilder<T, Query, Body> { .init(settings: settings) }
    /// The type the query parameters decode into.
    public func query<T: Decodable & Sendable>(_: T.Type) -> DialectRouteBuilder<Path, T, Body> { .init(settings: settings) }
    /// The type the body decodes into (JSON, or a ``RawBodyInput``).
    public func body<T: Decodable & Sendable>(_: T.Type) -> DialectRouteBuilder<Path, Query, T> { .init(settings: settings) }

    /// Who may call it (default public).
    public func access(_ rule: AccessRule) -> Self { var copy = self; copy.settings.access = rule; return copy }
    /// Its cache policy (default not cached).
    public func cache(_ policy: CachePolicy) -> Self { var copy = self; copy.settings.cache = policy; return copy }
    /// Units of rate limit one call costs (default 1).
    public func cost(_ units: Int) -> Self { var copy = self; copy.settings.cost = units; return copy }
    /// The path parameter naming the resource a key may be restricted to.
    public func resource(_ parameter: String) -> Self { var copy = self; copy.settings.resource = parameter; return copy }
    /// Labels for the plugin's authorize hook and `gateway routes`.
    public func tags(_ tags: String...) -> Self { var copy = self; copy.settings.tags += tags; return copy }
    /// Longer prose.
    public func details(_ text: String) -> Self { var copy = self; copy.settings.details = text; return copy }

    /// Finishes with a handler that receives the decoded, validated input beside the raw request.
    @inlinable
    public func handleDecoded(
        _ handler: @escaping @Sendable (DialectCall<Path, Query, Body>, OperationContext) async throws -> DialectResponse
    ) -> DialectRoute {
        let decode = InputDecoder.decoder(path: Path.self, query: Query.self, body: Body.self)
        let s = settings
        return DialectRoute(
            s.method, s.path, summary: s.summary, details: s.details, access: s.access, cache: s.cache, cost: s.cost, resource: s.resource,
            tags: s.tags, io: OperationIO(path: Path.self, query: Query.self, body: Body.self, output: NoContent.self)
        ) { request, context in
            let input = try decode(OperationRequest(pathParameters: request.pathParameters, queryParameters: request.queryParameters,
                                                    body: request.body, contentType: request.contentType))
            return try await handler(DialectCall(request: request, input: input), context)
        }
    }
}

extension DialectRouteBuilder where Path == NoInput, Query == NoInput, Body == NoInput {
    /// Finishes with a handler that reads the request raw.
    public func handle(_ handler: @escaping @Sendable (DialectRequest, OperationContext) async throws -> DialectResponse) -> DialectRoute {
        let s = settings
        return DialectRoute(s.method, s.path, summary: s.summary, details: s.details, access: s.access, cache: s.cache, cost: s.cost,
                            resource: s.resource, tags: s.tags, handler: handler)
    }
}

/// The settings a route builder gathers (shared by operations and dialect routes).
@usableFromInline
struct RouteSettings: Sendable {
    @usableFromInline let method: HTTPRequest.Method
    @usableFromInline let path: String
    @usableFromInline let summary: String
    @usableFromInline var details: String?
    @usableFromInline var access: AccessRule = .public
    @usableFromInline var cache: CachePolicy = .none
    @usableFromInline var cost = 1
    @usableFromInline var resource: String?
    @usableFromInline var tags: [String] = []
    @usableFromInline var bodySchema: JSONValue?
    @usableFromInline var outputSchema: JSONValue?
    @usableFromInline var bodyShape: DocumentedShape?
    @usableFromInline var outputShape: DocumentedOutputShape?
    @usableFromInline var rawMediaTypes: [String] = []
    @usableFromInline var inputRules: [String: FieldRule] = [:]
    @usableFromInline var errorMediaTypes: [Int: String] = [:]
    @usableFromInline var example: String?

    @usableFromInline
    init(method: HTTPRequest.Method, path: String, summary: String) {
        self.method = method
        self.path = path
        self.summary = summary
    }
}

/// What a typed dialect handler receives: the raw request and its decoded, validated input.
public struct DialectCall<Path: Sendable, Query: Sendable, Body: Sendable>: Sendable {
    public var request: DialectRequest
    public var input: OperationInput<Path, Query, Body>

    @inlinable
    public init(request: DialectRequest, input: OperationInput<Path, Query, Body>) {
        self.request = request
        self.input = input
    }
}

/// A request as a dialect sees it: raw, but with its path parameters and query already percent-decoded.
public struct DialectRequest: Sendable {
    public var method: HTTPRequest.Method
    /// The request path as sent (still percent-encoded).
    public var path: String
    public var pathParameters: [String: String]
    public var queryParameters: [(name: String, value: String)]
    public var headers: HTTPFields
    public var body: ByteBuffer
    /// The host (and port) the client addressed (HTTP/1 `Host`), for legacy replies that carry absolute URLs.
    public var authority: String?

    public init(method: HTTPRequest.Method, path: String, pathParameters: [String: String] = [:],
                queryParameters: [(name: String, value: String)] = [], headers: HTTPFields = [:], body: ByteBuffer = ByteBuffer(),
                authority: String? = nil) {
        self.authority = authority
        self.method = method
        self.path = path
        self.pathParameters = pathParameters
        self.queryParameters = queryParameters
        self.headers = headers
        self.body = body
    }

    /// The last value of query parameter `name`.
    public func query(_ name: String) -> String? {
        queryParameters.last { $0.name == name }?.value
    }

    /// The body's media type without parameters, lowercased.
    public var contentType: String? {
        headers[.contentType].map { MediaType.essence(of: $0) }
    }
}

/// A dialect's reply, sent as is (the host adds the rate-limit fields, `X-Request-Id` and, for a
/// cacheable route, the cache fields).
public struct DialectResponse: Sendable {
    public var status: HTTPResponse.Status
    /// The reply's header fields; a name may repeat (several `Set-Cookie` or `Link` fields).
    public var headers: HTTPFields
    public var body: ByteBuffer

    public init(status: HTTPResponse.Status = .ok, headers: HTTPFields = [:], body: ByteBuffer = ByteBuffer()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A text reply.
    public static func text(_ text: String, status: HTTPResponse.Status = .ok, contentType: String = "text/plain; charset=utf-8") -> DialectResponse {
        DialectResponse(status: status, headers: [.contentType: contentType], body: ByteBuffer(string: text))
    }

    /// A JSON reply: `value` as JSON (members in the order the value encodes them).
    public static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:],
                            contentType: String = "application/json") -> DialectResponse {
        var fields = headers
        if fields[.contentType] == nil { fields[.contentType] = contentType }
        return DialectResponse(status: status, headers: fields, body: value.serialized())
    }

    /// A JSON reply encoded with the gateway's conventions (``JSONStreamEncoder``: members in the
    /// order the value encodes them).
    public static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:],
                            contentType: String = "application/json") throws -> DialectResponse {
        var fields = headers
        if fields[.contentType] == nil { fields[.contentType] = contentType }
        return DialectResponse(status: status, headers: fields, body: try JSONStreamEncoder.encodeBuffer(value))
    }
}

/// A WebSocket route of a dialect (or of the native API).
///
/// Declared like an operation: the host enforces its ``access`` rule and the key's scopes (a
/// socket is a read: `<plugin>:read`) at the upgrade, answering 401 or 403 before upgrading. What
/// the client then asks for over the socket (each subscription) the handler authorizes with
/// ``OperationContext/authorizeSocketRequest(_:as:)``: the same rule for the caller as of now, the
/// key's resource restriction on ``resourceParameter``, and the plugin's authorize hook.
public struct WebSocketRoute: Sendable {
    /// The path template where clients upgrade.
    public let path: String
    public let summary: String
    /// Serves one connection until the client goes or the handler returns.
    public let serve: @Sendable (WebSocketRequest, any WebSocketConnection, OperationContext) async throws -> Void
    /// Who may open the socket (and make each request over it).
    public private(set) var access: AccessRule = .public
    /// The parameter of a socket request naming the resource a key may be restricted to.
    public private(set) var resourceParameter: String?
    /// Labels the plugin's authorize hook sees for each socket request.
    public private(set) var tags: [String] = []

    /// The route with access rule `rule`.
    public func access(_ rule: AccessRule) -> Self { var copy = self; copy.access = rule; return copy }
    /// The route whose socket requests name the resource a key may be restricted to in `parameter`.
    public func resource(_ parameter: String) -> Self { var copy = self; copy.resourceParameter = parameter; return copy }
    /// The route with `tags` for the plugin's authorize hook.
    public func tags(_ tags: [String]) -> Self { var copy = self; copy.tags = tags; return copy }

    public init(_ path: String, summary: String, handler: @escaping @Sendable (any WebSocketConnection, OperationContext) async throws -> Void) {
        self.path = path
        self.summary = summary
        serve = { _, connection, context in try await handler(connection, context) }
    }

    /// A route whose handler reads the upgrade request: its path parameters and query.
    public init(_ path: String, summary: String, request handler: @escaping @Sendable (WebSocketRequest, any WebSocketConnection, OperationContext) async throws -> Void) {
        self.path = path
        self.summary = summary
        serve = handler
    }
}

/// The request a WebSocket was opened with.
public struct WebSocketRequest: Sendable {
    /// The percent-decoded path parameters (a `{name...}` one as it came).
    public var pathParameters: [String: String]
    /// The percent-decoded query parameters in order.
    public var queryParameters: [(name: String, value: String)]
    /// The upgrade request's header fields.
    public var headers: HTTPFields

    public init(pathParameters: [String: String], queryParameters: [(name: String, value: String)], headers: HTTPFields) {
        self.pathParameters = pathParameters
        self.queryParameters = queryParameters
        self.headers = headers
    }
}

/// A message on a WebSocket.
public enum WebSocketMessage: Sendable, Equatable {
    case text(String)
    case binary(ByteBuffer)
}

/// One open WebSocket, as a handler sees it.
public protocol WebSocketConnection: Sendable {
    /// The messages the client sends; ends when the client closes.
    var inbound: AsyncStream<WebSocketMessage> { get }
    /// Sends a message; throws when the connection is gone.
    func send(_ message: WebSocketMessage) async throws
}

/// Media type helpers.
public enum MediaType {
    /// A `Content-Type` value without its parameters, trimmed and lowercased (`application/json`).
    public static func essence(of header: String) -> String {
        if header == "application/json" { return header }
        let type = header.split(separator: ";", maxSplits: 1).first.map(String.init) ?? header
        return type.trimmingCharacters(in: .whitespaces).lowercased()
    }
}

extension HTTPField.Name {
    /// `Link` (RFC 8288): the native API's `rel="next"` pagination, and any relation a reply names.
    public static var link: HTTPField.Name { HTTPField.Name("Link")! }
}
