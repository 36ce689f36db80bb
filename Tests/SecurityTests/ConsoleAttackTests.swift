import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import NIOCore
import NIOHTTP1
import Testing

/// Attacks on the admin console and the admin API, against the shipped plugins.yaml over a real
/// socket: a cross-site change, a forged sign-in, a user's session at every page, script in what
/// the pages show, an explorer call aimed elsewhere, an open redirect, the console's cookie
/// presented to the API, and secrets read through the configuration.
@Suite("attacks on the admin console and the admin API", .serialized)
struct ConsoleAttackTests {
    static let pages = ["/admin", "/admin/traffic", "/admin/live", "/admin/operations", "/admin/users", "/admin/users/root", "/admin/keys",
                        "/admin/providers", "/admin/cache", "/admin/configuration", "/admin/audit", "/admin/plugins/events/reservations"]
    static let adminRoutes = ["/v1/admin/users", "/v1/admin/keys", "/v1/admin/providers", "/v1/admin/cache", "/v1/admin/plugins", "/v1/admin/instances",
                              "/v1/admin/audit", "/v1/admin/metrics/live?seconds=1", "/v1/admin/plugins/events/views/reservations"]

    /// The shipped gateway whose plugins.yaml is a file of its own the admin API reads and writes.
    static func withEditableFile(_ body: @Sendable (ShippedGateway, URL) async throws -> Void) async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("console-attack-\(UUID().uuidString).yaml")
        try ShippedGateway.shippedYAML.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let editable = EditableConfiguration(url: file) { data in
            try GatewayConfiguration.parse(data, file: "plugins.yaml", knownPlugins: ShippedGateway.registrations.map(\.id), instanceTypes: ["upstream"],
                                           baseDirectory: ShippedGateway.root)
        }
        try await ShippedGateway.with(limits: false, configure: { $0.configurationFile = editable }) { gateway in try await body(gateway, file) }
    }

    /// A client that shows redirects rather than following them.
    static let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: .init(redirectConfiguration: .disallow))

    /// A page as a browser first receives it (a redirect not followed).
    static func get(_ gateway: ShippedGateway, _ path: String, cookie: String? = nil, bearer: String? = nil) async throws -> ShippedGateway.Reply {
        var request = HTTPClientRequest(url: gateway.base + path)
        if let cookie { request.headers.add(name: "Cookie", value: cookie) }
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer " + bearer) }
        let response = try await client.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 4 << 20)
        return ShippedGateway.Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: body))
    }

    /// A form posted as a browser would, with the cookies and fields given.
    static func post(_ gateway: ShippedGateway, _ path: String, cookie: String?, form: String, origin: String? = nil,
                     extra: [(String, String)] = []) async throws -> ShippedGateway.Reply {
        var request = HTTPClientRequest(url: gateway.base + path)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: extra.contains { $0.0 == "Content-Type" } ? extra.first { $0.0 == "Content-Type" }!.1
                                : "application/x-www-form-urlencoded")
        if let cookie { request.headers.add(name: "Cookie", value: cookie) }
        if let origin { request.headers.add(name: "Origin", value: origin) }
        for (name, value) in extra where name != "Content-Type" { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: form))
        let response = try await client.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 4 << 20)
        return ShippedGateway.Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: body))
    }

    /// Signs `username` in to the console: its session cookie (`gateway_console=…`) and the page's CSRF token.
    static func signIn(_ gateway: ShippedGateway, _ username: String) async throws -> (cookie: String, csrf: String)? {
        let login = try await get(gateway, "/admin/login")
        guard let loginCookie = login.headers["Set-Cookie"].first?.split(separator: ";").first.map(String.init) else { return nil }
        let token = String(loginCookie.split(separator: "=")[1])
        let reply = try await post(gateway, "/admin/login", cookie: loginCookie, form: "username=\(username)&password=correct+horse+battery&csrf=\(token)")
        guard let session = reply.headers["Set-Cookie"].first(where: { $0.hasPrefix("gateway_console=") && !$0.contains("Max-Age=0") }) else { return nil }
        let cookie = String(session.split(separator: ";")[0])
        let page = try await get(gateway, "/admin/cache", cookie: cookie)
        guard let csrf = page.body.firstMatch(of: /name="csrf-token" content="([^"]+)"/)?.1 else { return nil }
        return (cookie, String(csrf))
    }

    @Test("a user's session and a user's token open no page and no admin route; a guest is sent to sign in or refused", arguments: securityStorages)
    func nonAdministrators(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false) { gateway in
            _ = try await gateway.administrator("root")
            let user = try await gateway.register("mallory")
            #expect(try await Self.signIn(gateway, "mallory") == nil, "a user gets no console session")
            for page in Self.pages {
                let guest = try await Self.get(gateway, page)
                #expect(guest.status == 303 && guest.headers["Location"].first == "/admin/login", "\(page) as a guest: \(guest.status)")
                // A user's own session token put in the console's cookie by hand.
                let forged = try await Self.get(gateway, page, cookie: "gateway_console=\(user.token)")
                #expect(forged.status == 403, "\(page) with a user's session: \(forged.status)")
            }
            for route in Self.adminRoutes {
                #expect(try await gateway.send(.GET, route).status == 401, "\(route) as a guest")
                #expect(try await gateway.send(.GET, route, headers: [("Authorization", "Bearer \(user.token)")]).status == 403, "\(route) as a user")
            }
            let apply = try await gateway.send(.PUT, "/v1/admin/configuration", headers: [("Authorization", "Bearer \(user.token)")], json: #"{"text": "plugins: {}"}"#)
            #expect(apply.status == 403)
            let act = try await gateway.send(.POST, "/v1/admin/plugins/events/views/reservations/actions/confirm",
                                             headers: [("Authorization", "Bearer \(user.token)")], json: #"{"arguments": {"reservation": "1"}}"#)
            #expect(act.status == 403)
        }
    }

    @Test("cross-site changes: no CSRF token, a token of another session, another origin, another site; a forged sign-in; the console's cookie at the API")
    func crossSite() async throws {
        try await ShippedGateway.with(limits: false) { gateway in
            _ = try await gateway.administrator("root")
            _ = try await gateway.administrator("second")
            let root = try #require(try await Self.signIn(gateway, "root"))
            let second = try #require(try await Self.signIn(gateway, "second"))
            let purge = "scope=all&csrf="
            #expect(try await Self.post(gateway, "/admin/cache/purge", cookie: root.cookie, form: "scope=all").status == 403, "no token")
            #expect(try await Self.post(gateway, "/admin/cache/purge", cookie: root.cookie, form: purge + second.csrf).status == 403, "another session's token")
            #expect(try await Self.post(gateway, "/admin/cache/purge", cookie: root.cookie, form: purge + root.csrf, origin: "https://evil.example").status == 403)
            #expect(try await Self.post(gateway, "/admin/cache/purge", cookie: root.cookie, form: purge + root.csrf, origin: "null").status == 403)
            #expect(try await Self.post(gateway, "/admin/cache/purge", cookie: root.cookie, form: purge + root.csrf,
                                        extra: [("Sec-Fetch-Site", "cross-site")]).status == 403)
            #expect(try await Self.post(gateway, "/admin/users", cookie: root.cookie, form: "username=evil&password=long+enough+password&admin=on").status == 403)
            #expect(try await gateway.gateway.accounts.user(named: "evil") == nil, "no account was made")
            // The explorer's calls need the token in X-CSRF-Token.
            let call = #"{"method": "DELETE", "path": "/v1/admin/users/second"}"#
            #expect(try await Self.post(gateway, "/admin/operations/call", cookie: root.cookie, form: call, extra: [("Content-Type", "application/json")]).status == 403)
            #expect(try await gateway.gateway.accounts.user(named: "second") != nil)
            // Sign-in with a token that is not the form's cookie's (login CSRF): refused.
            let forged = try await Self.post(gateway, "/admin/login", cookie: "gateway_console_login=aaaa", form: "username=root&password=correct+horse+battery&csrf=bbbb")
            #expect(forged.status == 403 && !forged.headers["Set-Cookie"].contains { $0.hasPrefix("gateway_console=") })
            // The console's cookie is no credential for the API, whatever the route.
            #expect(try await Self.get(gateway, "/v1/admin/users", cookie: root.cookie).status == 401)
            #expect(try await Self.get(gateway, "/v1/me", cookie: root.cookie).status == 401)
            // The session ends at sign-out; its cookie then opens nothing.
            #expect(try await Self.post(gateway, "/admin/logout", cookie: root.cookie, form: "csrf=" + root.csrf).status == 303)
            #expect(try await Self.get(gateway, "/admin/users", cookie: root.cookie).status == 303)
        }
    }

    @Test("what the pages show is escaped; the policy forbids inline script; the explorer calls only this gateway; no open redirect; no secret in the configuration")
    func injection() async throws {
        try await Self.withEditableFile { gateway, _ in
            let root = try await gateway.administrator("root")
            let session = try #require(try await Self.signIn(gateway, "root"))
            let script = #"<script>alert(1)</script><img src=x onerror=alert(2)>"#
            let made = try await gateway.send(.POST, "/v1/admin/users", headers: [("Authorization", "Bearer \(root.token)")],
                                              json: #"{"username": "xss", "password": "long enough password", "displayName": "\#(script)"}"#)
            #expect(made.status == 201, "\(made.body)")
            for page in ["/admin/users", "/admin/users/xss", "/admin/audit"] {
                let reply = try await Self.get(gateway, page, cookie: session.cookie)
                #expect(reply.status == 200, "\(page)")
                #expect(!reply.body.contains("<script>alert") && !reply.body.contains("<img src=x"), "\(page) shows the name raw")
                #expect(reply.headers["Content-Security-Policy"].first?.contains("script-src 'self'") == true)
                #expect(reply.headers["Content-Security-Policy"].first?.contains("unsafe-inline") == false)
            }
            // The explorer's path is one of this gateway's, never a URL or the console itself.
            for path in ["http://169.254.169.254/latest", "//evil.example/x", "/admin/cache/purge", "relative", ""] {
                let reply = try await Self.post(gateway, "/admin/operations/call", cookie: session.cookie, form: #"{"method": "GET", "path": "\#(path)"}"#,
                                                extra: [("Content-Type", "application/json"), ("X-CSRF-Token", session.csrf)])
                #expect(reply.status == 400, "\(path): \(reply.status)")
            }
            let bad = try await Self.post(gateway, "/admin/operations/call", cookie: session.cookie, form: #"{"method": "TRACE", "path": "/v1/me"}"#,
                                          extra: [("Content-Type", "application/json"), ("X-CSRF-Token", session.csrf)])
            #expect(bad.status == 400)
            // After a change, back to a page of the console only.
            let revoke = try await Self.post(gateway, "/admin/keys/nothing/revoke", cookie: session.cookie, form: "csrf=\(session.csrf)&back=//evil.example/")
            #expect(revoke.status == 303 && revoke.headers["Location"].first == "/admin/keys", "\(revoke.headers)")
            // The shipped file's demo secrets never leave in the configuration's text.
            let shown = try await gateway.send(.GET, "/v1/admin/configuration", headers: [("Authorization", "Bearer \(root.token)")])
            #expect(shown.status == 200, "\(shown.body.prefix(200))")
            #expect(!shown.body.contains("demo-master-key-change-me") && !shown.body.contains("demo-app-key"), "\(shown.body.prefix(200))")
            let page = try await Self.get(gateway, "/admin/configuration", cookie: session.cookie)
            #expect(!page.body.contains("demo-master-key-change-me"))
        }
    }

    @Test("an administrator cannot read the host's files or environment through the configuration, nor move a masked secret where it shows; a feed's huge value and a user's path-like name do not break the pages; a live stream ends when its key is revoked")
    func escalation() async throws {
        try await Self.withEditableFile { gateway, file in
            let root = try await gateway.administrator("root")
            let admin = [("Authorization", "Bearer \(root.token)")]
            let shown = try await gateway.send(.GET, "/v1/admin/configuration", headers: admin).json ?? [:]
            let text = try #require(shown["text"] as? String)
            // A new reference to a file or a variable of the host: refused at its line, nothing read.
            let reading = text.replacingOccurrences(of: "  appKeys: [", with: "  appKeys: [\"${file:/etc/hostname}\", ")
            let checked = try await gateway.send(.POST, "/v1/admin/configuration/validate", headers: admin,
                                                 json: String(buffer: JSONValue.object(["text": .string(reading)]).serialized()))
            #expect(checked.json?["valid"] as? Bool == false, "\(checked.body.prefix(300))")
            #expect(((checked.json?["errors"] as? [[String: Any]])?.first?["message"] as? String)?.contains("environment or files") == true, "\(checked.body.prefix(300))")
            let applied = try await gateway.send(.PUT, "/v1/admin/configuration", headers: admin,
                                                 json: String(buffer: JSONValue.object(["text": .string(reading)]).serialized()))
            #expect(applied.status == 422)
            #expect(try String(contentsOf: file, encoding: .utf8) == ShippedGateway.shippedYAML)
            // A masked secret moved into a list that shrank: refused.
            let moved = text.replacingOccurrences(of: "appKeys: [\"********\"]", with: "appKeys: []")
                .replacingOccurrences(of: "masterKey: \"********\"", with: "masterKey: \"********\", extra: [\"********\"]")
            let movedReply = try await gateway.send(.POST, "/v1/admin/configuration/validate", headers: admin,
                                                    json: String(buffer: JSONValue.object(["text": .string(moved)]).serialized()))
            #expect(movedReply.json?["valid"] as? Bool == false && !movedReply.body.contains("demo-"), "\(movedReply.body.prefix(300))")

            // A user named like a path: the console's links and forms keep the name whole.
            let odd = try await gateway.send(.POST, "/v1/admin/users", headers: admin, json: #"{"username": "x/../root", "password": "long enough password"}"#)
            #expect(odd.status == 201, "\(odd.body)")
            let session = try #require(try await Self.signIn(gateway, "root"))
            let users = try await Self.get(gateway, "/admin/users?q=x", cookie: session.cookie)
            #expect(users.body.contains("/admin/users/x%2F..%2Froot") && !users.body.contains("href=\"/admin/users/x/../root\""), "\(users.body.prefix(200))")

            // A sensor's value past what an integer holds: the feeds page answers.
            let owner = try await gateway.register("sensor")
            let feed = try await gateway.send(.POST, "/v1/feeds", headers: [("Authorization", "Bearer \(owner.token)")],
                                              json: #"{"title": "Huge", "datastreams": [{"id": "big"}]}"#)
            let feedID = try #require(feed.json?["id"] as? Int, "\(feed.body)")
            let posted = try await gateway.send(.POST, "/v1/feeds/\(feedID)/datastreams/big/datapoints", headers: [("Authorization", "Bearer \(owner.token)")],
                                                json: #"{"datapoints": [{"at": "2026-11-29T00:00:00Z", "value": 1e20}]}"#)
            #expect(posted.status == 200, "\(posted.body)")
            let page = try await Self.get(gateway, "/admin/plugins/feeds/datastream?feed=\(feedID)&stream=big", cookie: session.cookie)
            #expect(page.status == 200 && page.body.contains("1e+20"), "\(page.status)")
            #expect(try await gateway.send(.GET, "/healthz").status == 200, "the gateway still runs")

            // A live stream read with a master key ends once the key is revoked.
            let key = try await gateway.test.gateway.accounts.createKey(userID: nil, grant: .init(label: "watch", scopes: ["admin"]))
            async let stream = gateway.send(.GET, "/v1/admin/metrics/live?seconds=20", headers: [("X-Api-Key", key.secret)], timeout: .seconds(40))
            try await Task.sleep(for: .seconds(2))
            _ = try await gateway.gateway.accounts.revokeKey(id: key.key.id, userID: nil)
            gateway.gateway.forgetCredentials()
            let events = try await stream.body.components(separatedBy: "event: traffic").count - 1
            #expect(events >= 1 && events <= 10, "the stream went on after the key was revoked: \(events) events")
        }
    }
}
