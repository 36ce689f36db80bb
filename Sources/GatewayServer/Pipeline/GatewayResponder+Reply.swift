import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore

/// The last stages of a route: the reply's fields, its validator, cache store and invalidation.
extension GatewayResponder {
    func respond(with reply: RouteReply, of mounted: MountedRoute, isRead: Bool, parameters: [String: String], query: [(name: String, value: String)],
                 request: Request, cacheKey: String?,
                 requestCacheControl: String, limitHeaders: [HTTPField], requestID: String) async throws -> Response {
        // The reply's fields: appended where no field of the name can be there yet (a search per
        // field is a large part of a small reply's cost), set where the handler may have set it.
        // `Content-Length` and `X-Request-Id` are added here too, so that neither Hummingbird's
        // `Response` nor ``respond(to:context:)`` has to search the fields and copy them to set one.
        // The body is made first, so that `Content-Length` is the first field: Hummingbird's
        // `Response` and NIO's encoder each search the fields for it, comparing names until they
        // find it.
        let bytes: ByteBuffer
        switch reply.body {
        case .empty: bytes = ByteBuffer()
        case .json(let value): bytes = try JSONStreamEncoder.encodeBuffer(value)
        case .bytes(let buffer, _): bytes = buffer
        case .stream(let stream, let type, let length):
            return await respond(streaming: stream, contentType: type, length: length, of: reply, mounted: mounted, isRead: isRead,
                                 parameters: parameters, query: query, request: request, limitHeaders: limitHeaders, requestID: requestID)
        }
        var headers = FieldList(capacity: limitHeaders.count + reply.headers.count + 9)
        headers.append(HTTPField(name: .contentLength, value: String(bytes.readableBytes)))
        headers.append(contentsOf: limitHeaders)
        // The handler's fields as they are: a name may repeat (`Link`, `Set-Cookie`).
        for field in reply.headers { headers.append(field) }
        if isRead, let next = reply.nextCursor {
            headers.append(HTTPField(name: .link, value: Self.nextLink(path: request.uri.path, query: query, cursor: next)))
        }
        // The names the handler set: only a field of one of these can be there already.
        let replace: [HTTPField.Name] = reply.headers.isEmpty ? [] : reply.headers.map(\.name)
        // A handler's own `Content-Length` gives way to the body's.
        if replace.contains(.contentLength) { headers[.contentLength] = String(bytes.readableBytes) }
        switch reply.body {
        case .json: Self.put(Self.jsonContentType, into: &headers, replacing: replace)
        case .bytes(_, let type?):
            // Most such bodies are JSON a plugin wrote itself: that field is made (and checked) once.
            Self.put(type == "application/json" ? Self.jsonContentType : HTTPField(name: .contentType, value: type), into: &headers, replacing: replace)
        default: break
        }
        Self.put(HTTPField(name: Self.requestIDField, value: requestID), into: &headers, replacing: replace)
        if reply.status.kind == .successful && !isRead && !mounted.cache.invalidates.isEmpty {
            await cache.invalidate(tags: mounted.invalidatedTags.map { $0.resolve(parameters) })
        }
        // A dialect's reply keeps its own fields unless its route is cacheable.
        guard isRead, reply.status == .ok, !(reply.isDialect && cacheKey == nil) else {
            return Self.response(status: reply.status, headers: headers, body: bytes)
        }
        let etag: String
        if replace.contains(.eTag), let given = headers[.eTag] {
            etag = given
        } else {
            etag = Self.strongETag(bytes)
            Self.put(HTTPField(name: .eTag, value: etag), into: &headers, replacing: replace)
        }
        // A reply is stored only as its own fields allow (a forwarded service's `no-store`,
        // `private`, `max-age`, `Set-Cookie`, ...); one that may not be keeps its `Cache-Control`.
        if let cacheKey, let routeTTL = mounted.cache.ttl, let ttl = ReplyStorability.lifetime(of: reply.headers, ttl: routeTTL) {
            let seconds = Int(ttl.components.seconds)
            Self.put(HTTPField(name: .cacheControl, value: mounted.cache.scope == .shared ? "public, max-age=\(seconds)" : "private, max-age=\(seconds)"),
                     into: &headers, replacing: replace)
            Self.put(Self.cacheMiss, into: &headers, replacing: replace)
            if !requestCacheControl.contains("no-store") {
                let stored = headers.fields.filter { field in
                    field.name != Self.requestIDField && field.name != .contentLength && field.name != .age && !limitHeaders.contains { $0.name == field.name }
                }
                await cache.store(cacheKey, CachedReply(
                    status: 200, headers: stored.map { ($0.name.rawName, $0.value) }, body: Array(buffer: bytes), etag: etag,
                    storedAt: .now, ttl: ttl, tags: mounted.storedTags.map { $0.resolve(parameters) }))
            }
        } else {
            if !replace.contains(.cacheControl) { Self.put(Self.noCache, into: &headers, replacing: replace) }
            Self.put(Self.cacheBypass, into: &headers, replacing: replace)
        }
        if Self.matches(ifNoneMatch: request.headers.value(.ifNoneMatch), etag: etag) {
            return Self.notModified(&headers)
        }
        return Self.response(status: .ok, headers: headers, body: bytes)
    }

