import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// The gateway's request pipeline, as one Hummingbird responder.
///
/// Every request passes the stages of DESIGN.md in order: request id → access log + metrics →
/// CORS → route → body size limit → principal → rate limit → cache lookup → authorization →
/// input decoding → handler → encode → cache store / invalidate → reply. The stages run inline
/// rather than as a chain of middleware so that the common path costs no extra allocations or
/// indirections. Every error becomes a problem document (or the dialect's legacy shape); nothing a
/// client sends can produce a 500 unless a handler itself fails unexpectedly.
private let requestIDPrefix: UInt64 = UInt64.random(in: 1...0x0FFF_FFFF) << 32
private let requestIDCounter = Atomic<UInt64>(0)

public struct GatewayResponder: HTTPResponder {
    public typealias Context = GatewayRequestContext

    let routes: RouteTable<Endpoint>
    let settings: PipelineSettings
    let authenticator: any Authenticator
    let rateLimiter: any RateLimiter
    let cache: any ResponseCacheStore
    let metrics: GatewayMetrics
    let logger: Logger

    /// Settings of the pipeline that come from plugins.yaml.
    struct PipelineSettings: Sendable {
        var maxBodySize: Int
        var cors: CORSSettings?
        var accessLog: Bool
    }

    static let requestIDField = HTTPField.Name("X-Request-Id")!

    /// Header names the pipeline sets on every reply, parsed once.
    static let knownFields: [String: HTTPField.Name] = {
        var table: [String: HTTPField.Name] = [:]
        for name in ["RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After",
                     "ETag", "Location", "Cache-Control", "Content-Type", "Allow", "WWW-Authenticate", "Accept-Post", "Age", "X-Cache"] {
            table[name] = HTTPField.Name(name)
        }
        return table
    }()

    @inline(__always)
    static func field(_ name: String) -> HTTPField.Name? {
        knownFields[name] ?? HTTPField.Name(name)
    }
    static let cacheField = HTTPField.Name("X-Cache")!
    // Fields of fixed value, checked once rather than on every reply.
    static let jsonContentType = HTTPField(name: .contentType, value: "application/json")
    static let noCache = HTTPField(name: .cacheControl, value: "no-cache")
    static let cacheMiss = HTTPField(name: cacheField, value: "MISS")
    static let cacheBypass = HTTPField(name: cacheField, value: "BYPASS")
    static let ageField = HTTPField.Name("Age")!

    public func respond(to request: Request, context: Context) async throws -> Response {
        let start = ContinuousClock.now
        let requestID = Self.requestID(from: request.headers)
        var endpointName = "unmatched"
        var endpointMetrics: GatewayMetrics.EndpointSeries?
        var operationReplied = false
        var response: Response
        // Read once: each read of a request's method copies its pseudo-header fields.
        let method = request.method
        if method == .options, let cors = settings.cors, request.headers.value(.accessControlRequestMethod) != nil {
            endpointName = "cors.preflight"
            response = Self.preflight(request, cors: cors)
        } else {
            do {
                switch try routes.resolve(method, path: Substring(request.uri.path)) {
                case .found(let endpoint, let parameters):
                    endpointName = endpoint.name
                    endpointMetrics = endpoint.metrics
                    if case .operation(let mounted) = endpoint {
                        response = try await runOperation(mounted, method: method, parameters: parameters, request: request, context: context, requestID: requestID)
                        operationReplied = true
                    } else {
                        response = try await dispatch(endpoint, parameters: parameters, request: request, context: context, requestID: requestID)
                    }
                case .methodNotAllowed(let allowed):
                    response = ProblemResponse.make(.methodNotAllowed(method.rawValue, allowed: allowed), path: request.uri.path, requestID: requestID)
                case .notFound:
                    response = ProblemResponse.make(.notFound("Nothing is served at \(request.uri.path.prefix(200))."), path: request.uri.path, requestID: requestID)
                }
            } catch {
                response = problem(for: error, request: request, requestID: requestID, endpoint: endpointName)
            }
        }
        // An operation's reply has its id already (added with its other fields).
        if !operationReplied { response.headers[Self.requestIDField] = requestID }
        if let cors = settings.cors { Self.addCORS(to: &response, request: request, cors: cors) }
        if method == .head { response.body = .init() }
        let elapsed = ContinuousClock.now - start
        if let endpointMetrics { endpointMetrics.record(status: response.status.code, duration: elapsed) } else {
            metrics.record(endpoint: endpointName, status: response.status.code, duration: elapsed)
        }
        let level: Logger.Level = settings.accessLog ? .info : .debug
        if logger.logLevel <= level {
            logger.log(level: level, "\(method.rawValue) \(request.uri.path) \(response.status.code)", metadata: [
                "request.id": .string(requestID), "endpoint": .string(endpointName), "client": .string(context.remoteAddress),
                "micros": .stringConvertible(elapsed.components.attoseconds / 1_000_000_000_000 + elapsed.components.seconds * 1_000_000),
            ])
        }
        return response
    }

