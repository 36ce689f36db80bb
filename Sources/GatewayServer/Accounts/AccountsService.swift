import Foundation
import GatewayCore
import SQLKit

/// The gateway's own account API — registration, sessions, profile, API keys, notifications and
/// history — declared as ordinary operations so it runs through the same pipeline, appears in the
/// OpenAPI document and works with `gateway call`. Mounted at `/v1`.
/// A service of the host's own (accounts, batches, composites), mounted like a plugin so that it
/// shares the whole pipeline, but made by the host with its dependencies: plugins.yaml cannot
/// enable it.
protocol HostService: ServicePlugin where Configuration == NoConfiguration {}

extension HostService {
    init(configuration: NoConfiguration, context: PluginContext) async throws {
        throw GatewayStartupError("\(Self.id) is part of the host and is not created from plugins.yaml")
    }
}

struct AccountsService: HostService {
    static let id = "accounts"
    static let summary = "Accounts, sessions, API keys, notifications and history"

    let store: AccountStore
    let authenticator: AccountAuthenticator
    let throttle: LoginThrottle
    let registration: AuthSettings.Registration
    let database: any SQLDatabase
    let cache: any ResponseCacheStore
    let resets: PasswordResets
    let reloads: ReloadHandle
    let keyRules: KeyRules
    /// What the admin API reads of the running gateway.
    let admin: AdminHandle

    /// What a user may make of their own keys (an administrator, from the CLI, is not held to these).
    struct KeyRules: Sendable {
        /// Live keys a user may hold (`auth.maxKeysPerUser`).
        var maxPerUser = 20
        /// The highest rate a user may give a key: what keys get by default (`limits.key`). A key's
        /// own rate may only lower it.
        var maxRate = RateSpec(count: 6000, period: 60)
    }

    init(store: AccountStore, authenticator: AccountAuthenticator, throttle: LoginThrottle, registration: AuthSettings.Registration,
         cache: any ResponseCacheStore, resets: PasswordResets, reloads: ReloadHandle, admin: AdminHandle, keyRules: KeyRules = KeyRules()) {
        self.keyRules = keyRules
        self.admin = admin
        self.resets = resets
        self.reloads = reloads
        self.store = store
        self.authenticator = authenticator
        self.throttle = throttle
        self.registration = registration
        self.database = store.database
        self.cache = cache
    }

    var dialects: [Dialect] {
        [CoimotionAccountsDialect.make(store: store, authenticator: authenticator, throttle: throttle, registration: registration,
                                       verifications: resets.verifications)]
    }

    /// 403 unless the caller signed in here (a session): what only the account's holder may do,
    /// not a key acting for them, nor a provider's token (a key it made would outlive it).
    static func requireSession(_ context: OperationContext, for action: String) throws {
        guard case .user = context.principal.kind else {
            throw GatewayError.forbidden("Only a signed-in session may \(action), not an API key or a provider's token.")
        }
    }

    // MARK: Inputs and outputs

    struct RegisterBody: Codable, Sendable, ValidatableInput {
        var username: String
        var password: String
        var displayName: String?
        var profile: [String: String]?

        static let fieldRules: [String: FieldRule] = [
            "username": AccountRules.username, "password": AccountRules.password,
            "displayName": AccountRules.displayName, "profile": AccountRules.profile,
        ]

        func validate() -> [GatewayError.FieldError] {
            var problems = ProfilePatch(displayName: displayName, profile: profile).validate()
            if username.unicodeScalars.count > AccountStore.longestUsername {
                problems.append(.init(pointer: "/username", detail: "must be at most 64 characters"))
            }
            return problems
        }
    }

    struct LoginBody: Codable, Sendable {
        /// A username, or the email address of an account.
        var username: String
        var password: String
    }

    struct SessionReply: Codable, Sendable {
        var token: String
        var expiresAt: Date
        var user: AccountStore.User
    }

    struct ProfilePatch: Codable, Sendable, ValidatableInput {
        var displayName: String?
        var profile: [String: String]?

