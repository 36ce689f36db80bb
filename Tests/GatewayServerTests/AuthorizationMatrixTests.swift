import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import Testing

/// Every operation of the fixture plugin, called by every kind of caller, against the status the
/// access rules promise. The plugin issues extend the same table to their operations.
@Suite("authorization matrix")
struct AuthorizationMatrixTests {
    typealias Caller = MatrixCaller

    /// Expected status per operation and caller. Operations act on a note owned by user A.
    static let expected: [String: [Caller: Int]] = {
        let row = MatrixCaller.row
        return [
            "notes.echo": row(200, 200, 200, 200, 403, 200, 200),
            "notes.list": row(200, 200, 200, 200, 403, 200, 200),
            "notes.create": row(201, 201, 201, 403, 201, 201, 201),
            "notes.get": row(200, 200, 200, 200, 403, 404, 200),
            "notes.update": row(404, 200, 404, 403, 200, 404, 200),
            "notes.delete": row(401, 204, 204, 403, 204, 404, 204),
            "notes.mine": row(401, 200, 200, 200, 403, 200, 200),
            "notes.stats": row(401, 403, 403, 403, 403, 403, 200),
            "notes.read": row(401, 200, 200, 200, 403, 404, 200),
            "notes.owned": row(401, 200, 404, 200, 403, 404, 200),
            "notes.slow": row(200, 200, 200, 200, 403, 200, 200),
            "notes.links": row(200, 200, 200, 200, 403, 200, 200),
        ]
    }()

    @Test("every operation of the fixture plugin, as every kind of caller: zero unexpected allows")
    func matrix() async throws {
        let clock = TestClock()
        try await TestGateway.with(notes, yaml: "auth: { sessionTTL: 1h }\n" + notesYAML, configure: { $0.clock = clock }) { gateway in
            let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "notes", otherResources: #"["ffffffffffffffffffffffffffffffff"]"#)
            func headers(_ caller: Caller) -> HTTPFields { callers.headers(caller) }

            let notesPlugin = try #require(gateway.gateway.plugins.first { $0.id == "notes" })
            let operations = notesPlugin.instance.routes
            #expect(Set(operations.map(\.name)) == Set(Self.expected.keys), "the matrix must cover every operation")
            var unexpectedAllows: [String] = []
            var mismatches: [String] = []
            for operation in operations {
                for caller in Caller.allCases {
                    // A fresh note owned by A for every cell, so deletes and updates do not interfere.
                    let created = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: headers(.userA),
                                                                   body: ByteBuffer(string: #"{"title": "A's", "body": "b"}"#))
                    let note = try JSONCoding.decoder.decode(Note.self, from: Data(buffer: created.body))
                    var path = operation.path.replacingOccurrences(of: "{id}", with: note.id)
                    var body: ByteBuffer?
                    switch operation.name {
                    case "notes.echo": path += "?name=x"
                    case "notes.slow": path += "?ms=1"
                    case "notes.create", "notes.update": body = ByteBuffer(string: #"{"title": "t", "body": "b"}"#)
                    default: break
                    }
                    let response = try await gateway.gateway.handle(operation.method, "/v1/notes" + path, headers: headers(caller), body: body)
                    let want = try #require(Self.expected[operation.name]?[caller])
                    if response.status != want {
                        mismatches.append("\(operation.name) as \(caller.rawValue): \(response.status), expected \(want)")
                        if response.status < 300 && want >= 400 { unexpectedAllows.append("\(operation.name) as \(caller.rawValue)") }
                    }
                }
            }
            #expect(unexpectedAllows.isEmpty, "unexpected allows: \(unexpectedAllows)")
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        }
    }
}
