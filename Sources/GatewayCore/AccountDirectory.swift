import Foundation

/// The gateway's accounts as a plugin sees them: for dialects whose old API registered users and
/// signed them in itself (`POST /users`, `POST /login`). Native clients use the gateway's own
/// account API; both reach the same accounts, so a user registered through a dialect signs in
/// natively with the same password, and the reverse.
public protocol AccountDirectory: Sendable {
    /// Creates an account. 409 when the username (or email) is taken, 422 for a bad username,
    /// email or password; 403 when registration is closed.
    func register(username: String, email: String?, password: String) async throws -> AccountRecord
    /// Checks a password and starts a session. `identifier` is a username or an email address.
    /// 401 when they do not match; 429 after repeated failures (the same throttle as the native login).
    func signIn(identifier: String, password: String, address: String) async throws -> (token: String, expiresAt: Date, account: AccountRecord)
    /// Ends the session of `token` (no error when it is unknown).
    func signOut(token: String) async throws
    /// The account with `id`, or nil.
    func account(id: String) async throws -> AccountRecord?
    /// The accounts named `username` or registered with `email` (exact, in any case), or with
    /// neither every account, oldest first, with `total` counting them all. `limit` is capped by
    /// the gateway (at most 1,000 a call).
    func accounts(username: String?, email: String?, skip: Int, limit: Int) async throws -> (accounts: [AccountRecord], total: Int?)
    /// Changes an account; what is nil stays as it is. An empty `email` removes the address;
    /// `options` is free JSON the account's user keeps on it (an object). A new password ends every
    /// session of the account on every instance. 404 when there is none, 409 when the new username
    /// or email is taken (``GatewayError/duplicate`` names which), 422 for a bad value.
    func updateAccount(id: String, username: String?, email: String?, password: String?, options: JSONValue?) async throws -> AccountRecord
    /// Deletes an account with its sessions and keys (they stop working on every instance at
    /// once); false when there is none.
    func deleteAccount(id: String) async throws -> Bool
    /// Queues a one-time link to set a new password for the user named `username` (or registered
    /// with `email`), mailed only to a verified address. Returns at once and the same way whether
    /// or not there is such a user, so that callers cannot tell which accounts exist.
    func requestPasswordReset(username: String?, email: String?) async throws
    /// The caller a credential identifies, for credentials that arrive inside a message rather than
    /// in a request's headers (a WebSocket request carrying its own key). 401 when it is unknown,
    /// expired or revoked; 403 when a key is used from an address it does not allow.
    func principal(for credential: Credential, address: String) async throws -> Principal
    /// Issues an API key for `userID` (nil: a master key, which acts as an administrator), for
    /// dialects whose old API managed keys itself, with the gateway's key API's meaning of each
    /// part: `scopes` (`<plugin>:read`, `<plugin>:write`, `<plugin>:*` or `*`), `resources` (per
    /// plugin, the only resource ids the key may touch; nil: unrestricted), `allowedAddresses`
    /// (exact or IPv4 CIDR; nil: any) and `expiresAt`. The secret is returned only now. 422 when
    /// the request is invalid.
    func issueKey(for userID: String?, label: String, scopes: [String], resources: [String: [String]]?, allowedAddresses: [String]?,
                  expiresAt: Date?) async throws -> (id: String, secret: String)
    /// Revokes key `id` of `userID`; false when there is no such key. Takes effect at once here.
    func revokeKey(id: String, of userID: String?) async throws -> Bool

    // MARK: Realms

    /// Records that account `userID` belongs to `realm`: a dialect's tenant or application
    /// (`"nebula/tutorial"`), whose master key administers its own members and nobody else. A
    /// dialect adds the accounts its old API registers; an administrator adds others
    /// (`gateway user realm add`). Adding a member twice is no error.
    func addMember(_ userID: String, to realm: String) async throws
    /// Whether `realm`'s master key may read, change or delete account `userID`: the account
    /// belongs to the realm and is not an administrator (an administrator is never a realm's to
    /// administer, even when it joined one).
    func isAdministrable(_ userID: String, by realm: String) async throws -> Bool
    /// The members of `realm` its master key may see (``isAdministrable(_:by:)``), looked up or
    /// listed as ``accounts(username:email:skip:limit:)`` does.
    func members(of realm: String, username: String?, email: String?, skip: Int, limit: Int) async throws -> (accounts: [AccountRecord], total: Int?)
}

/// An account as plugins see it.
public struct AccountRecord: Sendable, Equatable, Codable {
    public var id: String
    public var username: String
    public var email: String?
    public var displayName: String
    public var createdAt: Date
    public var updatedAt: Date
    /// Free JSON the user keeps on the account (an object; empty when none was stored).
    public var options: JSONValue

    public init(id: String, username: String, email: String?, displayName: String, createdAt: Date, updatedAt: Date, options: JSONValue = .object([:])) {
        self.id = id
        self.username = username
        self.email = email
        self.displayName = displayName
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.options = options
    }
}
