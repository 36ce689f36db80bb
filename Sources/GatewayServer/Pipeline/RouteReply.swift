import GatewayCore
import HTTPTypes
import NIOCore

/// What a route's handler answered, whichever kind of route it is: the one reply type from the
/// handle stage to the wire (an operation's ``OperationReply`` and a dialect's
/// ``DialectResponse`` are taken as one).
struct RouteReply {
    enum Body {
        case empty
        case json(any Encodable & Sendable)
        /// Bytes; a content type sets (or replaces) the reply's `Content-Type`.
        case bytes(ByteBuffer, contentType: String?)
        /// Bytes sent as they are read (see ``OperationReply/Body/stream(_:contentType:length:)``).
        case stream(ByteStream, contentType: String?, length: Int?)
    }

    var status: HTTPResponse.Status
    var headers: HTTPFields
    var body: Body
    /// The next page's cursor, for an operation that answers a ``PagedOutput``.
    var nextCursor: String?
    /// A dialect's reply: sent with its own fields; the cache fields and `ETag` only where the
    /// route is cacheable.
    var isDialect: Bool

    init(_ reply: OperationReply) {
        status = reply.status
        headers = reply.headers
        switch reply.body {
        case .empty: body = .empty
        case .json(let value): body = .json(value)
        case .bytes(let bytes, let contentType): body = .bytes(bytes, contentType: contentType)
        case .stream(let stream, let contentType, let length): body = .stream(stream, contentType: contentType, length: length)
        }
        nextCursor = reply.nextCursor
        isDialect = false
    }

    init(_ response: DialectResponse) {
        status = response.status
        headers = response.headers
        body = .bytes(response.body, contentType: nil)
        isDialect = true
    }
}
