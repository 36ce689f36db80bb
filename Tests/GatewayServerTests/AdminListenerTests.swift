import AsyncHTTPClient
import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NotesFixturePlugin
import ServiceLifecycle
import Testing

@Suite("admin listener and what the gateway's own endpoints show")
struct AdminListenerTests {
    /// Notes whose health turns degraded (with a reason) as soon as one note exists.
    static let degradedYAML = "plugins:\n  notes:\n    enabled: true\n    config: { maxNotes: 1, recountEvery: 100ms }\n"

    /// Runs the plugins' background services (the notes janitor, which counts) while `body` runs,
    /// with `extra` services beside them.
    static func withServices(_ gateway: TestGateway, extra: [any Service] = [], _ body: () async throws -> Void) async throws {
        let services = extra + gateway.gateway.plugins.flatMap(\.instance.services)
        let group = ServiceGroup(configuration: .init(services: services.map { .init(service: $0) }, logger: Logger(label: "test")))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await body()
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    static func waitForDegraded(_ gateway: TestGateway) async throws {
        for _ in 0..<3 {
            _ = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: .json, body: ByteBuffer(string: #"{"title": "t", "body": "b"}"#))
        }
        for _ in 0..<600 {
            if await gateway.gateway.health().contains(where: { $0.health.status == .degraded }) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("the notes plugin never reported degraded")
    }

    static func reasons(_ reply: JSONValue, _ key: String) -> [String] {
        reply[path: [key]]?.arrayValue?.compactMap { $0[path: ["reason"]]?.stringValue } ?? []
    }

    @Test("on the main port, health reasons are for administrators only; guests and load balancers see the status")
    func mainPortHidesReasons() async throws {
        try await TestGateway.with(notes, yaml: Self.degradedYAML) { gateway in
          try await Self.withServices(gateway) {
            try await Self.waitForDegraded(gateway)
            let guest = try await gateway.gateway.handle(.get, "/readyz")
            #expect(guest.status == 200)
            let guestReply = try JSONValue.parse(guest.body)
            #expect(guestReply[path: ["status"]]?.stringValue == "degraded")
            #expect(Self.reasons(guestReply, "plugins").isEmpty)
            let guestPlugins = try JSONValue.parse(try await gateway.gateway.handle(.get, "/v1/plugins").body)
            #expect(Self.reasons(guestPlugins, "items").isEmpty)
            #expect(guestPlugins[path: ["items"]]?.arrayValue?.first?[path: ["status"]]?.stringValue == "degraded")

            let user = try await gateway.register("someone")
            let asUser = try JSONValue.parse(try await gateway.gateway.handle(.get, "/readyz", headers: [.authorization: "Bearer \(user.token)"]).body)
            #expect(Self.reasons(asUser, "plugins").isEmpty)
            let badToken = try await gateway.gateway.handle(.get, "/readyz", headers: [.authorization: "Bearer nonsense"])
            #expect(badToken.status == 200, "a health check never fails for a credential")
            #expect(Self.reasons(try JSONValue.parse(badToken.body), "plugins").isEmpty)

            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            let asAdmin = try JSONValue.parse(try await gateway.gateway.handle(.get, "/readyz", headers: [.authorization: "Bearer \(root.token)"]).body)
            #expect(Self.reasons(asAdmin, "plugins").first?.contains("above the limit") == true)
            let pluginsAsAdmin = try JSONValue.parse(try await gateway.gateway.handle(.get, "/v1/plugins", headers: [.authorization: "Bearer \(root.token)"]).body)
            #expect(Self.reasons(pluginsAsAdmin, "items").count == 1)
          }
        }
    }

    @Test("server.admin serves healthz, readyz with reasons, metrics without a credential and plugins on a port of its own; nothing else")
    func adminListener() async throws {
        try await TestGateway.with(notes, yaml: Self.degradedYAML) { gateway in
            let (ports, continuation) = AsyncStream<(String, Int)>.makeStream()
            let app = gateway.gateway.makeApplication(host: "127.0.0.1", port: 0) { port in continuation.yield(("main", port)) }
            let admin = gateway.gateway.makeAdminListener(host: "127.0.0.1", port: 0) { port in continuation.yield(("admin", port)) }
            try await Self.withServices(gateway, extra: [app, admin]) {
                try await Self.waitForDegraded(gateway)
                var found: [String: Int] = [:]
                for await (name, port) in ports {
                    found[name] = port
                    if found.count == 2 { break }
                }
                let main = try #require(found["main"]), adminPort = try #require(found["admin"])
                func get(_ port: Int, _ path: String, method: HTTPMethod = .GET) async throws -> (status: UInt, body: String) {
                    var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
                    request.method = method
                    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                    let body = try await response.body.collect(upTo: 1 << 22)
                    return (response.status.code, String(buffer: body))
                }
                let metrics = try await get(adminPort, "/metrics")
                #expect(metrics.status == 200)
                #expect(metrics.body.contains("gateway_requests_total"))
                #expect(try await get(main, "/metrics").status == 401, "the main port still asks for an administrator")
                let ready = try await get(adminPort, "/readyz")
                #expect(ready.body.contains("above the limit"))
                #expect(!(try await get(main, "/readyz").body.contains("above the limit")))
                #expect(try await get(adminPort, "/v1/plugins").body.contains("above the limit"))
                #expect(try await get(adminPort, "/healthz").status == 200)
                #expect(try await get(adminPort, "/v1/notes/echo?name=a").status == 404, "the admin listener serves no API")
                #expect(try await get(adminPort, "/metrics", method: .POST).status == 405)
                #expect(try await get(adminPort, "/healthz", method: .HEAD).status == 200)
            }
        }
    }

    @Test("server.admin is read with its host defaulting to loopback; a port shared with the main listener is an error at its line")
    func settings() throws {
        let parsed = try GatewayConfiguration.parse(Data("server:\n  port: 8080\n  host: 0.0.0.0\n  admin: { port: 9090 }\n".utf8),
                                                    file: "plugins.yaml", knownPlugins: [])
        #expect(parsed.server.admin == AdminListenerSettings(host: "127.0.0.1", port: 9090))
        #expect(throws: ConfigurationFileError.self) {
            try GatewayConfiguration.parse(Data("server:\n  port: 8080\n  admin: { port: 8080 }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
        #expect(throws: ConfigurationFileError.self) {
            try GatewayConfiguration.parse(Data("server:\n  admin: { host: 127.0.0.1 }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
    }
}
