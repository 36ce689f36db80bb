import Foundation
import GatewayCore
import SQLKit

/// Which accounts belong to which realm: a dialect's tenant or application (`nebula/tutorial`),
/// whose master key administers its own members and nobody else.
///
/// A master key is a secret an old client's app ships with; it must not reach accounts it never
/// had: not an administrator, not a user of the native API, not a user of another tenant. So an
/// account is a realm's only when it was registered through the realm's dialect or an
/// administrator added it (`gateway user realm add NAME REALM`), and an administrator is never a
/// realm's to administer, whatever it joined.
extension AccountStore {
    /// The longest realm name (a plugin's dialect and a tenant or application id).
    static let maxRealmLength = 200

    /// Adds `userID` to `realm` (no error when it is a member already). 404 when there is no such
    /// account, 422 for an empty or overlong realm name.
    public func addRealmMember(_ userID: String, to realm: String) async throws {
        guard !realm.isEmpty, realm.utf8.count <= Self.maxRealmLength else {
            throw GatewayError.invalid(field: "/realm", "must be 1 to \(Self.maxRealmLength) bytes")
        }
        guard try await userRow(id: userID) != nil else { throw GatewayError.notFound("No such user.") }
        guard try await !isRealmMember(userID, of: realm) else { return }
        do {
            try await database.insert(into: "gateway_realm_members").columns("realm", "user_id", "created_at")
                .values(SQLBind(realm), SQLBind(userID), SQLBind(clock.now().timeIntervalSince1970)).run()
        } catch {
            // Added at the same moment by another request or instance: the primary key refused the second.
            guard try await isRealmMember(userID, of: realm) else { throw error }
        }
    }

    /// Removes `userID` from `realm`; false when it was not a member.
    public func removeRealmMember(_ userID: String, from realm: String) async throws -> Bool {
        guard try await isRealmMember(userID, of: realm) else { return false }
        try await database.delete(from: "gateway_realm_members").where("realm", .equal, realm).where("user_id", .equal, userID).run()
        return true
    }

    /// Whether `userID` has been added to `realm`.
    public func isRealmMember(_ userID: String, of realm: String) async throws -> Bool {
        try await database.select().column("user_id").from("gateway_realm_members")
            .where("realm", .equal, realm).where("user_id", .equal, userID).first() != nil
    }

    /// The realms `userID` belongs to.
    public func realms(of userID: String) async throws -> [String] {
        try await database.select().column("realm").from("gateway_realm_members").where("user_id", .equal, userID).orderBy("realm")
            .all().map { try $0.decode(column: "realm", as: String.self) }
    }

    /// Whether `realm`'s master key may administer `userID`: a member that is not an administrator.
    public func isAdministrable(_ userID: String, by realm: String) async throws -> Bool {
        guard let user = try await userRow(id: userID), user.is_admin == 0 else { return false }
        return try await isRealmMember(userID, of: realm)
    }

    /// The members of `realm` that are not administrators, named `username` or registered with
    /// `email` (exact, in any case), or with neither all of them by creation, with their total.
    public func realmMembers(_ realm: String, username: String?, email: String?, skip: Int, limit: Int) async throws -> (users: [User], total: Int?) {
        func members(_ query: SQLSelectBuilder) -> SQLSelectBuilder {
            var query = query.from("gateway_users")
                .join("gateway_realm_members", on: SQLColumn("user_id", table: "gateway_realm_members"), .equal, SQLColumn("id", table: "gateway_users"))
                .where(SQLColumn("realm", table: "gateway_realm_members"), .equal, SQLBind(realm))
                .where(SQLColumn("is_admin", table: "gateway_users"), .equal, SQLBind(0))
            if let username { query = query.where(SQLColumn("username_key", table: "gateway_users"), .equal, SQLBind(Self.usernameKey(username))) }
            if let email { query = query.where(SQLColumn("email_key", table: "gateway_users"), .equal, SQLBind(Self.emailKey(email))) }
            return query
        }
        let rows = try await members(database.select().column(SQLColumn(SQLLiteral.all, table: SQLIdentifier("gateway_users"))))
            .orderBy(SQLColumn("created_at", table: "gateway_users")).orderBy(SQLColumn("id", table: "gateway_users"))
            .offset(skip).limit(limit).all(decoding: UserRow.self)
        var total: Int?
        if username == nil, email == nil {
            total = try await members(database.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")).first()?.decode(column: "n", as: Int.self)
        }
        return (rows.map(\.user), total)
    }
}

extension GatewayAccountDirectory {
    func addMember(_ userID: String, to realm: String) async throws {
        try await store.addRealmMember(userID, to: realm)
    }

    func isAdministrable(_ userID: String, by realm: String) async throws -> Bool {
        try await store.isAdministrable(userID, by: realm)
    }

    func members(of realm: String, username: String?, email: String?, skip: Int, limit: Int) async throws -> (accounts: [AccountRecord], total: Int?) {
        let found = try await store.realmMembers(realm, username: username, email: email, skip: max(0, skip), limit: max(0, min(limit, 1_000)))
        return (found.users.map(Self.record), found.total)
    }
}
