import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import Synchronization
import Testing
@testable import UpstreamPlugin

@Suite("upstream: the admin console's instances page")
struct UpstreamAdminViewTests {
    @Test("each instance's health and last check, its failures, and the circuit breaker's state")
    func instances() async throws {
        let a = FakeUpstream("a"), b = FakeUpstream("b")
        try await a.serve { urlA in
            try await b.serve { urlB in
                a.healthy.withLock { $0 = false }
                let extra = "      retries: 0\n      ejection: { failures: 0 }\n      breaker: { failures: 2, openFor: 60s }\n"
                    + "      healthCheck: { path: /health, interval: 1h, timeout: 60s, unhealthyAfter: 1, healthyAfter: 1 }\n"
                try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [urlA, urlB], extra)) { gateway in
                    let root = try await gateway.register("root")
                    try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
                    gateway.gateway.forgetCredentials(userID: root.userID)
                    let auth: HTTPFields = [.authorization: "Bearer \(root.token)"]
                    let plugin = try #require(gateway.gateway.plugins.first { $0.id == "svc" }?.instance as? UpstreamPlugin)
                    let checker = try #require(plugin.services.first as? HealthChecker)
                    await checker.checkAll()

                    func page() async throws -> (figures: [String: String], rows: [[String]]) {
                        let reply = try await gateway.gateway.handle(.get, "/v1/admin/plugins/svc/views/instances", headers: auth)
                        #expect(reply.status == 200, "\(reply.text)")
                        let sections = reply.json["sections"] as? [[String: Any]] ?? []
                        #expect(sections.map { $0["kind"] as? String } == ["figures", "table"], "\(reply.text)")
                        let figures = (sections.first?["figures"] as? [[String: String]] ?? []).reduce(into: [String: String]()) { $0[$1["label"] ?? ""] = $1["value"] }
                        let rows = (sections.last?["rows"] as? [[String: Any]] ?? []).compactMap { $0["cells"] as? [String] }
                        return (figures, rows)
                    }

                    let healthy = try await page()
                    #expect(healthy.figures["Circuit breaker"] == "closed (0 failures in a row)", "\(healthy.figures)")
                    #expect(healthy.figures["Instances up"] == "1 of 2")
                    #expect(healthy.figures["Health checks"] == "GET /health every 1h", "\(healthy.figures)")
                    #expect(healthy.rows.map { $0.first } == [urlA, urlB])
                    #expect(healthy.rows.first?[1] == "unhealthy")
                    #expect(healthy.rows.first?[2].hasSuffix("(down)") == true, "\(healthy.rows)")
                    #expect(healthy.rows.last?[1] == "healthy")
                    #expect(healthy.rows.last?[2].hasSuffix("(up)") == true, "\(healthy.rows)")

                    // Two failures of b (a is down, so requests go to b) open the breaker.
                    b.failWith.withLock { $0 = 500 }
                    for _ in 0..<2 { #expect(try await gateway.gateway.handle(.get, "/v1/svc/x").status == 500) }
                    let open = try await page()
                    #expect(open.figures["Circuit breaker"]?.hasPrefix("open (requests refused for") == true, "\(open.figures)")
                    #expect(open.rows.last?[4] == "2", "b's failures in a row: \(open.rows)")

                    let user = try await gateway.register("plain")
                    #expect(try await gateway.gateway.handle(.get, "/v1/admin/plugins/svc/views/instances",
                                                             headers: [.authorization: "Bearer \(user.token)"]).status == 403)
                }
            }
        }
    }
}
