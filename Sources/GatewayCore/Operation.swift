import Foundation
import HTTPTypes
import NIOCore

/// One operation of a plugin's native API, described as data.
///
/// (DESIGN.md calls it `Operation`; Foundation on Linux already exports a class of that name, so
/// every plugin importing Foundation would have to qualify it. `ServiceOperation` pairs with
/// ``ServicePlugin`` and never clashes.)
///
/// From the list of operations a plugin returns, the host builds the REST routes, the OpenAPI
/// document, `gateway call`, and (later) batch and composite requests. An `ServiceOperation` guarantees
/// that its handler only ever sees input that decoded into its declared types: path parameters,
/// query parameters and body are decoded and validated by the host's pipeline first, and any
/// failure becomes a 400 or 422 problem naming the offending field.
///
/// Declare one with ``ServiceOperation/define(_:_:_:summary:)`` and its builder:
///
/// ```swift
/// ServiceOperation.define("notes.get", .get, "/notes/{id}", summary: "Read one note")
///     .path(NoteID.self)
///     .returns(Note.self) { input, context in
///         try await store.note(input.path.id)
///     }
/// ```
public struct ServiceOperation: Sendable {
    /// The stable, dotted name: `<plugin id>.<verb>` such as `suggest.complete`. Unique in the gateway.
    public let name: String
    /// The HTTP method.
    public let method: HTTPRequest.Method
    /// The path template relative to the plugin's mount, such as `/terms/{id}`; `""` or `/` is the mount itself.
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
    /// The path parameter that names the resource a key may be restricted to (e.g. `feed`), if any.
    public var resourceParameter: String?
    /// The status of a successful reply when the handler does not choose one (200; 201 for creates).
    public var successStatus: HTTPResponse.Status
    /// Labels the plugin's ``AuthorizingPlugin/authorize(_:)`` hook and `gateway routes` see.
    public var tags: [String]
    /// The declared types, for documentation and `gateway call`.
    public let io: OperationIO
    /// A JSON Schema that documents the body where its type cannot (a user-defined payload, such
    /// as an object of a bucket whose schema plugins.yaml gives); it may refer to the plugin's
    /// ``ServicePlugin/schemas`` as `#/components/schemas/<name>`.
    public var documentedBody: JSONValue?
    /// A JSON Schema that documents the successful reply where its type cannot.
    public var documentedOutput: JSONValue?
    /// A type whose `Decodable` shape documents a body the operation reads another way (as a
    /// ``JSONValue`` it checks member by member, say).
    public var documentedBodyShape: DocumentedShape?
    /// A type whose `Encodable` shape documents the JSON reply of an operation that answers with
    /// ``RawReply`` (it writes the JSON itself, or answers another format on request).
    public var documentedOutputShape: DocumentedOutputShape?
    /// The media types a ``RawReply`` may have (default `text/plain`).
    public var rawMediaTypes: [String] = []
    /// Statuses the handler answers itself with a body of another media type than a problem
    /// (a page that shows what is wrong), by status code.
    public var errorMediaTypes: [Int: String] = [:]
    /// Rules of input fields that depend on the plugin's configuration (the configured cities), or
    /// that the input's type does not carry, keyed `path.<name>`, `query.<name>`, `body.<member>`
    /// (a top-level member of a JSON body) or `body` (the body as a whole, such as
    /// ``FieldRule/requiring(_:)``). They add to the type's own ``ConstrainedFields``.
    public var inputRules: [String: FieldRule] = [:]
    /// The media types the body may have (only for operations with a body).
    public let bodyMediaTypes: [String]
    /// Whether the handler reads the body as it arrives (``OperationRequest/bodyStream``) instead
    /// of the host collecting it against `server.maxBodySize` first.
    public var streamsBody = false
    /// A request below the plugin's mount that shows the operation at work (``OperationBuilder/example(_:)``).
    public var example: String?

    @usableFromInline
    let run: @Sendable (OperationRequest, OperationContext) async throws -> OperationReply

    /// Runs the operation on raw input: decodes, validates, calls the handler.
    /// Throws ``GatewayError`` for bad input; rethrows whatever the handler throws.
    @inlinable
    public func callAsFunction(_ request: OperationRequest, context: OperationContext) async throws -> OperationReply {
        try await run(request, context)
    }

