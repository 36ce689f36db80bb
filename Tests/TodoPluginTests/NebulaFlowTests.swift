import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdTesting
import NIOCore
@testable import TodoPlugin
import Testing

/// An official SDK's session from start to end, over a real socket, in the order it calls:
/// register, log in, insert, a long query, an aggregation, a soft delete, a user look-up, a
/// password reset (its link mailed to an SMTP server on loopback), log out.
@Suite("NEC BaaS dialect: an SDK's whole session")
struct NebulaFlowTests {
    static let base = NebulaDialectTests.base

    @Test("register, log in, insert, long query, aggregate, soft delete, look a user up, reset a password, log out", arguments: TestStorage.available)
    func sdkSession(storage: TestStorage) async throws {
        let sink = try await SMTPSink.start()
        let yaml = todoYAML + "\nmail: { host: 127.0.0.1, port: \(sink.port), from: gateway@example.com }\n"
        try await TestGateway.with(todo, yaml: yaml, storage: storage) { gateway in
            try await gateway.test(.live) { client in
                var session: String?
                func send(_ method: HTTPRequest.Method, _ path: String, _ body: String? = nil, master: Bool = false) async throws -> (Int, JSONValue) {
                    var headers = master ? NebulaDialectTests.master : NebulaDialectTests.app
                    if let session { headers[HTTPField.Name("X-Session-Token")!] = session }
                    if body != nil { headers[.contentType] = "application/json" }
                    let response = try await client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
                    return (Int(response.status.code), response.body.readableBytes == 0 ? .null : try JSONValue.parse(response.body))
                }
                // Register and log in.
                var (status, reply) = try await send(.post, "\(Self.base)/users", #"{"username": "kenji", "email": "kenji@example.com", "password": "password-123"}"#)
                #expect(status == 201)
                let userID = try #require(reply["_id"]?.string)
                // The address is confirmed through the link mailed to it (only then may it receive resets).
                let verification = try #require(try await sink.waitForMessages(1).last.flatMap { message in
                    message.data.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.contains("verify-email?token=") }
                })
                let verified = try await client.execute(uri: String(verification[try #require(verification.range(of: "/v1/")).lowerBound...]), method: .get)
                #expect(verified.status == .ok)
                (status, reply) = try await send(.post, "\(Self.base)/login", #"{"username": "kenji", "password": "password-123"}"#)
                #expect(status == 200)
                session = try #require(reply["sessionToken"]?.string)

                // Insert.
                for (text, done) in [("buy milk", false), ("write report", true), ("call mom", true), ("pay rent", false)] {
                    (status, _) = try await send(.post, "\(Self.base)/objects/notes", #"{"text": "\#(text)", "done": \#(done)}"#)
                    #expect(status == 201)
                }
                // A long query, as the SDK sends it once its query string grows.
                let long = #"{"where": {"$or": [{"done": true}, {"text": {"$regex": "^buy"}}]}, "order": "text", "skip": 0, "limit": -1, "count": 1}"#
                (status, reply) = try await send(.post, "\(Self.base)/objects/notes/_query", long)
                #expect(status == 200)
                #expect(reply["results"]?.arrayValue?.compactMap { $0["text"]?.string } == ["buy milk", "call mom", "write report"])
                #expect(reply["count"] == .number(3))
                // An aggregation: how many are done and not.
                (status, reply) = try await send(.post, "\(Self.base)/objects/notes/_aggregate",
                                                 #"{"pipeline": [{"$group": {"_id": "$done", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]}"#)
                #expect(status == 200)
                #expect(reply == .object(["results": .array([.object(["_id": .bool(false), "n": .number(2)]), .object(["_id": .bool(true), "n": .number(2)])])]))
                // A soft delete of what is done, as the Android SDK deletes.
                (status, reply) = try await send(.delete, "\(Self.base)/objects/notes?where=\(encoded(#"{"done": true}"#))&deleteMark=1")
                #expect(reply["deletedObjects"] == .number(2))
                (_, reply) = try await send(.get, "\(Self.base)/objects/notes?count=1")
                #expect(reply["count"] == .number(2))
                (_, reply) = try await send(.get, "\(Self.base)/objects/notes?count=1&deleteMark=1")
                #expect(reply["count"] == .number(4))
                // Look the user up, with the master key.
                (status, reply) = try await send(.get, "\(Self.base)/users?username=kenji", master: true)
                #expect(status == 200)
                #expect(reply["results"]?.arrayValue?.first?["_id"]?.string == userID)
                // Reset the password: the mailed link's page sets a new one and ends the session.
                (status, reply) = try await send(.post, "\(Self.base)/request_password_reset", #"{"email": "kenji@example.com"}"#)
                #expect(status == 200)
                let link = try #require(try await sink.waitForMessages(2).count == 2 ? sink.lastLink : nil)
                let token = String(try #require(link.split(separator: "=").last))
                let set = try await client.execute(uri: "/v1/auth/password-reset/form", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                                                   body: ByteBuffer(string: "token=\(token)&password=password-456&confirm=password-456"))
                #expect(set.status == .ok)
                (status, _) = try await send(.get, "\(Self.base)/users/current")
                #expect(status == 401, "the reset ended the session")
                session = nil   // as the SDKs do when their session token is refused
                (status, reply) = try await send(.post, "\(Self.base)/login", #"{"username": "kenji", "password": "password-456"}"#)
                #expect(status == 200)
                session = try #require(reply["sessionToken"]?.string)
                // Log out.
                (status, _) = try await send(.delete, "\(Self.base)/login")
                #expect(status == 200)
                gateway.gateway.forgetCredentials()
                (status, _) = try await send(.get, "\(Self.base)/users/current")
                #expect(status == 401)
            }
        }
        await sink.stop()
    }
}
