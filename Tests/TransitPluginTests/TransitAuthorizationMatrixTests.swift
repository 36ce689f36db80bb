import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import TransitPlugin
import Testing

/// Every transit operation, called by every kind of caller, against the status the access rules
/// promise. Timetables are public reads (a key needs transit:read); the served feeds are data every
/// user shares, managed by administrators and the users an administrator granted transit:write.
/// Keys belong to A, who holds no grant.
@Suite("transit authorization matrix")
struct TransitAuthorizationMatrixTests {
    typealias Caller = MatrixCaller

    static let expected: [String: [Caller: Int]] = {
        let row = MatrixCaller.row
        let publicRead = row(200, 200, 200, 200, 403, 200, 200)
        // Signed-in users hold no scope of their own: without a grant, the feeds are not theirs to manage.
        let manage = row(401, 403, 403, 403, 403, 403, 200).granting(200)
        return [
            "transit.agencies": publicRead, "transit.stops.near": publicRead, "transit.stops.search": publicRead,
            "transit.stops.get": publicRead, "transit.stops.arrivals": publicRead, "transit.stops.schedule": publicRead,
            "transit.routes.near": publicRead, "transit.routes.get": publicRead, "transit.trips.get": publicRead,
            "transit.feeds.list": manage, "transit.feeds.import": manage, "transit.feeds.realtime": manage,
            "transit.feeds.delete": row(401, 403, 403, 403, 403, 403, 204).granting(204),
        ]
    }()

    @Test("every transit operation, as every kind of caller: zero unexpected allows")
    func matrix() async throws {
        let clock = TestClock(sampleMorning)
        try await withTransit(yaml: "auth: { sessionTTL: 1h }\nplugins:\n  transit: {}\n", clock: clock) { gateway in
            let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "transit", otherResources: #"["none"]"#)
            let operations = try gateway.transitPlugin.operations
            #expect(Set(operations.map(\.name)) == Set(Self.expected.keys), "the matrix must cover every operation")
            /// A small feed of its own agency, which no other feed serves.
            func feed(_ agency: String) throws -> URL {
                var files = FeedFiles.minimal
                files["agency.txt"] = FeedFiles.agency.replacingOccurrences(of: "TST,", with: "\(agency),")
                return try FeedFiles.zip(files)
            }
            var unexpectedAllows: [String] = []
            var mismatches: [String] = []
            var cell = 0
            for operation in operations {
                for caller in Caller.allCases {
                    cell += 1
                    var headers = callers.headers(caller)
                    var body: ByteBuffer?
                    var path = operation.path
                    switch operation.name {
                    case "transit.stops.near", "transit.routes.near": path += "?lat=36.915682&lon=-116.751677&radius=1500"
                    case "transit.stops.search": path += "?q=stage"
                    case "transit.stops.get": path = path.replacingOccurrences(of: "{id}", with: "DTA_STAGECOACH")
                    case "transit.stops.arrivals": path = path.replacingOccurrences(of: "{id}", with: "DTA_AMV") + "?minutesBefore=0&minutesAfter=60"
                    case "transit.stops.schedule": path = path.replacingOccurrences(of: "{id}", with: "DTA_AMV") + "?date=2010-06-01"
                    case "transit.routes.get": path = path.replacingOccurrences(of: "{id}", with: "DTA_CITY")
                    case "transit.trips.get": path = path.replacingOccurrences(of: "{id}", with: "DTA_AB1")
                    case "transit.feeds.import":
                        path = path.replacingOccurrences(of: "{feed}", with: "copy\(cell)")
                        headers[.contentType] = "application/zip"
                        body = ByteBuffer(data: try Data(contentsOf: try feed("C\(cell)")))
                    case "transit.feeds.delete":
                        // A fresh feed for every cell, so that each caller has one to delete.
                        let doomed = try feed("D\(cell)")
                        _ = try await gateway.transitPlugin.feeds.importFile(doomed, feed: "doomed\(cell)", source: doomed.path, strict: false,
                                                                             progress: { _, _ in })
                        path = path.replacingOccurrences(of: "{feed}", with: "doomed\(cell)")
                    case "transit.feeds.realtime":
                        path = path.replacingOccurrences(of: "{feed}", with: "sample")
                        headers[.contentType] = "application/x-protobuf"
                        body = ByteBuffer(data: try Messages.morning())
                    default: break
                    }
                    let response = try await gateway.gateway.handle(operation.method, "/v1/transit" + path, headers: headers, body: body)
                    let want = try #require(Self.expected[operation.name]?[caller])
                    if response.status != want {
                        mismatches.append("\(operation.name) as \(caller.rawValue): \(response.status), expected \(want): \(String(buffer: response.body).prefix(200))")
                        if response.status < 300 && want >= 400 { unexpectedAllows.append("\(operation.name) as \(caller.rawValue)") }
                    }
                }
            }
            #expect(unexpectedAllows.isEmpty, "unexpected allows: \(unexpectedAllows)")
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        }
    }
}