    /// Declares an operation whose handler chooses its reply's status and headers.
    ///
    /// Inlinable, so that the function it makes (run on every call) is compiled for the declared
    /// types in the plugin's module: unspecialized, it would look up the generic types' metadata
    /// at run time on every call.
    @inlinable
    public init<Path: Decodable & Sendable, Query: Decodable & Sendable, Body: Decodable & Sendable, Output: Encodable & Sendable>(
        _ name: String,
        _ method: HTTPRequest.Method,
        _ path: String,
        summary: String,
        details: String? = nil,
        access: AccessRule = .public,
        cache: CachePolicy = .none,
        cost: Int = 1,
        resource: String? = nil,
        successStatus: HTTPResponse.Status? = nil,
        tags: [String] = [],
        path pathType: Path.Type,
        query queryType: Query.Type,
        body bodyType: Body.Type,
        output outputType: Output.Type,
        handler: @escaping @Sendable (OperationInput<Path, Query, Body>, OperationContext) async throws -> Reply<Output>
    ) {
        let defaultStatus = successStatus ?? (method == .post ? .created : .ok)
        let decode = InputDecoder.decoder(path: Path.self, query: Query.self, body: Body.self)
        let writer = JSONWriter.writer(for: Output.self)
        let paged = Output.self is any PagedOutput.Type
        self.init(name: name, method: method, path: path, summary: summary, details: details, access: access, cache: cache, cost: cost,
                  resource: resource, successStatus: defaultStatus, tags: tags,
                  io: OperationIO(path: pathType, query: queryType, body: bodyType, output: outputType),
                  bodyMediaTypes: Body.self == NoInput.self ? [] : (Body.self as? any RawBodyInput.Type)?.acceptedMediaTypes ?? ["application/json"]) { request, context in
            let reply = try await handler(try decode(request), context)
            var erased = reply.erased(defaultStatus: defaultStatus, writer: writer)
            if paged { erased.nextCursor = (reply.output as? any PagedOutput)?.nextCursor }
            return erased
        }
    }

    /// Declares an operation whose handler returns just its output (status ``successStatus``).
    @inlinable
    public init<Path: Decodable & Sendable, Query: Decodable & Sendable, Body: Decodable & Sendable, Output: Encodable & Sendable>(
        _ name: String,
        _ method: HTTPRequest.Method,
        _ path: String,
        summary: String,
        details: String? = nil,
        access: AccessRule = .public,
        cache: CachePolicy = .none,
        cost: Int = 1,
        resource: String? = nil,
        successStatus: HTTPResponse.Status? = nil,
        tags: [String] = [],
        path pathType: Path.Type,
        query queryType: Query.Type,
        body bodyType: Body.Type,
        output outputType: Output.Type,
        handler: @escaping @Sendable (OperationInput<Path, Query, Body>, OperationContext) async throws -> Output
    ) {
        self.init(
            name, method, path, summary: summary, details: details, access: access, cache: cache, cost: cost,
            resource: resource, successStatus: successStatus, tags: tags, path: pathType, query: queryType, body: bodyType,
            output: outputType
        ) { input, context in
            Reply(try await handler(input, context))
        }
    }

    /// Declares an operation that takes its input and gives its reply as they are — the way of a
    /// plugin that forwards requests elsewhere (a proxy), whose input has no type to decode into.
    /// Its path may end in a parameter that takes the rest of the path, `{rest...}`, given to the
    /// handler as it came (still percent-encoded, without its leading `/`). With `streamsBody`, a
    /// body is handed over as it arrives (``OperationRequest/bodyStream``), never held whole.
    public static func forwarding(
        _ name: String, _ method: HTTPRequest.Method, _ path: String, summary: String, details: String? = nil,
        access: AccessRule = .public, cache: CachePolicy = .none, cost: Int = 1, tags: [String] = [], streamsBody: Bool = true,
        handler: @escaping @Sendable (OperationRequest, OperationContext) async throws -> OperationReply
    ) -> ServiceOperation {
        ServiceOperation(name: name, method: method, path: path, summary: summary, details: details, access: access, cache: cache, cost: cost,
                         tags: tags, streamsBody: streamsBody && method != .get && method != .head, handler: handler)
    }

