import Foundation
import GatewayCore
import SQLKit

/// `/v1/admin/users`: administrators manage accounts as `gateway user` does from the command line
/// — list and search, create, change (disable, administrator, consumer group, password), delete.
/// Every change is written to the audit log (``AuditLog``). An administrator cannot disable,
/// demote or delete their own account (409): a console must not lock its last user out.
enum AdminUserOperations {
    struct UserName: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["username": AccountRules.username]
        var username: String
    }

    struct ListQuery: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "q": FieldRule.text(0...100).described("A part of the username, display name or e-mail address (any case)."),
            "limit": PageQuery.limitRule, "cursor": PageQuery.cursorRule,
        ]
        var q: String?
        var limit: Int?
        var cursor: String?

        func validate() -> [GatewayError.FieldError] {
            var problems = PageQuery(limit: limit, cursor: cursor).validate()
            if let q, q.unicodeScalars.count > 100 { problems.append(.init(pointer: "q", detail: "must be at most 100 characters")) }
            return problems
        }
    }

    /// `/v1/admin/audit`'s query: a page's size and the cursor it gave.
    struct AuditQuery: Codable, Sendable, ValidatableInput {
        static let cursorPattern = "^[0-9]{1,20}(\\.[0-9]{1,20})?:[0-9a-f]{1,64}$"
        static let fieldRules: [String: FieldRule] = [
            "limit": PageQuery.limitRule,
            "cursor": FieldRule.pattern(cursorPattern).described("The `nextCursor` of the page before."),
        ]
        var limit: Int?
        var cursor: String?

        func validate() -> [GatewayError.FieldError] {
            var problems = PageQuery(limit: limit).validate()
            if let cursor, cursor.range(of: Self.cursorPattern, options: .regularExpression) == nil {
                problems.append(.init(pointer: "cursor", detail: "is not a cursor of this list"))
            }
            return problems
        }
    }

    struct NewUser: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "username": AccountRules.username, "password": AccountRules.password, "displayName": AccountRules.displayName,
            "email": FieldRule.text(3...254).described("An e-mail address."), "group": groupRule,
        ]
        var username: String
        var password: String
        var displayName: String?
        var email: String?
        var admin: Bool?
        /// A consumer group of `limits.groups`.
        var group: String?

        func validate() -> [GatewayError.FieldError] {
            var problems = AccountsService.ProfilePatch(displayName: displayName, profile: nil).validate()
            if username.unicodeScalars.count > AccountStore.longestUsername { problems.append(.init(pointer: "/username", detail: "must be at most 64 characters")) }
            if let email, !(3...254).contains(email.unicodeScalars.count) { problems.append(.init(pointer: "/email", detail: "must be 3 to 254 characters")) }
            if let problem = AdminUserOperations.groupProblem(group) { problems.append(problem) }
            return problems
        }
    }

    struct UserChange: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "password": AccountRules.password, "displayName": AccountRules.displayName,
            "group": groupRule,
        ]
        var disabled: Bool?
        var admin: Bool?
        /// A consumer group of `limits.groups`; `""` takes the user out of theirs.
        var group: String?
        /// A new password (ends the user's sessions).
        var password: String?
        var displayName: String?

        func validate() -> [GatewayError.FieldError] {
            var problems = AccountsService.ProfilePatch(displayName: displayName, profile: nil).validate()
            if let password, !AccountStore.passwordLength.contains(password.unicodeScalars.count) {
                problems.append(.init(pointer: "/password", detail: "must be 8 to 1024 characters"))
            }
            if let problem = AdminUserOperations.groupProblem(group) { problems.append(problem) }
            return problems
        }
    }

    /// A group's name as the admin API takes it: `""` (none), or lowercase letters, digits, `-` and
    /// `_` starting with a letter, at most 64 (a name plugins.yaml does not configure has no effect).
    static let groupPattern = "^([a-z][a-z0-9_-]{0,63})?$"
    static let groupRule = FieldRule.pattern(groupPattern).described("A consumer group of limits.groups; \"\" for none.")

    static func groupProblem(_ group: String?) -> GatewayError.FieldError? {
        guard let group, group.range(of: groupPattern, options: .regularExpression) == nil else { return nil }
        return .init(pointer: "/group", detail: "'\(group.prefix(64))' is not a group name (lowercase letters, digits, - and _, starting with a letter)")
    }

    static func operations(store: AccountStore, authenticator: AccountAuthenticator, audit: AuditLog) -> [Route] {
        @Sendable func user(_ username: String) async throws -> AccountStore.User { try await store.existingUser(named: username) }
        return [
            Route.define("accounts.admin.users.list", .get, "/admin/users", summary: "Users, by username, with a search")
                .access(.admin)
                .query(ListQuery.self)
                .returns(Page<AccountStore.User>.self) { input, _ in
                    let limit = input.query.limit ?? 50
                    let (users, next) = try await store.searchUsers(input.query.q, after: input.query.cursor, limit: limit)
                    return Page(items: users, nextCursor: next)
                },
            Route.define("accounts.admin.users.get", .get, "/admin/users/{username}", summary: "One user")
                .access(.admin)
                .path(UserName.self)
                .returns(AccountStore.User.self) { input, _ in try await user(input.path.username) },
            Route.define("accounts.admin.users.create", .post, "/admin/users", summary: "Create a user (an administrator with admin: true)")
                .access(.admin)
                .body(NewUser.self)
                .returns(AccountStore.User.self) { input, context in
                    let body = input.body
                    return try await audit.change(context, action: "user.create", target: "user:" + body.username, store: store) { store in
                        var made = try await store.register(username: body.username, secret: .plain(body.password), displayName: body.displayName,
                                                            isAdmin: body.admin == true, email: body.email)
                        if let group = body.group, !group.isEmpty {
                            try await store.setConsumerGroup(userID: made.id, group)
                            made.consumerGroup = group
                        }
                        return (made, ["admin": .bool(made.isAdmin), "group": made.consumerGroup.map(JSONValue.string) ?? .null])
                    }
                },
            Route.define("accounts.admin.users.update", .patch, "/admin/users/{username}",
                         summary: "Disable or enable a user, make or unmake an administrator, set their consumer group or password")
                .access(.admin)
                .path(UserName.self)
                .body(UserChange.self)
                .returns(AccountStore.User.self) { input, context in
                    let found = try await user(input.path.username)
                    let change = input.body
                    if found.id == context.principal.userID, change.disabled == true || change.admin == false {
                        throw GatewayError.conflict("An administrator cannot disable or demote their own account; another administrator can.")
                    }
                    try await audit.change(context, action: "user.update", target: "user:" + found.username, store: store) { store in
                        var detail: [String: JSONValue] = [:]
                        if let disabled = change.disabled, disabled != found.disabled {
                            try await store.setDisabled(userID: found.id, disabled)
                            detail["disabled"] = .bool(disabled)
                        }
                        if let admin = change.admin, admin != found.isAdmin {
                            try await store.setAdmin(userID: found.id, admin)
                            detail["admin"] = .bool(admin)
                        }
                        if let group = change.group {
                            try await store.setConsumerGroup(userID: found.id, group.isEmpty ? nil : group)
                            detail["group"] = group.isEmpty ? .null : .string(group)
                        }
                        if let password = change.password {
                            try await store.setPassword(userID: found.id, secret: .plain(password))
                            detail["password"] = .string("changed")
                        }
                        if let displayName = change.displayName {
                            _ = try await store.updateProfile(userID: found.id, displayName: displayName, profile: nil)
                            detail["displayName"] = .string(displayName)
                        }
                        return ((), detail.isEmpty ? nil : detail)
                    }
                    // Remembered credentials of the user (here and on the other instances) are dropped:
                    // a disabled user's next request is refused, a new role or group applies at once.
                    authenticator.forget(userID: found.id)
                    return try await user(found.username)
                },
            Route.define("accounts.admin.users.delete", .delete, "/admin/users/{username}", summary: "Delete a user with their sessions and keys")
                .access(.admin)
                .path(UserName.self)
                .returns(NoContent.self) { input, context in
                    let found = try await user(input.path.username)
                    if found.id == context.principal.userID {
                        throw GatewayError.conflict("An administrator cannot delete their own account; another administrator can.")
                    }
                    try await audit.change(context, action: "user.delete", target: "user:" + found.username, store: store) { store in
                        (try await store.deleteUser(id: found.id), [:])
                    }
                    authenticator.forget(userID: found.id)
                    return NoContent()
                },
            Route.define("accounts.admin.audit", .get, "/admin/audit", summary: "The audit log: every change made through the admin API, newest first")
                .access(.admin)
                .query(AuditQuery.self)
                .returns(Page<AuditLog.Entry>.self) { input, _ in
                    let (entries, next) = try await audit.entries(before: input.query.cursor, limit: input.query.limit ?? 50)
                    return Page(items: entries, nextCursor: next)
                },
        ]
    }
}

