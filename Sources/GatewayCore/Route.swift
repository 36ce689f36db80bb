import Foundation
import HTTPTypes
import NIOCore

/// One route of a plugin — an operation of its native API, a route of a dialect, or a WebSocket —
/// described as data.
///
/// Every route is declared with the same builder and passes the same pipeline: the host
/// identifies the caller, charges its rate limit, enforces ``access`` and the key's scopes and
/// resources (at the upgrade, for a WebSocket), consults the cache, decodes and validates the
/// declared input, and only then runs the handler. A handler never sees input that did not decode
/// into its declared types: any failure is a 400 or 422 naming the field (in a dialect's shape,
/// for a dialect's route). From a plugin's routes the host also builds the OpenAPI document,
/// `gateway call`, batches and composites.
///
/// ```swift
/// Route.define("notes.get", .get, "/notes/{id}", summary: "Read one note")
///     .path(NoteID.self)
///     .returns(Note.self) { input, context in
///         try await store.note(input.path.id)
///     }
///
/// Route.define(.get, "/v2/feeds/{feed}", summary: "Read a feed")      // a dialect's route
///     .access(.public)
///     .cache(.shared(ttl: .seconds(30), tags: ["feeds:{feed}"]))
///     .handle { request, context in ... }
///
/// Route.define(.get, "/live", summary: "Live updates")                  // a WebSocket
///     .access(.user)
///     .socket { request, connection, context in ... }
/// ```
public struct Route: Sendable {
    /// The stable, dotted name of a native operation: `<plugin id>.<verb>` such as
    /// `suggest.complete`, unique in the gateway. Empty for a dialect's routes and WebSockets: the
    /// host names them `<plugin>.<dialect> METHOD <path>` (`WS` for a WebSocket's method; a native
    /// WebSocket's dialect is `native`).
    public let name: String
    /// The HTTP method (`GET` for a WebSocket).
    public let method: HTTPRequest.Method
    /// The path template, `{name}` marking a parameter segment and a last `{name...}` the rest of
    /// the path; relative to the plugin's mount for the native API, absolute for a dialect.
    public let path: String
    /// One line for the OpenAPI document and `gateway routes`.
    public let summary: String
    /// Longer prose for the OpenAPI document.
    public var details: String?
    /// Who may call it.
    public var access: AccessRule
    /// Whether replies may be cached, and which cached replies a call invalidates.
    public var cache: CachePolicy
    /// How many units of the caller's rate limit one call consumes (default 1).
    public var cost: Int
    /// The path parameter (for a WebSocket: the parameter of a socket request) that names the
    /// resource a key may be restricted to (e.g. `feed`), if any.
    public var resourceParameter: String?
    /// The status of a successful reply when the handler does not choose one (200; 201 for POST).
    public var successStatus: HTTPResponse.Status
    /// Labels the plugin's ``AuthorizingPlugin/authorize(_:)`` hook and `gateway routes` see.
    public var tags: [String]
    /// A JSON Schema that documents the body where its type cannot (a user-defined payload); it
    /// may refer to the plugin's ``ServicePlugin/schemas`` as `#/components/schemas/<name>`.
    public var documentedBody: JSONValue?
    /// A JSON Schema that documents the successful reply where its type cannot.
    public var documentedOutput: JSONValue?
    /// The media types a ``RawReply`` may have (default `text/plain`).
    public var rawMediaTypes: [String] = []
    /// Statuses the handler answers itself with a body of another media type than a problem, by code.
    public var errorMediaTypes: [Int: String] = [:]
    /// Rules of input fields that depend on the configuration, keyed `path.<name>`,
    /// `query.<name>`, `body.<member>` or `body` (``RouteBuilder/rules(_:)``).
    public var inputRules: [String: FieldRule] = [:]
    /// The media types the body may have (empty without a body).
    public let bodyMediaTypes: [String]
    /// Whether the handler reads the body as it arrives (``RouteRequest/bodyStream``) instead of
    /// the host collecting it against `server.maxBodySize` first.
    public var streamsBody = false
    /// A request below the plugin's mount that shows the route at work (``RouteBuilder/example(_:)``).
    public var example: String?