    private init(name: String, method: HTTPRequest.Method, path: String, summary: String, details: String?, access: AccessRule, cache: CachePolicy,
                 cost: Int, tags: [String], streamsBody: Bool, handler: @escaping @Sendable (OperationRequest, OperationContext) async throws -> OperationReply) {
        let takesBody = method != .get && method != .head && method != .delete
        self.init(name: name, method: method, path: path, summary: summary, details: details, access: access, cache: cache, cost: cost,
                  resource: nil, successStatus: .ok, tags: tags,
                  io: OperationIO(path: NoInput.self, query: NoInput.self, body: takesBody ? ForwardedBody.self : NoInput.self, output: RawReply.self),
                  bodyMediaTypes: takesBody ? ForwardedBody.acceptedMediaTypes : [], run: handler)
        rawMediaTypes = ["*/*"]
        self.streamsBody = streamsBody && takesBody
    }

    /// Sets every stored member: the one place both kinds of operation are made.
    @usableFromInline
    init(name: String, method: HTTPRequest.Method, path: String, summary: String, details: String?, access: AccessRule, cache: CachePolicy,
         cost: Int, resource: String?, successStatus: HTTPResponse.Status, tags: [String], io: OperationIO, bodyMediaTypes: [String],
         run: @escaping @Sendable (OperationRequest, OperationContext) async throws -> OperationReply) {
        self.name = name
        self.method = method
        self.path = path
        self.summary = summary
        self.details = details
        self.access = access
        self.cache = cache
        self.cost = max(0, cost)
        self.resourceParameter = resource
        self.successStatus = successStatus
        self.tags = tags
        self.io = io
        self.bodyMediaTypes = bodyMediaTypes
        self.run = run
    }

    /// The names of the `{parameters}` in ``path``.
    public var pathParameterNames: [String] {
        ServiceOperation.parameterNames(in: path)
    }

    /// The `{names}` of a path template, in order.
    public static func parameterNames(in template: String) -> [String] {
        template.split(separator: "/").compactMap { segment in
            guard segment.hasPrefix("{"), segment.hasSuffix("}") else { return nil }
            let name = segment.dropFirst().dropLast()
            return String(name.hasSuffix("...") ? name.dropLast(3) : name)
        }
    }
}

/// A type kept for its `Decodable` shape, which the OpenAPI document shows.
public struct DocumentedShape: @unchecked Sendable {
    // A metatype is an immutable value; the wrapper only exists because `any Decodable.Type` is
    // not yet `Sendable` in the language.
    public let type: any Decodable.Type

    public init<T: Decodable>(_ type: T.Type) {
        self.type = type
    }
}

/// A type kept for its `Encodable` shape, which the OpenAPI document shows.
public struct DocumentedOutputShape: @unchecked Sendable {
    // A metatype is an immutable value (see ``DocumentedShape``).
    public let type: any Encodable.Type

    public init<T: Encodable>(_ type: T.Type) {
        self.type = type
    }
}

/// The declared types of an operation, kept so the host can describe them (OpenAPI, `gateway call`).
public struct OperationIO: @unchecked Sendable {
    // Metatypes are immutable values; the wrapper only exists because `any Decodable.Type`
    // is not yet `Sendable` in the language.
    public let path: any Decodable.Type
    public let query: any Decodable.Type
    public let body: any Decodable.Type
    public let output: any Encodable.Type

    @usableFromInline
    init(path: any Decodable.Type, query: any Decodable.Type, body: any Decodable.Type, output: any Encodable.Type) {
        self.path = path
        self.query = query
        self.body = body
        self.output = output
    }

    /// Whether the operation reads a body.
    public var hasBody: Bool { body != NoInput.self }
}

/// What a handler receives: its decoded, validated path parameters, query parameters and body.
public struct OperationInput<Path: Sendable, Query: Sendable, Body: Sendable>: Sendable {
    public var path: Path
    public var query: Query
    public var body: Body

    public init(path: Path, query: Query, body: Body) {
        self.path = path
        self.query = query
        self.body = body
    }
}

/// The absence of an input part (no path parameters, no query, no body).
public struct NoInput: Codable, Sendable, Equatable {
    public init() {}
    public init(from decoder: any Decoder) throws {}
    public func encode(to encoder: any Encoder) throws {}
}

/// The output of an operation that answers with no body (204 No Content).
public struct NoContent: Codable, Sendable, Equatable {
    public init() {}
}

