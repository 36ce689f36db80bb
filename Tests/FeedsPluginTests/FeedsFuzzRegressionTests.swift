import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import FeedsPlugin
import Testing

/// Inputs the fuzzer (Fuzz/, target `xively-datapoints`) found, kept as tests.
@Suite("feeds: inputs found by fuzzing")
struct FeedsFuzzRegressionTests {
    /// The fast reader took any run of digits, signs, dots and exponents for a number, so a body
    /// that is not JSON (`"value": .5`) was stored when the general reading refuses it.
    @Test("the fast reader takes only JSON numbers")
    func scannerNumbers() {
        let now: Int64 = 1_700_000_000_000_000
        func scan(_ value: String) -> [Datapoint]? {
            DatapointScanner.scan(ByteBuffer(string: #"{"datapoints": [{"at": "2013-01-01T14:14:45Z", "value": \#(value)}]}"#), now: now)
        }
        for bad in [".5", "+1", "01", "-01", "1.", "1e", "1e+", "-", "--1", "1..2", "1e5e5", "1.5.5", "-.5", "1-2"] {
            #expect(scan(bad) == nil, "\(bad)")
        }
        for (good, value) in [("0", 0.0), ("-0.5", -0.5), ("10", 10), ("1e3", 1000), ("2.5E-1", 0.25), ("1e+2", 100), ("0.125", 0.125)] {
            #expect(scan(good)?.first?.value == value, "\(good)")
        }
    }

    @Test("a datapoints body with a number that is not JSON is refused, not stored", arguments: TestStorage.available)
    func refusedOverHTTP(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let ann = try await gateway.register("ann")
            let created = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Sensor", "datastreams": [{"id": "temp"}]}"#)
            let id = try #require(created.json["id"]?.numberValue.map { Int($0) })
            let path = "/v1/feeds/\(id)/datastreams/temp/datapoints"
            let refused = try await gateway.call(.post, path, token: ann.token, body: #"{"datapoints": [{"at": "2023-11-14T22:13:20Z", "value": .5}]}"#)
            #expect((400..<500).contains(refused.status), "status \(refused.status)")
            let stored = try await gateway.call(.get, path + "?start=2023-11-14T00:00:00Z&end=2023-11-15T00:00:00Z", token: ann.token)
            #expect(stored.status == 200)
            #expect(try #require(stored.json["datapoints"]?.arrayValue).isEmpty)
            // The same body with a JSON number is taken: the refusal is about the number's form.
            #expect(try await gateway.call(.post, path, token: ann.token, body: #"{"datapoints": [{"at": "2023-11-14T22:13:20Z", "value": 0.5}]}"#).status == 200)
        }
    }
}