    /// The declared types, for the OpenAPI document and `gateway call`.
    package let io: RouteTypes
    /// What runs a call.
    package let handler: RouteHandler

    /// Whether the route is a WebSocket.
    public var isWebSocket: Bool {
        if case .socket = handler { return true }
        return false
    }

    /// Runs an HTTP route on raw input: decodes, validates, calls the handler. Throws
    /// ``GatewayError`` for bad input; rethrows whatever the handler throws. (A WebSocket route
    /// runs only when a client upgrades: called this way it answers 400.)
    public func callAsFunction(_ request: RouteRequest, context: OperationContext) async throws -> RouteReply {
        guard case .http(let run) = handler else { throw GatewayError.badRequest("\(path) is a WebSocket: upgrade to it.") }
        return try await run(request, context)
    }

    /// Starts declaring an operation of the native API, named `<plugin id>.<verb>`.
    public static func define(_ name: String, _ method: HTTPRequest.Method, _ path: String, summary: String) -> RouteBuilder<NoInput, NoInput, NoInput> {
        RouteBuilder(name: name, method: method, path: path, summary: summary)
    }

    /// Starts declaring a route of a dialect, or a WebSocket.
    public static func define(_ method: HTTPRequest.Method, _ path: String, summary: String) -> RouteBuilder<NoInput, NoInput, NoInput> {
        RouteBuilder(name: nil, method: method, path: path, summary: summary)
    }

    package init(settings s: RouteSettings, io: RouteTypes, bodyMediaTypes: [String], handler: RouteHandler) {
        name = s.name ?? ""
        method = s.method
        path = s.path
        summary = s.summary
        details = s.details
        access = s.access
        cache = s.cache
        cost = max(0, s.cost)
        resourceParameter = s.resource
        successStatus = s.successStatus ?? (s.method == .post ? .created : .ok)
        tags = s.tags
        documentedBody = s.bodySchema
        documentedOutput = s.outputSchema
        rawMediaTypes = s.rawMediaTypes
        errorMediaTypes = s.errorMediaTypes
        inputRules = s.inputRules
        example = s.example
        self.io = io
        self.bodyMediaTypes = bodyMediaTypes
        self.handler = handler
    }

    /// The names of the `{parameters}` in ``path``.
    public var pathParameterNames: [String] { Route.parameterNames(in: path) }

    /// The `{names}` of a path template, in order.
    public static func parameterNames(in template: String) -> [String] {
        template.split(separator: "/").compactMap { segment in
            guard segment.hasPrefix("{"), segment.hasSuffix("}") else { return nil }
            let name = segment.dropFirst().dropLast()
            return String(name.hasSuffix("...") ? name.dropLast(3) : name)
        }
    }
}

/// What runs a call of a route.
package enum RouteHandler: Sendable {
    case http(@Sendable (RouteRequest, OperationContext) async throws -> RouteReply)
    case socket(@Sendable (RouteRequest, any WebSocketConnection, OperationContext) async throws -> Void)
}

/// The declared types of a route, kept so the host can describe them (OpenAPI, `gateway call`).
package struct RouteTypes: @unchecked Sendable {
    // Metatypes are immutable values; the wrapper only exists because `any Decodable.Type`
    // is not yet `Sendable` in the language.
    package let path: any Decodable.Type
    package let query: any Decodable.Type
    package let body: any Decodable.Type
    package let output: any Encodable.Type
    /// A type whose `Decodable` shape documents a body read another way (``RouteBuilder/documentBody(as:)``).
    package var bodyShape: (any Decodable.Type)?
    /// A type whose `Encodable` shape documents a ``RawReply``'s JSON (``RouteBuilder/documentOutput(as:)``).
    package var outputShape: (any Encodable.Type)?

    package init(path: any Decodable.Type, query: any Decodable.Type, body: any Decodable.Type, output: any Encodable.Type,
                 bodyShape: (any Decodable.Type)? = nil, outputShape: (any Encodable.Type)? = nil) {
        self.path = path
        self.query = query
        self.body = body
        self.output = output
        self.bodyShape = bodyShape
        self.outputShape = outputShape
    }

    /// Whether the route reads a body.
    package var hasBody: Bool { body != NoInput.self }
}

