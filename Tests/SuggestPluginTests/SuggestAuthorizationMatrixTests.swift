import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import SuggestPlugin
import Testing

/// Every suggest operation and the KKBOX dialect route, called by every kind of caller, against
/// the status the access rules promise. The dictionaries serve everyone: reading is public (a key
/// needs suggest:read), changing a term takes an administrator or a user an administrator granted
/// suggest:write. Keys belong to A, who holds no grant.
@Suite("suggest authorization matrix")
struct SuggestAuthorizationMatrixTests {
    typealias Caller = MatrixCaller

    static let expected: [String: [Caller: Int]] = {
        let row = MatrixCaller.row
        let publicRead = row(200, 200, 200, 200, 403, 200, 200)
        return [
            "suggest.complete": publicRead, "suggest.dictionaries": publicRead,
            // The old KKBOX API reads no credential: every caller is a guest there, and it only reads.
            "kkbox": Dictionary(uniqueKeysWithValues: Caller.allCases.map { ($0, 200) }),
            // A signed-in user holds no scope of its own: a new account rewriting every user's
            // suggestions was the hole. Only an administrator, or the grant, opens these.
            "suggest.terms.put": row(401, 403, 403, 403, 403, 403, 200).granting(200),
            "suggest.terms.delete": row(401, 403, 403, 403, 403, 403, 204).granting(204),
        ]
    }()

    @Test("every suggest operation, as every kind of caller: zero unexpected allows")
    func matrix() async throws {
        let clock = TestClock()
        try await TestGateway.with(suggest, yaml: "auth: { sessionTTL: 1h }\nplugins:\n  suggest: {}\n", configure: { $0.clock = clock }) { gateway in
            let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "suggest", otherResources: #"["none"]"#)
            let plugin = try #require(gateway.gateway.plugins.first { $0.id == "suggest" }?.instance as? SuggestPlugin)
            var routes = plugin.operations.map { (name: $0.name, method: $0.method, path: "/v1/suggest" + $0.path) }
            routes += plugin.dialects.flatMap(\.routes).map { (name: "kkbox", method: $0.method, path: $0.path) }
            #expect(Set(routes.map(\.name)) == Set(Self.expected.keys), "the matrix must cover every operation and dialect route")
            var unexpectedAllows: [String] = []
            var mismatches: [String] = []
            var cell = 0
            for route in routes {
                for caller in Caller.allCases {
                    cell += 1
                    // A fresh term for every cell, so that each caller has one to remove.
                    let admin: HTTPFields = callers.headers(.admin)
                    _ = try await gateway.gateway.handle(.put, "/v1/suggest/terms", headers: admin,
                                                         body: ByteBuffer(string: #"{"keyword": "term\#(cell)", "weight": 1}"#))
                    var path = route.path.replacingOccurrences(of: "{dictionary}", with: "custom").replacingOccurrences(of: "{keyword}", with: "term\(cell)")
                    var body: ByteBuffer?
                    switch route.name {
                    case "suggest.complete": path += "?q=ta"
                    case "kkbox": path += "?query=ta"
                    case "suggest.terms.put": body = ByteBuffer(string: #"{"keyword": "new\#(cell)", "text": "New", "weight": 5}"#)
                    default: break
                    }
                    let response = try await gateway.gateway.handle(route.method, path, headers: callers.headers(caller), body: body)
                    let want = try #require(Self.expected[route.name]?[caller])
                    if response.status != want {
                        mismatches.append("\(route.name) as \(caller.rawValue): \(response.status), expected \(want): \(String(buffer: response.body).prefix(200))")
                        if response.status < 300 && want >= 400 { unexpectedAllows.append("\(route.name) as \(caller.rawValue)") }
                    }
                }
            }
            #expect(unexpectedAllows.isEmpty, "unexpected allows: \(unexpectedAllows)")
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        }
    }
}
