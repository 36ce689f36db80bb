import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import Synchronization
@testable import UpstreamPlugin
import Testing

/// Every route of an upstream service, one per access rule plugins.yaml can give, called by every
/// kind of caller against a real service on loopback. The service's own writes to data every
/// caller shares (`granted:svc:write`) take an administrator or a user an administrator granted
/// svc:write; `scope:svc:write` only narrows keys; `admin` takes an administrator (a key: `admin`).
/// Keys belong to A, who holds no grant.
@Suite("upstream authorization matrix")
struct UpstreamAuthorizationMatrixTests {
    typealias Caller = MatrixCaller

    static let expected: [String: [Caller: Int]] = {
        let row = MatrixCaller.row
        return [
            "svc.open": row(200, 200, 200, 200, 403, 200, 200),
            "svc.mine": row(401, 200, 200, 200, 403, 200, 200),
            "svc.notes": row(401, 200, 200, 403, 200, 200, 200),
            "svc.catalog": row(401, 403, 403, 403, 403, 403, 200).granting(200),
            "svc.admin": row(401, 403, 403, 403, 403, 403, 200),
        ]
    }()

    @Test("every upstream access rule, as every kind of caller: zero unexpected allows")
    func matrix() async throws {
        let fake = FakeUpstream("svc")
        try await fake.serve { url in
            let routes = """
                  routes:
                    - { path: "/open/{rest...}", methods: [GET], name: open, access: public }
                    - { path: "/mine/{rest...}", methods: [GET], name: mine, access: user }
                    - { path: "/notes/{rest...}", methods: [POST], name: notes, access: "scope:svc:write" }
                    - { path: "/catalog/{rest...}", methods: [PUT], name: catalog, access: "granted:svc:write" }
                    - { path: "/admin/{rest...}", methods: [POST], name: admin, access: admin }

            """
            let clock = TestClock()
            try await TestGateway.with(upstream, yaml: "auth: { sessionTTL: 1h }\n" + upstreamYAML("svc", [url], routes), configure: { $0.clock = clock }) { gateway in
                let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "svc", otherResources: #"["none"]"#)
                let operations = try #require(gateway.gateway.plugins.first { $0.id == "svc" }).instance.routes
                #expect(Set(operations.map(\.name)) == Set(Self.expected.keys), "the matrix must cover every route")
                var unexpectedAllows: [String] = []
                var mismatches: [String] = []
                for operation in operations {
                    for caller in Caller.allCases {
                        let path = "/v1/svc" + operation.path.replacingOccurrences(of: "{rest...}", with: "item/1")
                        let body: ByteBuffer? = operation.method == .get ? nil : ByteBuffer(string: "{}")
                        let response = try await gateway.gateway.handle(operation.method, path, headers: callers.headers(caller), body: body)
                        let want = try #require(Self.expected[operation.name]?[caller])
                        if response.status != want {
                            mismatches.append("\(operation.name) as \(caller.rawValue): \(response.status), expected \(want): \(String(buffer: response.body).prefix(200))")
                            if response.status < 300 && want >= 400 { unexpectedAllows.append("\(operation.name) as \(caller.rawValue)") }
                        }
                    }
                }
                #expect(unexpectedAllows.isEmpty, "unexpected allows: \(unexpectedAllows)")
                #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
                #expect(fake.requests.load(ordering: .relaxed) > 0, "the allowed calls reached the service")
            }
        }
    }
}
