import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Synchronization
import Tracing
import W3CTraceContext

/// Request ids: a random prefix for this process and a counter, so that ids of several instances
/// do not collide.
private let requestIDPrefix: UInt64 = UInt64.random(in: 1...0x0FFF_FFFF) << 32
private let requestIDCounter = Atomic<UInt64>(0)

/// The gateway's request pipeline, as one Hummingbird responder.
///
/// Every request passes the stages of DESIGN.md in order: request id → access log + metrics →
/// CORS → route → body size limit → principal → rate limit → cache lookup → authorization →
/// input decoding → handler → encode → cache store / invalidate → reply. The stages run inline
/// rather than as a chain of middleware so that the common path costs no extra allocations or
/// indirections. Every error becomes a problem document (or the dialect's legacy shape); nothing a
/// client sends can produce a 500 unless a handler itself fails unexpectedly.
public struct GatewayResponder: HTTPResponder {
    public typealias Context = GatewayRequestContext

    /// What a reload of plugins.yaml replaces: routes, settings and limits, swapped as one.
    let live: LivePipeline
    /// The state this copy serves with: a request takes the live state once, when it arrives,
    /// and finishes with it whatever a reload swaps in meanwhile.
    private var state: PipelineState
    let authenticator: any Authenticator
    let cache: any ResponseCacheStore
    let metrics: GatewayMetrics
    let logger: Logger
    /// With PostgreSQL: what a request publishes to the other instances goes in one statement.
    let messaging: PostgresMessaging?

    var routes: RouteTable<Endpoint> { state.routes }
    var settings: PipelineSettings { state.settings }
    var rateLimiter: any RateLimiter { state.rateLimiter }
    /// The WebSocket routes (served by the upgrade, beside this responder).
    var webSockets: RouteTable<MountedWebSocket> { state.webSockets }

    init(state: PipelineState, authenticator: any Authenticator, cache: any ResponseCacheStore, metrics: GatewayMetrics, logger: Logger,
         messaging: PostgresMessaging? = nil) {
        live = LivePipeline(state)
        self.state = state
        self.authenticator = authenticator
        self.cache = cache
        self.metrics = metrics
        self.logger = logger
        self.messaging = messaging
    }

    /// This responder with the live state as it is now.
    func current() -> GatewayResponder {
        var copy = self
        copy.state = live.state
        return copy
    }

    /// Settings of the pipeline that come from plugins.yaml.
    struct PipelineSettings: Sendable {
        var maxBodySize: Int
        var cors: CORSSettings?
        var accessLog: Bool
        var proxies = ProxyTrust([])
        var compression: ResponseCompression?
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
        let responder = current()
        if GatewayTracing.isEnabled { return try await responder.respondInSpan(to: request, context: context) }
        // A request of a trace (W3C `traceparent`) is handled inside it: upstream calls continue it.
        if let trace = RequestTrace.context(of: request.headers) {
            return try await RequestTrace.$current.withValue(trace) { try await responder.respondInTrace(to: request, context: context) }
        }
        return try await responder.respondInTrace(to: request, context: context)
    }

    /// The request in a server span of its own, a child of the caller's `traceparent` when it sends
    /// one; its stages, statements and upstream calls are the span's children.
    private func respondInSpan(to request: Request, context: Context) async throws -> Response {
        var parent = ServiceContext.topLevel
        InstrumentationSystem.instrument.extract(request.headers, into: &parent, using: HTTPFieldsExtractor())
        let method = request.method
        var name = "\(method.rawValue) unmatched"
        var path = request.uri.path
        if case .found(let endpoint, let parameters)? = try? routes.resolve(method, path: Substring(path)) {
            name = "\(method.rawValue) \(endpoint.name)"
            path = endpoint.loggedPath(path, parameters: parameters)
        }
        return try await withSpan(name, context: parent, ofKind: .server) { span in
            // Upstream calls and the access log name the span's trace.
            var fields = HTTPFields()
            InstrumentationSystem.instrument.inject(span.context, into: &fields, using: HTTPFieldsInjector())
            let response = try await RequestTrace.$current.withValue(RequestTrace.context(of: fields)) {
                try await respondInTrace(to: request, context: context)
            }
            span.attributes["http.request.method"] = method.rawValue
            span.attributes["url.path"] = path
            span.attributes["http.response.status_code"] = response.status.code
            span.attributes["gateway.request_id"] = response.headers[Self.requestIDField] ?? ""
            if response.status.code >= 500 { span.setStatus(SpanStatus(code: .error)) }
            return response
        }
    }