        static let fieldRules: [String: FieldRule] = ["displayName": AccountRules.displayName, "profile": AccountRules.profile]

        func validate() -> [GatewayError.FieldError] {
            var problems: [GatewayError.FieldError] = []
            if let displayName, displayName.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty || displayName.unicodeScalars.count > 100 {
                problems.append(.init(pointer: "/displayName", detail: "must be 1 to 100 characters"))
            }
            if let profile, profile.count > 50 || profile.contains(where: { $0.key.unicodeScalars.count > 64 || $0.value.unicodeScalars.count > 1000 }) {
                problems.append(.init(pointer: "/profile", detail: "at most 50 fields, keys up to 64 and values up to 1000 characters"))
            }
            return problems
        }
    }

    struct PasswordChange: Codable, Sendable, ValidatableInput {
        var currentPassword: String
        var newPassword: String

        static let fieldRules: [String: FieldRule] = ["newPassword": AccountRules.password]
    }

    struct KeyID: Codable, Sendable { var id: String }

    struct CreatedKey: Codable, Sendable {
        var secret: String
        var key: AccountStore.APIKey
    }


    struct Purge: Codable, Sendable, ValidatableInput {
        var tags: [String]?
        var all: Bool?

        static let fieldRules: [String: FieldRule] = ["tags": FieldRule(keywords: ["minItems": .number(1)]).described("Tags to purge; or send all: true.")]
        static let requiredAlternatives = [["tags"], ["all"]]
    }

    struct Purged: Codable, Sendable { var purged: [String] }

    // MARK: Operations

