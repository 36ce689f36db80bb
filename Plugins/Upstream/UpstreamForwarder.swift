import Foundation
import GatewayCore
import HTTPTypes
import NIOCore
import Synchronization

/// Sends one call on to the service: the upstream path and query made from the route, the
/// request's fields cleaned of the gateway's own credentials and of hop-by-hop fields, the
/// configured transforms applied; retried on another instance where that is safe; the reply's
/// body streamed back (or, for a cached route, read whole when it is small enough to keep).
struct UpstreamForwarder: Sendable {
    let settings: UpstreamSettings
    let pool: UpstreamPool
    let http: any UpstreamHTTPClient
    let serviceName: String
    /// The gateway's identity tokens (for ``UpstreamSettings/forwardToken``).
    var identityTokens: IdentityTokens? = nil

    /// How long a request whose body streams may take to be sent and answered.
    static let uploadTimeout = Duration.seconds(3600)
    /// Replies of cached routes up to this size are read whole so that the cache can keep them.
    static let cacheableSize = 4 << 20

    /// Fields that concern one connection only (RFC 9110 §7.6.1), never forwarded either way.
    static let hopByHop: Set<String> = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
                                        "proxy-authorization", "proxy-authenticate"]
    /// The gateway's own credentials: they are for the gateway, never for the service behind it.
    static let gatewayCredentials: [HTTPField.Name] = [.authorization, HTTPField.Name("X-Api-Key")!]
    static let forwardedFor = HTTPField.Name("X-Forwarded-For")!
    static let forwardedProto = HTTPField.Name("X-Forwarded-Proto")!
    static let requestID = HTTPField.Name("X-Request-Id")!

    func forward(_ route: UpstreamSettings.Route, _ request: RouteRequest, _ context: OperationContext) async throws -> RouteReply {
        try pool.admit()
        let target = try upstreamPath(route, parameters: request.pathParameters) + query(request.queryParameters)
        let headers = try await requestFields(context)
        if request.bodyStream != nil, let length = context.headers[.contentLength].flatMap(Int.init), length > settings.maxBodySize {
            throw GatewayError.contentTooLarge(limit: settings.maxBodySize)
        }
        let body = request.bodyStream.map { limited($0) }
        // A body that streams can be sent once only: such a request is never retried.
        let idempotent = [.get, .head, .put, .delete, .options].contains(route.method) && body == nil
        let attempts = idempotent ? settings.retries + 1 : 1
        var tried = Set<Int>()
        for attempt in 1...attempts {
            let (index, base) = pool.pick(excluding: tried)
            tried.insert(index)
            // The wait for the head includes sending the body: a streamed upload (any size, any
            // client speed) gets an hour for both instead of the route's timeout; the client's
            // idle read timeout (60 s) still bounds a service that stops answering.
            // A request without a body goes out without one (no `Content-Length: 0` on a GET).
            let whole = body == nil && request.body.readableBytes > 0 ? request.body : nil
            let upstream = UpstreamRequest(method: route.method, url: base + target, headers: headers, body: whole,
                                           timeout: body == nil ? route.timeout : max(route.timeout, Self.uploadTimeout),
                                           maxConnections: settings.maxConnections)
            let response: UpstreamResponse<ByteStream>
            do {
                response = try await http.open(upstream, body: body)
            } catch let error as GatewayError where error.status == 502 || error.status == 504 {
                pool.release(index)
                pool.record(index, success: false)
                if attempt < attempts { continue }
                throw error.status == 504
                    ? GatewayError.gatewayTimeout("The upstream service '\(serviceName)' did not answer within \(ConfigDuration(route.timeout)).")
                    : GatewayError.badGateway("The upstream service '\(serviceName)' could not be reached.")
            } catch {
                pool.release(index)
                throw error
            }
            let failed = response.status.code >= 500
            pool.record(index, success: !failed)
            if failed && [502, 503, 504].contains(response.status.code) && attempt < attempts {
                pool.release(index)
                continue
            }
            return try await reply(response, route: route, release: Release { pool.release(index) })
        }
        throw GatewayError.badGateway("The upstream service '\(serviceName)' could not be reached.")
    }

    /// A WebSocket opened at a route, joined to one opened at the service: messages go both ways
    /// until either side closes.
    func forwardWebSocket(_ route: UpstreamSettings.Route, _ request: RouteRequest, _ connection: any WebSocketConnection,
                          _ context: OperationContext) async throws {
        try pool.admit()
        let target = try upstreamPath(route, parameters: request.pathParameters) + query(request.queryParameters)
        var headers = try await requestFields(context)
        // The handshake's own fields are the client library's to make.
        for field in headers where field.name.canonicalName.hasPrefix("sec-websocket-") && field.name.canonicalName != "sec-websocket-protocol" {
            headers[field.name] = nil
        }
        let (index, base) = pool.pick(excluding: [])
        defer { pool.release(index) }
        let url = (base.hasPrefix("https://") ? "wss://" + base.dropFirst(8) : "ws://" + base.dropFirst(7)) + target
        do {
            try await http.webSocket(url, headers: headers) { upstream in
                pool.record(index, success: true)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for await message in connection.inbound { try await upstream.send(message) } }
                    group.addTask { for await message in upstream.inbound { try await connection.send(message) } }
                    _ = try await group.next()
                    group.cancelAll()
                }
            }
        } catch let error as GatewayError where error.status == 502 {
            pool.record(index, success: false)
            throw error
        }
    }

    /// The reply to the caller: the service's status and fields (cleaned and transformed), its body
    /// streamed — or read whole for a cached route's small 200.
    private func reply(_ response: UpstreamResponse<ByteStream>, route: UpstreamSettings.Route, release: Release) async throws -> RouteReply {
        var fields = HTTPFields()
        var contentType: String?
        var length: Int?
        for field in response.headers {
            let name = field.name.canonicalName
            if Self.hopByHop.contains(name) { continue }
            if field.name == .contentType { contentType = field.value; continue }
            if field.name == .contentLength { length = Int(field.value); continue }
            fields.append(field)
        }
        for name in settings.responseRemove { fields[name] = nil }
        for field in settings.responseSet { fields[field.name] = field.value }
        let stream = Self.releasing(response.body, release)
        if route.cache.isCacheable && response.status == .ok && (length ?? 0) <= Self.cacheableSize {
            // Read up to the cacheable size; a longer body goes on as a stream of what was read and the rest.
            var iterator = stream.makeAsyncIterator()
            var collected = ByteBuffer()
            while collected.readableBytes <= Self.cacheableSize, var piece = try await iterator.next() {
                collected.writeBuffer(&piece)
            }
            if collected.readableBytes <= Self.cacheableSize {
                return RouteReply(status: response.status, headers: fields, body: .bytes(collected, contentType: contentType ?? "application/octet-stream"))
            }
            let rest = iterator
            let first = TakeOnce(collected)
            return RouteReply(status: response.status, headers: fields, body: .stream(ByteStream(next: {
                if let head = first.take() { return head }
                var copy = rest
                return try await copy.next()
            }), contentType: contentType, length: length))
        }
        return RouteReply(status: response.status, headers: fields, body: .stream(stream, contentType: contentType, length: length))
    }

    /// The request's fields for the service: the caller's, without hop-by-hop fields, `Host`, the
    /// length (sent with the body) and the gateway's credentials; then the forwarding fields, the
    /// configured transforms, the service's credential and who the caller is (``UpstreamSettings/identity``).
    private func requestFields(_ context: OperationContext) async throws -> HTTPFields {
        var fields = HTTPFields()
        var forwarded: String?
        for field in context.headers {
            let name = field.name.canonicalName
            if Self.hopByHop.contains(name) || name == "host" || name == "content-length" || name == "expect" { continue }
            if Self.gatewayCredentials.contains(field.name) { continue }
            if settings.identity.contains(where: { $0.name == field.name }) { continue }
            if field.name == Self.forwardedFor { forwarded = forwarded.map { $0 + ", " + field.value } ?? field.value; continue }
            if field.name == Self.requestID { continue }
            fields.append(field)
        }
        let client = context.principal.address
        fields[Self.forwardedFor] = forwarded.map { $0 + ", " + client } ?? client
        if fields[Self.forwardedProto] == nil { fields[Self.forwardedProto] = "http" }
        fields[Self.requestID] = context.requestID
        for name in settings.requestRemove { fields[name] = nil }
        for field in settings.requestSet { fields[field.name] = field.value }
        if let credential = settings.credential { fields[credential.name] = credential.value }
        for (fact, name) in settings.identity {
            if let value = fact.value(of: context.principal) { fields[name] = value }
        }
        if let forwardToken = settings.forwardToken {
            // The client's own field of that name never reaches the service.
            fields[forwardToken.field] = nil
            if let token = try await identityTokens?.token(for: context.principal, audience: forwardToken.audience, lifetime: forwardToken.lifetime) {
                fields[forwardToken.field] = forwardToken.field == .authorization ? "Bearer " + token : token
            }
        }
        if let length = context.headers[.contentLength] { fields[.contentLength] = length }
        return fields
    }

    /// `?a=1&b=2` without the gateway's credential parameters (``Credential/queryParameters``),
    /// after the configured removals and settings; empty when there is nothing.
    private func query(_ parameters: [(name: String, value: String)]) -> String {
        var pairs = parameters.filter { !Credential.queryParameters.contains($0.name) && !settings.queryRemove.contains($0.name) }
        for (name, value) in settings.querySet {
            pairs.removeAll { $0.name == name }
            pairs.append((name, value))
        }
        guard !pairs.isEmpty else { return "" }
        return "?" + pairs.map { Self.encode($0.name) + "=" + Self.encode($0.value) }.joined(separator: "&")
    }

    /// Counts a streamed body against ``UpstreamSettings/maxBodySize`` as it goes.
    private func limited(_ stream: ByteStream) -> ByteStream {
        let limit = settings.maxBodySize
        let iterator = stream.makeAsyncIterator()
        let read = ByteCount()
        return ByteStream(next: {
            var copy = iterator
            let piece = try await copy.next()
            if read.add(piece?.readableBytes ?? 0) > limit { throw GatewayError.contentTooLarge(limit: limit) }
            return piece
        })
    }

    /// The path to send for a call of `route`: exactly the segments the gateway routed and
    /// authorized, read once (``segments(_:matrix:)``) and written in one encoding, or a 400 when the
    /// service could read the path as another route's (``UpstreamSettings/routeShadows``).
    func upstreamPath(_ route: UpstreamSettings.Route, parameters: [String: String]) throws -> String {
        var routed: [String] = []
        var values: [String: [String]] = [:]
        for part in route.pathParts {
            switch part {
            case .text(let text):
                routed.append(text)
            case .parameter(let name):
                let value = try Self.checked(parameters[name] ?? "", matrix: route.matrixParameters)
                values[name] = [value]
                routed.append(value)
            case .rest(let name):
                let rest = try Self.segments(parameters[name] ?? "", matrix: route.matrixParameters)
                values[name] = rest
                routed += rest
            }
        }
        // The path as a lenient service might read it (any case, without `;` parameters) must
        // lead to this route, and not to one the gateway guards otherwise.
        let lenient = settings.routeShadows.isSingle ? [] : routed.map { segment in
            (route.matrixParameters ? String(segment.prefix { $0 != ";" }) : segment).lowercased()
        }
        if !settings.routeShadows.isSingle, settings.routeShadows.route(for: lenient) != route.path.lowercased() {
            throw GatewayError.badRequest("The path is ambiguous: a service could read it as another route's (spelled in another case, or with ';' parameters).")
        }
        var path = ""
        for part in route.upstreamPath {
            switch part {
            case .text(let text):
                path += "/" + text
            case .parameter(let name):
                path += "/" + Self.segment(values[name]?.first ?? "", matrix: route.matrixParameters)
            case .rest(let name):
                for segment in values[name] ?? [] { path += "/" + Self.segment(segment, matrix: route.matrixParameters) }
            }
        }
        return path.isEmpty ? "/" : path
    }

    /// The segments of a `{name...}` rest as it came (percent-encoded still): each decoded once and
    /// checked (``checked(_:matrix:)``), empty ones dropped (the gateway's routing skips them too).
    static func segments(_ rest: String, matrix: Bool) throws -> [String] {
        try rest.split(separator: "/", omittingEmptySubsequences: true).map { raw in
            // Most segments are plain: nothing to decode, written as they are.
            if raw.utf8.allSatisfy({ isPlain($0, matrix: matrix) }) { return try checked(String(raw), matrix: matrix) }
            // With `;` parameters allowed, each piece between them is decoded on its own; an
            // encoded `;` would become one more separator, so it is refused.
            let pieces = matrix ? raw.split(separator: ";", omittingEmptySubsequences: false) : [raw]
            let decoded = try pieces.map { piece -> String in
                guard let text = piece.removingPercentEncoding else {
                    throw GatewayError.badRequest("The path segment '\(raw.prefix(80))' is not validly percent-encoded.")
                }
                if matrix && text.contains(";") { throw ambiguous(raw) }
                return text
            }
            return try checked(decoded.joined(separator: ";"), matrix: matrix, raw: raw)
        }
    }

    /// A decoded segment, refused (400) where a service could read it otherwise than the gateway:
    /// `.` or `..` (in any encoding), a `/` or `\` inside (an encoded slash), a NUL, or — unless the
    /// route allows them — a `;` (servers that drop `;` parameters read `/admin;x` as `/admin`).
    static func checked(_ segment: String, matrix: Bool, raw: Substring? = nil) throws -> String {
        if segment == "." || segment == ".." { throw GatewayError.badRequest("A path segment may not be '.' or '..'.") }
        if segment.contains(where: { $0 == "/" || $0 == "\\" || $0 == "\0" }) || (!matrix && segment.contains(";")) {
            throw ambiguous(raw ?? Substring(segment))
        }
        return segment
    }

    private static func ambiguous(_ segment: Substring) -> GatewayError {
        GatewayError.badRequest("The path segment '\(segment.prefix(80))' is ambiguous: an encoded slash or backslash, a NUL or a ';' parameter is refused.")
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    private static let segmentCharacters = unreserved.union(CharacterSet(charactersIn: "!$&'()*+,=:@"))

    private static let segmentCharactersWithParameters = segmentCharacters.union(CharacterSet(charactersIn: ";"))

    /// A decoded segment written for the service: everything but unreserved characters and
    /// sub-delimiters percent-encoded; `;` too, unless the route passes `;` parameters on.
    static func segment(_ text: String, matrix: Bool = false) -> String {
        if text.utf8.allSatisfy({ isPlain($0, matrix: matrix) }) { return text }
        return text.addingPercentEncoding(withAllowedCharacters: matrix ? segmentCharactersWithParameters : segmentCharacters) ?? text
    }

    /// Whether a byte stands for itself in a segment, decoded or encoded: an unreserved character
    /// or a sub-delimiter (`;` only with `;` parameters allowed), not `%`.
    private static func isPlain(_ byte: UInt8, matrix: Bool) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"),
             UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: "="),
             UInt8(ascii: ":"), UInt8(ascii: "@"): true
        case UInt8(ascii: ";"): matrix
        default: false
        }
    }
    static func encode(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? text }

    /// `body`, with `release` called once it ends, fails, or is dropped unread.
    static func releasing(_ body: ByteStream, _ release: Release) -> ByteStream {
        let iterator = body.makeAsyncIterator()
        return ByteStream(next: { [release] in
            var copy = iterator
            do {
                let piece = try await copy.next()
                if piece == nil { release.fire() }
                return piece
            } catch {
                release.fire()
                throw error
            }
        })
    }
}

/// Something to do once: when fired, or at the latest when dropped.
final class Release: Sendable {
    private let action: Mutex<(@Sendable () -> Void)?>
    init(_ action: @escaping @Sendable () -> Void) { self.action = Mutex(action) }
    func fire() { action.withLock { action in defer { action = nil }; return action }?() }
    deinit { fire() }
}

/// A value taken once.
final class TakeOnce<Value: Sendable>: Sendable {
    private let value: Mutex<Value?>
    init(_ value: Value) { self.value = Mutex(value) }
    func take() -> Value? { value.withLock { value in defer { value = nil }; return value } }
}

/// Bytes counted from several tasks.
final class ByteCount: Sendable {
    private let count = Atomic<Int>(0)
    /// Adds `bytes`; the new total.
    func add(_ bytes: Int) -> Int { count.add(bytes, ordering: .relaxed).newValue }
}