/// The settings a ``RouteBuilder`` gathers.
package struct RouteSettings: @unchecked Sendable {
    // Unchecked only for the two documented-shape metatypes (immutable values; `any
    // Decodable.Type` is not yet `Sendable` in the language), as in ``RouteTypes``.
    let name: String?
    let method: HTTPRequest.Method
    let path: String
    let summary: String
    var details: String?
    var access: AccessRule = .public
    var cache: CachePolicy = .none
    var cost = 1
    var resource: String?
    var successStatus: HTTPResponse.Status?
    var tags: [String] = []
    var bodySchema: JSONValue?
    var outputSchema: JSONValue?
    var bodyShape: (any Decodable.Type)?
    var outputShape: (any Encodable.Type)?
    var rawMediaTypes: [String] = []
    var inputRules: [String: FieldRule] = [:]
    var errorMediaTypes: [Int: String] = [:]
    var example: String?
}

/// Declares a ``Route`` step by step: its settings, its input types, then its handler. Input
/// parts left out are ``NoInput``.
public struct RouteBuilder<Path: Decodable & Sendable, Query: Decodable & Sendable, Body: Decodable & Sendable>: Sendable {
    var settings: RouteSettings

    init(name: String?, method: HTTPRequest.Method, path: String, summary: String) {
        settings = RouteSettings(name: name, method: method, path: path, summary: summary)
    }

    init(settings: RouteSettings) {
        self.settings = settings
    }

    /// The type the path parameters decode into (one property per `{name}`).
    public func path<T: Decodable & Sendable>(_: T.Type) -> RouteBuilder<T, Query, Body> { .init(settings: settings) }
    /// The type the query parameters decode into.
    public func query<T: Decodable & Sendable>(_: T.Type) -> RouteBuilder<Path, T, Body> { .init(settings: settings) }
    /// The type the body decodes into (JSON, or a ``RawBodyInput``).
    public func body<T: Decodable & Sendable>(_: T.Type) -> RouteBuilder<Path, Query, T> { .init(settings: settings) }

    /// Who may call it (default public).
    public func access(_ rule: AccessRule) -> Self { with { $0.access = rule } }
    /// Its cache policy (default not cached).
    public func cache(_ policy: CachePolicy) -> Self { with { $0.cache = policy } }
    /// Units of rate limit one call costs (default 1).
    public func cost(_ units: Int) -> Self { with { $0.cost = units } }
    /// The path parameter (for a WebSocket: the socket request's parameter) naming the resource a
    /// key may be restricted to.
    public func resource(_ parameter: String) -> Self { with { $0.resource = parameter } }
    /// Longer prose for the OpenAPI document.
    public func details(_ text: String) -> Self { with { $0.details = text } }
    /// The status of a successful reply (default 200; 201 for POST).
    public func status(_ status: HTTPResponse.Status) -> Self { with { $0.successStatus = status } }
    /// Labels the plugin's authorize hook and `gateway routes` see.
    public func tags(_ tags: String...) -> Self { with { $0.tags += tags } }
    /// Labels the plugin's authorize hook and `gateway routes` see.
    public func tags(_ tags: [String]) -> Self { with { $0.tags += tags } }
    /// A JSON Schema for the OpenAPI document's description of the body, where the body's type
    /// cannot say it (a user-defined payload). The body is still decoded as its declared type.
    public func documentBody(schema: JSONValue) -> Self { with { $0.bodySchema = schema } }
    /// A JSON Schema for the OpenAPI document's description of the successful reply.
    public func documentOutput(schema: JSONValue) -> Self { with { $0.outputSchema = schema } }
    /// A type whose `Decodable` shape the OpenAPI document shows for the body, where the body is
    /// read another way (a ``JSONValue`` checked member by member). A test should hold the two to
    /// the same members.
    public func documentBody<T: Decodable>(as type: T.Type) -> Self { with { $0.bodyShape = type } }
    /// For a route that answers ``RawReply``: the type whose `Encodable` shape its JSON reply has.
    public func documentOutput<T: Encodable>(as type: T.Type) -> Self { with { $0.outputShape = type } }
    /// For a route that answers ``RawReply``: the media types of its other replies (`text/calendar`).
    public func documentRawOutput(mediaTypes: String...) -> Self { with { $0.rawMediaTypes = mediaTypes } }
    /// Statuses the handler answers with its own body of `mediaType` instead of a problem document
    /// (an HTML form that shows the page again with what is wrong).
    public func documentErrors(_ statuses: [HTTPResponse.Status], mediaType: String) -> Self {
        with { for status in statuses { $0.errorMediaTypes[status.code] = mediaType } }
    }
    /// A request that shows the route answering something worth seeing: its path below the
    /// plugin's mount with a query (`/stops/near?lat=36.9&lon=-116.7`). `gateway serve` prints it
    /// as a first thing to try.
    public func example(_ pathAndQuery: String) -> Self { with { $0.example = pathAndQuery } }
    /// Rules of input fields that depend on the configuration (``Route/inputRules``):
    /// `["query.city": .oneOf(configuredCities)]`. The handler must enforce what they state.
    public func rules(_ rules: [String: FieldRule]) -> Self { with { $0.inputRules.merge(rules) { $0.and($1) } } }