    private func problem(for error: any Error, request: Request, requestID: String, endpoint: String) -> Response {
        if let gatewayError = ProblemResponse.gatewayError(from: error) {
            return ProblemResponse.make(gatewayError, path: request.uri.path, requestID: requestID)
        }
        logger.error("unhandled error", metadata: ["request.id": .string(requestID), "endpoint": .string(endpoint), "error": "\(String(reflecting: error))"])
        return ProblemResponse.make(.internalError(), path: request.uri.path, requestID: requestID)
    }

    private func dispatch(_ endpoint: Endpoint, parameters: [String: String], request: Request, context: Context, requestID: String) async throws -> Response {
        switch endpoint {
        case .gateway(let gateway):
            return try await gateway.handler(request, context)
        case .operation(let mounted):
            return try await runOperation(mounted, method: request.method, parameters: parameters, request: request, context: context, requestID: requestID)
        case .dialect(let mounted):
            do {
                return try await runDialect(mounted, parameters: parameters, request: request, context: context, requestID: requestID)
            } catch {
                guard let gatewayError = ProblemResponse.gatewayError(from: error) else {
                    logger.error("unhandled dialect error", metadata: ["request.id": .string(requestID), "error": "\(String(reflecting: error))"])
                    return Self.response(mounted.dialect.renderError(.internalError()))
                }
                var response = Self.response(mounted.dialect.renderError(gatewayError))
                for (name, value) in gatewayError.headers where name != "WWW-Authenticate" || gatewayError.status == 401 {
                    if let field = Self.field(name) { response.headers[field] = value }
                }
                return response
            }
        }
    }

    // MARK: Stages shared by operations and dialects

    private func collectBody(_ request: Request) async throws -> ByteBuffer {
        if let length = request.headers.value(.contentLength).flatMap(Int.init), length > settings.maxBodySize {
            throw GatewayError.contentTooLarge(limit: settings.maxBodySize)
        }
        do {
            return try await request.body.collect(upTo: settings.maxBodySize)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw GatewayError.contentTooLarge(limit: settings.maxBodySize)
        }
    }

    func limit(_ principal: Principal, plugin: String, cost: Int) async throws -> [HTTPField] {
        try Self.admit(try await rateLimiter.acquire(principal: principal, plugin: plugin, cost: cost))
    }

    /// The principal and the rate-limit fields of a request, without suspending when the
    /// authenticator and the limiter can answer at once (no credential or a remembered one, limits
    /// kept in this process): most requests then make no asynchronous call for either stage.
    @inline(__always)
    private func principalAndLimit(_ credential: Credential?, address: String, plugin: String, cost: Int) async throws -> (Principal, [HTTPField]) {
        let principal: Principal
        if let known = try authenticator.knownPrincipal(for: credential, address: address) {
            principal = known
        } else {
            principal = try await authenticator.principal(for: credential, address: address)
        }
        if let decision = rateLimiter.acquireNow(principal: principal, plugin: plugin, cost: cost) {
            return (principal, try Self.admit(decision))
        }
        return (principal, try await limit(principal, plugin: plugin, cost: cost))
    }

    /// The decision's fields, or the 429 it calls for.
    private static func admit(_ decision: RateLimitDecision) throws -> [HTTPField] {
        guard decision.allowed else {
            throw GatewayError.quotaExceeded(policy: decision.policy, retryAfter: decision.retryAfter)
                .adding(headers: Dictionary(decision.headers.map { ($0.name.rawName, $0.value) }, uniquingKeysWith: { _, new in new }))
        }
        return decision.headers
    }

