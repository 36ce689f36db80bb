import Foundation
import GatewayCore

/// The NEC BaaS user API beyond sign-up and login: looking users up, reading, changing and
/// deleting an account, with the gateway's accounts behind it (the native API's users).
///
/// - `GET users` (`username=`, `email=`, `skip`, `limit`: 0 for all, capped) answers the master key
///   or an administrator: `{"results": [...], "count": N}`, `count` only for a full listing; a
///   lookup that finds nobody is a 404, as the old service answered.
/// - `GET`, `PUT` and `DELETE users/{id}` answer the user themself, an administrator or the master
///   key; another user gets a 403.
///
/// A tenant's master key administers the tenant's own users only: the accounts registered through
/// `POST /1/{tenant}/users` or added to the tenant's realm (`nebula/{tenant}`) by an administrator,
/// never an administrator. To it every other account does not exist (404, left out of lists), as
/// it did not in the old service, whose tenants had users of their own.
/// - `POST request_password_reset` mails the user a one-time link to a page of the gateway where
///   they set a new password. It answers `{"result": "ok"}` for every user, known or not, in the
///   same time (the mail is queued): the old service's answer for an unknown user is not written
///   down, and a 404 there would tell anyone which usernames and addresses exist. `PUT` changes `username`, `email`, `password` (every session of the user
///   ends) and `options` (free JSON); `?etag=` makes it conditional (409 `etag_mismatch`).
extension NebulaDialect {
    var userRoutes: [Route] {
        [
            route(.get, "/1/{tenant}/users", "Look users up by username or email, or list them all (the master key)") { request, actor, context in
                guard actor.isManager else { throw GatewayError.forbidden("Only the master key lists users.") }
                let username = request.query("username").flatMap { $0.isEmpty ? nil : $0 }
                let email = request.query("email").flatMap { $0.isEmpty ? nil : $0 }
                let skip = try Self.integer(request.query("skip").map(JSONValue.string), "skip") ?? 0
                let limit = try Self.integer(request.query("limit").map(JSONValue.string), "limit") ?? 100
                guard skip >= 0 else { throw GatewayError.badRequest("skip must be a number from 0.") }
                guard limit >= 0 else { throw GatewayError.badRequest("limit must be a number of users, or 0 for all.") }
                let count = limit == 0 ? maxLimit : min(limit, maxLimit)
                let found = context.principal.isAdmin
                    ? try await accounts.accounts(username: username, email: email, skip: skip, limit: count)
                    : try await accounts.members(of: Self.realm(request), username: username, email: email, skip: skip, limit: count)
                if username != nil || email != nil, found.accounts.isEmpty { throw GatewayError.notFound("No such user.") }
                var reply: [String: JSONValue] = ["results": .array(found.accounts.map { Self.render($0, groups: nil) })]
                if let total = found.total { reply["count"] = .number(Double(total)) }
                return try Self.json(.object(reply))
            },
            route(.get, "/1/{tenant}/users/{id}", "Read a user (the user themself or the master key)") { request, actor, context in
                let account = try await ownAccount(request, actor: actor, context: context)
                return try Self.json(Self.render(account, groups: groups(of: account.id)))
            },
            route(.put, "/1/{tenant}/users/{id}", "Change a user: username, email, password, options (?etag= for a conditional change)") { request, actor, context in
                let account = try await ownAccount(request, actor: actor, context: context)
                if let etag = request.query("etag"), etag != Self.etag(of: account) {
                    return try Self.etagMismatch(current: Self.render(account, groups: groups(of: account.id)), "The user has changed: its etag is no longer \(etag).")
                }
                guard case .object(let members) = try Self.body(request) else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
                for key in members.keys where !["username", "email", "password", "options"].contains(key) {
                    throw GatewayError.invalid(field: "/\(key)", "is not a member of a user that may change (username, email, password, options)")
                }
                func text(_ key: String) throws -> String? {
                    guard let value = members[key], value != .null else { return nil }
                    guard case .string(let text) = value else { throw GatewayError.invalid(field: "/\(key)", "must be a string") }
                    return text
                }
                let updated = try await accounts.updateAccount(id: account.id, username: try text("username"), email: try text("email"),
                                                               password: try text("password"),
                                                               options: members["options"].flatMap { $0 == .null ? nil : $0 })
                return try Self.json(Self.render(updated, groups: groups(of: updated.id)))
            },
            route(.delete, "/1/{tenant}/users/{id}", "Delete a user (the user themself or the master key)") { request, actor, context in
                let account = try await ownAccount(request, actor: actor, context: context)
                if let etag = request.query("etag"), etag != Self.etag(of: account) {
                    return try Self.etagMismatch(current: Self.render(account, groups: groups(of: account.id)), "The user has changed: its etag is no longer \(etag).")
                }
                guard try await accounts.deleteAccount(id: account.id) else { throw GatewayError.notFound("No such user.") }
                return try Self.json(.object(["result": .string("ok")]))
            },
            route(.post, "/1/{tenant}/request_password_reset", "Mail a user a link to set a new password ({username} or {email})") { request, _, _ in
                guard case .object(let members) = try Self.body(request) else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
                let username = members["username"]?.stringValue, email = members["email"]?.stringValue
                guard username?.isEmpty == false || email?.isEmpty == false else { throw GatewayError.invalid(field: "/username", "send a username or an email") }
                try await accounts.requestPasswordReset(username: username, email: email)
                return try Self.json(.object(["result": .string("ok")]))
            },
        ]
    }