    var routes: [Route] {
        let store = self.store
        let authenticator = self.authenticator
        let throttle = self.throttle
        let registration = self.registration
        let cache = self.cache
        let verifications = resets.verifications
        return [
            Route.define("accounts.register", .post, "/auth/register", summary: "Create an account and sign in")
                .body(RegisterBody.self)
                .replies(SessionReply.self) { input, context in
                    guard registration == .open || context.principal.isAdmin else {
                        throw GatewayError.forbidden("Registration is closed on this gateway.")
                    }
                    let user = try await store.register(username: input.body.username, secret: .plain(input.body.password),
                                                        displayName: input.body.displayName, profile: input.body.profile ?? [:])
                    verifications.offer(user)
                    let session = try await store.createSession(userID: user.id)
                    return Reply(SessionReply(token: session.token, expiresAt: session.expiresAt, user: user), status: 201,
                                 headers: [.location: "/v1/me", .cacheControl: "no-store"])
                },
            Route.define("accounts.login", .post, "/auth/login", summary: "Sign in and receive a session token")
                .status(.ok)
                .body(LoginBody.self)
                .replies(SessionReply.self) { input, context in
                    let user = try await throttle.verify(store, identifier: input.body.username, secret: .plain(input.body.password),
                                                         address: context.principal.address, acceptsEmail: true)
                    guard let user else { throw GatewayError.unauthorized("The username or password is wrong.") }
                    let session = try await store.createSession(userID: user.id)
                    return Reply(SessionReply(token: session.token, expiresAt: session.expiresAt, user: user), status: 200,
                                 headers: [.cacheControl: "no-store"])
                },
            Route.define("accounts.logout", .post, "/auth/logout", summary: "End this session")
                .access(.user)
                .returns(NoContent.self) { _, context in
                    if case .bearerToken(let token)? = NativeCredentials.extract(from: context.headers) {
                        try await store.revokeSession(token: token)
                        authenticator.forget(credential: .bearerToken(token))
                    }
                    return NoContent()
                },
            Route.define("accounts.logoutEverywhere", .post, "/auth/logout-everywhere", summary: "End every session of this user")
                .access(.user)
                .returns(NoContent.self) { _, context in
                    guard let userID = context.principal.userID else { throw GatewayError.forbidden("This credential has no user.") }
                    try await store.revokeAllSessions(userID: userID)
                    authenticator.forget(userID: userID)
                    return NoContent()
                },
            Route.define("accounts.me", .get, "/me", summary: "The signed-in user's profile")
                .access(.user)
                .returns(AccountStore.User.self) { _, context in
                    try await Self.currentUser(context, store: store)
                },
            Route.define("accounts.updateMe", .patch, "/me", summary: "Change the display name or profile fields")
                .access(.user)
                .body(ProfilePatch.self)
                .returns(AccountStore.User.self) { input, context in
                    let user = try await Self.currentUser(context, store: store)
                    let updated = try await store.updateProfile(userID: user.id, displayName: input.body.displayName, profile: input.body.profile)
                    // A new address is unverified until its owner opens the link mailed to it.
                    if updated.email != user.email { verifications.offer(updated) }
                    return updated
                },
            Route.define("accounts.changePassword", .put, "/me/password", summary: "Change the password (ends every other session)")
                .access(.user)
                .body(PasswordChange.self)
                .returns(NoContent.self) { input, context in
                    let user = try await Self.currentUser(context, store: store)
                    let verified = try await throttle.verify(store, user: user, secret: .plain(input.body.currentPassword), address: context.principal.address)
                    guard verified else { throw GatewayError.forbidden("The current password is wrong.") }
                    try await store.setPassword(userID: user.id, secret: .plain(input.body.newPassword))
                    authenticator.forget(userID: user.id)
                    return NoContent()
                },
            Route.define("accounts.keys.list", .get, "/me/keys", summary: "The signed-in user's API keys")
                .access(.user)
                .returns(Page<AccountStore.APIKey>.self) { _, context in
                    // A user has few keys: one page, all of them.
                    Page(items: try await store.keys(userID: try await Self.currentUser(context, store: store).id), nextCursor: nil)
                },
            Route.define("accounts.keys.create", .post, "/me/keys", summary: "Create an API key (its secret is shown once)")
                .access(.user)
                .body(AccountStore.KeyGrant.self)
                .replies(CreatedKey.self) { [keyRules] input, context in
                    // Keys are made with a session, never with another key: a key cannot make one
                    // stronger than itself (more scopes or resources, a later expiry, a higher rate).
                    try Self.requireSession(context, for: "create API keys")
                    let user = try await Self.currentUser(context, store: store)
                    if let text = input.body.rate, let rate = RateSpec(parsing: text),
                       Double(rate.count) / rate.period > Double(keyRules.maxRate.count) / keyRules.maxRate.period {
                        throw GatewayError.invalid(field: "/rate", "must not exceed \(keyRules.maxRate), the rate keys get here (an administrator can set more)")
                    }
                    guard try await store.liveKeyCount(userID: user.id) < keyRules.maxPerUser else {
                        throw GatewayError.conflict("You hold \(keyRules.maxPerUser) keys, the most one user may: revoke one first.")
                    }
                    let (secret, key) = try await store.createKey(userID: user.id, grant: input.body)
                    return Reply(CreatedKey(secret: secret, key: key), status: 201,
                                 headers: [.location: "/v1/me/keys/\(key.id)", .cacheControl: "no-store"])
                },
            Route.define("accounts.keys.revoke", .delete, "/me/keys/{id}", summary: "Revoke one of the user's API keys")
                .access(.user)
                .path(KeyID.self)
                .returns(NoContent.self) { input, context in
                    try Self.requireSession(context, for: "revoke API keys")
                    let user = try await Self.currentUser(context, store: store)
                    guard try await store.revokeKey(id: input.path.id, userID: user.id) else { throw GatewayError.notFound("No such key.") }
                    authenticator.forget(userID: user.id)
                    return NoContent()
                },
            Route.define("accounts.cache.purge", .post, "/admin/cache/purge", summary: "Purge cached replies by tag, or all")
                .access(.admin)
                .status(200)
                .body(Purge.self)
                .returns(Purged.self) { [audit] input, context in
                    if input.body.all == true {
                        await cache.invalidate(tags: [ResponseCacheTags.all])
                        try await audit.record(context, action: "cache.purge", target: nil, detail: ["all": .bool(true)])
                        return Purged(purged: [ResponseCacheTags.all])
                    }
                    guard let tags = input.body.tags, !tags.isEmpty else { throw GatewayError.invalid(field: "/tags", "name at least one tag, or send all: true") }
                    await cache.invalidate(tags: tags)
                    try await audit.record(context, action: "cache.purge", target: nil, detail: ["tags": .array(tags.map(JSONValue.string))])
                    return Purged(purged: tags)
                },
            Route.define("accounts.reload", .post, "/admin/reload",
                                    summary: "Read plugins.yaml again and apply what can change live (on every instance of the database)")
                .access(.admin)
                .status(200)
                .returns(ReloadReport.self) { [reloads, audit] _, context in
                    let report = await reloads.reload()
                    guard report.status != .refused else {
                        throw GatewayError.invalid("The configuration was not reloaded; the running one stays. \(report.error ?? "")")
                    }
                    try await audit.record(context, action: "reload", target: nil, detail: ["changes": .array(report.changes.map(JSONValue.string))])
                    return report
                },
        ] + InboxOperations.operations(database: database) + PasswordResetOperations.operations(resets: resets)
            + GrantOperations.operations(store: store, authenticator: authenticator, audit: audit)
            + AdminUserOperations.operations(store: store, authenticator: authenticator, audit: audit)
            + AdminKeyOperations.operations(store: store, authenticator: authenticator, audit: audit)
            + AdminGatewayOperations.operations(admin: admin, cache: cache, reloads: reloads, audit: audit, clock: store.clock, authenticator: authenticator)
    }