    /// Enforces an operation's access rule. A key is further bounded by its scopes on every
    /// operation, public ones included (a key is a capability: it acts for its owner, so a
    /// read-only key must not write even where a guest could): a read (GET/HEAD) needs
    /// `<plugin>:read` and anything else `<plugin>:write` (or `<plugin>:*`, or `*`).
    static func authorize(_ rule: AccessRule, principal: Principal, plugin: String, method: HTTPRequest.Method) throws {
        if case .apiKey = principal.kind, !principal.isAdmin {
            let needed = "\(plugin):" + (method == .get || method == .head ? "read" : "write")
            guard principal.scopes.contains(needed) || principal.scopes.contains("\(plugin):*") || principal.scopes.contains("*") else {
                throw GatewayError.forbidden("This key lacks the scope \(needed).")
            }
        }
        switch rule {
        case .public:
            return
        case .user, .owner:
            guard principal.userID != nil || principal.isAdmin else {
                throw principal.isAnonymous ? GatewayError.unauthorized() : GatewayError.forbidden("This operation acts for a user; this key has none.")
            }
        case .scope(let scope):
            if principal.isAdmin { return }
            switch principal.kind {
            case .anonymous: throw GatewayError.unauthorized()
            case .user: return
            case .apiKey:
                guard principal.scopes.contains(scope) || principal.scopes.contains("*") || principal.scopes.contains("\(plugin):*") else {
                    throw GatewayError.forbidden("This key lacks the scope \(scope).")
                }
            }
        case .admin:
            guard principal.isAdmin else {
                throw principal.isAnonymous ? GatewayError.unauthorized() : GatewayError.forbidden("Only administrators may do this.")
            }
        }
    }

    // MARK: Operations