    private func respondInTrace(to request: Request, context: Context) async throws -> Response {
        let start = ContinuousClock.now
        // The client behind trusted proxies; forwarding fields from anyone else are dropped. (The
        // request is passed on rather than copied into a variable: each copy of a `Request` retains
        // every reference it holds.)
        var context = context
        var fields = request.headers
        context.remoteAddress = settings.proxies.client(peer: context.remoteAddress, headers: &fields)
        if fields.count != request.headers.count {
            var head = request.head
            head.headerFields = fields
            return try await respondFromClient(to: Request(head: head, body: request.body), context: context, start: start)
        }
        return try await respondFromClient(to: request, context: context, start: start)
    }

    private func respondFromClient(to request: Request, context: Context, start: ContinuousClock.Instant) async throws -> Response {
        let requestID = Self.requestID(from: request.headers)
        var endpointName = "unmatched"
        // The path as the access log shows it (secret parameters as `***`).
        var loggedPath = request.uri.path
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
                    loggedPath = endpoint.loggedPath(loggedPath, parameters: parameters)
                    endpointMetrics = endpoint.metrics
                    switch endpoint {
                    case .route(let mounted):
                        if let messaging {
                            response = await messaging.collecting {
                                await run(mounted, method: method, parameters: parameters, request: request, context: context, requestID: requestID)
                            }
                        } else {
                            response = await run(mounted, method: method, parameters: parameters, request: request, context: context, requestID: requestID)
                        }
                        operationReplied = true
                    case .gateway(let gateway):
                        if let messaging {
                            response = try await messaging.collecting { try await gateway.handler(request, context) }
                        } else {
                            response = try await gateway.handler(request, context)
                        }
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
        // A route's reply has its id already (added with its other fields).
        if !operationReplied { response.headers[Self.requestIDField] = requestID }
        if let cors = settings.cors { Self.addCORS(to: &response, request: request, cors: cors) }
        if let compression = settings.compression {
            do {
                try await compression.apply(to: &response, request: request)
            } catch {
                // zlib failing (out of memory): the reply goes as it is.
                logger.warning("compression failed", metadata: ["request.id": .string(requestID), "error": .string("\(error)")])
            }
        }
        if method == .head { response.body = .init() }
        let elapsed = ContinuousClock.now - start
        if let endpointMetrics { endpointMetrics.record(status: response.status.code, duration: elapsed) } else {
            metrics.record(endpoint: endpointName, status: response.status.code, duration: elapsed)
        }
        let level: Logger.Level = settings.accessLog ? .info : .debug
        if logger.logLevel <= level {
            var metadata: Logger.Metadata = [
                "request.id": .string(requestID), "endpoint": .string(endpointName), "client": .string(context.remoteAddress),
                "micros": .stringConvertible(elapsed.components.attoseconds / 1_000_000_000_000 + elapsed.components.seconds * 1_000_000),
            ]
            if let trace = RequestTrace.current { metadata["trace.id"] = .string(trace.traceID.description) }
            logger.log(level: level, "\(method.rawValue) \(loggedPath) \(response.status.code)", metadata: metadata)
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
        MediaType.essence(of: header)
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

    static func cacheKey(_ mounted: MountedRoute, parameters: [String: String], query: [(name: String, value: String)],
                         request: Request, principal: Principal) -> String {
        var key = mounted.name
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
        var headers = FieldList(capacity: hit.headers.count + limitHeaders.count + 5)
        headers.append(HTTPField(name: .contentLength, value: String(hit.body.count)))
        for (name, value) in hit.headers { if let field = Self.field(name) { headers.append(HTTPField(name: field, value: value)) } }
        headers.append(contentsOf: limitHeaders)
        headers[cacheField] = "HIT"
        headers.append(HTTPField(name: ageField, value: String(age.components.seconds)))
        headers.append(HTTPField(name: requestIDField, value: requestID))
        if matches(ifNoneMatch: request.headers.value(.ifNoneMatch), etag: hit.etag) { return notModified(&headers) }
        return response(status: .init(code: hit.status), headers: headers, body: ByteBuffer(bytes: hit.body))
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


/// The parts of the pipeline that plugins.yaml decides and a reload replaces.
final class PipelineState: Sendable {
    let routes: RouteTable<Endpoint>
    let webSockets: RouteTable<MountedWebSocket>
    let settings: GatewayResponder.PipelineSettings
    let rateLimiter: any RateLimiter

    init(routes: RouteTable<Endpoint>, webSockets: RouteTable<MountedWebSocket>, settings: GatewayResponder.PipelineSettings, rateLimiter: any RateLimiter) {
        self.routes = routes
        self.webSockets = webSockets
        self.settings = settings
        self.rateLimiter = rateLimiter
    }
}

/// The pipeline state in use; a reload stores a new one, requests already running keep theirs.
final class LivePipeline: Sendable {
    private let current: Mutex<PipelineState>

    init(_ state: PipelineState) { current = Mutex(state) }

    var state: PipelineState { current.withLock { $0 } }

    func store(_ state: PipelineState) { current.withLock { $0 = state } }
}
