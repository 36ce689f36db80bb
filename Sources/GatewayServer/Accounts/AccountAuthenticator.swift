import Crypto
import Foundation
import GatewayCore
import NIOConcurrencyHelpers

/// Identifies callers by session token or API key against the ``AccountStore``, and by the tokens
/// of the identity providers of `auth.providers` (``IdentityProviders``), whose callers act for the
/// accounts linked to them.
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
        var principal: Principal
        let allowedAddresses: [AddressMatcher]
        let userID: String?
        let expires: ContinuousClock.Instant
    }

    private let cache = NIOLockedValueBox<[String: Cached]>([:])
    private let broadcaster = NIOLockedValueBox<StoredClosure<@Sendable (String) -> Void>?>(nil)

    /// The identity providers whose tokens are accepted (none when nil).
    let identities: IdentityProviders?

    public convenience init(store: AccountStore, cacheTTL: Duration = .seconds(5)) {
        self.init(store: store, cacheTTL: cacheTTL, identities: nil)
    }

    init(store: AccountStore, cacheTTL: Duration, identities: IdentityProviders?) {
        self.store = store
        self.cacheTTL = cacheTTL
        self.identities = identities
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
        case .bearerToken(let token): "b:" + token
        case .apiKey(let key): "k:" + key
        }
    }

    /// A token as a session or as a bearer token (the same token in both places).
    private static func cacheKeys(_ credential: Credential) -> [String] {
        switch credential {
        case .sessionToken(let token), .bearerToken(let token): ["s:" + token, "b:" + token]
        case .apiKey: [cacheKey(credential)]
        }
    }

    public func principal(for credential: Credential?, address: String) async throws -> Principal {
        if let known = try knownPrincipal(for: credential, address: address) { return known }
        guard let credential else { return .anonymous(address: address) }
        let cacheKey = Self.cacheKey(credential)
        var resolved: Cached
        switch credential {
        case .sessionToken(let token):
            guard token.utf8.count <= 256, let user = try await store.sessionUser(token: token) else {
                throw GatewayError.unauthorized("The session token is unknown, expired or revoked.")
            }
            resolved = try await session(user)
        case .bearerToken(let token):
            resolved = try await bearer(token, address: address)
        case .apiKey(let secret):
            guard secret.utf8.count <= 256, let (key, owner) = try await store.liveKey(secret: secret) else {
                throw GatewayError.unauthorized("The API key is unknown, expired or revoked.")
            }
            // A key is held to its scopes, master or not: a master key acts as an administrator only
            // with `admin` (or `*`), and what its scopes name is what the operator granted it.
            let scopes = Set(key.scopes)
            var grants = scopes
            if let owner { grants = Set(try await store.grants(of: owner.id)) }
            resolved = Cached(
                principal: Principal(kind: .apiKey(keyID: key.id), userID: owner?.id, displayName: owner?.displayName ?? key.label,
                                     isAdmin: owner == nil && Principal.covers(scopes, Principal.adminScope), scopes: scopes,
                                     resources: key.resources.mapValues(Set.init), address: "",
                                     quota: key.rate.flatMap(RateSpec.init(parsing:)).map { Principal.Quota(count: $0.count, seconds: $0.period) }, grants: grants),
                allowedAddresses: key.allowedAddresses.compactMap(AddressMatcher.init), userID: owner?.id, expires: ContinuousClock.now + cacheTTL)
            resolved.principal.hasOwnLimit = key.ownLimit || owner == nil
            resolved.principal.groups = [key.consumerGroup, owner?.consumerGroup].compactMap { $0 }
        }
        cache.withLockedValue { table in
            if table.count >= maxCachedCredentials { table.removeAll(keepingCapacity: true) }
            table[cacheKey] = resolved
        }
        return try admit(resolved, address: address)
    }

    private func session(_ user: AccountStore.User) async throws -> Cached {
        var principal = Principal(kind: .user, userID: user.id, displayName: user.displayName, isAdmin: user.isAdmin, address: "",
                                  grants: Set(try await store.grants(of: user.id)))
        principal.groups = user.consumerGroup.map { [$0] } ?? []
        return Cached(principal: principal, allowedAddresses: [], userID: user.id, expires: ContinuousClock.now + cacheTTL)
    }

    /// A native bearer token: a provider's JWT, a session of this gateway, or else an opaque token
    /// a provider introspects.
    private func bearer(_ token: String, address: String) async throws -> Cached {
        if let identities, !identities.isEmpty, IdentityProviders.isJWT(token) {
            return try await caller(identities.identify(token, address: address), identities: identities)
        }
        if token.utf8.count <= 256, let user = try await store.sessionUser(token: token) { return try await session(user) }
        if let identities, identities.introspects {
            return try await caller(identities.identify(token, address: address), identities: identities)
        }
        throw IdentityProviders.refusal("The session token is unknown, expired or revoked.")
    }

    /// The principal of a provider's caller: the account linked to it (made on first sight where
    /// the provider provisions), or none; remembered until the token expires, at most ``cacheTTL``.
    private func caller(_ identity: VerifiedIdentity, identities: IdentityProviders) async throws -> Cached {
        // An administrator's token acts as one only with the scope `admin` (or `*`), as a master key does.
        let mayAdminister = Principal.covers(identity.scopes, Principal.adminScope)
        var principal = Principal(kind: .token(provider: identity.provider, subject: identity.subject), displayName: identity.username,
                                  isAdmin: identity.isAdmin && mayAdminister, scopes: identity.scopes, address: "")
        principal.groups = Array(identity.groups.prefix(32))
        let provision = identities.provisioning(of: identity.provider)
        if provision != .none {
            guard let user = try await store.linkedUser(for: identity, provision: provision) else {
                throw GatewayError.forbidden("No account of this gateway is linked to this identity (provider \(identity.provider) accepts linked accounts only).")
            }
            guard !user.disabled else { throw IdentityProviders.refusal("The account of this identity is disabled.") }
            principal.userID = user.id
            principal.displayName = user.displayName
            principal.isAdmin = (identity.isAdmin || user.isAdmin) && mayAdminister
            principal.grants = Set(try await store.grants(of: user.id))
            // The account's group comes before those the token names.
            if let group = user.consumerGroup { principal.groups.insert(group, at: 0) }
        }
        let remaining = Duration.seconds(max(0, identity.expiresAt.timeIntervalSinceNow))
        return Cached(principal: principal, allowedAddresses: [], userID: principal.userID, expires: ContinuousClock.now + min(cacheTTL, remaining))
    }

    /// A principal remembered under `key` (a client certificate's), if still fresh.
    func remembered(_ key: String, address: String) throws -> Principal? {
        guard let hit = cache.withLockedValue({ $0[key] }), hit.expires > ContinuousClock.now else { return nil }
        return try admit(hit, address: address)
    }

    /// Remembers `principal` under `key` for ``cacheTTL``.
    func remember(_ key: String, principal: Principal) {
        let cached = Cached(principal: principal, allowedAddresses: [], userID: principal.userID, expires: ContinuousClock.now + cacheTTL)
        cache.withLockedValue { table in
            if table.count >= maxCachedCredentials { table.removeAll(keepingCapacity: true) }
            table[key] = cached
        }
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
        let keys = Self.cacheKeys(credential)
        cache.withLockedValue { table in
            for key in keys { table[key] = nil }
        }
        for key in keys { broadcaster.withLockedValue { $0 }?.call("credential:" + Self.digest(key)) }
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

/// Slows down and then refuses repeated password guesses against one account from one client
/// address.
///
/// An attempt is counted when it is admitted, before the password is checked, so that attempts
/// sent in parallel cannot all pass the allowance. The first ``freeAttempts`` attempts pass at once;
/// after them each attempt must wait a delay that doubles with every further one (``baseDelay``,
/// twice that, … up to ``maxDelay``) since the previous, and is refused sooner with 429 and
/// `Retry-After`, without checking the password. A success clears the record of that account and
/// address; a record is forgotten ``window`` after its last attempt.
///
/// Accounts are throttled per client address, so an attacker's failures never lock the owner out
/// from elsewhere. An account is keyed by its id (its username and email address count together),
/// an unknown name by its normalised form, so an unknown name is throttled exactly like a known
/// one and the throttle tells nobody which accounts exist. One address trying many accounts
/// (password spraying) is throttled the same way after ``freeAttemptsPerAddress``.
///
/// The records are kept in memory: each instance of a cluster throttles the attempts it receives.
public final class LoginThrottle: Sendable {
    public let freeAttempts: Int
    public let freeAttemptsPerAddress: Int
    public let baseDelay: Duration
    public let maxDelay: Duration
    public let window: Duration

    private struct Record {
        var attempts: Int
        var last: ContinuousClock.Instant
    }

    /// An admitted attempt; report a success with ``succeeded(_:)``.
    public struct Attempt: Sendable {
        fileprivate let pair: String
        fileprivate let address: String
    }

    private let records = NIOLockedValueBox<[String: Record]>([:])

    public init(freeAttempts: Int = 5, freeAttemptsPerAddress: Int = 50, baseDelay: Duration = .seconds(1), maxDelay: Duration = .seconds(900),
                window: Duration = .seconds(900)) {
        self.freeAttempts = freeAttempts
        self.freeAttemptsPerAddress = freeAttemptsPerAddress
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.window = max(window, maxDelay)
    }

    /// How long after the last of `attempts` counted attempts the next may come, when `free` pass at once.
    public func delay(after attempts: Int, free: Int) -> Duration {
        guard attempts >= free else { return .zero }
        let doublings = min(attempts - free, 30)
        return min(maxDelay, baseDelay * (1 << doublings))
    }

    /// Admits and counts an attempt on `account` (``LoginThrottle/accountKey(_:)``) from `address`,
    /// or throws 429 when it comes before its delay has passed.
    public func admit(account: String, address: String) throws -> Attempt {
        let now = ContinuousClock.now
        let attempt = Attempt(pair: "p:" + account + "|" + address, address: "a:" + address)
        let wait: Duration = records.withLockedValue { table in
            func remaining(_ key: String, free: Int) -> Duration {
                guard let record = table[key] else { return .zero }
                if now - record.last > window {
                    table[key] = nil
                    return .zero
                }
                return max(.zero, record.last + delay(after: record.attempts, free: free) - now)
            }
            let wait = max(remaining(attempt.pair, free: freeAttempts), remaining(attempt.address, free: freeAttemptsPerAddress))
            guard wait == .zero else { return wait }
            for key in [attempt.pair, attempt.address] {
                var record = table[key] ?? Record(attempts: 0, last: now)
                record.attempts += 1
                record.last = now
                table[key] = record
            }
            if table.count > 1_000_000 { table = table.filter { now - $0.value.last <= window } }
            return .zero
        }
        guard wait == .zero else {
            let seconds = max(1, Int(wait.components.seconds) + (wait.components.attoseconds > 0 ? 1 : 0))
            throw GatewayError.quotaExceeded(policy: "login", retryAfter: seconds,
                                             detail: "Too many attempts to sign in to this account; try again in \(seconds) seconds.")
        }
        return attempt
    }

    /// Records that an admitted attempt succeeded: the account may be tried from that address
    /// freely again, and the attempt does not count against the address.
    public func succeeded(_ attempt: Attempt) {
        records.withLockedValue { table in
            table[attempt.pair] = nil
            if var record = table[attempt.address] {
                record.attempts = max(0, record.attempts - 1)
                table[attempt.address] = record
            }
        }
    }

    /// The throttle's key of an account: its id when it exists, else the normalised name.
    public static func accountKey(userID: String?, name: String) -> String {
        userID.map { "id:" + $0 } ?? "name:" + AccountStore.usernameKey(name)
    }

    /// Checks the password of the account `identifier` names (a username, or with `acceptsEmail`
    /// an email address that names a registered one) through the throttle: the way every login
    /// path of the gateway checks one. nil when it does not match.
    func verify(_ store: AccountStore, identifier: String, secret: AccountStore.Secret, address: String,
                acceptsEmail: Bool) async throws -> AccountStore.User? {
        var row = try await store.userRow(usernameKey: AccountStore.usernameKey(identifier))
        if acceptsEmail, identifier.contains("@"), let owner = try await store.userRow(emailKey: AccountStore.emailKey(identifier)) { row = owner }
        let attempt = try admit(account: Self.accountKey(userID: row?.id, name: identifier), address: address)
        let user = try await store.verify(username: row?.username ?? identifier, secret: secret)
        if user != nil { succeeded(attempt) }
        return user
    }

    /// Checks the password of a signed-in user (before a password change) through the throttle.
    func verify(_ store: AccountStore, user: AccountStore.User, secret: AccountStore.Secret, address: String) async throws -> Bool {
        let attempt = try admit(account: Self.accountKey(userID: user.id, name: user.username), address: address)
        guard try await store.verify(username: user.username, secret: secret) != nil else { return false }
        succeeded(attempt)
        return true
    }
}