    private func runOperation(_ mounted: MountedOperation, method: HTTPRequest.Method, parameters: [String: String], request: Request, context: Context,
                              requestID: String) async throws -> Response {
        // Fields are read from the mounted operation in place: a copy of the whole descriptor
        // would count references to each of its strings and arrays.
        let credential = NativeCredentials.extract(from: request.headers)
        let (principal, limitHeaders) = try await principalAndLimit(credential, address: context.remoteAddress, plugin: mounted.pluginID,
                                                                    cost: mounted.operation.cost)
        let query = try PercentDecoding.queryParameters(Self.query(of: request))

        let isRead = method == .get || method == .head
        let requestCacheControl = request.headers.value(.cacheControl)?.lowercased() ?? ""
        var cacheKey: String?
        if isRead, mounted.cache.isCacheable, !requestCacheControl.contains("no-store"), await mounted.cacheAdmits(principal) {
            cacheKey = Self.cacheKey(mounted, parameters: parameters, query: query, request: request, principal: principal)
        }
        if let cacheKey, !requestCacheControl.contains("no-cache"), let hit = await cache.lookup(cacheKey) {
            let age = ContinuousClock.now - hit.storedAt
            let maxAge = Self.requestMaxAge(requestCacheControl)
            if age < hit.ttl, maxAge.map({ age <= .seconds($0) }) ?? true {
                return Self.cachedResponse(hit, age: age, request: request, limitHeaders: limitHeaders, requestID: requestID)
            }
        }

        try Self.authorize(mounted.operation.access, principal: principal, plugin: mounted.pluginID, method: method)
        if let resource = mounted.operation.resourceParameter, let id = parameters[resource],
           !principal.mayAccess(resource: id, of: mounted.pluginID) {
            throw GatewayError.notFound("No such resource '\(id)'.")
        }
        var body: ByteBuffer?
        if mounted.operation.io.hasBody {
            body = try await collectBody(request)
        }
        let contentType = request.headers.value(.contentType).map { Self.mediaType($0) }
        let operationContext = OperationContext(principal: principal, requestID: requestID, logger: logger,
                                                headers: request.headers, plugin: mounted.plugin, credential: credential)
        let reply = try await mounted.operation(
            OperationRequest(pathParameters: parameters, queryParameters: query, body: body, contentType: contentType),
            context: operationContext)

        // The reply's fields: appended where no field of the name can be there yet (a search per
        // field is a large part of a small reply's cost), set where the operation may have set it.
        // `Content-Length` and `X-Request-Id` are added here too, so that neither Hummingbird's
        // `Response` nor ``respond(to:context:)`` has to search the fields and copy them to set one.
        var headers = FieldList(capacity: limitHeaders.count + reply.headers.count + 8)
        headers.append(contentsOf: limitHeaders)
        for (name, value) in reply.headers { if let field = Self.field(name) { headers[field] = value } }
        // The names the operation set: only a field of one of these can be there already.
        let replace: [HTTPField.Name] = reply.headers.isEmpty ? [] : reply.headers.keys.compactMap { Self.field($0) }
        let bytes: ByteBuffer
        switch reply.body {
        case .empty:
            bytes = ByteBuffer()
        case .json(let value):
            bytes = try JSONStreamEncoder.encodeBuffer(value)
            Self.put(Self.jsonContentType, into: &headers, replacing: replace)
        case .bytes(let buffer, let type):
            bytes = buffer
            Self.put(HTTPField(name: .contentType, value: type), into: &headers, replacing: replace)
        }
        Self.put(HTTPField(name: Self.requestIDField, value: requestID), into: &headers, replacing: replace)
        let succeeded = (200..<300).contains(reply.status)
        if succeeded && !isRead && !mounted.cache.invalidates.isEmpty {
            await cache.invalidate(tags: mounted.invalidatedTags.map { $0.resolve(parameters) })
        }
        guard isRead, reply.status == 200 else {
            return Self.response(status: .init(code: reply.status), headers: &headers, body: bytes, replacing: replace)
        }
        let etag: String
        if replace.contains(.eTag), let given = headers[.eTag] {
            etag = given
        } else {
            etag = Self.strongETag(bytes)
            Self.put(HTTPField(name: .eTag, value: etag), into: &headers, replacing: replace)
        }
        if let cacheKey, let ttl = mounted.cache.ttl {
            let seconds = Int(ttl.components.seconds)
            Self.put(HTTPField(name: .cacheControl, value: mounted.cache.scope == .shared ? "public, max-age=\(seconds)" : "private, max-age=\(seconds)"),
                     into: &headers, replacing: replace)
            Self.put(Self.cacheMiss, into: &headers, replacing: replace)
            if !requestCacheControl.contains("no-store") {
                let stored = headers.fields.filter { field in field.name != Self.requestIDField && !limitHeaders.contains { $0.name == field.name } }
                await cache.store(cacheKey, CachedReply(
                    status: 200, headers: stored.map { ($0.name.rawName, $0.value) }, body: Array(buffer: bytes), etag: etag,
                    storedAt: .now, ttl: ttl, tags: mounted.storedTags.map { $0.resolve(parameters) }))
            }
        } else {
            if !replace.contains(.cacheControl) { Self.put(Self.noCache, into: &headers, replacing: replace) }
            Self.put(Self.cacheBypass, into: &headers, replacing: replace)
        }
        if Self.matches(ifNoneMatch: request.headers.value(.ifNoneMatch), etag: etag) {
            headers[.contentType] = nil
            return Response(status: .notModified, headers: headers.httpFields, body: .init())
        }
        return Self.response(status: .ok, headers: &headers, body: bytes, replacing: replace)
    }

    /// Appends `field`, or replaces the field of its name when the operation set one (`replacing`
    /// names the fields it set).
    @inline(__always)
    private static func put(_ field: HTTPField, into headers: inout FieldList, replacing: [HTTPField.Name]) {
        if !replacing.isEmpty && replacing.contains(field.name) { headers[field.name] = field.value } else { headers.append(field) }
    }

    /// The response, with `Content-Length` added to `headers` as their first field: Hummingbird's
    /// `Response` and NIO's encoder each search the fields for it before sending, comparing names
    /// until they find it.
    private static func response(status: HTTPResponse.Status, headers: inout FieldList, body: ByteBuffer, replacing: [HTTPField.Name]) -> Response {
        let length = HTTPField(name: .contentLength, value: String(body.readableBytes))
        if !replacing.isEmpty && replacing.contains(.contentLength) { headers[.contentLength] = length.value } else { headers.prepend(length) }
        return Response(status: status, headers: headers.httpFields, body: .init(byteBuffer: body))
    }

    // MARK: Dialects

