import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import TodoPlugin
import Testing

@Suite("todo: the admin console's buckets page")
struct TodoAdminViewTests {
    @Test("each bucket with its object count, its schema (or free) and where it is declared", arguments: TestStorage.available)
    func buckets(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            gateway.gateway.forgetCredentials(userID: root.userID)
            let user = try await gateway.register("plain")
            for text in ["one", "two"] {
                #expect(try await gateway.call(.post, "/v1/todo/buckets/todos/objects", token: user.token, json: #"{"description": "\#(text)"}"#).status == 201)
            }
            #expect(try await gateway.call(.post, "/v1/todo/buckets/notes/objects", token: user.token, json: #"{"rank": 1}"#).status == 201)
            #expect(try await gateway.call(.post, "/v1/todo/buckets", token: root.token, json: #"{"name": "books", "schema": {"type": "object"}}"#).status == 201)

            let page = try await gateway.call(.get, "/v1/admin/plugins/todo/views/buckets", token: root.token)
            #expect(page.status == 200, "\(page.json)")
            let sections = page.json["sections"]?.arrayValue ?? []
            #expect(sections.compactMap { $0["kind"]?.string } == ["figures", "table"], "\(page.json)")
            let figures = sections.first?["figures"]?.arrayValue ?? []
            #expect(figures.first { $0["label"]?.string == "Objects" }?["value"]?.string == "3")
            let table = try #require(sections.last)
            #expect(table["columns"]?.arrayValue?.first?.string == "Bucket")
            let rows = (table["rows"]?.arrayValue ?? []).map { ($0["cells"]?.arrayValue ?? []).compactMap(\.stringValue) }
            #expect(rows.map { $0.first } == ["books", "notes", "todos"], "\(rows)")
            #expect(rows.count == 3)
            guard rows.count == 3 else { return }
            #expect(rows[0] == ["books", "0", "0", "free (object)", "authenticated", "", "API"])
            #expect(rows[1] == ["notes", "1", "0", "free", "authenticated", "rank; kind,rank", "plugins.yaml"])
            #expect(rows[2] == ["todos", "2", "0", "description*: string, done: boolean, due: string (date), tags: array of string", "anyone",
                                "updatedAt; done; done,updatedAt", "plugins.yaml"])

            #expect(try await gateway.call(.get, "/v1/admin/plugins/todo/views/buckets", token: user.token).status == 403)
        }
    }
}