    private func with(_ change: (inout RouteSettings) -> Void) -> Self {
        var copy = self
        change(&copy.settings)
        return copy
    }

    /// Finishes with a handler that returns just its output (status ``Route/successStatus``;
    /// 204 for ``NoContent``).
    public func returns<Output: Encodable & Sendable>(
        _ output: Output.Type, handler: @escaping @Sendable (RouteInput<Path, Query, Body>, OperationContext) async throws -> Output
    ) -> Route {
        replies(output) { input, context in Reply(try await handler(input, context)) }
    }

    /// Finishes with a handler that chooses its reply's status and headers.
    public func replies<Output: Encodable & Sendable>(
        _ output: Output.Type, handler: @escaping @Sendable (RouteInput<Path, Query, Body>, OperationContext) async throws -> Reply<Output>
    ) -> Route {
        let defaultStatus = settings.successStatus ?? (settings.method == .post ? .created : .ok)
        let writer = JSONWriter.writer(for: Output.self)
        let paged = Output.self is any PagedOutput.Type
        return decoding(output: Output.self) { input, context in
            let reply = try await handler(input, context)
            var erased = reply.erased(defaultStatus: defaultStatus, writer: writer)
            if paged { erased.nextCursor = (reply.output as? any PagedOutput)?.nextCursor }
            return erased
        }
    }

    /// Finishes with a handler that receives the decoded, validated input (and, in
    /// ``RouteInput/request``, the request itself) and answers a reply of its own making: the way
    /// of a dialect, whose replies have the old service's shape.
    public func handleDecoded(
        _ handler: @escaping @Sendable (RouteInput<Path, Query, Body>, OperationContext) async throws -> RouteReply
    ) -> Route {
        decoding(output: RawReply.self, handler)
    }

    private func decoding<Output: Encodable>(
        output: Output.Type, _ handler: @escaping @Sendable (RouteInput<Path, Query, Body>, OperationContext) async throws -> RouteReply
    ) -> Route {
        let decode = InputDecoder.decoder(path: Path.self, query: Query.self, body: Body.self)
        let io = RouteTypes(path: Path.self, query: Query.self, body: Body.self, output: Output.self,
                            bodyShape: settings.bodyShape, outputShape: settings.outputShape)
        let mediaTypes = Body.self == NoInput.self ? [] : (Body.self as? any RawBodyInput.Type)?.acceptedMediaTypes ?? ["application/json"]
        return Route(settings: settings, io: io, bodyMediaTypes: mediaTypes, handler: .http { request, context in
            try await handler(try decode(request), context)
        })
    }
}