    private func runDialect(_ mounted: MountedDialectRoute, parameters: [String: String], request: Request, context: Context, requestID: String) async throws -> Response {
        let query = try PercentDecoding.queryParameters(Self.query(of: request))
        let body = try await collectBody(request)
        let dialectRequest = DialectRequest(method: request.method, path: request.uri.path, pathParameters: parameters,
                                            queryParameters: query, headers: request.headers, body: body, authority: request.head.authority)
        let credential = mounted.dialect.credential(dialectRequest)
        let (principal, limitHeaders) = try await principalAndLimit(credential, address: context.remoteAddress, plugin: mounted.pluginID,
                                                                    cost: mounted.route.cost)
        let operationContext = OperationContext(principal: principal, requestID: requestID, logger: logger,
                                                headers: request.headers, plugin: mounted.plugin, credential: credential)
        var response = Self.response(try await mounted.route.handler(dialectRequest, operationContext))
        for field in limitHeaders { response.headers[field.name] = field.value }
        return response
    }

    static func response(_ reply: DialectResponse) -> Response {
        var headers = HTTPFields()
        for (name, value) in reply.headers { if let field = Self.field(name) { headers[field] = value } }
        return Response(status: .init(code: reply.status), headers: headers, body: .init(byteBuffer: reply.body))
    }

    // MARK: Helpers

