import Crypto
import Foundation
import GatewayCore
import HummingbirdBcrypt
import NIOCore
import NIOPosix
import SQLKit
import Synchronization

/// Users, sessions and API keys, in the gateway's own tables.
///
/// Guarantees: passwords are stored only as bcrypt of the COIMOTION prehash
/// `sha1hex(sha1hex(username) + password)`, so native clients (plain password) and legacy clients
/// (prehash) log in with one stored credential; session tokens and key secrets are shown once and
/// stored only as SHA-256; usernames are unique after NFKC normalisation and case folding.
public struct AccountStore: Sendable {
    public let database: any SQLDatabase
    public let clock: any WallClock
    /// bcrypt cost (10 to 16).
    public let bcryptCost: Int
    /// How long a session lives without use; each use past half-life renews it (sliding expiry).
    public let sessionTTL: Double

    public init(database: any SQLDatabase, clock: any WallClock = SystemClock(), bcryptCost: Int = 12, sessionTTL: Double = 30 * 86_400) {
        self.database = database
        self.clock = clock
        self.bcryptCost = max(10, min(16, bcryptCost))
        self.sessionTTL = sessionTTL
    }

    // MARK: Users

    /// A user as the API shows it.
    public struct User: Codable, Sendable, Equatable {
        public var id: String
        public var username: String
        public var displayName: String
        public var profile: [String: String]
        public var isAdmin: Bool
        public var disabled: Bool
        public var createdAt: Date
        public var updatedAt: Date
        /// Free JSON the user keeps on the account (nil when none was stored).
        public var options: String?
        /// Whether ``email`` was verified (its owner opened a link mailed to it); only a verified
        /// address receives password reset links. Changing the address makes it unverified.
        public var emailVerified: Bool = false
        /// The consumer group the account belongs to (`limits.groups`), set by an administrator.
        public var consumerGroup: String?

        public var email: String? { profile["email"] }
    }

    struct UserRow: Codable {
        var id: String
        var username: String
        var username_key: String
        var display_name: String
        var profile: String
        var password_hash: String
        var is_admin: Int
        var disabled: Int
        var created_at: Double
        var updated_at: Double
        var email_key: String?
        var options: String?
        var prehash_name: String?
        /// The address (as ``AccountStore/emailKey(_:)``) whose verification link the user opened.
        var verified_email: String? = nil
        var consumer_group: String? = nil

        var user: User {
            let profile = (try? JSONDecoder().decode([String: String].self, from: Data(profile.utf8))) ?? [:]
            return User(id: id, username: username, displayName: display_name, profile: profile,
                        isAdmin: is_admin != 0, disabled: disabled != 0, createdAt: Date(timeIntervalSince1970: created_at),
                        updatedAt: Date(timeIntervalSince1970: updated_at), options: options,
                        emailVerified: verified_email != nil && verified_email == profile["email"].map(AccountStore.emailKey),
                        consumerGroup: consumer_group)
        }

        /// The name the stored password hash was prehashed with.
        var hashedName: String { prehash_name ?? username }
    }

    /// The form under which usernames are unique: NFKC, case-folded, trimmed.
    public static func usernameKey(_ username: String) -> String {
        username.trimmingCharacters(in: .whitespacesAndNewlines)
            .precomposedStringWithCompatibilityMapping
            .folding(options: [.caseInsensitive], locale: nil)
    }

    /// The COIMOTION client prehash: `sha1hex(sha1hex(username) + password)`, lowercase hex.
    public static func prehash(username: String, password: String) -> String {
        func sha1hex(_ text: String) -> String {
            Insecure.SHA1.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
        }
        return sha1hex(sha1hex(username) + password)
    }

    /// Checks a username: 1 to 64 characters, no control characters or line breaks.
    public static func usernameProblem(_ username: String) -> String? {
        let trimmed = username.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty { return "must not be empty" }
        if trimmed.count > 64 { return "must be at most 64 characters" }
        if trimmed.unicodeScalars.contains(where: { $0.properties.generalCategory == .control || CharacterSet.newlines.contains($0) }) {
            return "must not contain control characters"
        }
        return nil
    }