extension AccountStore {
    /// The user named `username`, or a 404 saying there is none (for the administrators' routes).
    func existingUser(named username: String) async throws -> User {
        guard let user = try await user(named: username) else { throw GatewayError.notFound("No user named '\(username.prefix(64))'.") }
        return user
    }

    /// Users whose username, display name or e-mail address holds `search` (any case), by
    /// username, after the cursor (the last username key of the page before); the next cursor.
    func searchUsers(_ search: String?, after cursor: String?, limit: Int) async throws -> (users: [User], next: String?) {
        var query = database.select().column("*").from("gateway_users").orderBy("username_key").limit(limit + 1)
        if let cursor { query = query.where("username_key", .greaterThan, cursor) }
        let text = (search ?? "").trimmingCharacters(in: .whitespaces)
        if !text.isEmpty {
            // Compared as the names are kept (the username's and address's keys), LIKE's own
            // characters escaped: the search matches text only. (Display names compare through
            // LOWER(), which SQLite applies to ASCII letters only.)
            func like(_ column: any SQLExpression, _ text: String) -> any SQLExpression {
                let escaped = text.replacingOccurrences(of: "!", with: "!!").replacingOccurrences(of: "%", with: "!%").replacingOccurrences(of: "_", with: "!_")
                return SQLBinaryExpression(left: column, op: SQLBinaryOperator.like,
                                           right: SQLList([SQLBind("%" + escaped + "%"), SQLRaw("ESCAPE '!'")], separator: SQLRaw(" ")))
            }
            query = query.where { group in
                group.where(like(SQLColumn("username_key"), Self.usernameKey(text)))
                    .orWhere(like(SQLColumn("email_key"), Self.emailKey(text)))
                    .orWhere(like(SQLFunction("LOWER", args: SQLColumn("display_name")), text.lowercased()))
            }
        }
        let rows = try await query.all(decoding: UserRow.self)
        let page = Array(rows.prefix(limit))
        return (page.map(\.user), rows.count > limit ? page.last?.username_key : nil)
    }
}