    static func requestID(from headers: HTTPFields) -> String {
        if let given = headers.value(requestIDField), !given.isEmpty, given.utf8.count <= 128,
           given.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) {
            return given
        }
        // A random per-process prefix and a counter: unique without a system call per request.
        // Fifteen hex digits (60 bits): a string of up to 15 bytes is held inline, so the id is
        // neither allocated nor reference-counted as it is copied into the reply and the context.
        let value = requestIDPrefix | (requestIDCounter.wrappingAdd(1, ordering: .relaxed).oldValue & 0xFFFF_FFFF)
        return hex(value, digits: 15)
    }

    /// The low `digits` hex digits of `value` (at most 16), optionally between double quotes.
    static func hex(_ value: UInt64, digits count: Int, quoted: Bool = false) -> String {
        let digits: StaticString = "0123456789abcdef"
        let length = quoted ? count + 2 : count
        return String(unsafeUninitializedCapacity: length) { buffer in
            var position = 0
            if quoted { buffer[0] = UInt8(ascii: "\""); position = 1 }
            for shift in stride(from: 4 * (count - 1), through: 0, by: -4) {
                buffer[position] = digits.utf8Start[Int((value >> UInt64(shift)) & 0xF)]
                position += 1
            }
            if quoted { buffer[position] = UInt8(ascii: "\""); position += 1 }
            return position
        }
    }

    static func mediaType(_ header: String) -> String {
        if header == "application/json" { return header }
        let type = header.split(separator: ";", maxSplits: 1).first.map(String.init) ?? header
        return type.trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// A strong validator derived from the body: the top 52 bits of its XXH64, stable across
    /// instances and restarts. Thirteen hex digits and the quotes make 15 bytes, which a string
    /// holds inline: the tag is not allocated on the thread that runs the operation and freed on
    /// the event loop that sends the reply.
    static func strongETag(_ bytes: ByteBuffer) -> String {
        hex(bytes.withUnsafeReadableBytes { XXHash64.hash($0) } >> 12, digits: 13, quoted: true)
    }

    static func matches(ifNoneMatch header: String?, etag: String) -> Bool {
        guard let header else { return false }
        if header.trimmingCharacters(in: .whitespaces) == "*" { return true }
        let bare = etag.hasPrefix("W/") ? String(etag.dropFirst(2)) : etag
        return header.split(separator: ",").contains { candidate in
            var value = candidate.trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("W/") { value.removeFirst(2) }
            return value == bare
        }
    }

    static func requestMaxAge(_ cacheControl: String) -> Int? {
        guard let range = cacheControl.range(of: "max-age=") else { return nil }
        return Int(cacheControl[range.upperBound...].prefix { $0.isNumber })
    }

    static func resolve(tags: [String], parameters: [String: String]) -> [String] {
        tags.map { TagTemplate($0).resolve(parameters) }
    }

    /// The request's query: what follows the first `?` of its target, up to a `#`, as it came.
    /// Read from the request's path in place (`request.uri.query` is a new string each time).
    static func query(of request: Request) -> Substring {
        guard let target = request.head.path else { return "" }
        // Searched as raw bytes (a string's UTF-8 view searched as a collection steps one index at
        // a time); a target is native UTF-8, so the offsets become indexes in constant time.
        let utf8 = target.utf8
        guard let bounds = utf8.withContiguousStorageIfAvailable(queryBounds) ?? Array(utf8).withUnsafeBufferPointer(queryBounds) else { return "" }
        return target[utf8.index(utf8.startIndex, offsetBy: bounds.lowerBound)..<utf8.index(utf8.startIndex, offsetBy: bounds.upperBound)]
    }

    /// Where the query is in a target's bytes: after the first `?`, up to a `#`.
    private static func queryBounds(_ bytes: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        guard let mark = bytes.firstIndex(of: UInt8(ascii: "?")) else { return nil }
        return (mark + 1)..<(bytes[(mark + 1)...].firstIndex(of: UInt8(ascii: "#")) ?? bytes.count)
    }

    static func cacheKey(_ mounted: MountedOperation, parameters: [String: String], query: [(name: String, value: String)],
                         request: Request, principal: Principal) -> String {
        var key = mounted.operation.name
        key += "|" + request.uri.path
        // Parameter order does not change the answer, so it must not split the cache.
        let sorted = query.sorted { ($0.name, $0.value) < ($1.name, $1.value) }
        for pair in sorted { key += "|\(pair.name)=\(pair.value)" }
        for header in mounted.cache.vary {
            if let field = HTTPField.Name(header) { key += "|\(header):\(request.headers[field] ?? "")" }
        }
        if mounted.cache.scope == .perPrincipal { key += "|@" + principal.limitKey }
        return key
    }

    static func cachedResponse(_ hit: CachedReply, age: Duration, request: Request, limitHeaders: [HTTPField], requestID: String) -> Response {
        // A stored reply has no rate-limit or Age fields and no name twice, so fields are appended
        // without a search; only its X-Cache (MISS when stored) is replaced.
        var headers = FieldList(capacity: hit.headers.count + limitHeaders.count + 4)
        for (name, value) in hit.headers { if let field = Self.field(name) { headers.append(HTTPField(name: field, value: value)) } }
        headers.append(contentsOf: limitHeaders)
        headers[cacheField] = "HIT"
        headers.append(HTTPField(name: ageField, value: String(age.components.seconds)))
        headers.append(HTTPField(name: requestIDField, value: requestID))
        if matches(ifNoneMatch: request.headers.value(.ifNoneMatch), etag: hit.etag) {
            headers[.contentType] = nil
            return Response(status: .notModified, headers: headers.httpFields, body: .init())
        }
        return response(status: .init(code: hit.status), headers: &headers, body: ByteBuffer(bytes: hit.body), replacing: [])
    }

    // MARK: CORS

    static func originAllowed(_ origin: String, cors: CORSSettings) -> Bool {
        cors.allowOrigins.contains("*") || cors.allowOrigins.contains(origin)
    }

    static func preflight(_ request: Request, cors: CORSSettings) -> Response {
        var headers = HTTPFields()
        if let origin = request.headers[.origin], originAllowed(origin, cors: cors) {
            headers[.accessControlAllowMethods] = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
            headers[.accessControlAllowHeaders] = cors.allowHeaders.joined(separator: ", ")
            headers[.accessControlMaxAge] = String(Int(cors.maxAge.seconds))
        }
        return Response(status: .noContent, headers: headers)
    }

    static func addCORS(to response: inout Response, request: Request, cors: CORSSettings) {
        guard let origin = request.headers[.origin], originAllowed(origin, cors: cors) else { return }
        let wildcard = cors.allowOrigins.contains("*") && !cors.allowCredentials
        response.headers[.accessControlAllowOrigin] = wildcard ? "*" : origin
        if !wildcard { response.headers[.vary] = "Origin" }
        if cors.allowCredentials { response.headers[.accessControlAllowCredentials] = "true" }
        if !cors.exposeHeaders.isEmpty { response.headers[.accessControlExposeHeaders] = cors.exposeHeaders.joined(separator: ", ") }
    }
}

extension HTTPFields {
    /// The value of the field named `name`, as the subscript gives it (the values of several such
    /// fields joined), but one field's value is returned as it is, in one pass and without the
    /// subscript's lazy joining: the pipeline reads a handful of request fields per request.
    @inline(__always)
    func value(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            if found != nil { return self[name] }
            found = field.value
        }
        return found
    }
}

