import Foundation
import GatewayCore
import SQLKit

/// What administrators granted users: named rights to write data every user shares (a
/// suggestion dictionary, a transit feed, a bucket's definition), which routes guarded by
/// ``AccessRule/granted(_:)`` accept.
///
/// Scopes only narrow what a key may do; a signed-in user holds no scope by being signed in. So a
/// user writes shared data only as an administrator or with a grant stored here (`gateway user
/// grant NAME suggest:write`, or `PUT /v1/admin/users/{username}/grants`); a key of that user still
/// needs the scope among its own.
extension AccountStore {
    /// Whether `scope` can be granted: `<plugin>:write`, `<plugin>:read`, `<plugin>:*` or a named
    /// scope of an upstream route (`<plugin>:<name>`). Never `*` or `admin`: the administrator role
    /// is given with `gateway user add --admin`, not by grant.
    public static func isGrantable(_ scope: String) -> Bool {
        let parts = scope.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, PluginRegistration.isValidID(String(parts[0])), (1...40).contains(parts[1].utf8.count) else { return false }
        return parts[1] == "*" || parts[1].utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
    }

    /// The scopes granted to `userID`, sorted.
    public func grants(of userID: String) async throws -> [String] {
        struct Row: Decodable { var scope: String }
        return try await database.select().column("scope").from("gateway_user_grants").where("user_id", .equal, userID)
            .orderBy("scope").all(decoding: Row.self).map(\.scope)
    }

    /// Grants `scopes` to `userID` (granting one twice is no error) and returns the user's grants.
    /// 404 when there is no such account, 422 for a scope that cannot be granted.
    @discardableResult
    public func grant(_ scopes: [String], to userID: String) async throws -> [String] {
        try Self.checkGrantable(scopes)
        guard try await userRow(id: userID) != nil else { throw GatewayError.notFound("No such user.") }
        let held = Set(try await grants(of: userID))
        for scope in Set(scopes).subtracting(held).sorted() {
            do {
                try await database.insert(into: "gateway_user_grants").columns("user_id", "scope", "created_at")
                    .values(SQLBind(userID), SQLBind(scope), SQLBind(clock.now().timeIntervalSince1970)).run()
            } catch {
                // Granted at the same moment elsewhere: the primary key refused the second.
                guard try await grants(of: userID).contains(scope) else { throw error }
            }
        }
        return try await grants(of: userID)
    }

    /// Withdraws `scopes` from `userID` and returns the user's grants.
    @discardableResult
    public func revokeGrants(_ scopes: [String], from userID: String) async throws -> [String] {
        for scope in Set(scopes) {
            try await database.delete(from: "gateway_user_grants").where("user_id", .equal, userID).where("scope", .equal, scope).run()
        }
        return try await grants(of: userID)
    }

    /// Replaces the grants of `userID` with `scopes` and returns them.
    @discardableResult
    public func setGrants(_ scopes: [String], of userID: String) async throws -> [String] {
        try Self.checkGrantable(scopes)
        guard try await userRow(id: userID) != nil else { throw GatewayError.notFound("No such user.") }
        let held = Set(try await grants(of: userID))
        try await revokeGrants(Array(held.subtracting(scopes)), from: userID)
        return try await grant(Array(Set(scopes).subtracting(held)), to: userID)
    }

    private static func checkGrantable(_ scopes: [String]) throws {
        guard scopes.count <= 100 else { throw GatewayError.invalid(field: "/scopes", "must name at most 100 scopes") }
        for (index, scope) in scopes.enumerated() where !isGrantable(scope) {
            throw GatewayError.invalid(field: "/scopes/\(index)",
                                       "'\(scope.prefix(60))' cannot be granted: name <plugin>:write, <plugin>:read, <plugin>:* or <plugin>:<scope>")
        }
    }
}
