import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The stages an operation or a dialect route passes, in order: credential → principal → rate
/// limit → cache key → authorization (access rule, key scopes and resources, the plugin's hook)
/// → cached reply, or input and handler → reply fields → cache store / invalidation.
extension GatewayResponder {
    /// Runs a route and answers; every error becomes the route's error shape (a problem document,
    /// or its dialect's legacy rendering), with `X-Request-Id`.
    func run(_ mounted: MountedRoute, method: HTTPRequest.Method, parameters: [String: String], request: Request, context: Context,
             requestID: String) async -> Response {
        do {
            return try await stages(mounted, method: method, parameters: parameters, request: request, context: context, requestID: requestID)
        } catch {
            var response = render(error, of: mounted, request: request, requestID: requestID)
            response.headers[Self.requestIDField] = requestID
            return response
        }
    }

    private func render(_ error: any Error, of mounted: MountedRoute, request: Request, requestID: String) -> Response {
        let gatewayError = ProblemResponse.gatewayError(from: error)
        if gatewayError == nil {
            logger.error("unhandled error", metadata: ["request.id": .string(requestID), "endpoint": .string(mounted.name),
                                                       "error": "\(String(reflecting: error))"])
        }
        guard let dialect = mounted.dialect else {
            return ProblemResponse.make(gatewayError ?? .internalError(), path: request.uri.path, requestID: requestID)
        }
        let problem = gatewayError ?? .internalError()
        var rendered = dialect.renderError(problem)
        // The error's own fields (`Retry-After`, `Allow`), unless the rendering set them; a
        // challenge only on a 401 the dialect kept as one.
        for name in Set(problem.headers.map(\.name)) where rendered.headers[name] == nil {
            if name == .wwwAuthenticate && rendered.status != .unauthorized { continue }
            rendered.headers[fields: name] = problem.headers[fields: name]
        }
        return Response(status: rendered.status, headers: rendered.headers, body: .init(byteBuffer: rendered.body))
    }

    private func stages(_ mounted: MountedRoute, method: HTTPRequest.Method, parameters: [String: String], request: Request, context: Context,
                        requestID: String) async throws -> Response {
        let query = try PercentDecoding.queryParameters(Self.query(of: request))

        // Credential, principal and rate limit. A dialect's credential may be in the body, so its
        // body is read first.
        var body: ByteBuffer?
        var dialectRequest: DialectRequest?
        let credential: Credential?
        var invalidCredential = CredentialExtractor.InvalidCredential.refuse
        if let dialect = mounted.dialect {
            body = try await collectBody(request)
            let raw = DialectRequest(method: method, path: request.uri.path, pathParameters: parameters, queryParameters: query,
                                     headers: request.headers, body: body ?? ByteBuffer(), authority: request.head.authority)
            dialectRequest = raw
            credential = dialect.credentials(raw)
            invalidCredential = dialect.credentials.invalid
        } else {
            // A credential the gateway cannot verify is a 401, even beside one it can.
            if let refusal = NativeCredentials.refusal(in: request.headers) { throw refusal }
            credential = NativeCredentials.extract(from: request.headers)
            if let second = NativeCredentials.secondKey(in: request.headers) {
                _ = try await identify(second, address: context.remoteAddress, invalid: .refuse)
            }
        }
        let (principal, credentialRefused) = try await GatewayTracing.span("principal") {
            try await identify(credential, address: context.remoteAddress, invalid: invalidCredential)
        }
        let limitHeaders = try await GatewayTracing.span("rate limit") { try await limit(principal, plugin: mounted.pluginID, cost: mounted.cost) }

        let isRead = method == .get || method == .head
        let requestCacheControl = request.headers.value(.cacheControl)?.lowercased() ?? ""
        var cacheKey: String?
        if isRead, mounted.cache.isCacheable, !requestCacheControl.contains("no-store"), await mounted.cacheAdmits(principal) {
            cacheKey = Self.cacheKey(mounted, parameters: parameters, query: query, request: request, principal: principal)
        }

        // Authorization, before a cached reply is served as before a handler runs.
        try mounted.access.enforce(principal: principal, plugin: mounted.pluginID, method: method)
        if let resource = mounted.resourceParameter, let id = parameters[resource], !principal.mayAccess(resource: id, of: mounted.pluginID) {
            throw GatewayError.notFound("No such resource '\(id)'.")
        }
        if let authorize = mounted.authorize {
            try await authorize(AuthorizationRequest(
                principal: principal, route: mounted.name, dialect: mounted.dialect?.name, method: method, tags: mounted.tags,
                pathParameters: parameters, headers: request.headers))
        }

        if let cacheKey, !requestCacheControl.contains("no-cache"), let hit = await GatewayTracing.span("cache lookup", { await cache.lookup(cacheKey) }) {
            let age = ContinuousClock.now - hit.storedAt
            let maxAge = Self.requestMaxAge(requestCacheControl)
            if age < hit.ttl, maxAge.map({ age <= .seconds($0) }) ?? true {
                return Self.cachedResponse(hit, age: age, request: request, limitHeaders: limitHeaders, requestID: requestID)
            }
        }

        let pluginID = mounted.pluginID
        let operationContext = OperationContext(principal: principal, requestID: requestID, logger: logger, headers: request.headers,
                                                plugin: mounted.plugin, credential: credentialRefused ? nil : credential,
                                                credentialRefused: credentialRefused) { [self] cost in
            // Work a handler does beyond the one request (each operation of a batch).
            _ = try await limit(principal, plugin: pluginID, cost: cost)
        }
        let reply: RouteReply
        if let dialectRequest, let route = mounted.dialectRoute {
            reply = RouteReply(try await GatewayTracing.span("handler \(mounted.name)") { try await route.handler(dialectRequest, operationContext) })
        } else {
            if mounted.readsBody { body = try await collectBody(request) }
            let contentType = request.headers.value(.contentType).map { Self.mediaType($0) }
            var input = OperationRequest(pathParameters: parameters, queryParameters: query, body: body, contentType: contentType)
            if mounted.streamsBody { input.bodyStream = ByteStream(request.body) }
            let prepared = input
            guard let answer = try await GatewayTracing.span("handler \(mounted.name)", { try await mounted.operation?(prepared, context: operationContext) }) else {
                throw GatewayError.internalError()
            }
            reply = RouteReply(answer)
        }
        return try await respond(with: reply, of: mounted, isRead: isRead, parameters: parameters, query: query, request: request, cacheKey: cacheKey,
                                 requestCacheControl: requestCacheControl, limitHeaders: limitHeaders, requestID: requestID)
    }

