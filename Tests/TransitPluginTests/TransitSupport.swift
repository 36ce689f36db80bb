import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import TransitPlugin
import Testing
import ZIPFoundation

let transit = [PluginRegistration(TransitPlugin.self)]

let transitYAML = """
    auth:
      appKeys: [test-app-key]
    plugins:
      transit: {}
    """

/// plugins.yaml text with the transit plugin keeping `feeds` (each a YAML flow mapping) imported.
func feedsYAML(_ feeds: String...) -> String {
    "plugins:\n  transit:\n    config:\n      feeds:\n" + feeds.map { "        - \($0)\n" }.joined()
}

/// The project's root folder.
let projectRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// The GTFS specification's example feed (Demo Transit Authority), as the demo ships it.
let sampleFeed = projectRoot.appendingPathComponent("data/demo/gtfs-sample.zip")

/// 2010-06-01 08:00 in Los Angeles (PDT, 15:00 UTC), a Tuesday the sample feed's weekday service runs.
let sampleMorning = Date(timeIntervalSince1970: 1_275_404_400)

/// Runs `body` with a gateway serving the transit plugin on `storage`, the clock at `sampleMorning`
/// and, unless `feed` is nil, that feed imported as `sample`.
func withTransit<R: Sendable>(_ storage: TestStorage = .sqlite, yaml: String = transitYAML, clock: TestClock = TestClock(sampleMorning),
                              feed: URL? = sampleFeed, _ body: @Sendable (TestGateway) async throws -> R) async throws -> R {
    try await TestGateway.with(transit, yaml: yaml, storage: storage, configure: { $0.clock = clock }) { gateway in
        if let feed {
            _ = try await gateway.transitPlugin.feeds.importFile(feed, feed: "sample", source: feed.path, strict: false, progress: { _, _ in })
        }
        return try await body(gateway)
    }
}

/// A reply as the tests read it.
struct TransitReply: Sendable {
    var status: Int
    var json: JSONValue
    var headers: HTTPFields
    var text: String

    subscript(_ path: String...) -> JSONValue? { json[path: path] }
    var items: [JSONValue] { json[path: ["items"]]?.arrayValue ?? [] }
}

extension TestGateway {
    var transitPlugin: TransitPlugin {
        get throws { try #require(gateway.plugins.first { $0.id == "transit" }?.instance as? TransitPlugin) }
    }

    /// Sends a request and parses a JSON reply.
    @discardableResult
    func send(_ method: HTTPRequest.Method, _ target: String, token: String? = nil, headers extra: HTTPFields = [:],
              body: ByteBuffer? = nil, contentType: String? = nil) async throws -> TransitReply {
        var headers: HTTPFields = extra
        if let token { headers[.authorization] = "Bearer \(token)" }
        if let contentType { headers[.contentType] = contentType }
        let response = try await gateway.handle(method, target, headers: headers, body: body)
        let text = String(buffer: response.body)
        let value = response.body.readableBytes == 0 ? JSONValue.null : (try? JSONValue.parse(response.body, maximumDepth: 64)) ?? .string(text)
        return TransitReply(status: response.status, json: value, headers: response.headers, text: text)
    }

    /// An administrator's session token.
    func administrator() async throws -> String {
        let root = try await register("root")
        try await gateway.accounts.setAdmin(userID: root.userID, true)
        return root.token
    }
}

extension JSONValue {
    subscript(_ key: String) -> JSONValue? { self[path: [key]] }
    var items: [JSONValue] { self["items"]?.arrayValue ?? [] }
}

/// Builds a GTFS zip from file texts (the sample feed's own files unless replaced or removed).
enum FeedFiles {
    static let agency = "agency_id,agency_name,agency_url,agency_timezone\nTST,Test Transit,http://google.com,America/Los_Angeles\n"
    static let stops = """
        stop_id,stop_name,stop_lat,stop_lon
        A,First Street,36.9,-116.7
        B,Second Street,36.91,-116.71
        C,Third Street,36.92,-116.72

        """
    static let routes = "route_id,route_short_name,route_long_name,route_type\nR,1,One,3\n"
    static let trips = "route_id,service_id,trip_id,trip_headsign,direction_id\nR,ALL,T1,to C,0\n"
    static let stopTimes = """
        trip_id,arrival_time,departure_time,stop_id,stop_sequence
        T1,08:00:00,08:00:00,A,1
        T1,08:10:00,08:11:00,B,2
        T1,08:20:00,08:20:00,C,3

        """
    static let calendar = "service_id,monday,tuesday,wednesday,thursday,friday,saturday,sunday,start_date,end_date\nALL,1,1,1,1,1,1,1,20100101,20101231\n"

    static var minimal: [String: String] {
        ["agency.txt": agency, "stops.txt": stops, "routes.txt": routes, "trips.txt": trips, "stop_times.txt": stopTimes, "calendar.txt": calendar]
    }

    /// Writes `files` into a new zip and returns its URL.
    static func zip(_ files: [String: String]) throws -> URL {
        try zip(files.mapValues { Data($0.utf8) })
    }

    static func zip(_ files: [String: Data]) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("feed-\(UUID().uuidString).zip")
        let archive = try Archive(url: url, accessMode: .create)
        for (name, data) in files.sorted(by: { $0.key < $1.key }) {
            try archive.addEntry(with: name, type: .file, uncompressedSize: Int64(data.count), compressionMethod: .deflate) { position, size in
                data.subdata(in: Int(position)..<Int(position) + size)
            }
        }
        return url
    }
}
