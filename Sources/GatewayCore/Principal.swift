/// Who is calling: identified by the host before any handler runs.
///
/// Every request has a principal; a caller that presents no credential is ``Kind-swift.enum/anonymous``
/// and is known only by its network address (which rate limits use).
public struct Principal: Sendable, Equatable, Hashable {
    /// The kind of caller.
    public enum Kind: Sendable, Equatable, Hashable {
        /// No credential: a guest, known by address only.
        case anonymous
        /// A signed-in user, by session token.
        case user
        /// A caller presenting an API key (owned by `userID`, or a master key when it is nil).
        case apiKey(keyID: String)
        /// A caller presenting a token of the identity provider `provider` (`auth.providers`),
        /// known there as `subject`; acting for the linked account `userID`, or for no account
        /// when the provider provisions none. A verified client certificate is such a credential
        /// too, of the provider ``Principal/certificateKind`` with its subject as `subject`.
        case token(provider: String, subject: String)
    }

    /// What kind of caller this is.
    public var kind: Kind
    /// The user the request acts for: the signed-in user, or the key's owner. Nil for guests and master keys.
    public var userID: String?
    /// The caller's display name where known (used by dialects that echo it).
    public var displayName: String?
    /// Whether the caller acts as an administrator: a user with the gateway's admin role (by
    /// session), or a master key holding the scope `admin` or `*`.
    public var isAdmin: Bool
    /// The scopes a key or a provider's token carries (`todo:read`, `feeds:write`, `*`). Users
    /// and guests carry none: their access follows from the operation's rule alone.
    public var scopes: Set<String>
    /// What an administrator granted the user the request acts for (`suggest:write`): rights to
    /// write shared data, which ``AccessRule/granted(_:)`` routes accept. A master key's grants
    /// are its own scopes (the operator who made it chose them). Scopes only narrow; grants extend.
    public var grants: Set<String>
    /// Resource restrictions of a key, per plugin id: the key may touch only these resource ids.
    /// Absent for a plugin means unrestricted.
    public var resources: [String: Set<String>]
    /// The caller's network address as the server saw it (no port).
    public var address: String
    /// A key's own rate limit, replacing the configured default for keys. A user may set one only
    /// below that default; an administrator may set any.
    public var quota: Quota?
    /// Whether a key counts its requests in a rate-limit bucket of its own. A user's keys share
    /// their owner's bucket (``rateLimitKey``), so that making more keys buys no more requests;
    /// an administrator may give one key a bucket of its own (master keys always have one).
    public var hasOwnLimit: Bool = false
    /// The consumer groups the caller belongs to, the most specific first: its key's, its
    /// account's, then those its provider's token names. The first that `limits.groups`
    /// configures sets its rate and quota.
    public var groups: [String] = []

    /// A number of requests per number of seconds.
    public struct Quota: Sendable, Equatable, Hashable {
        public var count: Int
        public var seconds: Double
        public init(count: Int, seconds: Double) {
            self.count = count
            self.seconds = seconds
        }
    }

    public init(
        kind: Kind, userID: String? = nil, displayName: String? = nil, isAdmin: Bool = false,
        scopes: Set<String> = [], resources: [String: Set<String>] = [:], address: String, quota: Quota? = nil, grants: Set<String> = []
    ) {
        self.kind = kind
        self.userID = userID
        self.displayName = displayName
        self.isAdmin = isAdmin
        self.scopes = scopes
        self.grants = grants
        self.resources = resources
        self.address = address
        self.quota = quota
    }

    /// A guest calling from `address`.
    public static func anonymous(address: String) -> Principal {
        Principal(kind: .anonymous, address: address)
    }

    /// Whether this is a guest.
    public var isAnonymous: Bool { kind == .anonymous }

    /// The key that identifies this caller for rate limiting and per-caller caching:
    /// `user:<id>`, `key:<id>`, `token:<provider>:<subject>` or `addr:<address>`.
    public var limitKey: String {
        switch kind {
        case .anonymous: "addr:\(address)"
        case .user: "user:\(userID ?? "")"
        case .apiKey(let keyID): "key:\(keyID)"
        case .token(let provider, let subject): "token:\(provider):\(subject)"
        }
    }

    /// The kind of credential presented, as a plugin's `accept` list names it: `session`, `key`,
    /// or the provider's name; nil for a guest.
    public var credentialKind: String? {
        switch kind {
        case .anonymous: nil
        case .user: "session"
        case .apiKey: "key"
        case .token(let provider, _): provider
        }
    }

    /// Whether the request is bound by ``scopes``: a key's, or a provider's token's.
    public var isBoundByScopes: Bool {
        switch kind {
        case .apiKey, .token: true
        case .anonymous, .user: false
        }
    }

    /// The caller a rate limit counts this request against: ``limitKey``, except that the keys
    /// of one user share `keys:<owner>` unless the key has a bucket of its own (``hasOwnLimit``),
    /// and a token acting for an account counts as that user (`user:<id>`).
    public var rateLimitKey: String {
        if case .apiKey = kind, !hasOwnLimit, let userID { return "keys:\(userID)" }
        if case .token = kind, let userID { return "user:\(userID)" }
        return limitKey
    }

    /// Whether the caller may touch `resource` of `plugin`: true unless it is a key restricted
    /// to other resources of that plugin.
    public func mayAccess(resource: String, of plugin: String) -> Bool {
        guard let allowed = resources[plugin] else { return true }
        return allowed.contains(resource)
    }

    /// The credential kind (and ``Kind-swift.enum/token(provider:subject:)``'s provider) of a
    /// caller named by a verified client certificate (`auth.certificates`).
    public static let certificateKind = "certificate"

    /// The scope that covers the administrators' routes for a key (a master key's `admin`).
    public static let adminScope = "admin"

    /// Whether `scopes` include `scope`: the scope itself, `<plugin>:*` for a `<plugin>:…` scope,
    /// or `*`.
    public static func covers(_ scopes: Set<String>, _ scope: String) -> Bool {
        if scopes.contains(scope) || scopes.contains("*") { return true }
        guard let colon = scope.firstIndex(of: ":") else { return false }
        return scopes.contains(scope[..<colon] + ":*")
    }

    /// Whether the caller's own bound allows `scope`: a key or a provider's token only within its
    /// scopes; a session or a guest has no such bound (what they may do follows from the route's rule).
    public func keyAllows(_ scope: String) -> Bool {
        guard isBoundByScopes else { return true }
        return Self.covers(scopes, scope)
    }

    /// Whether an administrator granted `scope` to the user this request acts for (or, for a master
    /// key, whether the operator gave it `scope`).
    public func holdsGrant(_ scope: String) -> Bool {
        Self.covers(grants, scope)
    }
}
