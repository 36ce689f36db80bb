import AsyncHTTPClient
import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HummingbirdWSClient
import HTTPTypes
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import NIOWebSocket
import NotesFixturePlugin
import ServiceLifecycle
import Testing
import X509

@Suite("TLS and HTTP/2")
struct TLSTests {
    static func directory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// A client that trusts only the authority of `certificates`.
    static func client(trusting certificates: TestCertificates, http1Only: Bool = false) throws -> HTTPClient {
        var configuration = HTTPClient.Configuration(tlsConfiguration: try certificates.clientConfiguration())
        configuration.httpVersion = http1Only ? .http1Only : .automatic
        configuration.timeout.connect = .seconds(2)   // a refused handshake is retried until then
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Serves `gateway` on a free port and runs `body` with it.
    static func serving(_ gateway: TestGateway, _ body: (Int) async throws -> Void) async throws {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = gateway.gateway.makeApplication(host: "127.0.0.1", port: 0) { port in continuation.yield(port) }
        let group = ServiceGroup(configuration: .init(services: [.init(service: app)], logger: Logger(label: "test")))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var iterator = ports.makeAsyncIterator()
            let port = try #require(await iterator.next())
            try await body(port)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    static func get(_ client: HTTPClient, _ url: String) async throws -> (status: UInt, version: HTTPVersion, body: String) {
        let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (response.status.code, response.version, String(buffer: body))
    }

    @Test("HTTPS with HTTP/2 by ALPN and HTTP/1.1 beside it; SIGHUP's reload serves a new certificate to new connections, a broken one is refused and the old stays")
    func httpsAndReload() async throws {
        let folder = try Self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let first = try TestCertificates.make("one")
        try first.write(to: folder)
        let yaml = notesYAML + "\nserver:\n  tls: { certificate: \(folder.path)/cert.pem, key: \(folder.path)/key.pem }\n"
        try await TestGateway.with(notes, yaml: yaml) { gateway in
            let certificates = try #require(gateway.gateway.certificates)
            try await Self.serving(gateway) { port in
                let url = "https://127.0.0.1:\(port)/v1/notes/echo?name=tls"
                let h2 = try Self.client(trusting: first)
                let answer = try await Self.get(h2, url)
                #expect(answer.status == 200)
                #expect(answer.version == .http2, "ALPN picks h2")
                #expect(answer.body.contains("tls"))
                try await h2.shutdown()
                let h1 = try Self.client(trusting: first, http1Only: true)
                let old = try await Self.get(h1, url)
                #expect(old.status == 200)
                #expect(old.version == .http1_1)
                try await h1.shutdown()

                // A new pair in the same files, read again (as on SIGHUP).
                let second = try TestCertificates.make("two")
                try second.write(to: folder)
                try certificates.reload()
                let trustsSecond = try Self.client(trusting: second)
                #expect(try await Self.get(trustsSecond, url).status == 200)
                try await trustsSecond.shutdown()
                let trustsFirst = try Self.client(trusting: first)
                await #expect(throws: (any Error).self, "new connections get the new certificate") { _ = try await Self.get(trustsFirst, url) }
                try await trustsFirst.shutdown()

                // A broken key: the reload is refused, the pair in use stays.
                try "not a key".write(to: folder.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
                #expect(throws: GatewayStartupError.self) { try certificates.reload() }
                let stillSecond = try Self.client(trusting: second)
                #expect(try await Self.get(stillSecond, url).status == 200)
                try await stillSecond.shutdown()
                // A key of another certificate: refused too.
                try TestCertificates.make("three").leafKey.write(to: folder.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
                #expect(throws: GatewayStartupError.self) { try certificates.reload() }
            }
        }
    }

    @Test("http2: false offers HTTP/1.1 only, and WebSocket upgrades work over TLS")
    func http1Only() async throws {
        let folder = try Self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let pair = try TestCertificates.make("h1")
        try pair.write(to: folder)
        let yaml = notesYAML + "\nserver:\n  tls: { certificate: \(folder.path)/cert.pem, key: \(folder.path)/key.pem, http2: false, minimumVersion: \"1.3\" }\n"
        try await TestGateway.with(notes, yaml: yaml) { gateway in
            try await Self.serving(gateway) { port in
                let client = try Self.client(trusting: pair)
                let answer = try await Self.get(client, "https://127.0.0.1:\(port)/v1/notes/echo?name=one")
                #expect(answer.status == 200)
                #expect(answer.version == .http1_1)
                try await client.shutdown()
                // wss:// reaches the WebSocket route.
                let closed = try await WebSocketClient.connect(url: "wss://127.0.0.1:\(port)/legacy/live", configuration: .init(sniHostname: "localhost"),
                                                               tlsConfiguration: try pair.clientConfiguration(), logger: Logger(label: "wss")) { inbound, outbound, _ in
                    try await outbound.write(.text("secure"))
                    var iterator = inbound.messages(maxSize: 1 << 16).makeAsyncIterator()
                    let reply = try await iterator.next()
                    try await outbound.close(.normalClosure, reason: nil)
                    #expect(reply == .text("SECURE"))
                }
                #expect(closed?.closeCode == .normalClosure)
            }
        }
    }

    @Test("certificate files: relative to plugins.yaml's folder; missing, unreadable or mismatched ones stop the start with the file named")
    func files() async throws {
        let folder = try Self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let pair = try TestCertificates.make("files")
        try pair.write(to: folder)
        let store = try CertificateStore(TLSSettings(certificate: "cert.pem", key: "key.pem"), baseDirectory: folder)
        #expect(!store.serialNumber.isEmpty)
        #expect(throws: GatewayStartupError.self) { try CertificateStore(TLSSettings(certificate: "missing.pem", key: "key.pem"), baseDirectory: folder) }
        #expect(throws: GatewayStartupError.self) { try CertificateStore(TLSSettings(certificate: "key.pem", key: "key.pem"), baseDirectory: folder) }
        try TestCertificates.make("other").leafKey.write(to: folder.appendingPathComponent("other-key.pem"), atomically: true, encoding: .utf8)
        do {
            _ = try CertificateStore(TLSSettings(certificate: "cert.pem", key: "other-key.pem"), baseDirectory: folder)
            Issue.record("a key of another certificate was accepted")
        } catch let error as GatewayStartupError {
            #expect("\(error)".contains("does not belong"))
        }
        // Gateway.start refuses before opening the database.
        let yaml = notesYAML + "\nserver:\n  tls: { certificate: \(folder.path)/nowhere.pem, key: \(folder.path)/key.pem }\n"
        await #expect(throws: GatewayStartupError.self) {
            try await TestGateway.with(notes, yaml: yaml) { _ in }
        }
        #expect(throws: ConfigurationFileError.self) {
            try GatewayConfiguration.parse(Data("server:\n  tls: { certificate: a.pem, key: b.pem, minimumVersion: \"1.0\" }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
        #expect(throws: ConfigurationFileError.self) {
            try GatewayConfiguration.parse(Data("server:\n  tls: { certificate: a.pem }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
    }

    /// A client trusting `server`'s authority and presenting `certificate` (nil: none).
    static func client(trusting server: TestCertificates, presenting certificate: (certificate: String, key: String)?, http1Only: Bool = false) throws -> HTTPClient {
        let tls = try certificate.map { try server.clientConfiguration(presenting: $0) } ?? server.clientConfiguration()
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = http1Only ? .http1Only : .automatic
        configuration.timeout.connect = .seconds(2)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// GET `url` with `client` (and `headers`), then shuts the client down.
    static func call(_ client: HTTPClient, _ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = []) async throws -> (status: UInt, body: String) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if method == .POST {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: #"{"title": "t", "body": "b"}"#))
        }
        do {
            let response = try await client.execute(request, timeout: .seconds(30))
            let body = String(buffer: try await response.body.collect(upTo: 1 << 20))
            try await client.shutdown()
            return (response.status.code, body)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    @Test("client certificates: optional and required; a verified certificate names an account or scopes (auth.certificates); unmapped is a 401; a foreign one fails the handshake")
    func clientCertificates() async throws {
        let folder = try Self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try TestCertificates.make("mtls-server")
        try server.write(to: folder)
        let clients = try TestCertificates.make("mtls-clients")
        try clients.authority.write(to: folder.appendingPathComponent("clients-ca.pem"), atomically: true, encoding: .utf8)
        let billing = try clients.client("billing")
        let reports = try clients.client("reports", alternativeNames: [.uniformResourceIdentifier("spiffe://acme/reports")])
        let stranger = try clients.client("stranger")
        let foreign = try TestCertificates.make("elsewhere").client("billing")
        func yaml(_ mode: String, plugins: String = notesYAML) -> String {
            plugins + """

                composites:
                  whoami:
                    path: /v1/views/whoami
                    access: user
                    steps:
                      me: { method: GET, path: /v1/me }
                server:
                  tls: { certificate: \(folder.path)/cert.pem, key: \(folder.path)/key.pem, clientCertificates: { ca: \(folder.path)/clients-ca.pem, mode: \(mode) } }
                auth:
                  certificates:
                    - { subject: "CN=billing,O=Acme", user: billing }
                    - { san: "uri:spiffe://acme/reports", scopes: [notes:read] }

                """
        }
        try await TestGateway.with(notes, yaml: yaml("optional")) { gateway in
            let user = try await gateway.register("billing")
            let key = try await gateway.createKey(token: user.token, grant: #"{"label": "k", "scopes": ["*"]}"#)
            try await Self.serving(gateway) { port in
                let base = "https://127.0.0.1:\(port)"
                // Optional: a client without a certificate is served as a guest.
                #expect(try await Self.call(Self.client(trusting: server, presenting: nil), base + "/v1/notes/echo?name=x").status == 200)
                #expect(try await Self.call(Self.client(trusting: server, presenting: nil), base + "/v1/me").status == 401)
                // A certificate naming an account acts for it, over HTTP/2 and HTTP/1.1.
                for http1Only in [false, true] {
                    let me = try await Self.call(Self.client(trusting: server, presenting: billing, http1Only: http1Only), base + "/v1/me")
                    #expect(me.status == 200 && me.body.contains(user.userID), "\(me.body)")
                }
                // A composite's steps run as the certificate's caller too.
                let composed = try await Self.call(Self.client(trusting: server, presenting: billing), base + "/v1/views/whoami")
                #expect(composed.status == 200 && composed.body.contains(user.userID), "\(composed.body)")
                // A certificate naming scopes: bound by them.
                #expect(try await Self.call(Self.client(trusting: server, presenting: reports), base + "/v1/notes/echo?name=x").status == 200)
                let write = try await Self.call(Self.client(trusting: server, presenting: reports), base + "/v1/notes/notes", method: .POST)
                #expect(write.status == 403 && write.body.contains("certificate lacks the scope notes:write"), "\(write.body)")
                // Verified but named by no rule: a 401 saying so.
                let unmapped = try await Self.call(Self.client(trusting: server, presenting: stranger), base + "/v1/notes/echo?name=x")
                #expect(unmapped.status == 401 && unmapped.body.contains("names no caller"), "\(unmapped.body)")
                // Another credential beside the certificate decides who calls.
                let withKey = try await Self.call(Self.client(trusting: server, presenting: stranger), base + "/v1/me", headers: [("X-Api-Key", key.secret)])
                #expect(withKey.status == 200 && withKey.body.contains(user.userID))
                // Signed by another authority: the handshake fails.
                await #expect(throws: (any Error).self) { _ = try await Self.call(Self.client(trusting: server, presenting: foreign), base + "/v1/notes/echo?name=x") }
            }
            // A disabled account's certificate is refused once the gateway forgets its credentials.
            try await gateway.gateway.accounts.setDisabled(userID: user.userID, true)
            gateway.gateway.forgetCredentials(userID: user.userID)
            try await Self.serving(gateway) { port in
                let me = try await Self.call(Self.client(trusting: server, presenting: billing), "https://127.0.0.1:\(port)/v1/me")
                #expect(me.status == 401, "\(me.body)")
            }
        }
        try await TestGateway.with(notes, yaml: yaml("required", plugins: notesYAML + "    accept: [certificate]\n")) { gateway in
            _ = try await gateway.register("billing")
            try await Self.serving(gateway) { port async throws in
                let base = "https://127.0.0.1:\(port)"
                await #expect(throws: (any Error).self, "required: no certificate, no handshake") {
                    _ = try await Self.call(Self.client(trusting: server, presenting: nil), base + "/v1/notes/echo?name=x")
                }
                #expect(try await Self.call(Self.client(trusting: server, presenting: billing), base + "/v1/notes/echo?name=x").status == 200)
            }
        }
        // Configuration errors: a missing authority file; a rule without a caller.
        await #expect(throws: GatewayStartupError.self) {
            try await TestGateway.with(notes, yaml: notesYAML + "\nserver:\n  tls: { certificate: \(folder.path)/cert.pem, key: \(folder.path)/key.pem, clientCertificates: { ca: \(folder.path)/none.pem } }\n") { _ in }
        }
        #expect(throws: (any Error).self) {
            try GatewayConfiguration.parse(Data("auth:\n  certificates:\n    - { subject: \"CN=x\" }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
        #expect(throws: (any Error).self) {
            try GatewayConfiguration.parse(Data("auth:\n  certificates:\n    - { san: \"x\", scopes: [\"*\"] }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
    }

    @Test("certificate rules: DNS names and e-mail addresses match without regard to case, IP addresses in any spelling; the rule is the caller")
    func certificateRules() throws {
        let yaml = """
            auth:
              certificates:
                - { san: "dns:Reports.Internal", scopes: [notes:read] }
                - { san: "ip:2001:db8::1", scopes: [notes:read] }
                - { subject: "CN=billing,O=Acme", user: billing }

            """
        let rules = try GatewayConfiguration.parse(Data(yaml.utf8), file: "plugins.yaml", knownPlugins: []).auth.certificates
        func rule(for certificate: ClientCertificate) -> CertificateRule? { rules.first { $0.matches(certificate) } }
        let reports = ClientCertificate(subject: "CN=any", alternativeNames: ["dns:reports.internal"], fingerprint: "a")
        #expect(rule(for: reports)?.selector == "san:dns:reports.internal")
        let byAddress = ClientCertificate(subject: "CN=other", alternativeNames: ["ip:2001:db8:0:0:0:0:0:1"], fingerprint: "b")
        #expect(rule(for: byAddress) == rules[1])
        // Two certificates of one subject are one caller: the rule's.
        let first = ClientCertificate(subject: "CN=billing,O=Acme", alternativeNames: [], fingerprint: "c")
        let renewed = ClientCertificate(subject: "CN=billing,O=Acme", alternativeNames: [], fingerprint: "d")
        #expect(rule(for: first)?.selector == rule(for: renewed)?.selector)
        #expect(rule(for: first) != nil)
        #expect(rule(for: ClientCertificate(subject: "", alternativeNames: [], fingerprint: "unreadable")) == nil)
        #expect(ClientCertificate(der: Array("not a certificate".utf8)).subject.isEmpty)
        #expect(throws: (any Error).self) {
            try GatewayConfiguration.parse(Data("auth:\n  certificates:\n    - { san: \"ip:010.0.0.1\", scopes: [\"*\"] }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
        #expect(throws: (any Error).self) {
            try GatewayConfiguration.parse(Data("auth:\n  certificates:\n    - { subject: \"\", scopes: [\"*\"] }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
    }

    @Test("two certificates of one rule are one caller, named by the rule; a rule of scopes alone has no account")
    func certificateCallerIdentity() async throws {
        let yaml = notesYAML + """
            auth:
              certificates:
                - { san: "uri:spiffe://acme/reports", scopes: [notes:read] }

            """
        try await TestGateway.with(notes, yaml: yaml) { gateway in
            let rules = gateway.gateway.configuration.auth.certificates
            let authenticator = try #require(gateway.gateway.parts.accountsService.authenticator as AccountAuthenticator?)
            let first = ClientCertificate(subject: "O=SPIRE,C=US", alternativeNames: ["uri:spiffe://acme/reports"], fingerprint: "one")
            let second = ClientCertificate(subject: "O=SPIRE,C=US", alternativeNames: ["uri:spiffe://acme/reports"], fingerprint: "two")
            let a = try await authenticator.principal(for: first, rules: rules, address: "192.0.2.1")
            let b = try await authenticator.principal(for: second, rules: rules, address: "192.0.2.2")
            #expect(a.kind == .token(provider: "certificate", subject: "san:uri:spiffe://acme/reports"))
            #expect(a.kind == b.kind && a.userID == nil && a.scopes == ["notes:read"])
            let stranger = ClientCertificate(subject: "O=SPIRE,C=US", alternativeNames: ["uri:spiffe://acme/other"], fingerprint: "three")
            await #expect(throws: GatewayError.self) { _ = try await authenticator.principal(for: stranger, rules: rules, address: "192.0.2.3") }
        }
    }
}
