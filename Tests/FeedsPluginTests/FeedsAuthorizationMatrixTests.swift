import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import FeedsPlugin
import Testing

/// Every feeds operation, called by every kind of caller, against the status the access rules
/// promise: the gateway's authorization matrix, extended to this plugin. Each cell acts on a fresh
/// public feed of A (with a datastream, a datapoint and a trigger of A); keys belong to A.
@Suite("feeds authorization matrix")
struct FeedsAuthorizationMatrixTests {
    typealias Caller = MatrixCaller

    static let expected: [String: [Caller: Int]] = {
        let row = MatrixCaller.row
        let read = row(200, 200, 200, 200, 403, 404, 200)
        let change = row(401, 200, 403, 403, 200, 404, 200)
        let remove = row(401, 204, 403, 403, 204, 404, 204)
        return [
            "feeds.list": row(200, 200, 200, 200, 403, 200, 200),
            "feeds.create": row(401, 201, 201, 403, 201, 403, 201),
            "feeds.get": read, "feeds.update": change, "feeds.delete": remove,
            "feeds.datastreams.list": read, "feeds.datastreams.create": row(401, 201, 403, 403, 201, 404, 201),
            "feeds.datastreams.get": read, "feeds.datastreams.update": change, "feeds.datastreams.delete": remove,
            "feeds.datapoints.ingest": change, "feeds.datapoints.history": read, "feeds.datapoints.deleteRange": change,
            "feeds.datapoints.get": read, "feeds.datapoints.update": change, "feeds.datapoints.delete": remove,
            // Triggers are their creator's alone: another user gets 404.
            "feeds.triggers.list": row(401, 200, 200, 200, 403, 200, 200),
            "feeds.triggers.create": row(401, 201, 201, 403, 201, 404, 201),
            "feeds.triggers.get": row(401, 200, 404, 200, 403, 404, 200),
            "feeds.triggers.update": row(401, 200, 404, 403, 200, 404, 200),
            "feeds.triggers.delete": row(401, 204, 404, 403, 204, 404, 204),
            "feeds.triggers.deliveries": row(401, 200, 404, 200, 403, 404, 200),
        ]
    }()

    @Test("every feeds operation, as every kind of caller: zero unexpected allows")
    func matrix() async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
        try await TestGateway.with(feeds, yaml: "auth: { sessionTTL: 1h }\n" + feedsYAML, configure: { $0.clock = clock }) { gateway in
            let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "feeds", otherResources: #"["999999"]"#)
            let a = callers.a
            let operations = try gateway.feedsPlugin.operations
            #expect(Set(operations.map(\.name)) == Set(Self.expected.keys), "the matrix must cover every operation")
            let at = UTCTimestamp.format(micros: UTCTimestamp.micros(clock.now()) - 60_000_000)
            var unexpectedAllows: [String] = []
            var mismatches: [String] = []
            var cell = 0
            for operation in operations {
                for caller in Caller.allCases {
                    cell += 1
                    let feed = try await gateway.call(.post, "/v1/feeds", token: a.token, body: #"{"title": "A's", "datastreams": [{"id": "t"}]}"#)
                    let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
                    _ = try await gateway.call(.post, "/v1/feeds/\(id)/datastreams/t/datapoints", token: a.token, body: #"[{"at": "\#(at)", "value": 1}]"#)
                    let trigger = try await gateway.call(.post, "/v1/feeds/triggers", token: a.token,
                                                         body: #"{"feed": \#(id), "datastream": "t", "url": "http://127.0.0.1:9/hook", "type": "change"}"#)
                    let triggerID = try #require(trigger.json["id"]?.numberValue.map { Int($0) })
                    let path = operation.path.replacingOccurrences(of: "{feed}", with: "\(id)").replacingOccurrences(of: "{stream}", with: "t")
                        .replacingOccurrences(of: "{at}", with: at).replacingOccurrences(of: "{trigger}", with: "\(triggerID)")
                    var target = "/v1/feeds" + path
                    var body: String?
                    switch operation.name {
                    case "feeds.create", "feeds.update": body = #"{"title": "x"}"#
                    case "feeds.datastreams.create": body = #"{"id": "n\#(cell)"}"#
                    case "feeds.datastreams.update": body = #"{"tags": ["x"]}"#
                    case "feeds.datapoints.ingest": body = #"[{"value": 2}]"#
                    case "feeds.datapoints.update": body = #"{"value": 3}"#
                    case "feeds.datapoints.deleteRange": target += "?duration=1hour"
                    case "feeds.triggers.create": body = #"{"feed": \#(id), "datastream": "t", "url": "http://127.0.0.1:9/hook", "type": "change"}"#
                    case "feeds.triggers.update": body = #"{"url": "http://127.0.0.1:9/other"}"#
                    default: break
                    }
                    var headers = callers.headers(caller)
                    if body == nil { headers[.contentType] = nil }
                    let response = try await gateway.gateway.handle(operation.method, target, headers: headers, body: body.map { ByteBuffer(string: $0) })
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
