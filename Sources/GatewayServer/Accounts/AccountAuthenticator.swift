import Crypto
import Foundation
import GatewayCore
import NIOConcurrencyHelpers

/// Identifies callers by session token or API key against the ``AccountStore``.
///
/// A presented credential that is unknown, expired, revoked or belongs to a disabled user is a 401,
/// never a silent fall-back to guest. A key used from an address it does not allow is a 403.
/// Resolved credentials are remembered for a few seconds so that a hot path costs no database
/// query; revocations made through this gateway take effect at once (``forget(userID:)``), on
/// every instance sharing its PostgreSQL database too (``broadcast(with:)``: a logout, a revoked key
/// or session, a password change or a disabled user is sent to the others, which forget it), and
/// those made behind the gateways' backs (in the database itself) within ``cacheTTL``.
public final class AccountAuthenticator: Authenticator {
    public let store: AccountStore
    /// How long a resolved credential is trusted without asking the database.
    public let cacheTTL: Duration
    public let maxCachedCredentials = 100_000

    private struct Cached {
        let principal: Principal
        let allowedAddresses: [AddressMatcher]
        let userID: String?
        let expires: ContinuousClock.Instant
    }

    private let cache = NIOLockedValueBox<[String: Cached]>([:])
    private let broadcaster = NIOLockedValueBox<StoredClosure<@Sendable (String) -> Void>?>(nil)

    public init(store: AccountStore, cacheTTL: Duration = .seconds(5)) {
        self.store = store
        self.cacheTTL = cacheTTL
    }

    public func knownPrincipal(for credential: Credential?, address: String) throws -> Principal? {
        guard let credential else { return .anonymous(address: address) }
        let now = ContinuousClock.now
        if let hit = cache.withLockedValue({ $0[Self.cacheKey(credential)] }), hit.expires > now {
            return try admit(hit, address: address)
        }
        return nil
    }

    private static func cacheKey(_ credential: Credential) -> String {
        switch credential {
        case .sessionToken(let token): "s:" + token
        case .apiKey(let key): "k:" + key
        }
    }

    public func principal(for credential: Credential?, address: String) async throws -> Principal {
        if let known = try knownPrincipal(for: credential, address: address) { return known }
        guard let credential else { return .anonymous(address: address) }
        let cacheKey = Self.cacheKey(credential)
        let resolved: Cached
        switch credential {
        case .sessionToken(let token):
            guard token.utf8.count <= 256, let user = try await store.sessionUser(token: token) else {
                throw GatewayError.unauthorized("The session token is unknown, expired or revoked.")
            }
            resolved = Cached(principal: Principal(kind: .user, userID: user.id, displayName: user.displayName, isAdmin: user.isAdmin, address: ""),
                              allowedAddresses: [], userID: user.id, expires: ContinuousClock.now + cacheTTL)
        case .apiKey(let secret):
            guard secret.utf8.count <= 256, let (key, owner) = try await store.liveKey(secret: secret) else {
                throw GatewayError.unauthorized("The API key is unknown, expired or revoked.")
            }
            resolved = Cached(
                principal: Principal(kind: .apiKey(keyID: key.id), userID: owner?.id, displayName: owner?.displayName ?? key.label,
                                     isAdmin: owner == nil, scopes: Set(key.scopes), resources: key.resources.mapValues(Set.init), address: "",
                                     quota: key.rate.flatMap(RateSpec.init(parsing:)).map { Principal.Quota(count: $0.count, seconds: $0.period) }),
                allowedAddresses: key.allowedAddresses.compactMap(AddressMatcher.init), userID: owner?.id, expires: ContinuousClock.now + cacheTTL)
        }
        cache.withLockedValue { table in
            if table.count >= maxCachedCredentials { table.removeAll(keepingCapacity: true) }
            table[cacheKey] = resolved
        }
        return try admit(resolved, address: address)
    }

    private func admit(_ cached: Cached, address: String) throws -> Principal {
        if !cached.allowedAddresses.isEmpty, !cached.allowedAddresses.contains(where: { $0.matches(address) }) {
            throw GatewayError.forbidden("This key is not accepted from \(address).")
        }
        var principal = cached.principal
        principal.address = address
        return principal
    }

