import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import SQLKit
import Testing

@Suite("accounts and sessions")
struct AccountTests {
    func json(_ response: InProcessResponse) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(buffer: response.body))) as? [String: Any] ?? [:]
    }

    func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)", .contentType: "application/json"] }

    @Test("register, read and edit the profile, log out")
    func lifecycle() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let (token, userID) = try await gateway.register("Ada")
            #expect(token.count == 43)
            let me = try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token))
            #expect(me.status == 200)
            #expect(json(me)["username"] as? String == "Ada")
            #expect(json(me)["id"] as? String == userID)
            let patched = try await gateway.gateway.handle(.patch, "/v1/me", headers: bearer(token),
                                                           body: ByteBuffer(string: #"{"displayName": "Ada L.", "profile": {"city": "London"}}"#))
            #expect(json(patched)["displayName"] as? String == "Ada L.")
            #expect((json(patched)["profile"] as? [String: String])?["city"] == "London")
            let logout = try await gateway.gateway.handle(.post, "/v1/auth/logout", headers: bearer(token))
            #expect(logout.status == 204)
            let after = try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token))
            #expect(after.status == 401)
        }
    }

    @Test("the password is stored only as bcrypt of the COIMOTION prehash")
    func storedCredential() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            _ = try await gateway.register("grace", password: "s3cret-enough")
            struct Row: Decodable { var password_hash: String }
            let row = try await gateway.gateway.database.sql.select().column("password_hash").from("gateway_users").first(decoding: Row.self)
            let hash = try #require(row?.password_hash)
            #expect(hash.hasPrefix("$2"))
            #expect(!hash.contains("s3cret"))
            let prehash = AccountStore.prehash(username: "grace", password: "s3cret-enough")
            #expect(try await gateway.gateway.accounts.verify(username: "grace", secret: .prehashed(prehash)) != nil)
            #expect(try await gateway.gateway.accounts.verify(username: "grace", secret: .plain("s3cret-enough")) != nil)
            #expect(try await gateway.gateway.accounts.verify(username: "grace", secret: .plain("wrong-password")) == nil)
        }
    }

    @Test("usernames are unique across case and width (NFKC + case fold)")
    func uniqueUsernames() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            _ = try await gateway.register("user")
            for variant in ["USER", "Ｕｓｅｒ", " user "] {
                let response = try await gateway.gateway.handle(.post, "/v1/auth/register", headers: .json,
                                                                body: ByteBuffer(string: #"{"username": "\#(variant)", "password": "long enough pw"}"#))
                #expect(response.status == 409, "\(variant)")
            }
            let login = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                         body: ByteBuffer(string: #"{"username": "USER", "password": "correct horse battery"}"#))
            #expect(login.status == 200)
        }
    }

    @Test("bad registrations are 422s naming the field")
    func badRegistrations() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            for (body, pointer) in [(#"{"username": "", "password": "long enough pw"}"#, "/username"),
                                    (#"{"username": "x", "password": "short"}"#, "/password"),
                                    (#"{"username": "a\u0001b", "password": "long enough pw"}"#, "/username")] {
                let response = try await gateway.gateway.handle(.post, "/v1/auth/register", headers: .json, body: ByteBuffer(string: body))
                #expect(response.status == 422)
                #expect((json(response)["errors"] as? [[String: String]])?.first?["pointer"] == pointer)
            }
        }
    }

    @Test("a failed login says nothing about whether the user exists")
    func uniformFailure() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            _ = try await gateway.register("known")
            let wrong = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                         body: ByteBuffer(string: #"{"username": "known", "password": "not the password"}"#))
            let unknown = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                           body: ByteBuffer(string: #"{"username": "nobody", "password": "not the password"}"#))
            #expect(wrong.status == 401)
            #expect(unknown.status == 401)
            #expect(json(wrong)["detail"] as? String == json(unknown)["detail"] as? String)
        }
    }

    @Test("repeated failed logins: five are checked, then each must wait a doubling delay (429 with Retry-After sooner)")
    func throttling() async throws {
        // Delays of 60 s, 120 s, ...: longer than any login takes on a busy machine, so the sixth and
        // seventh attempts come within them however slowly the first five were checked. (What
        // happens once a delay has passed is the unit test's below, on a throttle of 1 s.)
        try await TestGateway.with(notes, yaml: notesYAML, configure: { $0.loginThrottle = LoginThrottle(baseDelay: .seconds(60)) }) { gateway in
            _ = try await gateway.register("target")
            var statuses: [Int] = []
            var retryAfter: String?
            for _ in 0..<7 {
                let response = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                                body: ByteBuffer(string: #"{"username": "target", "password": "guess guess guess"}"#))
                statuses.append(response.status)
                if response.status == 429 { retryAfter = response.headers[.retryAfter] }
            }
            #expect(statuses == [401, 401, 401, 401, 401, 429, 429])
            #expect(retryAfter.flatMap(Int.init).map { (1...60).contains($0) } ?? false, "\(retryAfter ?? "none")")
            // The right password from the same address waits too.
            let right = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                         body: ByteBuffer(string: #"{"username": "target", "password": "correct horse battery"}"#))
            #expect(right.status == 429)
            // From another address the owner signs in at once.
            let elsewhere = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                             body: ByteBuffer(string: #"{"username": "target", "password": "correct horse battery"}"#),
                                                             from: "198.51.100.20")
            #expect(elsewhere.status == 200)
        }
    }

    @Test("the login throttle: attempts counted on admission, per account and address, delays doubling up to the cap")
    func throttleUnit() throws {
        let throttle = LoginThrottle(freeAttempts: 2, freeAttemptsPerAddress: 100, baseDelay: .seconds(1), maxDelay: .seconds(8))
        let account = LoginThrottle.accountKey(userID: "u1", name: "ignored")
        #expect(account == LoginThrottle.accountKey(userID: "u1", name: "other"))
        #expect(LoginThrottle.accountKey(userID: nil, name: " Nobody ") == LoginThrottle.accountKey(userID: nil, name: "nobody"))
        _ = try throttle.admit(account: account, address: "192.0.2.1")
        _ = try throttle.admit(account: account, address: "192.0.2.1")
        #expect(throws: GatewayError.self) { try throttle.admit(account: account, address: "192.0.2.1") }
        // Another address, and another account, are not held back.
        let other = try throttle.admit(account: account, address: "192.0.2.2")
        _ = try throttle.admit(account: LoginThrottle.accountKey(userID: "u2", name: ""), address: "192.0.2.1")
        throttle.succeeded(other)
        #expect(throttle.delay(after: 1, free: 2) == .zero)
        #expect(throttle.delay(after: 2, free: 2) == .seconds(1))
        #expect(throttle.delay(after: 4, free: 2) == .seconds(4))
        #expect(throttle.delay(after: 40, free: 2) == .seconds(8))
    }

    @Test("sessions expire, slide forward when used, and end everywhere on request")
    func sessionExpiry() async throws {
        let clock = TestClock()
        try await TestGateway.with(notes, yaml: "auth: { sessionTTL: 1h }\n" + notesYAML, configure: { $0.clock = clock }) { gateway in
            let (token, _) = try await gateway.register("sliding")
            clock.advance(by: 40 * 60)
            let used = try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token))
            #expect(used.status == 200)
            // Renewed at 40 min for another hour: still valid at 90 min.
            clock.advance(by: 50 * 60)
            gateway.gateway.forgetCredentials()
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token)).status == 200)
            clock.advance(by: 2 * 3600)
            gateway.gateway.forgetCredentials()
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token)).status == 401)

            let login = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                         body: ByteBuffer(string: #"{"username": "sliding", "password": "correct horse battery"}"#))
            let first = try #require(json(login)["token"] as? String)
            let second = try #require(json(try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                body: ByteBuffer(string: #"{"username": "sliding", "password": "correct horse battery"}"#)))["token"] as? String)
            #expect(try await gateway.gateway.handle(.post, "/v1/auth/logout-everywhere", headers: bearer(first)).status == 204)
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(second)).status == 401)
        }
    }

    @Test("changing the password needs the current one and ends other sessions")
    func passwordChange() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let (token, _) = try await gateway.register("changer")
            let wrong = try await gateway.gateway.handle(.put, "/v1/me/password", headers: bearer(token),
                                                         body: ByteBuffer(string: #"{"currentPassword": "nope nope", "newPassword": "brand new password"}"#))
            #expect(wrong.status == 403)
            let right = try await gateway.gateway.handle(.put, "/v1/me/password", headers: bearer(token),
                                                         body: ByteBuffer(string: #"{"currentPassword": "correct horse battery", "newPassword": "brand new password"}"#))
            #expect(right.status == 204)
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token)).status == 401)
            let login = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                         body: ByteBuffer(string: #"{"username": "changer", "password": "brand new password"}"#))
            #expect(login.status == 200)
        }
    }

    @Test("closed registration refuses newcomers; a disabled user's token and keys stop working")
    func closedAndDisabled() async throws {
        try await TestGateway.with(notes, yaml: "auth: { registration: closed }\n" + notesYAML) { gateway in
            let refused = try await gateway.gateway.handle(.post, "/v1/auth/register", headers: .json,
                                                           body: ByteBuffer(string: #"{"username": "new", "password": "long enough pw"}"#))
            #expect(refused.status == 403)
        }
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let (token, userID) = try await gateway.register("leaver")
            let key = try await gateway.createKey(token: token, grant: #"{"label": "k", "scopes": ["notes:read"]}"#)
            try await gateway.gateway.accounts.setDisabled(userID: userID, true)
            gateway.gateway.forgetCredentials()
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token)).status == 401)
            let keyed = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [HTTPField.Name("X-Api-Key")!: key.secret])
            #expect(keyed.status == 401)
        }
    }

    @Test("API keys: created with their secret once, listed without it, revoked")
    func keys() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let (token, _) = try await gateway.register("keyholder")
            let key = try await gateway.createKey(token: token, grant: #"{"label": "ci", "scopes": ["notes:read", "notes:write"]}"#)
            #expect(key.secret.hasPrefix("gk_"))
            let list = try await gateway.gateway.handle(.get, "/v1/me/keys", headers: bearer(token))
            #expect(!String(buffer: list.body).contains(key.secret))
            #expect(String(buffer: list.body).contains(key.id))
            let apiKey = HTTPField.Name("X-Api-Key")!
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 200)
            #expect(try await gateway.gateway.handle(.delete, "/v1/me/keys/\(key.id)", headers: bearer(token)).status == 204)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 401)
            let bad = try await gateway.gateway.handle(.post, "/v1/me/keys", headers: bearer(token),
                                                       body: ByteBuffer(string: #"{"label": "", "scopes": ["everything"], "allowedAddresses": ["nowhere"], "rate": "lots"}"#))
            #expect(bad.status == 422)
            #expect(((json(bad)["errors"] as? [[String: String]]) ?? []).map { $0["pointer"] ?? "" }.sorted()
                    == ["/allowedAddresses/0", "/label", "/rate", "/scopes/0"])
        }
    }

    @Test("a key stops working when it expires")
    func keyExpiry() async throws {
        let clock = TestClock()
        try await TestGateway.with(notes, yaml: notesYAML, configure: { $0.clock = clock }) { gateway in
            let (token, _) = try await gateway.register("expirer")
            let expires = UTCTimestamp.format(clock.now().addingTimeInterval(3600))
            let key = try await gateway.createKey(token: token, grant: #"{"label": "short", "scopes": ["*"], "expiresAt": "\#(expires)"}"#)
            let apiKey = HTTPField.Name("X-Api-Key")!
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 200)
            clock.advance(by: 7200)
            gateway.gateway.forgetCredentials()
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 401)
            let past = UTCTimestamp.format(clock.now().addingTimeInterval(-60))
            let refused = try await gateway.gateway.handle(.post, "/v1/me/keys", headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                                                           body: ByteBuffer(string: #"{"label": "old", "scopes": ["*"], "expiresAt": "\#(past)"}"#))
            #expect(refused.status == 422)
        }
    }

    @Test("a key restricted to source addresses is refused from others (over a real socket)")
    func keyAddresses() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let (token, _) = try await gateway.register("addressed")
            let allowed = try await gateway.createKey(token: token, grant: #"{"label": "a", "scopes": ["*"], "allowedAddresses": ["127.0.0.0/8"]}"#)
            let other = try await gateway.createKey(token: token, grant: #"{"label": "b", "scopes": ["*"], "allowedAddresses": ["10.0.0.0/8"]}"#)
            let apiKey = HTTPField.Name("X-Api-Key")!
            try await gateway.test(.live) { client in
                let ok = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get, headers: [apiKey: allowed.secret])
                #expect(ok.status == .ok)
                let refused = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get, headers: [apiKey: other.secret])
                #expect(refused.status == .forbidden)
            }
        }
    }
}
