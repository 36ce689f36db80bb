import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOPosix
import NotesFixturePlugin
import Testing

@Suite("credentials: bcrypt on threads of its own, no timing oracle, no silent downgrade")
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

    /// Hashing has threads of its own: while every one of them is busy, requests and the database's
    /// blocking work (SQLite runs on GRDB's dispatch queues) go on. The hashing threads are held here by
    /// sleeping jobs, which take no CPU, so only queueing could delay the requests: had hashing shared
    /// NIO's pool, the database read would wait the whole hold. The margin is wide (the requests get
    /// five of the hold's six seconds) so that a machine busy with other tests does not fail it.
    @Test("requests and database reads go on while every hashing thread is busy")
    func hashingHasItsOwnThreads() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            _ = try await gateway.register("busy")
            let hold = Duration.seconds(6)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<(System.coreCount + 1) {
                    group.addTask { try await AccountStore.hashing.runIfActive { Thread.sleep(forTimeInterval: 6) } }
                }
                try await Task.sleep(for: .milliseconds(100))
                let start = ContinuousClock.now
                let health = try await gateway.gateway.handle(.get, "/healthz")
                let list = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [.cacheControl: "no-cache"])
                let took = ContinuousClock.now - start
                #expect(health.status == 200 && list.status == 200)
                #expect(took < hold - .seconds(1), "the requests waited \(took) for the hashing threads")
                try await group.waitForAll()
            }
            // A login queued behind them still completes.
            let login = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                         body: ByteBuffer(string: #"{"username": "busy", "password": "correct horse battery"}"#))
            #expect(login.status == 200)
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
            // The scheme in any case, blanks around the token.
            #expect(try await status([.authorization: "bearer \(token)"]) == 200)
            #expect(try await status([.authorization: "BEARER \t \(token) "]) == 200)
            #expect(try await status([.authorization: "Bearer\t\(token)"]) == 401, "a tab is not the separator after the scheme")
            #expect(try await status([.authorization: "Bearerx \(token)"]) == 401)
            #expect(try await status([.authorization: "Bearer  \t "]) == 401)
        }
    }

    @Test("the token of `Bearer <token>` is read byte by byte: scheme in any case, blanks dropped, nothing else")
    func bearerParsing() {
        #expect(NativeCredentials.bearerToken(in: "Bearer abc") == "abc")
        #expect(NativeCredentials.bearerToken(in: "bEaReR   abc.def.ghi\t") == "abc.def.ghi")
        #expect(NativeCredentials.bearerToken(in: "Bearer a b") == "a b")
        #expect(NativeCredentials.bearerToken(in: "Bearer ") == nil)
        #expect(NativeCredentials.bearerToken(in: "Bearer") == nil)
        #expect(NativeCredentials.bearerToken(in: "Basic abc") == nil)
        #expect(NativeCredentials.bearerToken(in: "Béarer abc") == nil)
        #expect(NativeCredentials.bearerToken(in: "Bearer ünïcode") == "ünïcode")
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
