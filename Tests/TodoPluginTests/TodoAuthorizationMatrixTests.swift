import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import TodoPlugin
import Testing

/// Every todo operation, called by every kind of caller, against the status the access rules and
/// ACLs promise: the authorization matrix of the gateway, extended to this plugin.
@Suite("todo authorization matrix")
struct TodoAuthorizationMatrixTests {
    typealias Caller = MatrixCaller

    /// Expected status per operation and caller. Object operations act on an object A owns in
    /// `notes`; the batch's status is that of its one operation. Keys belong to A.
    static let expected: [String: [Caller: Int]] = {
        let row = MatrixCaller.row
        return [
            "todo.buckets.list": row(200, 200, 200, 200, 403, 200, 200),
            "todo.buckets.get": row(200, 200, 200, 200, 403, 404, 200),
            // A bucket's definition is shared by every user: an administrator, or a user an
            // administrator granted todo:write, defines it; A's todo:write key does not (A holds no grant).
            "todo.buckets.create": row(401, 403, 403, 403, 403, 403, 201).granting(201),
            "todo.buckets.delete": row(401, 403, 403, 403, 403, 403, 200).granting(200),
            "todo.objects.create": row(401, 201, 201, 403, 201, 404, 201),
            "todo.objects.query": row(200, 200, 200, 200, 403, 404, 200),
            // A query in a body is a POST: keys need todo:write for it.
            "todo.objects.search": row(200, 200, 200, 403, 200, 404, 200),
            "todo.objects.get": row(404, 200, 404, 200, 403, 404, 200),
            "todo.objects.replace": row(404, 200, 404, 403, 200, 404, 200),
            "todo.objects.patch": row(404, 200, 404, 403, 200, 404, 200),
            "todo.objects.delete": row(404, 204, 404, 403, 204, 404, 204),
            "todo.objects.batch": row(404, 200, 404, 403, 200, 404, 200),
            // Group operations act on a group A owns (its ACL: the owner alone).
            "todo.groups.list": row(200, 200, 200, 200, 403, 200, 200),
            "todo.groups.get": row(404, 200, 404, 200, 403, 200, 200),
            "todo.groups.put": row(401, 200, 403, 403, 200, 200, 200),
            "todo.groups.addMembers": row(401, 200, 403, 403, 200, 200, 200),
            "todo.groups.removeMembers": row(401, 200, 403, 403, 200, 200, 200),
            "todo.groups.delete": row(401, 204, 403, 403, 204, 204, 204),
        ]
    }()

    @Test("every todo operation, as every kind of caller: zero unexpected allows")
    func matrix() async throws {
        let clock = TestClock()
        try await TestGateway.with(todo, yaml: "auth: { sessionTTL: 1h }\n" + todoYAML, configure: { $0.clock = clock }) { gateway in
            let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "todo", otherResources: #"["todos"]"#)
            let a = callers.a
            let admin = callers.admin
            func headers(_ caller: Caller) -> HTTPFields { callers.headers(caller) }

            let operations = try gateway.todoPlugin.operations
            #expect(Set(operations.map(\.name)) == Set(Self.expected.keys), "the matrix must cover every operation")
            var unexpectedAllows: [String] = []
            var mismatches: [String] = []
            var cell = 0
            for operation in operations {
                for caller in Caller.allCases {
                    cell += 1
                    // A fresh object owned by A and a fresh bucket for every cell, so writes do not interfere.
                    let created = try await gateway.call(.post, "/v1/todo/buckets/notes/objects", token: a.token, json: #"{"t": "A's"}"#)
                    let id = try #require(created.json["id"]?.string)
                    let temporary = "tmp\(cell)"
                    _ = try await gateway.call(.post, "/v1/todo/buckets", token: admin.token, json: #"{"name": "\#(temporary)"}"#)
                    let group = "grp\(cell)"
                    _ = try await gateway.call(.put, "/v1/todo/groups/\(group)", token: a.token, json: #"{"users": []}"#)
                    var path = operation.path.replacingOccurrences(of: "{id}", with: id).replacingOccurrences(of: "{name}", with: group)
                        .replacingOccurrences(of: "{bucket}", with: operation.name == "todo.buckets.delete" ? temporary : "notes")
                    var body: String?
                    switch operation.name {
                    case "todo.buckets.create": body = #"{"name": "new\#(cell)"}"#
                    case "todo.objects.create", "todo.objects.replace", "todo.objects.patch": body = #"{"t": "x"}"#
                    case "todo.objects.search": body = #"{"where": {"t": "A's"}}"#
                    case "todo.objects.batch": body = #"{"operations": [{"op": "patch", "id": "\#(id)", "object": {"t": "y"}}]}"#
                    case "todo.objects.query": path += "?count=true"
                    case "todo.groups.put", "todo.groups.addMembers", "todo.groups.removeMembers": body = #"{"users": []}"#
                    default: break
                    }
                    let response = try await gateway.gateway.handle(operation.method, "/v1/todo" + path, headers: headers(caller),
                                                                    body: body.map { ByteBuffer(string: $0) })
                    var status = response.status
                    if operation.name == "todo.objects.batch", status == 200,
                       let inner = try JSONValue.parse(response.body)["results"]?.arrayValue?.first?["status"]?.numberValue {
                        status = Int(inner)
                    }
                    let want = try #require(Self.expected[operation.name]?[caller])
                    if status != want {
                        mismatches.append("\(operation.name) as \(caller.rawValue): \(status), expected \(want)")
                        if status < 300 && want >= 400 { unexpectedAllows.append("\(operation.name) as \(caller.rawValue)") }
                    }
                }
            }
            #expect(unexpectedAllows.isEmpty, "unexpected allows: \(unexpectedAllows)")
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        }
    }
}
