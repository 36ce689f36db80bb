import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import ServiceLifecycle
@testable import TodoPlugin
import Testing

@Suite("todo groups across instances", .enabled(if: TestStorage.available.contains(.postgres)))
struct TodoClusterTests {
    @Test("a member added to a group through one instance reads, through the other, an object shared with the group; removed, no longer")
    func groupsReachEveryInstance() async throws {
        try await TestGateway.withTwoListening(todo, yaml: todoYAML) { first, second in
            let other = try #require(second.plugins.first { $0.id == "todo" }?.instance as? TodoPlugin)
            let listener = try #require(other.services.first)
            let task = Task { try await listener.run() }
            defer { task.cancel() }
            try await Task.sleep(for: .milliseconds(100))   // subscribed

            let writer = TestGateway(gateway: first, storage: .postgres)
            let reader = TestGateway(gateway: second, storage: .postgres)
            let owner = try await writer.register("owner")
            let member = try await writer.register("member")
            _ = try await writer.call(.put, "/v1/todo/groups/crew", token: owner.token, json: #"{"users": []}"#)
            let shared = try await writer.call(.post, "/v1/todo/buckets/notes/objects", token: owner.token,
                                               json: #"{"t": "for the crew", "acl": {"readers": ["g:crew"]}}"#)
            let id = try #require(shared.json["id"]?.string)
            let before = try await reader.call(.get, "/v1/todo/buckets/notes/objects/\(id)", token: member.token)
            #expect(before.status == 404)

            _ = try await writer.call(.post, "/v1/todo/groups/crew/members", token: owner.token, json: #"{"users": ["\#(member.userID)"]}"#)
            let admitted = try await eventually(within: .seconds(15)) {
                try await reader.call(.get, "/v1/todo/buckets/notes/objects/\(id)", token: member.token, headers: [.cacheControl: "no-cache"]).status == 200
            }
            #expect(admitted, "the other instance does not know the new member")

            _ = try await writer.call(.post, "/v1/todo/groups/crew/members/remove", token: owner.token, json: #"{"users": ["\#(member.userID)"]}"#)
            let refused = try await eventually(within: .seconds(15)) {
                try await reader.call(.get, "/v1/todo/buckets/notes/objects/\(id)", token: member.token, headers: [.cacheControl: "no-cache"]).status == 404
            }
            #expect(refused, "the other instance still admits the removed member")
        }
    }
}