extension RouteBuilder where Path == NoInput, Query == NoInput, Body == NoInput {
    /// Finishes with a handler that serves a WebSocket: the host upgrades only a caller the
    /// route's ``Route/access`` rule admits (401 or 403 before upgrading; a socket is a read), and
    /// the handler authorizes what the client asks for over it with
    /// ``OperationContext/authorizeSocketRequest(_:as:)``. It serves one connection until the
    /// client goes or it returns. Opening the socket costs the route's ``Route/cost``; the handler
    /// reads the upgrade request's parameters itself (a socket takes no typed input).
    public func socket(
        _ handler: @escaping @Sendable (RouteRequest, any WebSocketConnection, OperationContext) async throws -> Void
    ) -> Route {
        Route(settings: settings, io: RouteTypes(path: NoInput.self, query: NoInput.self, body: NoInput.self, output: NoContent.self),
              bodyMediaTypes: [], handler: .socket(handler))
    }

    /// Finishes with a handler that reads the request raw: a dialect's route that parses its old
    /// clients' requests itself. A body, of any media type, is read whole first (up to
    /// `server.maxBodySize`).
    public func handle(_ handler: @escaping @Sendable (RouteRequest, OperationContext) async throws -> RouteReply) -> Route {
        let takesBody = settings.method != .get && settings.method != .head
        return Route(settings: settings, io: RouteTypes(path: NoInput.self, query: NoInput.self, body: takesBody ? ForwardedBody.self : NoInput.self,
                                                        output: RawReply.self),
                     bodyMediaTypes: takesBody ? ["*/*"] : [], handler: .http(handler))
    }

    /// Finishes with a handler that takes the request and gives the reply as they are — the way of
    /// a plugin that forwards requests elsewhere (a proxy), whose input has no type to decode into.
    /// Its path may end in `{rest...}`, given to the handler as it came (still percent-encoded,
    /// without its leading `/`). With `streamsBody`, a body is handed over as it arrives
    /// (``RouteRequest/bodyStream``), never held whole — on the native API: a dialect's route reads
    /// its body whole first, since its credential may be in it.
    public func forwards(streamsBody: Bool = true,
                         _ handler: @escaping @Sendable (RouteRequest, OperationContext) async throws -> RouteReply) -> Route {
        let method = settings.method
        let takesBody = method != .get && method != .head && method != .delete
        var settings = settings
        settings.successStatus = .ok
        var route = Route(settings: settings, io: RouteTypes(path: NoInput.self, query: NoInput.self, body: takesBody ? ForwardedBody.self : NoInput.self,
                                                            output: RawReply.self),
                          bodyMediaTypes: takesBody ? ["*/*"] : [], handler: .http(handler))
        route.rawMediaTypes = ["*/*"]
        route.streamsBody = streamsBody && takesBody
        return route
    }
}

/// What a typed handler receives: its decoded, validated path parameters, query parameters and
/// body, and the request they came from.
public struct RouteInput<Path: Sendable, Query: Sendable, Body: Sendable>: Sendable {
    public var path: Path
    public var query: Query
    public var body: Body
    /// The request as it came (its header fields, its raw query, its body's bytes).
    public var request: RouteRequest

    public init(path: Path, query: Query, body: Body, request: RouteRequest = RouteRequest()) {
        self.path = path
        self.query = query
        self.body = body
        self.request = request
    }
}

/// The absence of an input part (no path parameters, no query, no body).
public struct NoInput: Codable, Sendable, Equatable {
    public init() {}
    public init(from decoder: any Decoder) throws {}
    public func encode(to encoder: any Encoder) throws {}
}

/// The output of a route that answers with no body (204 No Content).
public struct NoContent: Codable, Sendable, Equatable {
    public init() {}
}

/// An input type (path, query or body) that checks itself beyond decoding, and whose fields carry
/// ``FieldRule``s so the OpenAPI document describes what its validation enforces (field names are
/// the coding keys). Every member has a default: conform for the rules, the check, or both.
public protocol ValidatableInput {
    /// The rule of each field that has one, by its JSON name. Empty by default.
    static var fieldRules: [String: FieldRule] { get }
    /// Alternatives of which the input must have at least one, when no single member is required
    /// (`[["username"], ["email"]]`: a username or an email address). Empty by default.
    static var requiredAlternatives: [[String]] { get }
    /// The problems with this value; empty when it is valid (the default). Return every problem,
    /// not just the first: the client gets them all in one 422 reply. Pointers are relative to the
    /// input part (`/title` in a body, `limit` in a query).
    func validate() -> [GatewayError.FieldError]
}