    /// The audit log of the admin API's changes.
    var audit: AuditLog { AuditLog(database: database, clock: store.clock) }

    static func currentUser(_ context: OperationContext, store: AccountStore) async throws -> AccountStore.User {
        guard let userID = context.principal.userID, let user = try await store.user(id: userID) else {
            throw GatewayError.forbidden("This credential acts for no user.")
        }
        return user
    }
}

/// What the document states of account input; the store's and the inputs' checks enforce the same.
enum AccountRules {
    /// No control characters or line breaks, and one character that is not white space.
    static let username = FieldRule.text(1...AccountStore.longestUsername)
        .and(.pattern(#"^[^\x00-\x1F\x7F-\x9F\u2028\u2029]*[^\s\x00-\x1F\x7F-\x9F][^\x00-\x1F\x7F-\x9F\u2028\u2029]*$"#))
        .described("1 to 64 characters, not only white space, without control characters or line breaks.")
    static let password = FieldRule.text(AccountStore.passwordLength)
    static let displayName = FieldRule.nonBlank(maxLength: 100)
    static let profile = FieldRule(keywords: [
        "maxProperties": .number(50),
        "propertyNames": .object(["maxLength": .number(64)]),
        "additionalProperties": .object(["maxLength": .number(1000)]),
    ]).described("At most 50 fields; names up to 64 characters, values up to 1000.")
}

extension AccountStore.KeyGrant: ValidatableInput {
    private static let octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
    public static let fieldRules: [String: FieldRule] = [
        "label": .nonBlank(maxLength: 200),
        "scopes": .list(1...100, of: .pattern(#"^(\*|[a-z][a-z0-9-]{0,39}:(read|write|\*))$"#))
            .described("`<plugin>:read`, `<plugin>:write`, `<plugin>:*` or `*`."),
        "allowedAddresses": FieldRule.each(.pattern("^(\(octet)\\.\(octet)\\.\(octet)\\.\(octet)(/([0-9]|[12][0-9]|3[0-2]))?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)$"))
            .described("An IP address, or an IPv4 CIDR such as 10.0.0.0/8."),
        "expiresAt": FieldRule(keywords: [:]).described("In the future."),
        "rate": FieldRule.pattern("^ *[1-9][0-9]{0,8} */ *(s|sec|second|m|min|minute|h|hour|d|day) *$").described("Such as 100/min."),
    ]
}

/// Tag names the response cache reserves.
public enum ResponseCacheTags {
    /// Invalidating this tag empties the whole cache.
    public static let all = "*"
}
