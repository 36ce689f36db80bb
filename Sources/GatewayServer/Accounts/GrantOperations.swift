import Foundation
import GatewayCore

/// `/v1/admin/users/{username}/grants`: what an administrator granted a user (the same as
/// `gateway user grant`). A grant lets the user write shared data under an
/// ``AccessRule/granted(_:)`` route; it takes effect on the user's next request.
enum GrantOperations {
    struct UserName: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["username": AccountRules.username]
        var username: String
    }

    struct Grants: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "scopes": FieldRule.list(0...100, of: .pattern("^[a-z][a-z0-9-]{0,39}:(\\*|[a-z0-9-]{1,40})$"))
                .described("`<plugin>:write`, `<plugin>:read`, `<plugin>:*` or an upstream route's `<plugin>:<scope>`."),
        ]
        var scopes: [String]
    }

    static func operations(store: AccountStore, authenticator: AccountAuthenticator, audit: AuditLog) -> [Route] {
        @Sendable func user(_ username: String) async throws -> AccountStore.User { try await store.existingUser(named: username) }
        return [
            Route.define("accounts.grants.get", .get, "/admin/users/{username}/grants", summary: "What an administrator granted a user")
                .access(.admin)
                .path(UserName.self)
                .returns(Grants.self) { input, _ in
                    Grants(scopes: try await store.grants(of: try await user(input.path.username).id))
                },
            Route.define("accounts.grants.set", .put, "/admin/users/{username}/grants",
                                    summary: "Set what a user may write of the data everyone shares (such as suggest:write)")
                .access(.admin)
                .status(200)
                .path(UserName.self)
                .body(Grants.self)
                .returns(Grants.self) { input, context in
                    let found = try await user(input.path.username)
                    let wanted = input.body.scopes
                    let scopes = try await audit.change(context, action: "grants.set", target: "user:" + found.username, store: store) { store in
                        let scopes = try await store.setGrants(wanted, of: found.id)
                        return (scopes, ["scopes": .array(scopes.map(JSONValue.string))])
                    }
                    authenticator.forget(userID: found.id)
                    return Grants(scopes: scopes)
                },
        ]
    }
}
