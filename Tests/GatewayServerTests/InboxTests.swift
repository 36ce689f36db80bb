import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import Testing

@Suite("notifications and history")
struct InboxTests {
    func json(_ response: InProcessResponse) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(buffer: response.body))) as? [String: Any] ?? [:]
    }

    @Test("a plugin posts to the owner's inbox; the owner lists, counts, marks read and deletes; nobody else sees it")
    func notifications() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let a = try await gateway.register("alice")
            let b = try await gateway.register("bob")
            let asA: HTTPFields = [.authorization: "Bearer \(a.token)", .contentType: "application/json"]
            let asB: HTTPFields = [.authorization: "Bearer \(b.token)"]
            _ = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: asA, body: ByteBuffer(string: #"{"title": "hello", "body": "b"}"#))
            #expect(json(try await gateway.gateway.handle(.get, "/v1/me/notifications/unread-count", headers: asA))["unread"] as? Int == 1)
            let list = json(try await gateway.gateway.handle(.get, "/v1/me/notifications", headers: asA))
            let item = try #require((list["items"] as? [[String: Any]])?.first)
            #expect(item["body"] as? String == "hello")
            let id = try #require(item["id"] as? String)
            #expect(try await gateway.gateway.handle(.post, "/v1/me/notifications/\(id)/read", headers: asB).status == 404)
            #expect(try await gateway.gateway.handle(.delete, "/v1/me/notifications/\(id)", headers: asB).status == 404)
            #expect((json(try await gateway.gateway.handle(.get, "/v1/me/notifications", headers: asB))["items"] as? [Any])?.isEmpty == true)
            #expect(try await gateway.gateway.handle(.post, "/v1/me/notifications/\(id)/read", headers: asA).status == 200)
            #expect(json(try await gateway.gateway.handle(.get, "/v1/me/notifications/unread-count", headers: asA))["unread"] as? Int == 0)
            #expect(try await gateway.gateway.handle(.delete, "/v1/me/notifications/\(id)", headers: asA).status == 204)
            #expect(try await gateway.gateway.handle(.get, "/v1/me/notifications").status == 401)
        }
    }

    @Test("viewing records history; the owner lists, deletes one and clears; nobody else sees it")
    func history() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let a = try await gateway.register("alice")
            let b = try await gateway.register("bob")
            let asA: HTTPFields = [.authorization: "Bearer \(a.token)", .contentType: "application/json"]
            let asB: HTTPFields = [.authorization: "Bearer \(b.token)"]
            var ids: [String] = []
            for title in ["one", "two"] {
                let created = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: asA, body: ByteBuffer(string: #"{"title": "\#(title)", "body": "b"}"#))
                let id = try #require(json(created)["id"] as? String)
                ids.append(id)
                _ = try await gateway.gateway.handle(.get, "/v1/notes/notes/\(id)", headers: asA)
            }
            _ = try await gateway.gateway.handle(.get, "/v1/notes/notes/\(ids[0])", headers: asA)
            let entries = try #require(json(try await gateway.gateway.handle(.get, "/v1/me/history", headers: asA))["items"] as? [[String: Any]])
            #expect(entries.map { $0["title"] as? String } == ["one", "two"])
            #expect((json(try await gateway.gateway.handle(.get, "/v1/me/history", headers: asB))["items"] as? [Any])?.isEmpty == true)
            let first = try #require(entries.first?["id"] as? String)
            #expect(try await gateway.gateway.handle(.delete, "/v1/me/history/\(first)", headers: asB).status == 404)
            #expect(try await gateway.gateway.handle(.delete, "/v1/me/history/\(first)", headers: asA).status == 204)
            #expect((json(try await gateway.gateway.handle(.get, "/v1/me/history", headers: asA))["items"] as? [Any])?.count == 1)
            #expect(try await gateway.gateway.handle(.delete, "/v1/me/history", headers: asA).status == 204)
            #expect((json(try await gateway.gateway.handle(.get, "/v1/me/history", headers: asA))["items"] as? [Any])?.isEmpty == true)
        }
    }
}
