import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import FeedsPlugin
import Testing

/// Random damage to bodies, paths and query strings: every answer is a clear 4xx or a success,
/// never a 500, and a rejected batch stores nothing.
@Suite("feeds fuzzing")
struct FeedsFuzzTests {
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state
        }
    }

    static func mutate(_ text: String, _ random: inout Generator) -> String {
        var bytes = Array(text.utf8)
        let pieces: [[UInt8]] = [Array("\"".utf8), Array("{".utf8), Array("]".utf8), Array(",".utf8), Array("null".utf8), Array("1e999".utf8),
                                 Array("\\u0000".utf8), Array("-".utf8), Array("9999-99-99T99:99:99Z".utf8), [0xFF], [0xC3], Array("NaN".utf8), Array("\n".utf8)]
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            guard !bytes.isEmpty else { break }
            let index = Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<3, using: &random) {
            case 0: bytes.remove(at: index)
            case 1: bytes.insert(contentsOf: pieces.randomElement(using: &random)!, at: index)
            default: bytes[index] = UInt8.random(in: 0...255, using: &random)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test("1,500 damaged requests to ingest, history and the v2 dialect: no 500, nothing half-written")
    func fuzz() async throws {
        try await withFeeds { gateway in
            let ann = try await gateway.register("ann")
            let key = try await gateway.createKey(token: ann.token, grant: #"{"label": "k", "scopes": ["feeds:*"]}"#).secret
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "F", "datastreams": [{"id": "x"}]}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            var random = Generator(state: 20_261_121)
            let good = #"{"datapoints": [{"at": "\#(at(-100))", "value": "1.5"}, {"at": "\#(at(-50))", "value": 2}]}"#
            let csv = "\(at(-40)),3\n\(at(-30)),4\n"
            var failures: [String] = []
            for round in 0..<500 {
                let before = try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/x/datapoints?duration=1day&limit=1000").text
                let body = Self.mutate(round % 3 == 0 ? csv : good, &random)
                let native = try await gateway.call(.post, "/v1/feeds/\(id)/datastreams/x/datapoints", token: ann.token,
                                                    headers: round % 3 == 0 ? [.contentType: "text/csv"] : [:], body: body)
                if native.status >= 500 { failures.append("native ingest \(native.status): \(body.debugDescription)") }
                if native.status >= 400 {
                    let after = try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/x/datapoints?duration=1day&limit=1000").text
                    if after != before { failures.append("a rejected batch changed the data: \(body.debugDescription)") }
                }
                let legacy = try await gateway.call(.post, "/v2/feeds/\(id)/datastreams/x/datapoints\(round % 3 == 0 ? ".csv" : "")", key: key, body: body)
                if legacy.status >= 500 { failures.append("v2 ingest \(legacy.status): \(body.debugDescription)") }
                let query = Self.mutate("start=\(at(-3600))&duration=2hours&interval=60&interval_type=discrete&limit=50&function=avg", &random)
                    .addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed.subtracting(CharacterSet(charactersIn: "+#"))) ?? ""
                for path in ["/v1/feeds/\(id)/datastreams/x/datapoints?\(query)", "/v2/feeds/\(id)/datastreams/x.json?\(query)", "/v2/feeds?\(query)"] {
                    let reply = try await gateway.call(.get, path, key: key)
                    if reply.status >= 500 { failures.append("GET \(path): \(reply.status)") }
                }
                let feedBody = Self.mutate(#"{"title": "T", "location": {"lat": 1, "lon": 2}, "datastreams": [{"id": "y", "current_value": "3"}], "tags": ["a"]}"#, &random)
                let put = try await gateway.call(.put, "/v2/feeds/\(id)", key: key, body: feedBody)
                if put.status >= 500 { failures.append("PUT feed \(put.status): \(feedBody.debugDescription)") }
            }
            #expect(failures.isEmpty, "\(failures.prefix(10).joined(separator: "\n"))")
        }
    }
}