/// Input that checks itself after decoding. Return every problem, not just the first: the client
/// gets them all in one 422 reply.
public protocol ValidatableInput {
    /// The problems with this value; empty when it is valid. Pointers are relative to the input
    /// part (`/title` in a body, `limit` in a query).
    func validate() -> [GatewayError.FieldError]
}

/// Path or query input that reads its parameters itself, for an operation on a hot path: the
/// host calls ``init(parameters:)`` instead of decoding it through `Decodable`, which costs more
/// than some whole operations. The OpenAPI document still describes the type from its `Codable`
/// shape, so the two must agree: read the same parameters, with the same types (a test should
/// compare them).
public protocol ParameterReadable: Decodable, SendableMetatype {
    init(parameters: Parameters) throws
}

/// The string parameters of one input part (path or query), as ``ParameterReadable`` reads them.
/// A repeated parameter answers its last value, as decoding does; a value of the wrong type
/// throws the 422 problem decoding would, naming the parameter.
public struct Parameters {
    let values: ParameterValues
    /// `path` or `query`: the start of a problem's pointer.
    let location: String

    /// The last value of `name`, or nil when it is absent.
    public func string(_ name: String) -> String? {
        values.last(name)
    }

    /// The last value of `name` as an integer, or nil when it is absent.
    public func int(_ name: String) throws -> Int? {
        guard let text = values.last(name) else { return nil }
        guard let value = Int(text) else {
            let pointer = "\(location).\(name)"
            throw GatewayError.invalid("\(pointer): expected an integer", errors: [.init(pointer: pointer, detail: "expected an integer")])
        }
        return value
    }
}

/// A body taken as raw bytes (CSV, plain text, files) rather than decoded from JSON.
public protocol RawBodyInput: Decodable, Sendable {
    /// The media types the operation accepts, such as `text/csv`.
    static var acceptedMediaTypes: [String] { get }
    /// Builds the input from the raw body and its media type.
    init(bytes: ByteBuffer, contentType: String) throws
}

/// The body of a ``ServiceOperation/forwarding(_:_:_:summary:details:access:cache:cost:tags:streamsBody:handler:)``
/// operation, for its description: any media type, taken as it is.
public struct ForwardedBody: RawBodyInput, Sendable {
    public static var acceptedMediaTypes: [String] { ["*/*"] }
    public let bytes: ByteBuffer
    public init(bytes: ByteBuffer, contentType: String) { self.bytes = bytes }
    public init(from decoder: any Decoder) throws { bytes = ByteBuffer(string: try decoder.singleValueContainer().decode(String.self)) }
}

/// An operation's reply: its output plus the status and headers the handler chose.
public struct Reply<Output: Encodable & Sendable>: Sendable {
    public var output: Output
    /// The status; nil means the operation's ``ServiceOperation/successStatus`` (204 for ``NoContent``).
    public var status: HTTPResponse.Status?
    /// Extra reply header fields, such as `Location` or `ETag`; a name may repeat (`Link`).
    public var headers: HTTPFields

    public init(_ output: Output, status: HTTPResponse.Status? = nil, headers: HTTPFields = [:]) {
        self.output = output
        self.status = status
        self.headers = headers
    }

    @usableFromInline
    func erased(defaultStatus: HTTPResponse.Status, writer: JSONWriter.Writer<Output>?) -> OperationReply {
        if Output.self == NoContent.self {
            return OperationReply(status: status ?? .noContent, headers: headers, body: .empty)
        }
        if Output.self == RawReply.self, let raw = output as? RawReply {
            return OperationReply(status: status ?? defaultStatus, headers: headers, body: .bytes(raw.bytes, contentType: raw.contentType))
        }
        if Output.self == JSONValue.self, let value = output as? JSONValue {
            return OperationReply(status: status ?? defaultStatus, headers: headers, body: .bytes(value.serialized(), contentType: "application/json"))
        }
        if let writer {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(1024)
            writer(output, &bytes)
            return OperationReply(status: status ?? defaultStatus, headers: headers, body: .bytes(ByteBuffer(bytes: bytes), contentType: "application/json"))
        }
        if Output.self == JSONDocument.self, let document = output as? JSONDocument {
            return OperationReply(status: status ?? defaultStatus, headers: headers, body: .bytes(document.bytes, contentType: "application/json"))
        }
        return OperationReply(status: status ?? defaultStatus, headers: headers, body: .json(output))
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

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(String(buffer: bytes))
    }
}

