import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOPosix
import NotesFixturePlugin
import Synchronization
import Testing

@Suite("password reset")
struct PasswordResetTests {
    static func link(in message: String) -> String? {
        message.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.hasPrefix("http") }
    }

    @Test("a link is mailed over SMTP, its page sets a new password once, every session ends; expired and reused tokens are refused")
    func resetByMail() async throws {
        let sink = try await SMTPSink.start()
        let clock = TestClock()
        let yaml = """
            server: { publicURL: "https://api.example.com" }
            mail: { host: 127.0.0.1, port: \(sink.port), from: gateway@example.com }
            auth: { passwordReset: { ttl: 30m, resendAfter: 1m } }
            \(notesYAML)
            """
        try await TestGateway.with(notes, yaml: yaml, configure: { $0.clock = clock }) { gateway in
            let user = try await gateway.gateway.accounts.register(username: "ada", secret: .plain("first-password"), email: "ada@example.com")
            try await gateway.gateway.accounts.markEmailVerified(userID: user.id)
            let session = try await gateway.gateway.accounts.createSession(userID: user.id)
            let json: HTTPFields = [.contentType: "application/json"]

            let asked = try await gateway.gateway.handle(.post, "/v1/auth/password-reset", headers: json, body: ByteBuffer(string: #"{"email": "ADA@example.com"}"#))
            #expect(asked.status == 202)
            let mail = try #require(try await sink.waitForMessages(1).first)
            #expect(mail.to == "ada@example.com")
            #expect(mail.data.contains("Subject: Reset your password"))
            let link = try #require(Self.link(in: mail.data))
            #expect(link.hasPrefix("https://api.example.com/v1/auth/password-reset/form?token="))
            let token = String(try #require(link.split(separator: "=").last))

            // Asking again at once, or for nobody: the same 202, no second mail.
            #expect(try await gateway.gateway.handle(.post, "/v1/auth/password-reset", headers: json, body: ByteBuffer(string: #"{"username": "ada"}"#)).status == 202)
            #expect(try await gateway.gateway.handle(.post, "/v1/auth/password-reset", headers: json, body: ByteBuffer(string: #"{"username": "nobody"}"#)).status == 202)
            try await Task.sleep(for: .milliseconds(300))
            #expect(sink.all.count == 1)
            #expect(try await gateway.gateway.handle(.post, "/v1/auth/password-reset", headers: json, body: ByteBuffer(string: "{}")).status == 422)

            // The page, and its form: a mismatch and a short password are refused on the page.
            let page = try await gateway.gateway.handle(.get, "/v1/auth/password-reset/form?token=\(token)")
            #expect(page.status == 200)
            #expect(page.headers[.contentType]?.hasPrefix("text/html") == true)
            #expect(String(buffer: page.body).contains("value=\"\(token)\""))
            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            let mismatch = try await gateway.gateway.handle(.post, "/v1/auth/password-reset/form", headers: form,
                                                            body: ByteBuffer(string: "token=\(token)&password=second-password&confirm=other-password"))
            #expect(mismatch.status == 400)
            let short = try await gateway.gateway.handle(.post, "/v1/auth/password-reset/form", headers: form,
                                                         body: ByteBuffer(string: "token=\(token)&password=short&confirm=short"))
            #expect(short.status == 400)
            let set = try await gateway.gateway.handle(.post, "/v1/auth/password-reset/form", headers: form,
                                                       body: ByteBuffer(string: "token=\(token)&password=second+password&confirm=second+password"))
            #expect(set.status == 200, "\(String(buffer: set.body))")
            #expect(String(buffer: set.body).contains("Your password is set"))

            // Every session ended; the new password works, the old one not; the token is spent.
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: [.authorization: "Bearer \(session.token)"]).status == 401)
            let login = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: json, body: ByteBuffer(string: #"{"username": "ada", "password": "second password"}"#))
            #expect(login.status == 200)
            #expect(try await gateway.gateway.handle(.post, "/v1/auth/login", headers: json, body: ByteBuffer(string: #"{"username": "ada", "password": "first-password"}"#)).status == 401)
            let reused = try await gateway.gateway.handle(.post, "/v1/auth/password-reset/confirm", headers: json,
                                                          body: ByteBuffer(string: #"{"token": "\#(token)", "password": "third-password"}"#))
            #expect(reused.status == 404)

            // A new link after resendAfter; it expires after ttl.
            clock.advance(by: 61)
            #expect(try await gateway.gateway.handle(.post, "/v1/auth/password-reset", headers: json, body: ByteBuffer(string: #"{"username": "ada"}"#)).status == 202)
            let second = try #require(try await sink.waitForMessages(2).last.flatMap { Self.link(in: $0.data) }?.split(separator: "=").last.map(String.init))
            clock.advance(by: 31 * 60)
            let expired = try await gateway.gateway.handle(.post, "/v1/auth/password-reset/confirm", headers: json,
                                                           body: ByteBuffer(string: #"{"token": "\#(second)", "password": "third-password"}"#))
            #expect(expired.status == 404)
        }
        await sink.stop()
    }

    @Test("a mail server that is down changes no answer and leaves the account as it was")
    func mailServerDown() async throws {
        let port = try await { () async throws -> Int in
            let sink = try await SMTPSink.start()
            let port = sink.port
            await sink.stop()
            return port
        }()
        let yaml = "mail: { host: 127.0.0.1, port: \(port), from: gateway@example.com, timeout: 2s }\n" + notesYAML
        try await TestGateway.with(notes, yaml: yaml) { gateway in
            let user = try await gateway.gateway.accounts.register(username: "ada", secret: .plain("first-password"), email: "ada@example.com")
            try await gateway.gateway.accounts.markEmailVerified(userID: user.id)
            let directory = try #require(gateway.gateway.plugins.first { $0.id == "notes" }?.context.accounts)
            try await directory.requestPasswordReset(username: "ada", email: nil)
            let asked = try await gateway.gateway.handle(.post, "/v1/auth/password-reset", headers: [.contentType: "application/json"],
                                                         body: ByteBuffer(string: #"{"username": "ada"}"#))
            #expect(asked.status == 202)
            #expect(try await gateway.gateway.accounts.verify(username: user.username, secret: .plain("first-password")) != nil)
        }
    }

    @Test("an address is confirmed by its link: asked for by its user, once, and unconfirmed again when it changes")
    func emailVerification() async throws {
        let sink = try await SMTPSink.start()
        let yaml = "mail: { host: 127.0.0.1, port: \(sink.port), from: gateway@example.com }\n" + notesYAML
        try await TestGateway.with(notes, yaml: yaml) { gateway in
            let user = try await gateway.gateway.accounts.register(username: "ada", secret: .plain("first-password"), email: "ada@example.com")
            let session = try await gateway.gateway.accounts.createSession(userID: user.id)
            let headers: HTTPFields = [.authorization: "Bearer \(session.token)", .contentType: "application/json"]
            #expect(try await gateway.gateway.handle(.post, "/v1/me/email/verification", headers: headers).status == 202)
            // Without an address there is nothing to confirm: the request is fine, the account's state is not.
            let bare = try await gateway.register("no-address")
            #expect(try await gateway.gateway.handle(.post, "/v1/me/email/verification", headers: [.authorization: "Bearer \(bare.token)"]).status == 409)
            let link = try #require(try await sink.waitForMessages(1).last.flatMap { Self.link(in: $0.data) })
            #expect(link.contains("/v1/auth/verify-email?token="))
            let token = String(try #require(link.split(separator: "=").last))
            let confirmed = try await gateway.gateway.handle(.post, "/v1/auth/verify-email", headers: [.contentType: "application/json"],
                                                             body: ByteBuffer(string: #"{"token": "\#(token)"}"#))
            #expect(confirmed.status == 204)
            #expect(try await gateway.gateway.accounts.user(id: user.id)?.emailVerified == true)
            let again = try await gateway.gateway.handle(.post, "/v1/auth/verify-email", headers: [.contentType: "application/json"],
                                                         body: ByteBuffer(string: #"{"token": "\#(token)"}"#))
            #expect(again.status == 404)
            // A new address is unconfirmed, and its link goes out at once.
            let changed = try await gateway.gateway.handle(.patch, "/v1/me", headers: headers,
                                                           body: ByteBuffer(string: #"{"profile": {"email": "ada@elsewhere.example"}}"#))
            #expect(changed.status == 200)
            #expect(try await gateway.gateway.accounts.user(id: user.id)?.emailVerified == false)
            #expect(try await sink.waitForMessages(2).last?.to == "ada@elsewhere.example")
        }
        await sink.stop()
    }

    @Test("auth.keepKeysOnReset keeps a user's API keys through a reset; by default they are revoked")
    func keysOnReset() async throws {
        for keep in [false, true] {
            let sink = try await SMTPSink.start()
            let yaml = "mail: { host: 127.0.0.1, port: \(sink.port), from: gateway@example.com }\nauth: { keepKeysOnReset: \(keep) }\n" + notesYAML
            try await TestGateway.with(notes, yaml: yaml) { gateway in
                let user = try await gateway.gateway.accounts.register(username: "ada", secret: .plain("first-password"), email: "ada@example.com")
                try await gateway.gateway.accounts.markEmailVerified(userID: user.id)
                let session = try await gateway.gateway.accounts.createSession(userID: user.id)
                let key = try await gateway.createKey(token: session.token, grant: #"{"label": "ci", "scopes": ["accounts:read", "notes:read"]}"#)
                let json: HTTPFields = [.contentType: "application/json"]
                #expect(try await gateway.gateway.handle(.post, "/v1/auth/password-reset", headers: json, body: ByteBuffer(string: #"{"username": "ada"}"#)).status == 202)
                let token = try #require(try await sink.waitForMessages(1).last.flatMap { Self.link(in: $0.data) }?.split(separator: "=").last.map(String.init))
                let set = try await gateway.gateway.handle(.post, "/v1/auth/password-reset/confirm", headers: json,
                                                           body: ByteBuffer(string: #"{"token": "\#(token)", "password": "second-password"}"#))
                #expect(set.status == 204)
                let keys = try await gateway.gateway.accounts.keys(userID: user.id)
                #expect(keys.map(\.revoked) == [!keep])
                #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: [HTTPField.Name("X-Api-Key")!: key.secret]).status == (keep ? 200 : 401))
            }
            await sink.stop()
        }
    }
}
