import Foundation
import GatewayCore
import HTTPTypes

/// Identifies the caller of a request: the pipeline's "principal" stage.
///
/// Implementations must answer 401 (``GatewayError/unauthorized(_:)``) for a credential that is
/// presented but invalid, expired or revoked — never fall back to anonymous for it — and return
/// an anonymous principal only when no credential is presented.
public protocol Authenticator: Sendable {
    func principal(for credential: Credential?, address: String) async throws -> Principal
    /// The principal when it is known without waiting (no credential, or one remembered), else
    /// nil and the pipeline awaits ``principal(for:address:)``. The same rules apply: a credential
    /// known to be bad throws. The default is nil.
    func knownPrincipal(for credential: Credential?, address: String) throws -> Principal?
}

extension Authenticator {
    public func knownPrincipal(for credential: Credential?, address: String) throws -> Principal? { nil }
}

/// Reads the credential a native request carries: `Authorization: Bearer <token>` or `X-Api-Key`.
public enum NativeCredentials {
    static let apiKeyField = HTTPField.Name("X-Api-Key")!

    /// What `extract` cannot say, checked before a native request goes on: an `Authorization`
    /// field that is not `Bearer <token>` (Basic, an empty token) is a 401, never a guest.
    public static func refusal(in headers: HTTPFields) -> GatewayError? {
        guard let authorization = headers.value(.authorization) else { return nil }
        guard bearerToken(in: authorization) == nil else { return nil }
        let scheme = authorization.utf8.split(separator: 0x20, maxSplits: 1).first.map { String(decoding: $0.prefix(20), as: UTF8.self) } ?? ""
        return GatewayError.unauthorized("The Authorization scheme '\(scheme)' is not accepted: send `Bearer <session token>`, or an API key in X-Api-Key.")
    }

    /// The token of `Bearer <token>` (the scheme in any case, spaces and tabs around the token
    /// dropped), or nil for another scheme or an empty token. Read byte by byte: a provider's token
    /// is several hundred bytes, and splitting it into characters (grapheme breaking) or trimming
    /// it with Foundation cost more than the rest of a cached request (measured on
    /// `Benchmarks/run`'s `jwt/key`: 0.58 before, see Benchmarks/README.md).
    static func bearerToken(in authorization: String) -> Substring? {
        let utf8 = authorization.utf8
        guard let space = utf8.firstIndex(of: 0x20) else { return nil }
        let scheme = utf8[utf8.startIndex..<space]
        guard scheme.count == 6, zip(scheme, "bearer".utf8).allSatisfy({ $0 | 0x20 == $1 }) else { return nil }
        var start = space, end = utf8.endIndex
        func blank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        while start < end, blank(utf8[start]) { start = utf8.index(after: start) }
        while end > start, blank(utf8[utf8.index(before: end)]) { end = utf8.index(before: end) }
        guard start < end else { return nil }
        return authorization[start..<end]
    }

    /// The API key of a request that also carries a session token: it must be verified too, so that
    /// a bad key is refused rather than ignored.
    public static func secondKey(in headers: HTTPFields) -> Credential? {
        guard headers.value(.authorization) != nil, let key = headers.value(apiKeyField) else { return nil }
        return .apiKey(key)
    }

    public static func extract(from headers: HTTPFields) -> Credential? {
        if let authorization = headers.value(.authorization) {
            if let bearer = bearerToken(in: authorization) {
                let token = String(bearer)
                // An API key as a bearer token, for clients that can send only that (Prometheus).
                return token.hasPrefix("gk_") ? .apiKey(token) : .bearerToken(token)
            }
            // `Bearer` with nothing after it is a credential that cannot resolve (a 401), never
            // nothing: an API key beside it must not be taken instead (WebSocket upgrades read
            // only this).
            let scheme = authorization.utf8.prefix { $0 != 0x20 }
            if scheme.count == 6, zip(scheme, "bearer".utf8).allSatisfy({ $0 | 0x20 == $1 }) { return .bearerToken("") }
        }
        if let key = headers.value(apiKeyField) { return .apiKey(key) }
        return nil
    }