    /// Checks a plain password: 8 to 1024 characters (Unicode code points, as JSON Schema counts).
    public static func passwordProblem(_ password: String) -> String? {
        if password.unicodeScalars.count < passwordLength.lowerBound { return "must be at least 8 characters" }
        if password.unicodeScalars.count > passwordLength.upperBound { return "must be at most 1024 characters" }
        return nil
    }

    /// The lengths a plain password may have.
    public static let passwordLength = 8...1024
    /// The longest username, before surrounding white space is trimmed.
    public static let longestUsername = 64

    /// The credential given to bcrypt: a prehash is 40 lowercase hex digits.
    public enum Secret: Sendable {
        /// A plain password (native clients); the store computes the prehash.
        case plain(String)
        /// The prehash itself (legacy clients).
        case prehashed(String)

        func prehash(for username: String) -> String {
            switch self {
            case .plain(let password): AccountStore.prehash(username: username, password: password)
            case .prehashed(let hash): hash.lowercased()
            }
        }
    }

    /// Creates a user. 409 when the name is taken (in any case or width), 422 for a bad name or password.
    public func register(username: String, secret: Secret, displayName: String? = nil, profile: [String: String] = [:], isAdmin: Bool = false,
                         email: String? = nil) async throws -> User {
        let name = username.trimmingCharacters(in: .whitespacesAndNewlines)
        if let problem = Self.usernameProblem(name) { throw GatewayError.invalid(field: "/username", problem) }
        var profile = profile
        let emailKey = email.map(Self.emailKey)
        if let email {
            if let problem = Self.emailProblem(email) { throw GatewayError.invalid(field: "/email", problem) }
            profile["email"] = email.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if case .plain(let password) = secret, let problem = Self.passwordProblem(password) { throw GatewayError.invalid(field: "/password", problem) }
        if case .prehashed(let hash) = secret, hash.count != 40 || !hash.allSatisfy(\.isHexDigit) {
            throw GatewayError.invalid(field: "/passwd", "must be the 40-digit SHA-1 prehash")
        }
        let key = Self.usernameKey(name)
        let hash = try await Self.hash(secret.prehash(for: name), cost: bcryptCost)
        let now = clock.now().timeIntervalSince1970
        let row = UserRow(id: Self.newID(), username: name, username_key: key, display_name: displayName ?? name,
                          profile: String(decoding: try JSONEncoder().encode(profile), as: UTF8.self), password_hash: hash,
                          is_admin: isAdmin ? 1 : 0, disabled: 0, created_at: now, updated_at: now, email_key: emailKey, options: nil, prehash_name: nil)
        // Looked up first too: inside a transaction (the admin API's) a failed insert ends it on
        // PostgreSQL, and the look-up after it could not tell which name is taken.
        if try await userRow(usernameKey: key) != nil { throw GatewayError.conflict("The username '\(name)' is taken.", duplicate: "username") }
        if let emailKey, try await userRow(emailKey: emailKey) != nil { throw GatewayError.conflict("The email address is already registered.", duplicate: "email") }
        do {
            try await database.insert(into: "gateway_users").model(row).run()
        } catch {
            if try await userRow(usernameKey: key) != nil { throw GatewayError.conflict("The username '\(name)' is taken.", duplicate: "username") }
            if let emailKey, try await userRow(emailKey: emailKey) != nil { throw GatewayError.conflict("The email address is already registered.", duplicate: "email") }
            throw error
        }
        return row.user
    }

    func userRow(usernameKey key: String) async throws -> UserRow? {
        try await database.select().column("*").from("gateway_users").where("username_key", .equal, key).first(decoding: UserRow.self)
    }

    func userRow(emailKey key: String) async throws -> UserRow? {
        try await database.select().column("*").from("gateway_users").where("email_key", .equal, key).first(decoding: UserRow.self)
    }

    /// The form under which email addresses are unique: trimmed and lowercased.
    public static func emailKey(_ email: String) -> String {
        email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }

    /// Checks an email address: one `@` with text on both sides, at most 254 bytes, no spaces.
    public static func emailProblem(_ email: String) -> String? {
        let trimmed = email.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = trimmed.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[1].contains("."), !parts[1].hasPrefix("."), !parts[1].hasSuffix("."),
              trimmed.utf8.count <= 254, !trimmed.contains(where: { $0.isWhitespace || $0.isNewline }) else {
            return "must be an email address"
        }
        return nil
    }

    /// The user registered with `email`, or nil.
    public func user(email: String) async throws -> User? { try await userRow(emailKey: Self.emailKey(email))?.user }

    func userRow(id: String) async throws -> UserRow? {
        try await database.select().column("*").from("gateway_users").where("id", .equal, id).first(decoding: UserRow.self)
    }

    /// The user with `id`.
    public func user(id: String) async throws -> User? { try await userRow(id: id)?.user }

    /// The user named `username` (in any case or width).
    public func user(named username: String) async throws -> User? { try await userRow(usernameKey: Self.usernameKey(username))?.user }

    /// Every user, by name.
    public func users() async throws -> [User] {
        try await database.select().column("*").from("gateway_users").orderBy("username_key").all(decoding: UserRow.self).map(\.user)
    }

    /// The user whose credential matches, or nil. A disabled user never matches. Always spends one
    /// bcrypt verification, so timing does not tell whether the user exists.
    public func verify(username: String, secret: Secret) async throws -> User? {
        let row = try await userRow(usernameKey: Self.usernameKey(username))
        let candidate = secret.prehash(for: row?.hashedName ?? username.trimmingCharacters(in: .whitespacesAndNewlines))
        let hash: String
        if let stored = row?.password_hash { hash = stored } else { hash = try await Self.decoyHash(cost: bcryptCost) }
        let matches = try await Self.hashing.runIfActive { Bcrypt.verify(candidate, hash: hash) }
        guard let row, matches, row.disabled == 0 else { return nil }
        return row.user
    }

    /// bcrypt of `text` on threads of its own: hashing takes a quarter of a second at cost 12 and
    /// must neither hold a thread of the cooperative pool, where every other request runs, nor
    /// queue ahead of the database's blocking work on NIO's shared pool (SQLite runs there).
    static func hash(_ text: String, cost: Int) async throws -> String {
        try await hashing.runIfActive { Bcrypt.hash(text, cost: UInt8(cost)) }
    }

    /// The threads that hash: one per core, started once for the process.
    static let hashing: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: max(1, System.coreCount))
        pool.start()
        return pool
    }()

    /// A hash of the configured cost to verify against when the user does not exist, so that an
    /// unknown name costs the same time as a wrong password. Made once per cost.
    static func decoyHash(cost: Int) async throws -> String {
        if let made = decoys.withLock({ $0[cost] }) { return made }
        let made = try await hash("decoy-password-for-missing-users", cost: cost)
        decoys.withLock { $0[cost] = made }
        return made
    }

    private static let decoys = Mutex<[Int: String]>([:])

    /// Replaces a user's password and ends all their sessions.
    public func setPassword(userID: String, secret: Secret) async throws {
        guard let row = try await userRow(id: userID) else { throw GatewayError.notFound("No such user.") }
        if case .plain(let password) = secret, let problem = Self.passwordProblem(password) { throw GatewayError.invalid(field: "/newPassword", problem) }
        let hash = try await Self.hash(secret.prehash(for: row.username), cost: bcryptCost)
        try await database.update("gateway_users").set("password_hash", to: hash).set("prehash_name", to: SQLLiteral.null)
            .set("updated_at", to: clock.now().timeIntervalSince1970).where("id", .equal, userID).run()
        try await revokeAllSessions(userID: userID)
    }

    /// Users named `username` or registered with `email` (exact, in any case), or with neither
    /// every user by creation, with the total then.
    public func users(username: String?, email: String?, skip: Int, limit: Int) async throws -> (users: [User], total: Int?) {
        var query = database.select().column("*").from("gateway_users")
        if let username { query = query.where("username_key", .equal, Self.usernameKey(username)) }
        if let email { query = query.where("email_key", .equal, Self.emailKey(email)) }
        let rows = try await query.orderBy("created_at").orderBy("id").offset(skip).limit(limit).all(decoding: UserRow.self)
        var total: Int?
        if username == nil, email == nil {
            total = try await database.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n").from("gateway_users")
                .first()?.decode(column: "n", as: Int.self)
        }
        return (rows.map(\.user), total)
    }

    /// Renames a user, changes their email address (empty: none) or options; nil leaves a member
    /// as it is. 409 when the name or address is taken, 422 for a bad one.
    public func updateUser(id: String, username: String?, email: String?, options: String?) async throws -> User {
        guard var row = try await userRow(id: id) else { throw GatewayError.notFound("No such user.") }
        if let username {
            let name = username.trimmingCharacters(in: .whitespacesAndNewlines)
            if let problem = Self.usernameProblem(name) { throw GatewayError.invalid(field: "/username", problem) }
            if Self.usernameKey(name) != row.username_key {
                if try await userRow(usernameKey: Self.usernameKey(name)) != nil { throw GatewayError.conflict("The username '\(name)' is taken.", duplicate: "username") }
                if row.prehash_name == nil { row.prehash_name = row.username }
            }
            row.username = name
            row.username_key = Self.usernameKey(name)
        }
        if let email {
            var profile = (try? JSONDecoder().decode([String: String].self, from: Data(row.profile.utf8))) ?? [:]
            if email.isEmpty {
                profile["email"] = nil
                row.email_key = nil
            } else {
                if let problem = Self.emailProblem(email) { throw GatewayError.invalid(field: "/email", problem) }
                if Self.emailKey(email) != row.email_key, try await userRow(emailKey: Self.emailKey(email)) != nil {
                    throw GatewayError.conflict("The email address is already registered.", duplicate: "email")
                }
                profile["email"] = email.trimmingCharacters(in: .whitespacesAndNewlines)
                row.email_key = Self.emailKey(email)
            }
            row.profile = String(decoding: try JSONEncoder().encode(profile), as: UTF8.self)
        }
        if let options { row.options = options }
        row.updated_at = max(clock.now().timeIntervalSince1970, row.updated_at)
        do {
            try await database.update("gateway_users").set("username", to: row.username).set("username_key", to: row.username_key)
                .set("profile", to: row.profile).set("email_key", to: row.email_key).set("options", to: row.options)
                .set("prehash_name", to: row.prehash_name).set("updated_at", to: row.updated_at).where("id", .equal, id).run()
        } catch {
            // A concurrent change took the name or address first (the unique indexes refused it).
            if let other = try await userRow(usernameKey: row.username_key), other.id != id {
                throw GatewayError.conflict("The username '\(row.username)' is taken.", duplicate: "username")
            }
            if let key = row.email_key, let other = try await userRow(emailKey: key), other.id != id {
                throw GatewayError.conflict("The email address is already registered.", duplicate: "email")
            }
            throw error
        }
        return row.user
    }

    /// Deletes a user with everything kept for them — sessions, keys, realm memberships, grants,
    /// links to providers, notifications, history, reset and verification links; false when there
    /// is none. (On the store of a transaction, as the admin API's `AuditLog.change` gives, it is
    /// all or nothing.)
    public func deleteUser(id: String) async throws -> Bool {
        guard try await userRow(id: id) != nil else { return false }
        for table in ["gateway_sessions", "gateway_api_keys", "gateway_realm_members", "gateway_user_grants", "gateway_identities",
                      "gateway_notifications", "gateway_history", "gateway_password_resets", "gateway_email_verifications"] {
            try await database.delete(from: table).where("user_id", .equal, id).run()
        }
        try await database.delete(from: "gateway_users").where("id", .equal, id).run()
        return true
    }

    /// The same store on `database` (a transaction's connection).
    func on(_ database: any SQLDatabase) -> AccountStore {
        AccountStore(database: database, clock: clock, bcryptCost: bcryptCost, sessionTTL: sessionTTL)
    }

    /// Updates the display name and profile fields (nil leaves one as it is).
    public func updateProfile(userID: String, displayName: String?, profile: [String: String]?) async throws -> User {
        guard var row = try await userRow(id: userID) else { throw GatewayError.notFound("No such user.") }
        if let displayName { row.display_name = displayName }
        if let profile { row.profile = String(decoding: try JSONEncoder().encode(profile), as: UTF8.self) }
        try await database.update("gateway_users").set("display_name", to: row.display_name).set("profile", to: row.profile)
            .set("updated_at", to: clock.now().timeIntervalSince1970).where("id", .equal, userID).run()
        return row.user
    }

    /// Disables (or re-enables) a user; disabling ends their sessions at once.
    public func setDisabled(userID: String, _ disabled: Bool) async throws {
        try await database.update("gateway_users").set("disabled", to: disabled ? 1 : 0).where("id", .equal, userID).run()
        if disabled { try await revokeAllSessions(userID: userID) }
    }

    /// Puts the user in consumer group `group` (`limits.groups`), or in none.
    public func setConsumerGroup(userID: String, _ group: String?) async throws {
        try await database.update("gateway_users").set("consumer_group", to: group).where("id", .equal, userID).run()
    }

    /// Grants or removes the admin role.
    public func setAdmin(userID: String, _ isAdmin: Bool) async throws {
        try await database.update("gateway_users").set("is_admin", to: isAdmin ? 1 : 0).where("id", .equal, userID).run()
    }

    // MARK: Sessions

    /// A new session: the token (shown once) and when it expires.
    public struct Session: Codable, Sendable {
        public var token: String
        public var expiresAt: Date
    }

    struct SessionRow: Codable {
        var token_hash: String
        var user_id: String
        var created_at: Double
        var expires_at: Double
        var revoked_at: Double?
    }

    /// Starts a session for `userID`.
    public func createSession(userID: String) async throws -> Session {
        let token = Self.randomToken(bytes: 32)
        let now = clock.now().timeIntervalSince1970
        try await database.insert(into: "gateway_sessions")
            .model(SessionRow(token_hash: Self.sha256(token), user_id: userID, created_at: now, expires_at: now + sessionTTL, revoked_at: nil))
            .run()
        return Session(token: token, expiresAt: Date(timeIntervalSince1970: now + sessionTTL))
    }

    /// Ends the session of `token` (no error when it is unknown).
    public func revokeSession(token: String) async throws {
        try await database.update("gateway_sessions").set("revoked_at", to: clock.now().timeIntervalSince1970)
            .where("token_hash", .equal, Self.sha256(token)).run()
    }

    /// Ends every session of `userID` ("log out everywhere").
    public func revokeAllSessions(userID: String) async throws {
        try await database.update("gateway_sessions").set("revoked_at", to: clock.now().timeIntervalSince1970)
            .where("user_id", .equal, userID).where("revoked_at", .is, SQLLiteral.null).run()
    }

    /// The user a live session token belongs to; renews the session past its half-life.
    /// nil for an unknown, expired or revoked token, or a disabled user.
    public func sessionUser(token: String) async throws -> User? {
        let hash = Self.sha256(token)
        guard let session = try await database.select().column("*").from("gateway_sessions").where("token_hash", .equal, hash)
            .first(decoding: SessionRow.self), session.revoked_at == nil else { return nil }
        let now = clock.now().timeIntervalSince1970
        guard session.expires_at > now, let row = try await userRow(id: session.user_id), row.disabled == 0 else { return nil }
        if session.expires_at - now < sessionTTL / 2 {
            try await database.update("gateway_sessions").set("expires_at", to: now + sessionTTL).where("token_hash", .equal, hash).run()
        }
        return row.user
    }

    // MARK: API keys

    /// An API key as its owner sees it (never the secret, after creation).
    public struct APIKey: Codable, Sendable, Equatable {
        public var id: String
        public var prefix: String
        public var userID: String?
        public var label: String
        public var scopes: [String]
        public var resources: [String: [String]]
        public var allowedAddresses: [String]
        public var rate: String?
        /// Whether the key counts its requests in a rate-limit bucket of its own (an
        /// administrator's choice) rather than in its owner's, which all their other keys share.
        public var ownLimit: Bool
        /// The consumer group the key's requests count in (`limits.groups`), before its owner's.
        public var consumerGroup: String?
        public var expiresAt: Date?
        public var revoked: Bool
        public var createdAt: Date
    }

    struct KeyRow: Codable {
        var id: String
        var key_hash: String
        var prefix: String
        var user_id: String?
        var label: String
        var scopes: String
        var resources: String
        var allowed_addresses: String
        var rate: String?
        var expires_at: Double?
        var revoked_at: Double?
        var created_at: Double
        var own_limit: Int?
        var consumer_group: String? = nil

        var key: APIKey {
            let decoder = JSONDecoder()
            return APIKey(id: id, prefix: prefix, userID: user_id, label: label,
                          scopes: (try? decoder.decode([String].self, from: Data(scopes.utf8))) ?? [],
                          resources: (try? decoder.decode([String: [String]].self, from: Data(resources.utf8))) ?? [:],
                          allowedAddresses: (try? decoder.decode([String].self, from: Data(allowed_addresses.utf8))) ?? [],
                          rate: rate, ownLimit: (own_limit ?? 0) != 0, consumerGroup: consumer_group, expiresAt: expires_at.map(Date.init(timeIntervalSince1970:)), revoked: revoked_at != nil,
                          createdAt: Date(timeIntervalSince1970: created_at))
        }
    }

    /// What a new key may do.
    public struct KeyGrant: Codable, Sendable {
        public var label: String
        /// `<plugin>:read`, `<plugin>:write`, `<plugin>:*` or `*`.
        public var scopes: [String]
        /// Per plugin, the only resource ids the key may touch.
        public var resources: [String: [String]]?
        /// Client addresses (exact, or IPv4 CIDR like `10.0.0.0/8`) the key is accepted from.
        public var allowedAddresses: [String]?
        public var expiresAt: Date?
        /// The key's own rate limit, such as `100/min`.
        public var rate: String?

        public init(label: String, scopes: [String], resources: [String: [String]]? = nil, allowedAddresses: [String]? = nil,
                    expiresAt: Date? = nil, rate: String? = nil) {
            self.label = label
            self.scopes = scopes
            self.resources = resources
            self.allowedAddresses = allowedAddresses
            self.expiresAt = expiresAt
            self.rate = rate
        }

        /// Every problem with the grant, as field errors.
        public func problems(now: Date) -> [GatewayError.FieldError] {
            var problems: [GatewayError.FieldError] = []
            if label.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty || label.unicodeScalars.count > 200 {
                problems.append(.init(pointer: "/label", detail: "must be 1 to 200 characters"))
            }
            if scopes.isEmpty { problems.append(.init(pointer: "/scopes", detail: "must name at least one scope")) }
            if scopes.count > 100 { problems.append(.init(pointer: "/scopes", detail: "must name at most 100 scopes")) }
            for (index, scope) in scopes.enumerated() where !AccountStore.isValidScope(scope) {
                problems.append(.init(pointer: "/scopes/\(index)", detail: "'\(scope.prefix(60))' is not <plugin>:read, <plugin>:write, <plugin>:* or *"))
            }
            for (index, address) in (allowedAddresses ?? []).enumerated() where AddressMatcher(address) == nil {
                problems.append(.init(pointer: "/allowedAddresses/\(index)", detail: "'\(address.prefix(60))' is not an IP address or IPv4 CIDR"))
            }
            if let expiresAt, expiresAt <= now { problems.append(.init(pointer: "/expiresAt", detail: "is in the past")) }
            if let rate, RateSpec(parsing: rate) == nil { problems.append(.init(pointer: "/rate", detail: "'\(rate.prefix(60))' is not a rate such as 100/min")) }
            return problems
        }
    }

    /// `<plugin>:read`, `<plugin>:write`, `<plugin>:*`, `*`, or `admin` (the administrators'
    /// routes, for a master key only: ``createKey(userID:grant:)`` refuses it on a user's key).
    static func isValidScope(_ scope: String) -> Bool {
        if scope == "*" || scope == Principal.adminScope { return true }
        let parts = scope.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 2 && PluginRegistration.isValidID(String(parts[0])) && ["read", "write", "*"].contains(parts[1])
    }

    /// Creates a key for `userID` (nil: a master key, which acts as an administrator only when it
    /// holds `admin` or `*`). Returns the secret, shown only now, and the key. `ownLimit` gives it
    /// a rate-limit bucket of its own (an administrator's choice; master keys always have one).
    public func createKey(userID: String?, grant: KeyGrant, ownLimit: Bool = false, consumerGroup: String? = nil) async throws -> (secret: String, key: APIKey) {
        let problems = grant.problems(now: clock.now())
        guard problems.isEmpty else { throw GatewayError.invalid(problems.map { "\($0.pointer): \($0.detail)" }.joined(separator: "; "), errors: problems) }
        if userID != nil, let index = grant.scopes.firstIndex(of: Principal.adminScope) {
            throw GatewayError.invalid(field: "/scopes/\(index)", "'admin' is for master keys: a user's key never acts as an administrator")
        }
        let secret = "gk_" + Self.randomToken(bytes: 24)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let row = KeyRow(id: Self.newID(), key_hash: Self.sha256(secret), prefix: String(secret.prefix(10)), user_id: userID, label: grant.label,
                         scopes: String(decoding: try encoder.encode(grant.scopes), as: UTF8.self),
                         resources: String(decoding: try encoder.encode(grant.resources ?? [:]), as: UTF8.self),
                         allowed_addresses: String(decoding: try encoder.encode(grant.allowedAddresses ?? []), as: UTF8.self),
                         rate: grant.rate, expires_at: grant.expiresAt?.timeIntervalSince1970, revoked_at: nil,
                         created_at: clock.now().timeIntervalSince1970, own_limit: ownLimit || userID == nil ? 1 : 0, consumer_group: consumerGroup)
        try await database.insert(into: "gateway_api_keys").model(row).run()
        return (secret, row.key)
    }

    /// How many keys of `userID` still work (neither revoked nor expired).
    public func liveKeyCount(userID: String) async throws -> Int {
        let now = clock.now().timeIntervalSince1970
        let rows = try await database.select().column("expires_at").from("gateway_api_keys")
            .where("user_id", .equal, userID).where("revoked_at", .is, SQLLiteral.null).all()
        return try rows.filter { row in try row.decodeNil(column: "expires_at") || (try row.decode(column: "expires_at", as: Double.self)) > now }.count
    }

    /// The keys of `userID` (nil: master keys), newest first.
    public func keys(userID: String?) async throws -> [APIKey] {
        var query = database.select().column("*").from("gateway_api_keys")
        query = userID.map { query.where("user_id", .equal, $0) } ?? query.where("user_id", .is, SQLLiteral.null)
        return try await query.orderBy("created_at", .descending).all(decoding: KeyRow.self).map(\.key)
    }

    /// Revokes key `id` if it belongs to `userID` (nil: any key, for the CLI). False when there is no such key.
    @discardableResult
    public func revokeKey(id: String, userID: String?) async throws -> Bool {
        var query = database.select().column("*").from("gateway_api_keys").where("id", .equal, id)
        if let userID { query = query.where("user_id", .equal, userID) }
        guard try await query.first(decoding: KeyRow.self) != nil else { return false }
        try await database.update("gateway_api_keys").set("revoked_at", to: clock.now().timeIntervalSince1970).where("id", .equal, id).run()
        return true
    }

    /// The live key with `secret`, with its owner; nil when unknown, revoked, expired, or its owner is disabled.
    public func liveKey(secret: String) async throws -> (key: APIKey, owner: User?)? {
        guard let row = try await database.select().column("*").from("gateway_api_keys").where("key_hash", .equal, Self.sha256(secret))
            .first(decoding: KeyRow.self), row.revoked_at == nil else { return nil }
        if let expires = row.expires_at, expires <= clock.now().timeIntervalSince1970 { return nil }
        guard let userID = row.user_id else { return (row.key, nil) }
        guard let owner = try await userRow(id: userID), owner.disabled == 0 else { return nil }
        return (row.key, owner.user)
    }

    // MARK: Helpers

    static func sha256(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    static func randomToken(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
    }
}

/// Matches a client address against an exact address or an IPv4 CIDR block.
struct AddressMatcher: Sendable {
    private let exact: String?
    private let network: UInt32
    private let mask: UInt32

    init?(_ pattern: String) {
        if let slash = pattern.firstIndex(of: "/") {
            guard let base = Self.ipv4(String(pattern[..<slash])), let bits = Int(pattern[pattern.index(after: slash)...]), (0...32).contains(bits) else { return nil }
            mask = bits == 0 ? 0 : UInt32.max << (32 - bits)
            network = base & mask
            exact = nil
        } else {
            guard Self.ipv4(pattern) != nil || (pattern.contains(":") && pattern.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }) else { return nil }
            exact = pattern.lowercased()
            network = 0
            mask = 0
        }
    }

    func matches(_ address: String) -> Bool {
        if let exact { return exact == address.lowercased() }
        guard let value = Self.ipv4(address) else { return false }
        return value & mask == network
    }

    static func ipv4(_ text: String) -> UInt32? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard let byte = UInt8(part) else { return nil }
            value = value << 8 | UInt32(byte)
        }
        return value
    }
}
