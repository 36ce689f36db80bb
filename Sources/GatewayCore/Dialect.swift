import Foundation
import HTTPTypes
import NIOCore

/// A legacy API served beside a plugin's native one: raw routes that keep old clients working.
///
/// A dialect translates the old shapes and calls the same service code as the plugin's operations.
/// The host runs its routes through the same pipeline (request id, metrics, CORS, body limit,
/// principal, rate limit) and renders every ``GatewayError`` through ``renderError`` so that old
/// clients see the error shape they know.
public struct Dialect: Sendable {
    /// A short name (`kkbox`, `xively-v2`), used in logs and metrics.
    public let name: String
    /// The HTTP routes. Paths are absolute (`/ajax/ac_search.php`); plugins.yaml may put them under a prefix.
    public let routes: [DialectRoute]
    /// The WebSocket routes.
    public let webSockets: [WebSocketRoute]
    /// Renders an error in the legacy shape.
    public let renderError: @Sendable (GatewayError) -> DialectResponse
    /// Extracts the legacy credential (a header or query parameter) so the host can identify the caller.
    public let credential: @Sendable (DialectRequest) -> Credential?

    public init(
        name: String,
        routes: [DialectRoute],
        webSockets: [WebSocketRoute] = [],
        credential: @escaping @Sendable (DialectRequest) -> Credential? = { _ in nil },
        renderError: @escaping @Sendable (GatewayError) -> DialectResponse
    ) {
        self.name = name
        self.routes = routes
        self.webSockets = webSockets
        self.credential = credential
        self.renderError = renderError
    }
}

/// A credential a client presented.
public enum Credential: Sendable, Equatable {
    /// A session token.
    case sessionToken(String)
    /// An API key.
    case apiKey(String)
}

/// One raw HTTP route of a dialect.
public struct DialectRoute: Sendable {
    public let method: HTTPRequest.Method
    /// The path template, `{name}` marking a parameter segment.
    public let path: String
    /// One line for `gateway routes`.
    public let summary: String
    /// Units of rate limit one call consumes.
    public let cost: Int
    public let handler: @Sendable (DialectRequest, OperationContext) async throws -> DialectResponse

    public init(
        _ method: HTTPRequest.Method, _ path: String, summary: String, cost: Int = 1,
        handler: @escaping @Sendable (DialectRequest, OperationContext) async throws -> DialectResponse
    ) {
        self.method = method
        self.path = path
        self.summary = summary
        self.cost = cost
        self.handler = handler
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
}

/// A dialect's reply, sent as is.
public struct DialectResponse: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: ByteBuffer

    public init(status: Int = 200, headers: [String: String] = [:], body: ByteBuffer = ByteBuffer()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A text reply.
    public static func text(_ text: String, status: Int = 200, contentType: String = "text/plain; charset=utf-8") -> DialectResponse {
        DialectResponse(status: status, headers: ["Content-Type": contentType], body: ByteBuffer(string: text))
    }

    /// A JSON reply encoded with the gateway's conventions.
    public static func json(_ value: some Encodable, status: Int = 200, headers: [String: String] = [:]) throws -> DialectResponse {
        return DialectResponse(status: status, headers: headers.merging(["Content-Type": "application/json"]) { old, _ in old },
                               body: try JSONStreamEncoder.encodeBuffer(value))
    }
}

/// A WebSocket route of a dialect (or of the native API).
public struct WebSocketRoute: Sendable {
    /// The path template where clients upgrade.
    public let path: String
    public let summary: String
    /// Serves one connection until the client goes or the handler returns.
    public let handler: @Sendable (any WebSocketConnection, OperationContext) async throws -> Void

    public init(_ path: String, summary: String, handler: @escaping @Sendable (any WebSocketConnection, OperationContext) async throws -> Void) {
        self.path = path
        self.summary = summary
        self.handler = handler
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