    /// The caller, and whether it presented a credential that did not resolve and is served as a
    /// guest (where the dialect says so). Answered without suspending when the authenticator can
    /// (no credential, or a remembered one).
    @inline(__always)
    private func identify(_ credential: Credential?, address: String, invalid: CredentialExtractor.InvalidCredential) async throws -> (Principal, Bool) {
        do {
            if let known = try authenticator.knownPrincipal(for: credential, address: address) { return (known, false) }
            return (try await authenticator.principal(for: credential, address: address), false)
        } catch let error as GatewayError where error.kind == .unauthorized {
            metrics.recordAuthenticationFailure()
            guard invalid == .guest else { throw error }
            return (.anonymous(address: address), true)
        }
    }

    /// The rate-limit fields of a request, without suspending when the limiter can answer at once
    /// (limits kept in this process).
    @inline(__always)
    func limit(_ principal: Principal, plugin: String, cost: Int) async throws -> [HTTPField] {
        let rateLimiter = self.rateLimiter
        let decision: RateLimitDecision
        if let now = rateLimiter.acquireNow(principal: principal, plugin: plugin, cost: cost) {
            decision = now
        } else {
            decision = try await rateLimiter.acquire(principal: principal, plugin: plugin, cost: cost)
        }
        if !decision.allowed { metrics.recordRateLimited(plugin: plugin) }
        return try Self.admit(decision)
    }

    /// The decision's fields, or the 429 it calls for.
    static func admit(_ decision: RateLimitDecision) throws -> [HTTPField] {
        guard decision.allowed else {
            throw GatewayError.quotaExceeded(policy: decision.policy, retryAfter: decision.retryAfter).adding(headers: HTTPFields(decision.headers))
        }
        return decision.headers
    }

    func collectBody(_ request: Request) async throws -> ByteBuffer {
        if let length = request.headers.value(.contentLength).flatMap(Int.init), length > settings.maxBodySize {
            throw GatewayError.contentTooLarge(limit: settings.maxBodySize)
        }
        do {
            return try await request.body.collect(upTo: settings.maxBodySize)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw GatewayError.contentTooLarge(limit: settings.maxBodySize)
        }
    }
}

/// What a route's handler answered, whichever kind of route it is.
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