extension ValidatableInput {
    public static var fieldRules: [String: FieldRule] { [:] }
    public static var requiredAlternatives: [[String]] { [] }
    public func validate() -> [GatewayError.FieldError] { [] }
}

/// A body taken as raw bytes (CSV, plain text, files) rather than decoded from JSON.
public protocol RawBodyInput: Decodable, Sendable {
    /// The media types the route accepts, such as `text/csv`.
    static var acceptedMediaTypes: [String] { get }
    /// Builds the input from the raw body and its media type.
    init(bytes: ByteBuffer, contentType: String) throws
}

/// The body of a forwarding route, for its description: any media type, taken as it is.
package struct ForwardedBody: RawBodyInput, Sendable {
    package static var acceptedMediaTypes: [String] { ["*/*"] }
    package init(bytes: ByteBuffer, contentType: String) {}
    package init(from decoder: any Decoder) throws {}
}

/// A typed reply: the handler's output plus the status and headers it chose.
public struct Reply<Output: Encodable & Sendable>: Sendable {
    public var output: Output
    /// The status; nil means the route's ``Route/successStatus`` (204 for ``NoContent``).
    public var status: HTTPResponse.Status?
    /// Extra reply header fields, such as `Location` or `ETag`; a name may repeat (`Link`).
    public var headers: HTTPFields

    public init(_ output: Output, status: HTTPResponse.Status? = nil, headers: HTTPFields = [:]) {
        self.output = output
        self.status = status
        self.headers = headers
    }

    func erased(defaultStatus: HTTPResponse.Status, writer: JSONWriter.Writer<Output>?) -> RouteReply {
        let status = status ?? defaultStatus
        if Output.self == NoContent.self {
            return RouteReply(status: self.status ?? .noContent, headers: headers, body: .empty)
        }
        if Output.self == RawReply.self, let raw = output as? RawReply {
            return RouteReply(status: status, headers: headers, body: .bytes(raw.bytes, contentType: raw.contentType))
        }
        if Output.self == JSONValue.self, let value = output as? JSONValue {
            return RouteReply(status: status, headers: headers, body: .bytes(value.serialized(), contentType: "application/json"))
        }
        if let writer {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(1024)
            writer(output, &bytes)
            return RouteReply(status: status, headers: headers, body: .bytes(ByteBuffer(bytes: bytes), contentType: "application/json"))
        }
        if Output.self == JSONDocument.self, let document = output as? JSONDocument {
            return RouteReply(status: status, headers: headers, body: .bytes(document.bytes, contentType: "application/json"))
        }
        return RouteReply(status: status, headers: headers, body: .json(output))
    }
}

/// An output that is sent as is (plain text, CSV, images) instead of JSON.
public struct RawReply: Encodable, Sendable {
    public var bytes: ByteBuffer
    public var contentType: String

    public init(_ bytes: ByteBuffer, contentType: String) {
        self.bytes = bytes
        self.contentType = contentType
    }

    public init(text: String, contentType: String = "text/plain; charset=utf-8") {
        self.init(ByteBuffer(string: text), contentType: contentType)
    }

    /// `value` as JSON, encoded with the gateway's conventions (members in the order the value
    /// encodes them, RFC 3339 dates): for a route that answers JSON or another format on request.
    public init(json value: some Encodable) throws {
        self.init(try JSONStreamEncoder.encodeBuffer(value), contentType: "application/json")
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(String(buffer: bytes))
    }
}

/// A request to a route as the host read it: path parameters and query already percent-decoded.
public struct RouteRequest: Sendable {
    public var method: HTTPRequest.Method
    /// The request path as sent (still percent-encoded).
    public var path: String
    /// The percent-decoded path parameters (a `{name...}` one as it came).
    public var pathParameters: [String: String]
    /// The percent-decoded query parameters in order; a name may repeat.
    public var queryParameters: [(name: String, value: String)]
    public var headers: HTTPFields
    /// The body (empty without one, and for a route that ``Route/streamsBody``).
    public var body: ByteBuffer
    /// The body as it arrives, for a route that ``Route/streamsBody``.
    public var bodyStream: ByteStream?
    /// The host (and port) the client addressed (HTTP/1 `Host`), for replies that carry absolute URLs.
    public var authority: String?