/// The audit log (`gateway_audit`): who changed what through the admin API, when and from where.
/// A change of the database (users, keys, grants) and its entry are written in one transaction
/// (``change(_:action:target:store:_:)``): both, or neither. A change elsewhere (the cache, the
/// configuration file, a plugin's action) is recorded once it is made. Entries are never changed.
struct AuditLog: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock

    /// One entry as `/v1/admin/audit` shows it.
    struct Entry: Codable, Sendable {
        var id: String
        var at: Date
        /// The account (or key, or provider subject) that acted, its name and kind of credential.
        var actor: String
        var actorName: String?
        var credential: String?
        var address: String
        /// What was done (`user.update`, `grants.set`, `cache.purge`, `reload`).
        var action: String
        /// What it was done to (`user:ada`).
        var target: String?
        var detail: JSONValue
    }

    struct Row: Codable {
        var id: String
        var at: Double
        var actor: String
        var actor_name: String?
        var credential: String?
        var address: String
        var action: String
        var target: String?
        var detail: String

        var entry: Entry {
            Entry(id: id, at: Date(timeIntervalSince1970: at), actor: actor, actorName: actor_name, credential: credential, address: address,
                  action: action, target: target, detail: (try? JSONValue.parse(detail)) ?? .object([:]))
        }
    }

    /// Runs `work` on the store of one transaction and writes its entry there too (unless `work`
    /// gives no detail: nothing changed): the change and its record are kept together or not at all.
    func change<R: Sendable>(_ context: OperationContext, action: String, target: String?, store: AccountStore,
                             _ work: @escaping @Sendable (AccountStore) async throws -> (result: R, detail: [String: JSONValue]?)) async throws -> R {
        try await change(context, action: action, target: { _ in target }, store: store, work)
    }

    /// As above, for a change whose target is known once it is made (a new key's id).
    func change<R: Sendable>(_ context: OperationContext, action: String, target: @escaping @Sendable (R) -> String?, store: AccountStore,
                             _ work: @escaping @Sendable (AccountStore) async throws -> (result: R, detail: [String: JSONValue]?)) async throws -> R {
        try await database.transaction { db in
            let (result, detail) = try await work(store.on(db))
            if let detail { try await AuditLog(database: db, clock: clock).record(context, action: action, target: target(result), detail: detail) }
            return result
        }
    }

    func record(_ context: OperationContext, action: String, target: String?, detail: [String: JSONValue]) async throws {
        let principal = context.principal
        let actor = principal.userID.map { "user:" + $0 } ?? principal.limitKey
        let row = Row(id: AccountStore.newID(), at: clock.now().timeIntervalSince1970, actor: actor, actor_name: principal.displayName,
                      credential: principal.credentialKind, address: principal.address, action: action, target: target,
                      detail: String(decoding: try JSONEncoder().encode(JSONValue.object(detail)), as: UTF8.self))
        try await database.insert(into: "gateway_audit").model(row).run()
    }

    /// Entries newest first, before the cursor (`<at>:<id>` of the last entry of the page before).
    func entries(before cursor: String?, limit: Int) async throws -> (entries: [Entry], next: String?) {
        var query = database.select().column("*").from("gateway_audit").orderBy("at", .descending).orderBy("id", .descending).limit(limit + 1)
        if let cursor {
            let parts = cursor.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let at = Double(parts[0]) else { throw GatewayError.invalid(field: "/cursor", "is not a cursor of this list") }
            let id = String(parts[1])
            query = query.where { group in
                group.where("at", .lessThan, at).orWhere { same in same.where("at", .equal, at).where("id", .lessThan, id) }
            }
        }
        let rows = try await query.all(decoding: Row.self)
        let page = Array(rows.prefix(limit))
        return (page.map(\.entry), rows.count > limit ? page.last.map { "\($0.at):\($0.id)" } : nil)
    }
}