/// A reply's header fields while they are gathered: an array, made into `HTTPFields` once.
///
/// `HTTPFields` has no specialized way in for a field from outside its module: `append` (and
/// `append(contentsOf:)`, and the initializer from a sequence) go through its generic, unspecialized
/// `replaceSubrange`, which boxes every field in a heap allocation of its own. But its one stored
/// property is the array of its fields, in order (`_fields: [HTTPField]`), so a struct with that
/// property alone has that array's layout: where reflection confirms it (``storedAsArray``), the
/// list becomes `HTTPFields` as it is, without a copy. Otherwise ``httpFields`` starts from a list
/// of that many placeholder fields (copied from ``templates``; its position subscript is
/// inlinable) and sets each position.
struct FieldList {
    /// For each count below its size, that many placeholder fields.
    static let templates: [HTTPFields] = (0..<32).map { count in
        HTTPFields(repeatElement(HTTPField(name: placeholderName, value: ""), count: count))
    }
    private static let placeholderName = HTTPField.Name("x-placeholder")!
    /// Room for the fields Hummingbird adds after the responder (`Date`, and `Server` when one is
    /// configured): without it, adding one copies the whole list into a larger one.
    static let addedLater = 2
    private(set) var fields: [HTTPField] = []

    /// Room for `capacity` fields and for those Hummingbird adds later.
    init(capacity: Int) {
        fields.reserveCapacity(capacity + Self.addedLater)
    }

    mutating func append(_ field: HTTPField) {
        fields.append(field)
    }

    mutating func append(contentsOf more: [HTTPField]) {
        fields.append(contentsOf: more)
    }

    /// Puts `field` before every other.
    mutating func prepend(_ field: HTTPField) {
        fields.insert(field, at: 0)
    }

    /// The value of the first field named `name`. Setting one, as `HTTPFields` does, leaves a single
    /// field of the name (in the place of the first; appended when there was none), and nil removes
    /// them all.
    subscript(name: HTTPField.Name) -> String? {
        get { fields.first { $0.name == name }?.value }
        set {
            guard let first = fields.firstIndex(where: { $0.name == name }) else {
                if let newValue { fields.append(HTTPField(name: name, value: newValue)) }
                return
            }
            if let newValue {
                fields[first] = HTTPField(name: name, value: newValue)
                var index = first + 1
                while index < fields.count { if fields[index].name == name { fields.remove(at: index) } else { index += 1 } }
            } else {
                fields.removeAll { $0.name == name }
            }
        }
    }

    /// Whether `HTTPFields` is, as far as its memory goes, its array of fields: its only stored
    /// property (by its type's reflection metadata) is an `[HTTPField]`, and a list read that way
    /// has the fields, their count and lookups by name that the public API gives.
    static let storedAsArray: Bool = {
        let children = Array(Mirror(reflecting: HTTPFields()).children)
        guard children.count == 1, children[0].value is [HTTPField], MemoryLayout<HTTPFields>.size == MemoryLayout<[HTTPField]>.size,
              MemoryLayout<HTTPFields>.alignment == MemoryLayout<[HTTPField]>.alignment else { return false }
        let probe = [HTTPField(name: .contentType, value: "application/json"), HTTPField(name: .eTag, value: "\"probe\""),
                     HTTPField(name: .cacheControl, value: "no-cache")]
        var expected = HTTPFields()
        for field in probe { expected.append(field) }
        var converted = unsafeBitCast(probe, to: HTTPFields.self)
        guard converted == expected, converted.count == 3, Array(converted) == probe, converted[.eTag] == "\"probe\"" else { return false }
        converted[.date] = "Sun, 22 Nov 2026 12:00:00 GMT"
        return converted.count == 4 && converted[.date] != nil && probe.count == 3
    }()

    var httpFields: HTTPFields {
        // The list's own array, with its spare capacity for the fields added later.
        Self.storedAsArray ? unsafeBitCast(fields, to: HTTPFields.self) : copiedFields
    }

    /// The fields, copied into placeholders.
    var copiedFields: HTTPFields {
        let templates = Self.templates
        guard fields.count < templates.count else {
            var result = HTTPFields()
            result.reserveCapacity(fields.count + Self.addedLater)
            result.append(contentsOf: fields)
            return result
        }
        var result = templates[fields.count]
        // A list of its own, with room to spare; then each placeholder is replaced.
        result.reserveCapacity(fields.count + Self.addedLater)
        for index in fields.indices { result[index] = fields[index] }
        return result
    }
}
