import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import Testing

/// `/v1/admin/cache`, `/v1/admin/configuration`, `/v1/admin/plugins`, `/v1/admin/instances` and
/// `/v1/admin/metrics/live`, and the console's sign-in and its guards.
@Suite("admin API: cache, configuration, plugins, instances, live traffic; the console's guards")
struct AdminGatewayTests {
    static let yaml = """
        # The gateway of the admin tests.
        plugins:
          notes:
            enabled: true
        auth:
          appKeys: ["secret-app-key"]   # shown masked
        limits:
          anonymous: 60/min
        """

    /// A gateway whose plugins.yaml is a file the admin API reads and writes.
    static func withFile<R: Sendable>(storage: TestStorage = .sqlite, _ body: @Sendable (TestGateway, URL) async throws -> R) async throws -> R {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("admin-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("plugins.yaml")
        try yaml.write(to: file, atomically: true, encoding: .utf8)
        let editable = EditableConfiguration(url: file) { data in try GatewayConfiguration.parse(data, file: "plugins.yaml", knownPlugins: ["notes"]) }
        return try await TestGateway.with(notes, yaml: yaml, storage: storage, configure: { $0.configurationFile = editable }) { gateway in
            try await body(gateway, file)
        }
    }

    static func call(_ gateway: TestGateway, _ token: String, _ method: HTTPRequest.Method, _ path: String, _ body: JSONValue? = nil) async throws -> InProcessResponse {
        try await gateway.gateway.handle(method, path, headers: AdminUserTests.bearer(token), body: body.map { $0.serialized() })
    }

    @Test("configuration: shown with secrets masked; an edit validated with its error at its line; applied through a reload, masks keeping their values; a stale version 409; audited")
    func configuration() async throws {
        try await Self.withFile { gateway, file in
            let root = try await AdminUserTests.administrator(gateway)
            let shown = try await Self.call(gateway, root.token, .get, "/v1/admin/configuration")
            #expect(shown.status == 200, "\(shown.text)")
            let text = try #require(shown.object["text"] as? String)
            #expect(!text.contains("secret-app-key") && text.contains(#"appKeys: ["********"]   # shown masked"#), "\(text)")
            #expect(shown.object["masked"] as? [String] == ["auth.appKeys[0]"])
            #expect(text.contains("# The gateway of the admin tests."), "comments stay")
            let version = try #require(shown.object["version"] as? String)

            // A mistake: its line and column, and what it is.
            let broken = text.replacingOccurrences(of: "limits:\n", with: "limits:\n  colour: blue\n")
            let checked = try await Self.call(gateway, root.token, .post, "/v1/admin/configuration/validate", .object(["text": .string(broken)]))
            #expect(checked.status == 200, "\(checked.text)")
            #expect(checked.object["valid"] as? Bool == false)
            let error = try #require((checked.object["errors"] as? [[String: Any]])?.first)
            #expect(error["line"] as? Int == 8 && (error["keyPath"] as? String)?.hasPrefix("limits") == true, "\(checked.text)")
            // Applying it is refused whole: the file and the running limits stay.
            let refused = try await Self.call(gateway, root.token, .put, "/v1/admin/configuration", .object(["text": .string(broken), "baseVersion": .string(version)]))
            #expect(refused.status == 422, "\(refused.text)")
            #expect(try String(contentsOf: file, encoding: .utf8) == Self.yaml)

            // Valid: what it would change; then applied live, the mask given its value back.
            let fixed = text.replacingOccurrences(of: "anonymous: 60/min", with: "anonymous: 30/min")
            let valid = try await Self.call(gateway, root.token, .post, "/v1/admin/configuration/validate", .object(["text": .string(fixed)]))
            #expect(valid.object["valid"] as? Bool == true && valid.object["changes"] as? [String] == ["limits"], "\(valid.text)")
            let applied = try await Self.call(gateway, root.token, .put, "/v1/admin/configuration", .object(["text": .string(fixed), "baseVersion": .string(version)]))
            #expect(applied.status == 200, "\(applied.text)")
            #expect(applied.object["status"] as? String == "applied" && applied.object["changes"] as? [String] == ["limits"], "\(applied.text)")
            let written = try String(contentsOf: file, encoding: .utf8)
            #expect(written.contains(#"appKeys: ["secret-app-key"]"#) && written.contains("anonymous: 30/min"), "\(written)")
            #expect(gateway.gateway.configuration.limits.anonymous == RateSpec(parsing: "30/min"))
            #expect(gateway.gateway.configuration.auth.appKeys == ["secret-app-key"])

            // Read at the old version: refused, nothing overwritten.
            let stale = try await Self.call(gateway, root.token, .put, "/v1/admin/configuration", .object(["text": .string(text), "baseVersion": .string(version)]))
            #expect(stale.status == 409, "\(stale.text)")
            // A mask where the file keeps no secret: an error at its line.
            let invented = fixed + "\nserver:\n  publicURL: \"********\"\n"
            let masked = try await Self.call(gateway, root.token, .post, "/v1/admin/configuration/validate", .object(["text": .string(invented)]))
            #expect((masked.object["errors"] as? [[String: Any]])?.first?["keyPath"] as? String == "server.publicURL", "\(masked.text)")

            let audit = try await Self.call(gateway, root.token, .get, "/v1/admin/audit")
            let actions = (audit.object["items"] as? [[String: Any]] ?? []).compactMap { $0["action"] as? String }
            #expect(actions == ["configuration.apply"], "\(audit.text)")
            // Users are refused all of it.
            let user = try await gateway.register("plain")
            #expect(try await Self.call(gateway, user.token, .get, "/v1/admin/configuration").status == 403)
            #expect(try await Self.call(gateway, user.token, .put, "/v1/admin/configuration", .object(["text": .string(fixed)])).status == 403)
        }
    }

    @Test("a gateway started without a file: the configuration API says so (409)")
    func withoutFile() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let root = try await AdminUserTests.administrator(gateway)
            #expect(try await Self.call(gateway, root.token, .get, "/v1/admin/configuration").status == 409)
        }
    }

    @Test("masking: secrets by key and in URLs, references shown, block scalars, flow mappings; unmasking puts the values back", arguments: [
        ("keySecret: \"abc\"\n", "keySecret: \"********\"\n"),
        ("storage: postgres://gateway:hunter2@db/gateway\n", "storage: postgres://gateway:********@db/gateway\n"),
        ("password: ${DB_PASSWORD}\n", "password: ${DB_PASSWORD}\n"),
        ("apps:\n  - { id: demo, key: k1, masterKey: 'm1' }\n", "apps:\n  - { id: demo, key: \"********\", masterKey: \"********\" }\n"),
        ("signing:\n  pem: |\n    -----BEGIN-----\n    abc\n    -----END-----\nnext: 1\n", "signing:\n  pem: \"********\"\nnext: 1\n"),
        ("limits:\n  key: 6000/min\n", "limits:\n  key: 6000/min\n"),
    ])
    func masking(original: String, expected: String) throws {
        let masked = ConfigurationMasking.masked(original).text
        #expect(masked == expected)
        #expect(try ConfigurationMasking.unmasked(masked, original: original, file: "plugins.yaml").text == original)
    }

    @Test("masking also covers authorization headers and secret query parameters of URLs", arguments: [
        ("headers:\n  set: { Authorization: \"Bearer sk-1\" }\n", "headers:\n  set: { Authorization: \"********\" }\n"),
        ("source: https://feeds.example/gtfs.zip?token=abc123&city=1\n", "source: https://feeds.example/gtfs.zip?token=********&city=1\n"),
        ("url: \"https://u:pw1@api.example/v1?api_key=k9\"\n", "url: \"https://u:********@api.example/v1?api_key=********\"\n"),
    ])
    func maskingMore(original: String, expected: String) throws {
        let masked = ConfigurationMasking.masked(original).text
        #expect(masked == expected)
        #expect(try ConfigurationMasking.unmasked(masked, original: original, file: "plugins.yaml").text == original)
    }

    @Test("a mask never moves a secret: a list that changed length, an entry changed around its mask, a URL changed around its mask, a mask beside text, a new reference")
    func maskingRefusals() throws {
        func refusal(_ edited: String, _ original: String) -> ConfigurationFileError? {
            do {
                _ = try ConfigurationMasking.unmasked(edited, original: original, file: "plugins.yaml")
                return nil
            } catch {
                return error
            }
        }
        // Deleting the first of two masked keys would keep the first's value under the second's place.
        let keys = "auth:\n  appKeys: [\"leaked\", \"good\"]\n"
        #expect(refusal("auth:\n  appKeys: [\"********\"]\n", keys)?.keyPath == "auth.appKeys[0]")
        #expect(refusal("auth:\n  appKeys: [\"********\", \"********\", \"new\"]\n", keys) != nil)
        #expect(refusal("auth:\n  appKeys: [\"********\", \"********\"]\n", keys) == nil)
        // Swapping two apps would give each the other's key.
        let apps = "apps:\n  - { id: a, key: ka }\n  - { id: b, key: kb }\n"
        let swapped = "apps:\n  - { id: b, key: \"********\" }\n  - { id: a, key: \"********\" }\n"
        #expect(refusal(swapped, apps)?.line == 2)
        // A URL's masked password moved to where it would be shown, or the URL changed around it.
        let url = "upstreams: [\"http://u:S3CRET@api\"]\n"
        #expect(refusal("upstreams: [\"http://api/x:********@\"]\n", url) != nil)
        #expect(refusal("upstreams: [\"ftp://u:********@api\"]\n", url) != nil)
        #expect(refusal("upstreams: [\"http://u:********@api\"]\n", url) == nil)
        #expect(refusal("password: \"x********\"\n", "password: \"s\"\n") != nil)
        // A reference to the host's environment or files, new at that place.
        #expect(refusal("source: \"https://x/${file:/etc/ssl/private/key.pem}\"\n", "source: https://x/\n")?.keyPath == "source")
        #expect(refusal("storage: \"${DB_URL}\"\n", "storage: \"${DB_URL}\"\n") == nil, "one the file holds stays")
        // An error's line in the text with a block secret given back is the edited text's line.
        let block = "signing:\n  pem: |\n    a\n    b\n    c\nnext: 1\n"
        let whole = try ConfigurationMasking.unmasked("signing:\n  pem: \"********\"\nnext: 1\nbad: 2\n", original: block, file: "plugins.yaml")
        #expect(whole.editedLine(7) == 4 && whole.editedLine(2) == 2 && whole.editedLine(4) == 2)
        // Messages never quote a secret of the file.
        #expect(ConfigurationMasking.redacted("\"ftp://u:S3CRET@api\" is not an http(s) base URL", secretsOf: url) == "\"ftp://u:********@api\" is not an http(s) base URL")
    }

    @Test("cache statistics, plugins with their health and counters, the instances of the database", arguments: TestStorage.available)
    func cachePluginsInstances(storage: TestStorage) async throws {
        try await Self.withFile(storage: storage) { gateway, _ in
            let root = try await AdminUserTests.administrator(gateway)
            for _ in 0..<3 { _ = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=ada") }
            let cache = try await Self.call(gateway, root.token, .get, "/v1/admin/cache")
            #expect(cache.status == 200, "\(cache.text)")
            #expect(cache.object["maxEntries"] as? Int ?? 0 > 0 && cache.object["hits"] as? Int != nil, "\(cache.text)")

            let plugins = try await Self.call(gateway, root.token, .get, "/v1/admin/plugins")
            let notes = try #require((plugins.object["items"] as? [[String: Any]])?.first { $0["id"] as? String == "notes" })
            #expect(notes["status"] as? String == "ok" && notes["mount"] as? String == "/v1/notes", "\(plugins.text)")
            #expect((notes["served"] as? [String: Any])?["requests"] as? Int ?? 0 >= 3, "\(plugins.text)")

            let instances = try await Self.call(gateway, root.token, .get, "/v1/admin/instances")
            let items = instances.object["items"] as? [[String: Any]] ?? []
            #expect(items.first?["current"] as? Bool == true && items.first?["version"] as? String == GatewayVersion.current, "\(instances.text)")
            #expect(items.filter { $0["current"] as? Bool == true }.count == 1)
            #expect(items.first?["limited"] != nil && items.first?["errors"] != nil && items.first?["rate"] != nil, "\(instances.text)")
        }
    }

    @Test("live traffic as server-sent events: a second's requests, their latency, errors and per plugin")
    func liveTraffic() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let root = try await AdminUserTests.administrator(gateway)
            #expect(try await Self.call(gateway, root.token, .get, "/v1/admin/metrics/live?seconds=0").status == 422)
            // Requests spread over a little more than two seconds, the stream read beside them.
            @Sendable func load() async throws {
                for _ in 0..<40 {
                    _ = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=ada")
                    try await Task.sleep(for: .milliseconds(60))
                }
            }
            async let loading: Void = load()
            let stream = try await Self.call(gateway, root.token, .get, "/v1/admin/metrics/live?seconds=3")
            try await loading
            #expect(stream.status == 200)
            #expect(stream.headers[.contentType] == "text/event-stream")
            let events = stream.text.components(separatedBy: "\n\n").filter { $0.hasPrefix("event: traffic\ndata: ") }
            #expect(events.count == 3, "\(stream.text)")
            // (The load's 40 requests spread over more than two seconds: a busy machine may put
            // fewer in one second than an idle one, but some second holds several.)
            let samples = try events.map { try JSONDecoder().decode(JSONValue.self, from: Data($0.dropFirst("event: traffic\ndata: ".count).utf8)) }
            func notes(_ sample: JSONValue, _ field: String) -> JSONValue? { sample[path: ["plugins", "notes", field]] }
            #expect(samples.contains { (notes($0, "rate")?.numberValue ?? 0) >= 2 }, "\(stream.text)")
            #expect(samples.allSatisfy { $0[path: ["instances"]]?.arrayValue?.first?[path: ["current"]] == .bool(true) }, "\(stream.text)")
            let busy = try #require(samples.last { (notes($0, "rate")?.numberValue ?? 0) > 0 })
            #expect(notes(busy, "p50")?.numberValue != nil && notes(busy, "errors") == .number(0), "\(stream.text)")
        }
    }

    @Test("live traffic's figures: percentiles from the buckets, errors, 429s and the cache's hit rate, by second")
    func liveFigures() {
        let live = LiveTraffic()
        let start = ContinuousClock.now
        for index in 0..<100 {
            live.record(plugin: "a", status: index < 2 ? 503 : (index < 5 ? 429 : 200), duration: .milliseconds(index < 99 ? 1 : 100),
                        cache: index.isMultiple(of: 2) ? .hit : .miss, at: start)
        }
        live.record(plugin: "b", status: 200, duration: .microseconds(50), cache: nil, at: start)
        let sample = live.sample(lastSeconds: 1, at: start + .seconds(1))
        let a = sample.plugins["a"]
        #expect(a?.rate == 100 && a?.errors == 2 && a?.limited == 3 && a?.cacheHits == 50 && a?.cacheHitRate == 0.5)
        // 1 ms lies in the bucket up to 1.14 ms; the 99th of 100 too; the 100th (100 ms) is above.
        #expect((a?.p50 ?? 0) >= 1 && (a?.p50 ?? 0) < 1.3 && (a?.p99 ?? 0) < 1.3, "\(String(describing: a))")
        #expect(sample.overall.rate == 101 && sample.plugins["b"]?.cacheHitRate == nil)
        // A second later that slot is out of the window; the totals keep everything.
        #expect(live.sample(lastSeconds: 1, at: start + .seconds(2)).overall.rate == 0)
        #expect(live.totals["a"]?.requests == 100 && live.totals["a"]?.errors == 2)
    }

    @Test("the console: sign-in only for administrators, its session cookie, CSRF and origin checks on changes, its security fields")
    func console() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            _ = try await AdminUserTests.administrator(gateway)
            _ = try await gateway.register("plain")
            let gw = gateway.gateway
            let anonymous = try await gw.handle(.get, "/admin/users")
            #expect(anonymous.status == 303 && anonymous.headers[.location] == "/admin/login")
            let login = try await gw.handle(.get, "/admin/login")
            #expect(login.status == 200)
            #expect(login.headers[HTTPField.Name("Content-Security-Policy")!]?.contains("script-src 'self'") == true)
            #expect(login.headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
            let loginCookie = try #require(login.headers[.setCookie]?.split(separator: ";").first.map(String.init))
            let token = String(loginCookie.split(separator: "=")[1])
            func signIn(_ name: String, csrf: String, cookie: String) async throws -> InProcessResponse {
                try await gw.handle(.post, "/admin/login", headers: [.contentType: "application/x-www-form-urlencoded", .cookie: cookie],
                                    body: ByteBuffer(string: "username=\(name)&password=correct+horse+battery&csrf=\(csrf)"))
            }
            // The form's token must match its cookie.
            #expect(try await signIn("root", csrf: "forged", cookie: loginCookie).status == 403)
            // A user is not let in, and gets no session cookie.
            let user = try await signIn("plain", csrf: token, cookie: loginCookie)
            #expect(user.status == 403 && !(user.headers[values: .setCookie].contains { $0.hasPrefix("gateway_console=") && !$0.contains("Max-Age=0") }))
            let admin = try await signIn("root", csrf: token, cookie: loginCookie)
            #expect(admin.status == 303 && admin.headers[.location] == "/admin")
            let session = try #require(admin.headers[values: .setCookie].first { $0.hasPrefix("gateway_console=") })
            #expect(session.contains("HttpOnly") && session.contains("SameSite=Strict") && session.contains("Path=/admin") && !session.contains("Secure"))
            let cookie = String(session.split(separator: ";")[0])
            let page = try await gw.handle(.get, "/admin/cache", headers: [.cookie: cookie])
            #expect(page.status == 200 && page.text.contains("cache-stats"), "\(page.text.prefix(300))")
            let csrf = try #require(page.text.firstMatch(of: /name="csrf-token" content="([^"]+)"/)?.1).description
            // A change needs the token, from the console's own origin.
            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded", .cookie: cookie]
            #expect(try await gw.handle(.post, "/admin/cache/purge", headers: form, body: ByteBuffer(string: "scope=all")).status == 403)
            var foreign = form
            foreign[HTTPField.Name("Origin")!] = "https://evil.example"
            #expect(try await gw.handle(.post, "/admin/cache/purge", headers: foreign, body: ByteBuffer(string: "scope=all&csrf=\(csrf)")).status == 403)
            let purged = try await gw.handle(.post, "/admin/cache/purge", headers: form, body: ByteBuffer(string: "scope=all&csrf=\(csrf)"))
            #expect(purged.status == 303 && purged.headers[values: .setCookie].contains { $0.hasPrefix("gateway_console_flash=ok") })
            // The cookie opens the console only, never the API.
            #expect(try await gw.handle(.get, "/v1/admin/users", headers: [.cookie: cookie]).status == 401)
            // Signed out: the session ends.
            #expect(try await gw.handle(.post, "/admin/logout", headers: form, body: ByteBuffer(string: "csrf=\(csrf)")).status == 303)
            #expect(try await gw.handle(.get, "/admin/cache", headers: [.cookie: cookie]).status == 303)
            // The assets are the binary's own, with a validator.
            let script = try await gw.handle(.get, "/admin/assets/console.js")
            #expect(script.status == 200 && script.headers[.contentType]?.hasPrefix("text/javascript") == true)
            let etag = try #require(script.headers[.eTag])
            #expect(try await gw.handle(.get, "/admin/assets/console.js", headers: [.ifNoneMatch: etag]).status == 304)
            #expect(try await gw.handle(.get, "/admin/assets/nothing.js").status == 404)
        }
    }
}