/// The raw input of one call, as the host extracted it from a request.
public struct OperationRequest: Sendable {
    /// The percent-decoded path parameters.
    public var pathParameters: [String: String]
    /// The percent-decoded query parameters in order; a name may repeat.
    public var queryParameters: [(name: String, value: String)]
    /// The body, if any.
    public var body: ByteBuffer?
    /// The body's media type without parameters, lowercased (`application/json`).
    public var contentType: String?
    /// The body as it arrives, for an operation that ``ServiceOperation/streamsBody`` (then ``body`` is nil).
    public var bodyStream: ByteStream?

    public init(pathParameters: [String: String] = [:], queryParameters: [(name: String, value: String)] = [],
                body: ByteBuffer? = nil, contentType: String? = nil) {
        self.pathParameters = pathParameters
        self.queryParameters = queryParameters
        self.body = body
        self.contentType = contentType
    }
}

/// What an operation answered, before the host encodes it.
public struct OperationReply: Sendable {
    /// The body of a reply.
    public enum Body: Sendable {
        case empty
        case json(any Encodable & Sendable)
        case bytes(ByteBuffer, contentType: String)
        /// A body sent as it is read from `stream` (a proxied download): never cached, never
        /// compressed, and neither held whole nor given a validator. `length`, when known, is sent
        /// as `Content-Length`; the content type, when given, replaces the reply's.
        case stream(ByteStream, contentType: String?, length: Int?)
    }

    public var status: HTTPResponse.Status
    public var headers: HTTPFields
    public var body: Body
    /// For a ``PagedOutput``: the next page's cursor, which the host links (`Link: <...>; rel="next"`).
    public var nextCursor: String?