/// `/v1/admin/keys` and `/v1/admin/providers`: administrators manage any user's keys and master
/// keys as `gateway key` does (the secret shown once), and see the identity providers' keys.
enum AdminKeyOperations {
    struct Owner: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["user": AccountRules.username.described("The owner's username; absent: master keys.")]
        var user: String?
    }

    /// A key an administrator makes: a user's (`user`) or a master key, with what a user's own
    /// grant holds and what only an administrator sets (a bucket of its own, a consumer group,
    /// any rate).
    struct AdminKeyGrant: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = AccountStore.KeyGrant.fieldRules.merging([
            "user": AccountRules.username,
            "scopes": .list(1...100, of: .pattern(#"^(\*|admin|[a-z][a-z0-9-]{0,39}:(read|write|\*))$"#))
                .described("`<plugin>:read`, `<plugin>:write`, `<plugin>:*`, `*`, or (a master key) `admin`."),
            "group": AdminUserOperations.groupRule,
        ]) { $1 }
        var user: String?
        var label: String
        var scopes: [String]
        var resources: [String: [String]]?
        var allowedAddresses: [String]?
        var expiresAt: Date?
        var rate: String?
        var ownLimit: Bool?
        var group: String?

        func validate() -> [GatewayError.FieldError] {
            var problems = AccountStore.KeyGrant(label: label, scopes: scopes, resources: resources, allowedAddresses: allowedAddresses,
                                                 expiresAt: nil, rate: rate).problems(now: Date())
            if let problem = AdminUserOperations.groupProblem(group) { problems.append(problem) }
            return problems
        }
    }

    struct KeyID: Codable, Sendable { var id: String }

    static func operations(store: AccountStore, authenticator: AccountAuthenticator, audit: AuditLog) -> [Route] {
        [
            Route.define("accounts.admin.keys.list", .get, "/admin/keys", summary: "A user's API keys, or the master keys")
                .access(.admin)
                .query(Owner.self)
                .returns(Page<AccountStore.APIKey>.self) { input, _ in
                    var owner: String?
                    if let name = input.query.user { owner = try await store.existingUser(named: name).id }
                    return Page(items: try await store.keys(userID: owner), nextCursor: nil)
                },
            Route.define("accounts.admin.keys.create", .post, "/admin/keys", summary: "Create a user's key or a master key (its secret is shown once)")
                .access(.admin)
                .body(AdminKeyGrant.self)
                .replies(AccountsService.CreatedKey.self) { input, context in
                    let body = input.body
                    // A credential held to scopes (a master key, a provider's token) makes no key
                    // stronger than itself.
                    if context.principal.isBoundByScopes, let scope = body.scopes.first(where: { !Principal.covers(context.principal.scopes, $0) }) {
                        throw GatewayError.forbidden("This credential may not make a key with the scope '\(scope.prefix(60))': it does not hold it.")
                    }
                    var owner: AccountStore.User?
                    if let name = body.user { owner = try await store.existingUser(named: name) }
                    let grant = AccountStore.KeyGrant(label: body.label, scopes: body.scopes, resources: body.resources, allowedAddresses: body.allowedAddresses,
                                                      expiresAt: body.expiresAt, rate: body.rate)
                    let (secret, key) = try await audit.change(context, action: "key.create", target: { (made: (secret: String, key: AccountStore.APIKey)) in "key:" + made.key.id },
                                                               store: store) { [owner] store in
                        let made = try await store.createKey(userID: owner?.id, grant: grant, ownLimit: body.ownLimit == true,
                                                             consumerGroup: body.group.flatMap { $0.isEmpty ? nil : $0 })
                        return (made, ["owner": owner.map { .string($0.username) } ?? .null, "label": .string(made.key.label),
                                       "scopes": .array(made.key.scopes.map(JSONValue.string))])
                    }
                    return Reply(AccountsService.CreatedKey(secret: secret, key: key), status: 201, headers: [.cacheControl: "no-store"])
                },
            Route.define("accounts.admin.keys.revoke", .delete, "/admin/keys/{id}", summary: "Revoke any key")
                .access(.admin)
                .path(KeyID.self)
                .returns(NoContent.self) { input, context in
                    if case .apiKey(let own) = context.principal.kind, own == input.path.id {
                        throw GatewayError.conflict("A key cannot revoke itself through the admin API; another administrator, or `gateway key revoke`, can.")
                    }
                    let id = input.path.id
                    try await audit.change(context, action: "key.revoke", target: "key:" + id, store: store) { store in
                        guard try await store.revokeKey(id: id, userID: nil) else { throw GatewayError.notFound("No such key.") }
                        return ((), [:])
                    }
                    // Whose it was is not looked up: every remembered credential is dropped (here and on
                    // the other instances), so the key is refused from its next request.
                    authenticator.forget(userID: nil)
                    return NoContent()
                },
            Route.define("accounts.admin.providers", .get, "/admin/providers", summary: "The identity providers of auth.providers and their keys")
                .access(.admin)
                .returns(Page<IdentityProviders.State>.self) { _, _ in
                    Page(items: authenticator.identities?.states(reasons: true) ?? [], nextCursor: nil)
                },
        ]
    }
}
