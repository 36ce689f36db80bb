import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import Testing

/// The gateway binary against a real OpenID Connect provider: django-oauth-toolkit 3.4.1 (PyPI),
/// run from Tests/Fixtures/oidc-provider on loopback. Discovery, JWKS, the client-credentials and
/// password grants, JWT access tokens of RFC 9068 shape, an opaque token introspected (RFC 7662),
/// and the provider rotating its signing key while the gateway runs.
@Suite("a real OpenID Connect provider", .serialized)
struct OpenIDConnectTests {
    static let fixture = GatewayBinaryTests.packageRoot.appendingPathComponent("Tests/Fixtures/oidc-provider")
    /// The provider's Python environment, made once per checkout (pip, about 20 s) and kept in .build.
    static let venv = GatewayBinaryTests.packageRoot.appendingPathComponent(".build/oidc-provider-venv")

    /// Runs a shell script of the fixture to its end on a thread of its own; throws with its output when it fails.
    static func script(_ name: String, _ arguments: [String], environment: [String: String] = [:]) async throws {
        await SpawnGate.waitForFewDescriptors()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            Thread.detachNewThread {
                continuation.resume(with: Result {
                    let process = Process()
                    process.executableURL = URL(fileURLWithPath: "/bin/bash")
                    process.arguments = [fixture.appendingPathComponent(name).path] + arguments
                    process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
                    let output = Pipe()
                    process.standardOutput = output
                    process.standardError = output
                    try process.run()
                    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                    process.waitUntilExit()
                    guard process.terminationStatus == 0 else {
                        throw GatewayProcessError(description: "\(name) failed (\(process.terminationStatus)): \(text.suffix(2000))")
                    }
                })
            }
        }
    }

    /// The provider, started by start.sh on `port` with the signing key `key` (and `oldKeys` still
    /// published); stopped by ``stop()``.
    final class Provider: @unchecked Sendable {
        // Unchecked: the process is started in init and only stopped afterwards, by one task.
        let process = Process()
        let issuer: String

        init(port: Int, key: URL, oldKeys: [URL] = [], database: URL, log: URL) async throws {
            issuer = "http://127.0.0.1:\(port)/o"
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = [OpenIDConnectTests.fixture.appendingPathComponent("start.sh").path, OpenIDConnectTests.venv.path]
            process.environment = ProcessInfo.processInfo.environment.merging([
                "PORT": String(port), "IDP_KEY": key.path, "IDP_OLD_KEYS": oldKeys.map(\.path).joined(separator: ":"), "IDP_DB": database.path,
            ]) { _, new in new }
            FileManager.default.createFile(atPath: log.path, contents: nil)
            let handle = try FileHandle(forWritingTo: log)
            handle.seekToEndOfFile()
            process.standardOutput = handle
            process.standardError = handle
            await SpawnGate.waitForFewDescriptors()
            try process.run()
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline {
                if let (status, _) = try? await OpenIDConnectTests.request("GET", issuer + "/.well-known/openid-configuration"), status == 200 { return }
                guard process.isRunning else { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            stop()
            throw GatewayProcessError(description: "the provider did not start: \((try? String(contentsOf: log, encoding: .utf8))?.suffix(2000) ?? "")")
        }

        /// SIGKILL: the server inherits the test thread's blocked signals, SIGTERM among them.
        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
    }

    static func request(_ method: String, _ url: String, headers: [(String, String)] = [], body: String? = nil) async throws -> (Int, [String: Any]) {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        // Plain replies: the shared client's decompression refuses a reply that shrank as much as
        // /metrics does.
        request.headers.replaceOrAdd(name: "Accept-Encoding", value: "identity")
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(20))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), ((try? JSONSerialization.jsonObject(with: Data(buffer: bytes))) as? [String: Any]) ?? [:])
    }

    /// A token from the provider's token endpoint (`grant`: form fields), for the client `client`.
    static func token(_ provider: Provider, client: String, _ grant: [String: String]) async throws -> String {
        let form = grant.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }.joined(separator: "&")
        let basic = "Basic " + Data("\(client):\(client)-secret".utf8).base64EncodedString()
        let (status, json) = try await request("POST", provider.issuer + "/token/", headers: [("Authorization", basic), ("Content-Type", "application/x-www-form-urlencoded")], body: form)
        guard status == 200, let token = json["access_token"] as? String else { throw GatewayProcessError(description: "no token for \(client): \(status) \(json)") }
        return token
    }

    static func bearer(_ token: String) -> [(String, String)] { [("Authorization", "Bearer " + token), ("Content-Type", "application/json")] }

    @Test("client credentials, password grant, introspection and a key rotation, against django-oauth-toolkit", .timeLimit(.minutes(10)))
    func realProvider() async throws {
        try await Self.script("setup.sh", [Self.venv.path])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-oidc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("data"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (first, second) = (directory.appendingPathComponent("key-1.pem"), directory.appendingPathComponent("key-2.pem"))
        try await Self.script("newkey.sh", [Self.venv.path, first.path])
        try await Self.script("newkey.sh", [Self.venv.path, second.path])
        let port = try ClusterHarness.freePort()
        let database = directory.appendingPathComponent("idp.sqlite3")
        let log = directory.appendingPathComponent("idp.log")
        var provider = try await Provider(port: port, key: first, database: database, log: log)
        defer { provider.stop() }
        let issuer = provider.issuer
        try """
            storage: sqlite:data/gateway.sqlite
            demo: false
            auth:
              bcryptCost: 10
              providers:
                corp:
                  type: oidc
                  issuer: \(issuer)
                  audiences: [gateway]
                  claims:
                    admin: { claim: groups, value: gateway-admins }
                    group: { claim: groups }
                sso:
                  type: introspection
                  endpoint: \(issuer)/introspect/
                  client: { id: gateway, secret: gateway-secret }
                  claims: { subject: username, username: username }
            plugins:
              todo:
                enabled: true
                config:
                  buckets:
                    notes: { create: authenticated }
            """.write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)
        let gateway = try await GatewayProcess(directory: directory)
        defer { gateway.stop() }

        // Client credentials: a service's JWT (RFC 9068, typ at+jwt) reads, and may not write.
        let service = try await Self.token(provider, client: "jwt-service", ["grant_type": "client_credentials", "scope": "todo:read"])
        #expect(service.split(separator: ".").count == 3)
        let (listed, _) = try await Self.request("GET", gateway.url + "/v1/todo/buckets/notes/objects", headers: Self.bearer(service))
        #expect(listed == 200)
        let (refused, refusal) = try await Self.request("POST", gateway.url + "/v1/todo/buckets/notes/objects", headers: Self.bearer(service),
                                                        body: #"{"text": "x"}"#)
        #expect(refused == 403, "\(refusal)")

        // Password grant: alice's JWT makes her account on first sight; her object is hers.
        let alice = try await Self.token(provider, client: "jwt-app", ["grant_type": "password", "username": "alice", "password": "alice-pass",
                                                                         "scope": "todo:read todo:write accounts:read"])
        let (meStatus, me) = try await Self.request("GET", gateway.url + "/v1/me", headers: Self.bearer(alice))
        #expect(meStatus == 200, "\(me)")
        #expect(me["username"] as? String == "alice")
        let (created, object) = try await Self.request("POST", gateway.url + "/v1/todo/buckets/notes/objects", headers: Self.bearer(alice),
                                                       body: #"{"text": "from the provider"}"#)
        #expect(created == 201, "\(object)")
        #expect(object["owner"] as? String == me["id"] as? String)
        // Administrators by group: bob is in gateway-admins, alice is not.
        let bob = try await Self.token(provider, client: "jwt-app", ["grant_type": "password", "username": "bob", "password": "bob-pass", "scope": "admin"])
        let (bobMetrics, _) = try await Self.request("GET", gateway.url + "/metrics", headers: Self.bearer(bob))
        #expect(bobMetrics == 200)
        let (aliceMetrics, _) = try await Self.request("GET", gateway.url + "/metrics", headers: Self.bearer(alice))
        #expect(aliceMetrics == 403)

        // An opaque token, introspected.
        let opaque = try await Self.token(provider, client: "opaque-app", ["grant_type": "password", "username": "alice", "password": "alice-pass",
                                                                             "scope": "todo:read accounts:read"])
        #expect(!opaque.contains("."))
        let (introspected, viaIntrospection) = try await Self.request("GET", gateway.url + "/v1/me", headers: Self.bearer(opaque))
        #expect(introspected == 200, "\(viaIntrospection)")
        let (garbage, _) = try await Self.request("GET", gateway.url + "/v1/me", headers: Self.bearer("not-a-token-the-provider-issued"))
        #expect(garbage == 401)

        // The provider rotates its key while the gateway runs: new tokens carry the new kid.
        provider.stop()
        provider = try await Provider(port: port, key: second, oldKeys: [first], database: database, log: log)
        let rotated = try await Self.token(provider, client: "jwt-app", ["grant_type": "password", "username": "alice", "password": "alice-pass",
                                                                           "scope": "todo:read accounts:read"])
        let header = try #require(rotated.split(separator: ".").first)
        #expect(!alice.hasPrefix(String(header)), "the rotated token names another key")
        let (afterRotation, again) = try await Self.request("GET", gateway.url + "/v1/me", headers: Self.bearer(rotated))
        #expect(afterRotation == 200, "\(again)")
        #expect(again["id"] as? String == me["id"] as? String)
        let (oldStill, _) = try await Self.request("GET", gateway.url + "/v1/todo/buckets/notes/objects", headers: Self.bearer(alice))
        #expect(oldStill == 200)
    }
}