    public init(status: HTTPResponse.Status, headers: HTTPFields = [:], body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

extension ServiceOperation {
    /// Starts declaring an operation; add its input parts, then finish with
    /// ``OperationBuilder/returns(_:handler:)`` or ``OperationBuilder/replies(_:handler:)``.
    public static func define(_ name: String, _ method: HTTPRequest.Method, _ path: String, summary: String) -> OperationBuilder<NoInput, NoInput, NoInput> {
        OperationBuilder(name: name, settings: RouteSettings(method: method, path: path, summary: summary))
    }
}

/// Declares an ``ServiceOperation`` step by step: its settings, its input types, then its handler.
/// Input parts left out are ``NoInput``.
public struct OperationBuilder<Path: Decodable & Sendable, Query: Decodable & Sendable, Body: Decodable & Sendable> {
    @usableFromInline let name: String
    @usableFromInline var settings: RouteSettings
    @usableFromInline var successStatus: HTTPResponse.Status?

    init(name: String, settings: RouteSettings, successStatus: HTTPResponse.Status? = nil) {
        self.name = name
        self.settings = settings
        self.successStatus = successStatus
    }

    private func with<P, Q, B>(_: P.Type, _: Q.Type, _: B.Type) -> OperationBuilder<P, Q, B> {
        OperationBuilder<P, Q, B>(name: name, settings: settings, successStatus: successStatus)
    }

    /// The type the path parameters decode into (one property per `{name}`).
    public func path<T: Decodable & Sendable>(_ type: T.Type) -> OperationBuilder<T, Query, Body> { with(T.self, Query.self, Body.self) }
    /// The type the query parameters decode into.
    public func query<T: Decodable & Sendable>(_ type: T.Type) -> OperationBuilder<Path, T, Body> { with(Path.self, T.self, Body.self) }
    /// The type the body decodes into (JSON, or a ``RawBodyInput``).
    public func body<T: Decodable & Sendable>(_ type: T.Type) -> OperationBuilder<Path, Query, T> { with(Path.self, Query.self, T.self) }

    /// Who may call it (default public).
    public func access(_ rule: AccessRule) -> Self { var copy = self; copy.settings.access = rule; return copy }
    /// Its cache policy (default not cached).
    public func cache(_ policy: CachePolicy) -> Self { var copy = self; copy.settings.cache = policy; return copy }
    /// Units of rate limit one call costs (default 1).
    public func cost(_ units: Int) -> Self { var copy = self; copy.settings.cost = units; return copy }
    /// The path parameter naming the resource a key may be restricted to.
    public func resource(_ parameter: String) -> Self { var copy = self; copy.settings.resource = parameter; return copy }
    /// Longer prose for the OpenAPI document.
    public func details(_ text: String) -> Self { var copy = self; copy.settings.details = text; return copy }
    /// The status of a successful reply (default 200; 201 for POST).
    public func status(_ status: HTTPResponse.Status) -> Self { var copy = self; copy.successStatus = status; return copy }
    /// Labels the plugin's authorize hook and `gateway routes` see.
    public func tags(_ tags: String...) -> Self { var copy = self; copy.settings.tags += tags; return copy }
    /// A JSON Schema for the OpenAPI document's description of the body, where the body's type
    /// cannot say it (a user-defined payload). The body is still decoded as its declared type.
    public func documentBody(schema: JSONValue) -> Self { var copy = self; copy.settings.bodySchema = schema; return copy }
    /// A JSON Schema for the OpenAPI document's description of the successful reply.
    public func documentOutput(schema: JSONValue) -> Self { var copy = self; copy.settings.outputSchema = schema; return copy }
    /// A type whose `Decodable` shape the OpenAPI document shows for the body, where the body is
    /// read another way (a ``JSONValue`` checked member by member). A test should hold the two to
    /// the same members.
    public func documentBody<T: Decodable>(as type: T.Type) -> Self { var copy = self; copy.settings.bodyShape = DocumentedShape(type); return copy }
    /// For an operation that answers ``RawReply``: the type whose `Encodable` shape its JSON reply has.
    public func documentOutput<T: Encodable>(as type: T.Type) -> Self { var copy = self; copy.settings.outputShape = DocumentedOutputShape(type); return copy }
    /// For an operation that answers ``RawReply``: the media types of its other replies (`text/calendar`).
    public func documentRawOutput(mediaTypes: String...) -> Self { var copy = self; copy.settings.rawMediaTypes = mediaTypes; return copy }
    /// Statuses the handler answers with its own body of `mediaType` instead of a problem document
    /// (an HTML form that shows the page again with what is wrong).
    public func documentErrors(_ statuses: [HTTPResponse.Status], mediaType: String) -> Self {
        var copy = self
        for status in statuses { copy.settings.errorMediaTypes[status.code] = mediaType }
        return copy
    }
    /// A request that shows the operation answering something worth seeing: its path below the
    /// plugin's mount with a query (`/stops/near?lat=36.9&lon=-116.7`). `gateway serve` prints it
    /// as a first thing to try.
    public func example(_ pathAndQuery: String) -> Self { var copy = self; copy.settings.example = pathAndQuery; return copy }
    /// Rules of input fields that depend on the configuration (``ServiceOperation/inputRules``):
    /// `["query.city": .oneOf(configuredCities)]`. The handler must enforce what they state.
    public func rules(_ rules: [String: FieldRule]) -> Self {
        var copy = self
        copy.settings.inputRules.merge(rules) { $0.and($1) }
        return copy
    }

    /// Finishes with a handler that returns just its output. (Inlinable, as the operation's
    /// initializer is: see there.)
    @inlinable
    public func returns<Output: Encodable & Sendable>(
        _ output: Output.Type, handler: @escaping @Sendable (OperationInput<Path, Query, Body>, OperationContext) async throws -> Output
    ) -> ServiceOperation {
        replies(output) { input, context in Reply(try await handler(input, context)) }
    }

    /// Finishes with a handler that chooses its reply's status and headers.
    @inlinable
    public func replies<Output: Encodable & Sendable>(
        _ output: Output.Type, handler: @escaping @Sendable (OperationInput<Path, Query, Body>, OperationContext) async throws -> Reply<Output>
    ) -> ServiceOperation {
        var operation = ServiceOperation(
            name, settings.method, settings.path, summary: settings.summary, details: settings.details, access: settings.access,
            cache: settings.cache, cost: settings.cost, resource: settings.resource, successStatus: successStatus, tags: settings.tags,
            path: Path.self, query: Query.self, body: Body.self, output: Output.self, handler: handler)
        operation.documentedBody = settings.bodySchema
        operation.documentedOutput = settings.outputSchema
        operation.documentedBodyShape = settings.bodyShape
        operation.documentedOutputShape = settings.outputShape
        operation.rawMediaTypes = settings.rawMediaTypes
        operation.inputRules = settings.inputRules
        operation.errorMediaTypes = settings.errorMediaTypes
        operation.example = settings.example
        return operation
    }
}
