import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import GreeterPlugin
import NIOCore
import Testing

/// The example plugin, tested from its own package with the gateway's test kit: the real pipeline
/// on a fresh SQLite database (and on PostgreSQL when POSTGRES_URL is set).
@Suite("greeter")
struct GreeterPluginTests {
    static let plugins = [PluginRegistration(GreeterPlugin.self)]
    static let yaml = "auth: { sessionTTL: 1h }\nplugins:\n  greeter:\n    config: { greeting: Hi }\n"

    func json(_ response: InProcessResponse) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: Any])
    }

    @Test("the native API greets, remembers and lists in pages linked with rel=next", arguments: TestStorage.available)
    func native(storage: TestStorage) async throws {
        try await TestGateway.with(Self.plugins, yaml: Self.yaml, storage: storage) { gateway in
            let greet = try await gateway.gateway.handle(.get, "/v1/greeter/greet?name=Ada")
            #expect(try json(greet)["text"] as? String == "Hi, Ada!")
            #expect(try await gateway.gateway.handle(.get, "/v1/greeter/greet").status == 422)

            let (token, _) = try await gateway.register("ada")
            for name in ["Ada", "Grace", "Edsger"] {
                let created = try await gateway.gateway.handle(.post, "/v1/greeter/greetings", headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                                                               body: ByteBuffer(string: #"{"name": "\#(name)"}"#))
                #expect(created.status == 201)
            }
            let first = try await gateway.gateway.handle(.get, "/v1/greeter/greetings?limit=2")
            let cursor = try #require(try json(first)["nextCursor"] as? String)
            #expect((try json(first)["items"] as? [Any])?.count == 2)
            #expect(first.headers[.link] == "</v1/greeter/greetings?limit=2&cursor=\(cursor)>; rel=\"next\"")
            let last = try await gateway.gateway.handle(.get, "/v1/greeter/greetings?limit=2&cursor=\(cursor)")
            #expect((try json(last)["items"] as? [[String: Any]])?.first?["text"] as? String == "Hi, Edsger!")
            #expect(try json(last)["nextCursor"] is NSNull)
            #expect(last.headers[.link] == nil)
            // A guest may not write.
            #expect(try await gateway.gateway.handle(.post, "/v1/greeter/greetings", headers: .json, body: ByteBuffer(string: #"{"name": "x"}"#)).status == 401)
        }
    }

    @Test("the classic dialect answers plain text, and its errors in its own shape")
    func dialect() async throws {
        try await TestGateway.with(Self.plugins, yaml: Self.yaml) { gateway in
            let hello = try await gateway.gateway.handle(.get, "/hello.txt?who=Ada")
            #expect(String(buffer: hello.body) == "Hi, Ada")
            let missing = try await gateway.gateway.handle(.get, "/hello.txt")
            #expect(String(buffer: missing.body).hasPrefix("ERR 422 "))
            let badKey = try await gateway.gateway.handle(.get, "/hello.txt?who=Ada&token=nope")
            #expect(String(buffer: badKey.body).hasPrefix("ERR 401 "))
        }
    }

    @Test("every operation, as every kind of caller: zero unexpected allows")
    func authorizationMatrix() async throws {
        let expected: [(HTTPRequest.Method, String, [MatrixCaller: Int])] = [
            (.get, "/v1/greeter/greet?name=x", MatrixCaller.row(200, 200, 200, 200, 403, 200, 200)),
            (.post, "/v1/greeter/greetings", MatrixCaller.row(401, 201, 201, 403, 201, 201, 201)),
            (.get, "/v1/greeter/greetings", MatrixCaller.row(200, 200, 200, 200, 403, 200, 200)),
        ]
        let clock = TestClock()
        try await TestGateway.with(Self.plugins, yaml: Self.yaml, configure: { $0.clock = clock }) { gateway in
            let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "greeter", otherResources: #"["elsewhere"]"#)
            for (method, path, row) in expected {
                for (caller, status) in row {
                    let response = try await gateway.gateway.handle(method, path, headers: callers.headers(caller),
                                                                    body: method == .post ? ByteBuffer(string: #"{"name": "x"}"#) : nil)
                    #expect(response.status == status, "\(method) \(path) as \(caller)")
                }
            }
        }
    }
}
