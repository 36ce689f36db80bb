import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import SQLKit
import Testing

/// `/v1/admin/users` and `/v1/admin/audit`: administrators manage accounts through the API, and
/// every change is in the audit log.
@Suite("admin API: users and the audit log")
struct AdminUserTests {
    static func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer " + token, .contentType: "application/json"] }

    /// An administrator's session in `gateway`.
    static func administrator(_ gateway: TestGateway, _ name: String = "root") async throws -> (token: String, userID: String) {
        let root = try await gateway.register(name)
        try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
        gateway.gateway.forgetCredentials(userID: root.userID)
        return root
    }

    @Test("administrators only: a guest 401, a user and a user's key 403")
    func administratorsOnly() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let user = try await gateway.register("plain")
            let key = try await gateway.createKey(token: user.token, grant: #"{"label": "k", "scopes": ["*"]}"#)
            #expect(try await gateway.gateway.handle(.get, "/v1/admin/users").status == 401)
            #expect(try await gateway.gateway.handle(.get, "/v1/admin/users", headers: Self.bearer(user.token)).status == 403)
            #expect(try await gateway.gateway.handle(.get, "/v1/admin/audit", headers: [HTTPField.Name("X-Api-Key")!: key.secret]).status == 403)
            let create = try await gateway.gateway.handle(.post, "/v1/admin/users", headers: Self.bearer(user.token),
                                                          body: ByteBuffer(string: #"{"username": "intruder", "password": "long enough password", "admin": true}"#))
            #expect(create.status == 403)
            #expect(try await gateway.gateway.accounts.user(named: "intruder") == nil)
        }
    }

    @Test("deleting a user removes everything kept for them: sessions, keys, grants, notifications, history, reset links", arguments: TestStorage.available)
    func deleteRemovesEverything(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            let root = try await Self.administrator(gateway)
            let ada = try await gateway.register("ada")
            _ = try await gateway.createKey(token: ada.token, grant: #"{"label": "k", "scopes": ["*"]}"#)
            let db = gateway.gateway.database.sql
            let inbox = UserInbox(database: db)
            try await inbox.post(userID: ada.userID, plugin: "notes", title: "Hello", body: "A note", link: nil)
            try await inbox.record(userID: ada.userID, plugin: "notes", resource: "n1", title: "A note")
            _ = try await gateway.gateway.accounts.grant(["notes:write"], to: ada.userID)
            // A reset link and a verification link waiting (as their flows leave them).
            try await db.raw("INSERT INTO gateway_password_resets (token_hash, user_id, created_at, expires_at) VALUES ('r1', \(bind: ada.userID), 0, 1)").run()
            try await db.raw("""
                INSERT INTO gateway_email_verifications (token_hash, user_id, email_key, created_at, expires_at) VALUES ('v1', \(bind: ada.userID), 'ada@example.org', 0, 1)
                """).run()
            #expect(try await gateway.gateway.handle(.delete, "/v1/admin/users/ada", headers: Self.bearer(root.token)).status == 204)
            for table in ["gateway_users", "gateway_sessions", "gateway_api_keys", "gateway_user_grants", "gateway_notifications", "gateway_history",
                          "gateway_password_resets", "gateway_email_verifications", "gateway_identities", "gateway_realm_members"] {
                let column = table == "gateway_users" ? "id" : "user_id"
                let rows = try await db.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n").from(table)
                    .where(SQLColumn(column), .equal, SQLBind(ada.userID)).first(decoding: Count.self)
                #expect(rows?.n == 0, "\(table) keeps \(rows?.n ?? -1) rows of the deleted user")
            }
        }
    }

    struct Count: Decodable { var n: Int }

    @Test("a change whose audit entry cannot be written is not made")
    func auditedOrNothing() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let root = try await Self.administrator(gateway)
            let ada = try await gateway.register("ada")
            try await gateway.gateway.database.sql.raw("DROP TABLE gateway_audit").run()
            let refused = try await gateway.gateway.handle(.patch, "/v1/admin/users/ada", headers: Self.bearer(root.token),
                                                           body: ByteBuffer(string: #"{"disabled": true, "admin": true}"#))
            #expect(refused.status >= 500, "\(refused.text)")
            let kept = try #require(try await gateway.gateway.accounts.user(id: ada.userID))
            #expect(!kept.disabled && !kept.isAdmin, "the change was rolled back with its entry")
            let key = try await gateway.gateway.handle(.post, "/v1/admin/keys", headers: Self.bearer(root.token),
                                                       body: ByteBuffer(string: #"{"user": "ada", "label": "x", "scopes": ["*"]}"#))
            #expect(key.status >= 500)
            #expect(try await gateway.gateway.accounts.keys(userID: ada.userID).isEmpty)
        }
    }

    @Test("create, search and page, change (disable, administrator, group, password), delete; each in the audit log", arguments: TestStorage.available)
    func manageUsers(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            let root = try await Self.administrator(gateway)
            func call(_ method: HTTPRequest.Method, _ path: String, _ body: String? = nil) async throws -> InProcessResponse {
                try await gateway.gateway.handle(method, path, headers: Self.bearer(root.token), body: body.map { ByteBuffer(string: $0) })
            }
            let made = try await call(.post, "/v1/admin/users",
                                      #"{"username": "Ada", "password": "analytical engine", "displayName": "Ada Lovelace", "email": "ada@example.org", "group": "partners"}"#)
            #expect(made.status == 201, "\(made.text)")
            #expect(made.object["username"] as? String == "Ada" && made.object["consumerGroup"] as? String == "partners")
            #expect(try await call(.post, "/v1/admin/users", #"{"username": "ada", "password": "another password"}"#).status == 409)
            #expect(try await call(.post, "/v1/admin/users", #"{"username": "bad", "password": "long enough password", "group": "Not A Group"}"#).status == 422)
            #expect(try await call(.post, "/v1/admin/users", #"{"username": "short", "password": "x"}"#).status == 422)
            for name in ["babbage", "byron", "somerville"] {
                #expect(try await call(.post, "/v1/admin/users", #"{"username": "\#(name)", "password": "long enough password"}"#).status == 201)
            }
            // Search by a part of the name, the display name or the address, in any case.
            func names(_ reply: InProcessResponse) -> [String] { (reply.object["items"] as? [[String: Any]] ?? []).compactMap { $0["username"] as? String } }
            #expect(names(try await call(.get, "/v1/admin/users?q=LOVELACE")) == ["Ada"])
            #expect(names(try await call(.get, "/v1/admin/users?q=example.org")) == ["Ada"])
            #expect(names(try await call(.get, "/v1/admin/users?q=b")) == ["babbage", "byron"])
            #expect(names(try await call(.get, "/v1/admin/users?q=%25")).isEmpty, "a LIKE wildcard is searched for, not a wildcard")
            #expect(try await call(.post, "/v1/admin/users", #"{"username": "john_doe", "password": "long enough password"}"#).status == 201)
            #expect(names(try await call(.get, "/v1/admin/users?q=N_D")) == ["john_doe"])
            #expect(names(try await call(.get, "/v1/admin/users?q=n%25d")).isEmpty)
            #expect(try await call(.delete, "/v1/admin/users/john_doe").status == 204)
            // Pages of two: every user once, by username.
            var seen: [String] = []
            var cursor: String?
            repeat {
                let page = try await call(.get, "/v1/admin/users?limit=2" + (cursor.map { "&cursor=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""))
                seen += names(page)
                cursor = page.object["nextCursor"] as? String
            } while cursor != nil
            #expect(seen == ["Ada", "babbage", "byron", "root", "somerville"])

            // Disabled: the user's session is refused at once; enabled again, they sign in.
            let ada = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: [.contentType: "application/json"],
                                                       body: ByteBuffer(string: #"{"username": "ada", "password": "analytical engine"}"#))
            let adaToken = try #require(ada.object["token"] as? String)
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(adaToken)).status == 200)
            let disabled = try await call(.patch, "/v1/admin/users/ada", #"{"disabled": true}"#)
            #expect(disabled.status == 200 && disabled.object["disabled"] as? Bool == true, "\(disabled.text)")
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(adaToken)).status == 401)
            #expect(try await call(.patch, "/v1/admin/users/ada", #"{"disabled": false, "admin": true, "group": "", "password": "difference engine"}"#).status == 200)
            let again = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: [.contentType: "application/json"],
                                                         body: ByteBuffer(string: #"{"username": "ada", "password": "difference engine"}"#))
            let newToken = try #require(again.object["token"] as? String, "\(again.text)")
            // An administrator now: she may list users.
            #expect(try await gateway.gateway.handle(.get, "/v1/admin/users", headers: Self.bearer(newToken)).status == 200)
            #expect(try await call(.get, "/v1/admin/users/ada").object["consumerGroup"] == nil)
            // No administrator locks themselves out.
            #expect(try await call(.patch, "/v1/admin/users/root", #"{"admin": false}"#).status == 409)
            #expect(try await call(.patch, "/v1/admin/users/root", #"{"disabled": true}"#).status == 409)
            #expect(try await call(.delete, "/v1/admin/users/root").status == 409)
            #expect(try await call(.delete, "/v1/admin/users/byron").status == 204)
            #expect(try await call(.get, "/v1/admin/users/byron").status == 404)
            #expect(try await call(.patch, "/v1/admin/users/nobody", #"{"disabled": true}"#).status == 404)

            // The audit log, newest first, in pages; a password is never written.
            var actions: [String] = []
            var entries: [[String: Any]] = []
            cursor = nil
            repeat {
                let page = try await call(.get, "/v1/admin/audit?limit=3" + (cursor.map { "&cursor=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""))
                #expect(page.status == 200, "\(page.text)")
                let items = page.object["items"] as? [[String: Any]] ?? []
                entries += items
                actions += items.compactMap { $0["action"] as? String }
                cursor = page.object["nextCursor"] as? String
            } while cursor != nil
            #expect(actions == ["user.delete", "user.update", "user.update", "user.delete", "user.create", "user.create", "user.create", "user.create", "user.create"],
                    "\(actions)")
            #expect(entries.allSatisfy { $0["actor"] as? String == "user:" + root.userID && $0["credential"] as? String == "session" })
            let change = try #require(entries.first { $0["action"] as? String == "user.update" && ($0["detail"] as? [String: Any])?["password"] != nil })
            #expect((change["detail"] as? [String: Any])?["password"] as? String == "changed")
            #expect(!"\(entries)".contains("difference engine"))
            #expect(entries.first?["target"] as? String == "user:byron")
        }
    }

    @Test("grants, cache purges and reloads are audited too")
    func otherChangesAudited() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let root = try await Self.administrator(gateway)
            _ = try await gateway.register("writer")
            #expect(try await gateway.gateway.handle(.put, "/v1/admin/users/writer/grants", headers: Self.bearer(root.token),
                                                     body: ByteBuffer(string: #"{"scopes": ["notes:write"]}"#)).status == 200)
            #expect(try await gateway.gateway.handle(.post, "/v1/admin/cache/purge", headers: Self.bearer(root.token),
                                                     body: ByteBuffer(string: #"{"all": true}"#)).status == 200)
            let log = try await gateway.gateway.handle(.get, "/v1/admin/audit", headers: Self.bearer(root.token))
            let actions = (log.object["items"] as? [[String: Any]] ?? []).compactMap { $0["action"] as? String }
            #expect(actions == ["cache.purge", "grants.set"], "\(log.text)")
            #expect(try await gateway.gateway.handle(.get, "/v1/admin/audit?cursor=nonsense", headers: Self.bearer(root.token)).status == 422)
        }
    }

    @Test("keys: an administrator makes a user's key or a master key (secret once), lists and revokes any; the revoked key is refused at once", arguments: TestStorage.available)
    func manageKeys(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            let root = try await Self.administrator(gateway)
            _ = try await gateway.register("owner")
            func call(_ method: HTTPRequest.Method, _ path: String, _ body: String? = nil) async throws -> InProcessResponse {
                try await gateway.gateway.handle(method, path, headers: Self.bearer(root.token), body: body.map { ByteBuffer(string: $0) })
            }
            let made = try await call(.post, "/v1/admin/keys", #"{"user": "owner", "label": "reader", "scopes": ["notes:read"], "rate": "9000/min", "ownLimit": true, "group": "partners"}"#)
            #expect(made.status == 201, "\(made.text)")
            #expect(made.headers[.cacheControl] == "no-store")
            let secret = try #require(made.object["secret"] as? String)
            let key = try #require(made.object["key"] as? [String: Any])
            #expect(key["consumerGroup"] as? String == "partners" && key["ownLimit"] as? Bool == true && key["rate"] as? String == "9000/min")
            let apiKey = HTTPField.Name("X-Api-Key")!
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: secret]).status == 200)
            // A user's key never administers; a master key with admin does.
            #expect(try await call(.post, "/v1/admin/keys", #"{"user": "owner", "label": "x", "scopes": ["admin"]}"#).status == 422)
            let master = try await call(.post, "/v1/admin/keys", #"{"label": "ops", "scopes": ["admin"]}"#)
            let masterSecret = try #require(master.object["secret"] as? String)
            #expect(try await gateway.gateway.handle(.get, "/v1/admin/users", headers: [apiKey: masterSecret]).status == 200)
            // A key held to `admin` makes no key stronger than itself, and does not revoke itself.
            let escalate = try await gateway.gateway.handle(.post, "/v1/admin/keys", headers: [apiKey: masterSecret, .contentType: "application/json"],
                                                            body: ByteBuffer(string: #"{"label": "wider", "scopes": ["*"]}"#))
            #expect(escalate.status == 403, "\(escalate.text)")
            let masterID = try #require((master.object["key"] as? [String: Any])?["id"] as? String)
            #expect(try await gateway.gateway.handle(.delete, "/v1/admin/keys/\(masterID)", headers: [apiKey: masterSecret]).status == 409)
            #expect(try await call(.post, "/v1/admin/keys", #"{"user": "nobody", "label": "x", "scopes": ["*"]}"#).status == 404)
            #expect(try await call(.post, "/v1/admin/keys", #"{"label": "x", "scopes": ["*"], "group": "Bad Group"}"#).status == 422)
            // Lists: the user's keys, the master keys; never a secret.
            let owned = try await call(.get, "/v1/admin/keys?user=owner")
            #expect((owned.object["items"] as? [[String: Any]])?.count == 1 && !owned.text.contains(secret))
            let masters = try await call(.get, "/v1/admin/keys")
            #expect((masters.object["items"] as? [[String: Any]])?.compactMap { $0["label"] as? String } == ["ops"])
            // Revoked: refused from the next request.
            let id = try #require(key["id"] as? String)
            #expect(try await call(.delete, "/v1/admin/keys/\(id)").status == 204)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: secret]).status == 401)
            #expect(try await call(.delete, "/v1/admin/keys/\(id)x").status == 404)
            let log = try await call(.get, "/v1/admin/audit")
            let actions = (log.object["items"] as? [[String: Any]] ?? []).compactMap { $0["action"] as? String }
            #expect(actions == ["key.revoke", "key.create", "key.create"], "\(actions)")
            #expect(!log.text.contains(secret) && !log.text.contains(masterSecret))
        }
    }

    @Test("providers: their key status for administrators")
    func providers() async throws {
        try await IdentityProviderTests.withProvider { provider, gateway in
            let root = try await Self.administrator(gateway)
            let reply = try await gateway.gateway.handle(.get, "/v1/admin/providers", headers: Self.bearer(root.token))
            let items = reply.object["items"] as? [[String: Any]] ?? []
            #expect(items.count == 1 && items.first?["name"] as? String == "corp" && items.first?["status"] as? String == "ok", "\(reply.text)")
            #expect((items.first?["keys"] as? Int ?? 0) > 0)
        }
    }
}
