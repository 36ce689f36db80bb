import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore

/// Turns the handler's reply into bytes and fields: a JSON value is encoded, the fields are the
/// body's `Content-Length` (first: Hummingbird and NIO each search for it), the rate-limit fields,
/// the handler's own (a name may repeat: `Link`, `Set-Cookie`), a `Link: rel="next"` for a page
/// with more after it, and the body's `Content-Type`. A field the handler set is replaced rather
/// than repeated; any other is appended without a search.
struct EncodeStage {
    static let jsonContentType = HTTPField(name: .contentType, value: "application/json")

    func run(_ reply: RouteReply, call: RouteCall) throws -> EncodedReply {
        let body: EncodedReply.Body
        var contentType: String?
        switch reply.body {
        case .empty: body = .bytes(ByteBuffer())
        case .json(let value): body = .bytes(try JSONStreamEncoder.encodeBuffer(value)); contentType = "application/json"
        case .bytes(let buffer, let type): body = .bytes(buffer); contentType = type
        case .stream(let stream, let type, let length): body = .stream(stream, length: length); contentType = type
        }
        var encoded = EncodedReply(status: reply.status, body: body, handlerFields: reply.headers, isDialect: call.mounted.dialect != nil,
                                   capacity: call.limitFields.count + reply.headers.count + 8)
        if let length = body.length { encoded.headers.append(HTTPField(name: .contentLength, value: String(length))) }
        encoded.headers.append(contentsOf: call.limitFields)
        for field in reply.headers { encoded.headers.append(field) }
        if call.isRead, let next = reply.nextCursor {
            encoded.headers.append(HTTPField(name: .link, value: Self.nextLink(path: call.exchange.path, query: call.query, cursor: next)))
        }
        // A handler's own `Content-Length` gives way to the body's.
        if encoded.handlerSet.contains(.contentLength) { encoded.headers[.contentLength] = body.length.map(String.init) }
        if let contentType {
            // Most such bodies are JSON: that field is made (and checked) once.
            encoded.put(contentType == "application/json" ? Self.jsonContentType : HTTPField(name: .contentType, value: contentType))
        }
        return encoded
    }

    /// `<path?query&cursor=next>; rel="next"` (RFC 8288): the request's own path and query, its
    /// `cursor` replaced by the next page's.
    static func nextLink(path: String, query: [(name: String, value: String)], cursor: String) -> String {
        var pairs = query.filter { $0.name != "cursor" }
        pairs.append((name: "cursor", value: cursor))
        let encoded = pairs.map { PercentEncoding.component($0.name) + "=" + PercentEncoding.component($0.value) }.joined(separator: "&")
        return "<\(path)?\(encoded)>; rel=\"next\""
    }
}

/// A reply in its wire form, before the cache stage adds its validator and cache fields.
struct EncodedReply {
    enum Body {
        case bytes(ByteBuffer)
        /// Sent as it is read: no validator, no cache, nothing held.
        case stream(ByteStream, length: Int?)

        var length: Int? {
            switch self {
            case .bytes(let bytes): bytes.readableBytes
            case .stream(_, let length): length
            }
        }
    }

    var status: HTTPResponse.Status
    var headers: FieldList
    let body: Body
    /// The handler's own fields, as it set them.
    let handlerFields: HTTPFields
    /// The names the handler set: only a field of one of these can be there already.
    let handlerSet: [HTTPField.Name]
    let isDialect: Bool

    init(status: HTTPResponse.Status, body: Body, handlerFields: HTTPFields, isDialect: Bool, capacity: Int) {
        self.status = status
        self.body = body
        self.handlerFields = handlerFields
        handlerSet = handlerFields.isEmpty ? [] : handlerFields.map(\.name)
        self.isDialect = isDialect
        headers = FieldList(capacity: capacity)
    }

    /// Appends `field`, or replaces the field of its name when the handler set one.
    mutating func put(_ field: HTTPField) {
        if !handlerSet.isEmpty && handlerSet.contains(field.name) { headers[field.name] = field.value } else { headers.append(field) }
    }

    /// The reply as Hummingbird sends it.
    func response() -> Response {
        switch body {
        case .bytes(let bytes):
            return Response(status: status, headers: headers.httpFields, body: .init(byteBuffer: bytes))
        case .stream(let stream, let length):
            return Response(status: status, headers: headers.httpFields,
                            body: length.map { length in ResponseBody(contentLength: length) { writer in
                                for try await piece in stream { try await writer.write(piece) }
                                try await writer.finish(nil)
                            } } ?? ResponseBody(asyncSequence: stream))
        }
    }
}
