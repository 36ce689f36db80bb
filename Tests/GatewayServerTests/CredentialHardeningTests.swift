import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import Testing

@Suite("credentials: bcrypt off the request threads, no timing oracle, no silent downgrade")
struct CredentialHardeningTests {
    static let apiKey = HTTPField.Name("X-Api-Key")!

    @Test("an unknown username is checked against a decoy hash of the configured cost")
    func decoyCost() async throws {
        for cost in [10, 11, 12] {
            let decoy = try await AccountStore.decoyHash(cost: cost)
            #expect(decoy.hasPrefix(String(format: "$2b$%02d$", cost)), "\(decoy.prefix(7))")
        }
        try await TestGateway.with(notes, yaml: notesYAML + "\nauth:\n  bcryptCost: 11\n") { gateway in
            let unknown = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                           body: ByteBuffer(string: #"{"username": "nobody", "password": "not the password"}"#))
            #expect(unknown.status == 401)
        }
    }

    /// On Linux the global executor adds threads when its threads block, so an inline hash did not
    /// stall /healthz in this test either; hashing on NIO's blocking pool keeps the cooperative
    /// threads free wherever the executor is strict (and bounds hashing to the pool's threads).
    @Test("/healthz answers at once while 50 logins hash at cost 12")
    func bcryptOffTheCooperativePool() async throws {
        try await TestGateway.with(notes, yaml: notesYAML + "\nauth:\n  bcryptCost: 12\n") { gateway in
            _ = try await gateway.register("busy")
            let slowest = try await withThrowingTaskGroup(of: Duration?.self) { group in
                for _ in 0..<50 {
                    group.addTask {
                        _ = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                             body: ByteBuffer(string: #"{"username": "busy", "password": "correct horse battery"}"#))
                        return nil
                    }
                }
                group.addTask {
                    try await Task.sleep(for: .milliseconds(200))
                    var slowest = Duration.zero
                    for _ in 0..<20 {
                        let start = ContinuousClock.now
                        _ = try await gateway.gateway.handle(.get, "/healthz")
                        slowest = max(slowest, ContinuousClock.now - start)
                        try await Task.sleep(for: .milliseconds(20))
                    }
                    return slowest
                }
                var slowest = Duration.zero
                for try await result in group { if let result { slowest = result } }
                return slowest
            }
            #expect(slowest < .milliseconds(100), "the slowest /healthz took \(slowest)")
        }
    }

    @Test("a credential that cannot be verified is a 401 even beside a valid one; another Authorization scheme is not ignored")
    func noDowngrade() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let (token, _) = try await gateway.register("holder")
            let key = try await gateway.createKey(token: token, grant: #"{"label": "ci", "scopes": ["notes:read"]}"#)
            func status(_ headers: HTTPFields) async throws -> Int {
                try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: headers).status
            }
            let bearerOK = try await status([.authorization: "Bearer \(token)"])
            let keyOK = try await status([Self.apiKey: key.secret])
            let both = try await status([.authorization: "Bearer \(token)", Self.apiKey: key.secret])
            #expect(bearerOK == 200 && keyOK == 200 && both == 200)
            let badKeyBesideToken = try await status([.authorization: "Bearer \(token)", Self.apiKey: "gk_not_a_key"])
            let badTokenBesideKey = try await status([.authorization: "Bearer not-a-token", Self.apiKey: key.secret])
            let basic = try await status([.authorization: "Basic dXNlcjpwYXNz"])
            let basicBesideKey = try await status([.authorization: "Basic dXNlcjpwYXNz", Self.apiKey: key.secret])
            let emptyBearer = try await status([.authorization: "Bearer "])
            #expect(badKeyBesideToken == 401 && badTokenBesideKey == 401)
            #expect(basic == 401 && basicBesideKey == 401 && emptyBearer == 401)
            let guest = try await status([:])
            #expect(guest == 200, "no credential at all is a guest, where guests may call")
        }
    }
}

@Suite("/metrics is for administrators")
struct MetricsAccessTests {
    @Test("guests 401, users 403, administrators and their keys (also as a bearer token, as Prometheus sends it) 200; publicMetrics opens it")
    func access() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let user = try await gateway.register("someone")
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            // A master key (no owner: `gateway key create`) acts as an administrator; a user's key as its scopes allow.
            let key = (secret: try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "prometheus", scopes: ["*"])).0, id: "")
            func status(_ headers: HTTPFields) async throws -> Int { try await gateway.gateway.handle(.get, "/metrics", headers: headers).status }
            let guest = try await status([:])
            let member = try await status([.authorization: "Bearer \(user.token)"])
            let admin = try await status([.authorization: "Bearer \(root.token)"])
            let adminKey = try await status([CredentialHardeningTests.apiKey: key.secret])
            let adminKeyAsBearer = try await status([.authorization: "Bearer \(key.secret)"])
            let badKey = try await status([.authorization: "Bearer gk_nothing"])
            #expect(guest == 401 && member == 403 && badKey == 401)
            #expect(admin == 200 && adminKey == 200 && adminKeyAsBearer == 200)
        }
        try await TestGateway.with(notes, yaml: notesYAML + "\nserver:\n  publicMetrics: true\n") { gateway in
            let open = try await gateway.gateway.handle(.get, "/metrics").status
            #expect(open == 200)
        }
    }
}