    /// `<path?query&cursor=next>; rel="next"` (RFC 8288): the request's own path and query, its
    /// `cursor` replaced by the next page's.
    static func nextLink(path: String, query: [(name: String, value: String)], cursor: String) -> String {
        var pairs = query.filter { $0.name != "cursor" }
        pairs.append((name: "cursor", value: cursor))
        let encoded = pairs.map { PercentEncoding.component($0.name) + "=" + PercentEncoding.component($0.value) }.joined(separator: "&")
        return "<\(path)?\(encoded)>; rel=\"next\""
    }

    /// Appends `field`, or replaces the field of its name when the handler set one (`replacing`
    /// names the fields it set).
    @inline(__always)
    static func put(_ field: HTTPField, into headers: inout FieldList, replacing: [HTTPField.Name]) {
        if !replacing.isEmpty && replacing.contains(field.name) { headers[field.name] = field.value } else { headers.append(field) }
    }

    /// The response; `headers` begin with the body's `Content-Length`.
    static func response(status: HTTPResponse.Status, headers: FieldList, body: ByteBuffer) -> Response {
        Response(status: status, headers: headers.httpFields, body: .init(byteBuffer: body))
    }

    /// A 304 for a reply whose fields are `headers`: without a body, so without its length and type.
    static func notModified(_ headers: inout FieldList) -> Response {
        headers[.contentLength] = nil
        headers[.contentType] = nil
        return Response(status: .notModified, headers: headers.httpFields, body: .init())
    }

    /// A reply whose body is sent as it is read: no validator, no cache, nothing held.
    private func respond(streaming stream: ByteStream, contentType: String?, length: Int?, of reply: RouteReply, mounted: MountedRoute, isRead: Bool,
                         parameters: [String: String], query: [(name: String, value: String)], request: Request,
                         limitHeaders: [HTTPField], requestID: String) async -> Response {
        var headers = FieldList(capacity: limitHeaders.count + reply.headers.count + 6)
        if let length { headers.append(HTTPField(name: .contentLength, value: String(length))) }
        headers.append(contentsOf: limitHeaders)
        for field in reply.headers { headers.append(field) }
        if isRead, let next = reply.nextCursor {
            headers.append(HTTPField(name: .link, value: Self.nextLink(path: request.uri.path, query: query, cursor: next)))
        }
        let replace: [HTTPField.Name] = reply.headers.isEmpty ? [] : reply.headers.map(\.name)
        if replace.contains(.contentLength) { headers[.contentLength] = length.map(String.init) }
        if let contentType { Self.put(HTTPField(name: .contentType, value: contentType), into: &headers, replacing: replace) }
        Self.put(HTTPField(name: Self.requestIDField, value: requestID), into: &headers, replacing: replace)
        if reply.status.kind == .successful && !isRead && !mounted.cache.invalidates.isEmpty {
            await cache.invalidate(tags: mounted.invalidatedTags.map { $0.resolve(parameters) })
        }
        if !replace.contains(.cacheControl) && isRead { Self.put(Self.noCache, into: &headers, replacing: replace) }
        return Response(status: reply.status, headers: headers.httpFields,
                        body: length.map { length in ResponseBody(contentLength: length) { writer in
                            for try await piece in stream { try await writer.write(piece) }
                            try await writer.finish(nil)
                        } } ?? ResponseBody(asyncSequence: stream))
    }
}