    /// The credential of a native WebSocket upgrade: the headers, else `?access_token=` (a bearer
    /// token) or `?api_key=` (browsers cannot set headers on a WebSocket).
    public static func extract(from request: RouteRequest) -> Credential? {
        if let credential = extract(from: request.headers) { return credential }
        if let token = request.query("access_token"), !token.isEmpty { return .bearerToken(token) }
        if let key = request.query("api_key"), !key.isEmpty { return .apiKey(key) }
        return nil
    }
}

/// Until accounts are configured, every caller is a guest; a presented credential cannot be
/// checked, so it is refused rather than ignored.
public struct GuestOnlyAuthenticator: Authenticator {
    public init() {}
    public func principal(for credential: Credential?, address: String) async throws -> Principal {
        try knownPrincipal(for: credential, address: address)
    }

    public func knownPrincipal(for credential: Credential?, address: String) throws -> Principal {
        guard credential == nil else { throw GatewayError.unauthorized("This gateway has no accounts; the credential cannot be accepted.") }
        return .anonymous(address: address)
    }
}

/// The decision of the rate-limit stage for one request.
public struct RateLimitDecision: Sendable {
    /// Whether the request may proceed.
    public var allowed: Bool
    /// Header fields for the reply (`RateLimit`, `RateLimit-Policy`, `X-RateLimit-*`), one per name.
    public var headers: [HTTPField]
    /// The policy name, for the 429 problem.
    public var policy: String
    /// Seconds until the request would be allowed (for 429).
    public var retryAfter: Int
    /// What the 429 says, when more than the policy's name (a used-up quota and when it renews).
    public var detail: String?

    public init(allowed: Bool, headers: [HTTPField] = [], policy: String = "default", retryAfter: Int = 0) {
        self.allowed = allowed
        self.headers = headers
        self.policy = policy
        self.retryAfter = retryAfter
    }

    public static let unlimited = RateLimitDecision(allowed: true)
}

/// The rate-limit stage: decides whether `principal` may spend `cost` units of `plugin`'s quota now.
public protocol RateLimiter: Sendable {
    func acquire(principal: Principal, plugin: String, cost: Int) async throws -> RateLimitDecision
    /// The decision when it can be made without waiting (limits kept in this process), else nil
    /// and the pipeline awaits ``acquire(principal:plugin:cost:)``. The default is nil.
    func acquireNow(principal: Principal, plugin: String, cost: Int) -> RateLimitDecision?
}

extension RateLimiter {
    public func acquireNow(principal: Principal, plugin: String, cost: Int) -> RateLimitDecision? { nil }
}

/// A rate limiter that allows everything (used when limits are switched off, as in the benchmark's reference).
public struct UnlimitedRateLimiter: RateLimiter {
    public init() {}
    public func acquire(principal: Principal, plugin: String, cost: Int) async -> RateLimitDecision { .unlimited }
    public func acquireNow(principal: Principal, plugin: String, cost: Int) -> RateLimitDecision? { .unlimited }
}

/// A stored reply: its status and fields as the handler's reply had them (without the
/// rate-limit fields, `Content-Length`, `Age` and `X-Request-Id`, which each request sets).
public struct CachedReply: Sendable {
    public var status: HTTPResponse.Status
    public var headers: HTTPFields
    public var body: [UInt8]
    public var etag: String
    public var storedAt: ContinuousClock.Instant
    public var ttl: Duration
    public var tags: [String]

    public init(status: HTTPResponse.Status, headers: HTTPFields, body: [UInt8], etag: String, storedAt: ContinuousClock.Instant, ttl: Duration, tags: [String]) {
        self.status = status
        self.headers = headers
        self.body = body
        self.etag = etag
        self.storedAt = storedAt
        self.ttl = ttl
        self.tags = tags
    }
}

/// The response cache the pipeline's cache stages use: lookup after authorization, store after the
/// handler, invalidate by tag.
public protocol ResponseCacheStore: Sendable {
    func lookup(_ key: String) async -> CachedReply?
    func store(_ key: String, _ reply: CachedReply) async
    /// Removes every cached reply carrying any of `tags` (on every instance sharing the database).
    func invalidate(tags: [String]) async
}

/// A cache that stores nothing: every lookup misses (used when caching is switched off).
public struct DisabledResponseCache: ResponseCacheStore {
    public init() {}
    public func lookup(_ key: String) async -> CachedReply? { nil }
    public func store(_ key: String, _ reply: CachedReply) async {}
    public func invalidate(tags: [String]) async {}
}