    /// Drops remembered credentials of `userID` (after a logout, password change, key revocation
    /// or disabling), or all of them when nil — here and on the other instances.
    public func forget(userID: String?) {
        forgetHere(userID: userID)
        broadcaster.withLockedValue { $0 }?.call(userID.map { "user:" + $0 } ?? "all")
    }

    /// Drops one remembered credential, here and on the other instances (which are told its
    /// SHA-256, never the secret).
    public func forget(credential: Credential) {
        let key = Self.cacheKey(credential)
        cache.withLockedValue { $0[key] = nil }
        broadcaster.withLockedValue { $0 }?.call("credential:" + Self.digest(key))
    }

    /// Sends what this instance forgets to the others (`send` publishes one message).
    public func broadcast(with send: @escaping @Sendable (String) -> Void) {
        broadcaster.withLockedValue { $0 = StoredClosure(send) }
    }

    /// Applies what another instance forgot.
    public func forget(message: String) {
        if message == "all" {
            forgetHere(userID: nil)
        } else if message.hasPrefix("user:") {
            forgetHere(userID: String(message.dropFirst(5)))
        } else if message.hasPrefix("credential:") {
            let digest = String(message.dropFirst(11))
            cache.withLockedValue { table in
                for key in table.keys where Self.digest(key) == digest { table[key] = nil }
            }
        }
    }

    private func forgetHere(userID: String?) {
        cache.withLockedValue { table in
            guard let userID else { return table.removeAll() }
            table = table.filter { $0.value.userID != userID }
        }
    }

    private static func digest(_ key: String) -> String {
        SHA256.hash(data: Data(key.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

/// Slows down and then refuses repeated failed logins, per account and per client address.
///
/// After ``freeFailures`` failures within ``window`` each further attempt waits a growing delay
/// (up to two seconds); after ``maxFailures`` the account or address is refused with 429 until the
/// window passes. A success clears the account's count. The same answer is given whether or not the
/// account exists, so the throttle reveals nothing.
public final class LoginThrottle: Sendable {
    public let freeFailures: Int
    public let maxFailures: Int
    public let window: Duration

    private struct Record {
        var failures: Int
        var firstFailure: ContinuousClock.Instant
    }

    private let records = NIOLockedValueBox<[String: Record]>([:])

    public init(freeFailures: Int = 3, maxFailures: Int = 10, window: Duration = .seconds(900)) {
        self.freeFailures = freeFailures
        self.maxFailures = maxFailures
        self.window = window
    }

    private func failures(_ key: String, now: ContinuousClock.Instant) -> Int {
        records.withLockedValue { table in
            guard let record = table[key] else { return 0 }
            if now - record.firstFailure > window {
                table[key] = nil
                return 0
            }
            return record.failures
        }
    }

    /// Call before checking a password: throws 429 when refused, otherwise waits the current delay.
    public func admit(username: String, address: String) async throws {
        let now = ContinuousClock.now
        let worst = max(failures("u:" + AccountStore.usernameKey(username), now: now), failures("a:" + address, now: now))
        if worst >= maxFailures {
            let seconds = Int(window.components.seconds)
            throw GatewayError.quotaExceeded(policy: "login", retryAfter: seconds,
                                             detail: "Too many failed logins; try again in \(seconds / 60) minutes.")
        }
        if worst >= freeFailures {
            let delay = min(2000, 100 << min(worst - freeFailures, 5))
            try await Task.sleep(for: .milliseconds(delay))
        }
    }

    /// Records the outcome of a login attempt.
    public func record(username: String, address: String, succeeded: Bool) {
        let now = ContinuousClock.now
        let accountKey = "u:" + AccountStore.usernameKey(username)
        records.withLockedValue { table in
            if succeeded {
                table[accountKey] = nil
                return
            }
            for key in [accountKey, "a:" + address] {
                var record = table[key] ?? Record(failures: 0, firstFailure: now)
                if now - record.firstFailure > window { record = Record(failures: 0, firstFailure: now) }
                record.failures += 1
                table[key] = record
            }
            if table.count > 1_000_000 { table = table.filter { now - $0.value.firstFailure <= window } }
        }
    }
}