    public init(method: HTTPRequest.Method = .get, path: String = "/", pathParameters: [String: String] = [:],
                queryParameters: [(name: String, value: String)] = [], headers: HTTPFields = [:], body: ByteBuffer = ByteBuffer(),
                contentType: String? = nil, authority: String? = nil) {
        self.method = method
        self.path = path
        self.pathParameters = pathParameters
        self.queryParameters = queryParameters
        self.headers = headers
        self.body = body
        self.authority = authority
        if let contentType { self.headers[.contentType] = contentType }
    }

    /// The last value of query parameter `name`.
    public func query(_ name: String) -> String? {
        queryParameters.last { $0.name == name }?.value
    }

    /// The body's media type without parameters, lowercased (`application/json`).
    public var contentType: String? {
        headers[.contentType].map { MediaType.essence(of: $0) }
    }
}

/// What a route answered, before the host encodes it.
public struct RouteReply: Sendable {
    /// The body of a reply.
    public enum Body: Sendable {
        case empty
        /// A value the host encodes as JSON (`Content-Type: application/json`).
        case json(any Encodable & Sendable)
        /// Bytes; a content type sets (or replaces) the reply's `Content-Type`.
        case bytes(ByteBuffer, contentType: String?)
        /// A body sent as it is read from `stream` (a proxied download): never cached, never
        /// compressed, and neither held whole nor given a validator. `length`, when known, is sent
        /// as `Content-Length`; the content type, when given, replaces the reply's.
        case stream(ByteStream, contentType: String?, length: Int?)
    }

    public var status: HTTPResponse.Status
    /// The reply's header fields; a name may repeat (several `Set-Cookie` or `Link` fields).
    public var headers: HTTPFields
    public var body: Body
    /// For a page of a list (``Page``): the next page's cursor, which the host links (`Link: <...>; rel="next"`).
    public var nextCursor: String?

    public init(status: HTTPResponse.Status = .ok, headers: HTTPFields = [:], body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A reply of these bytes, with the `Content-Type` in `headers` (if any).
    public init(status: HTTPResponse.Status = .ok, headers: HTTPFields = [:], body: ByteBuffer = ByteBuffer()) {
        self.init(status: status, headers: headers, body: .bytes(body, contentType: nil))
    }

    /// The body's bytes, for a reply made of bytes (empty otherwise).
    public var bytes: ByteBuffer {
        if case .bytes(let bytes, _) = body { return bytes }
        return ByteBuffer()
    }

    /// The reply as it is sent whole (a dialect's rendered error): a JSON value encoded, and the
    /// body's content type, if it names one, in the header fields. A stream is not read: empty.
    package func whole() -> (headers: HTTPFields, body: ByteBuffer) {
        var fields = headers
        switch body {
        case .empty, .stream:
            return (fields, ByteBuffer())
        case .json(let value):
            fields[.contentType] = "application/json"
            return (fields, (try? JSONStreamEncoder.encodeBuffer(value)) ?? ByteBuffer())
        case .bytes(let bytes, let contentType):
            if let contentType { fields[.contentType] = contentType }
            return (fields, bytes)
        }
    }

    /// A text reply.
    public static func text(_ text: String, status: HTTPResponse.Status = .ok, contentType: String = "text/plain; charset=utf-8") -> RouteReply {
        RouteReply(status: status, headers: [.contentType: contentType], body: ByteBuffer(string: text))
    }

    /// A JSON reply: `value` as JSON (members in the order the value encodes them).
    public static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:],
                            contentType: String = "application/json") -> RouteReply {
        var fields = headers
        if fields[.contentType] == nil { fields[.contentType] = contentType }
        return RouteReply(status: status, headers: fields, body: value.serialized())
    }

    /// A JSON reply encoded with the gateway's conventions (members in the order the value encodes them).
    public static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:],
                            contentType: String = "application/json") throws -> RouteReply {
        var fields = headers
        if fields[.contentType] == nil { fields[.contentType] = contentType }
        return RouteReply(status: status, headers: fields, body: try JSONStreamEncoder.encodeBuffer(value))
    }
}