    /// The account `{id}` names, when the caller is that user, an administrator, or holds the
    /// master key of a tenant the account belongs to: 404 when there is none (or it is not the
    /// tenant's), 403 for another user's.
    func ownAccount(_ request: RouteRequest, actor: Actor, context: OperationContext) async throws -> AccountRecord {
        let id = request.pathParameters["id"] ?? ""
        guard actor.isManager || actor.userID == id else {
            if actor.userID == nil { throw GatewayError.unauthorized("Send X-Session-Token of this user's session, or the master key.") }
            throw GatewayError.forbidden("Only the user themself or the master key may do this.")
        }
        if actor.userID != id, !context.principal.isAdmin, try await !accounts.isAdministrable(id, by: Self.realm(request)) {
            throw GatewayError.notFound("No such user.")
        }
        guard let account = try await accounts.account(id: id) else { throw GatewayError.notFound("No such user.") }
        return account
    }

    /// The realm of the tenant a request names: the accounts its master key administers.
    static func realm(_ request: RouteRequest) -> String {
        "nebula/" + (request.pathParameters["tenant"] ?? "")
    }

    /// The groups a user belongs to, directly or through nested groups.
    func groups(of userID: String) -> [String] {
        service.groups.groups(of: userID).sorted()
    }

    /// A user as the old service wrote one; `groups` left out where it left them out (lists).
    static func render(_ account: AccountRecord, groups: [String]?) -> JSONValue {
        var members: [String: JSONValue] = [
            "_id": .string(account.id), "username": .string(account.username), "email": account.email.map(JSONValue.string) ?? .null,
            "options": account.options,
            "createdAt": .string(Timestamps.format(micros: Timestamps.micros(account.createdAt))),
            "updatedAt": .string(Timestamps.format(micros: Timestamps.micros(account.updatedAt))),
            "etag": .string(etag(of: account)),
        ]
        if let groups { members["groups"] = .array(groups.map(JSONValue.string)) }
        return .object(members)
    }

    /// A user's etag: a UUID-shaped digest of the account and its last change, the same on every
    /// instance, new with every change.
    static func etag(of account: AccountRecord) -> String {
        var digest: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in account.id.utf8 { digest = (digest ^ UInt64(byte)) &* 0x100_0000_01b3 }
        let micros = UInt64(bitPattern: Timestamps.micros(account.updatedAt))
        let high = ObjectStore.mix(digest ^ micros)
        let low = ObjectStore.mix(micros &+ digest)
        let hex = String(high, radix: 16).leftPadded(to: 16) + String(low, radix: 16).leftPadded(to: 16)
        let characters = Array(hex)
        return [0 ..< 8, 8 ..< 12, 12 ..< 16, 16 ..< 20, 20 ..< 32].map { String(characters[$0]) }.joined(separator: "-")
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
