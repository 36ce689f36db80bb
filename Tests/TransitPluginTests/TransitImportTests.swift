import Foundation
import GatewayCore
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import SQLKit
@testable import TransitPlugin
import Testing

@Suite("transit: GTFS import, good and bad feeds")
struct TransitImportTests {
    func importFeed(_ gateway: TestGateway, _ files: [String: String], feed: String = "test", strict: Bool = false) async throws -> GTFSImportResult {
        try await gateway.transitPlugin.feeds.importFile(try FeedFiles.zip(files), feed: feed, source: "test", strict: strict, progress: { _, _ in })
    }

    /// The message of the error an import throws.
    func failure(_ gateway: TestGateway, _ files: [String: String], strict: Bool = false) async throws -> String {
        do {
            _ = try await importFeed(gateway, files, strict: strict)
        } catch let error as GatewayError {
            return error.detail
        }
        Issue.record("the import succeeded")
        return ""
    }

    @Test("a BOM, quoted fields with commas, quotes and line breaks, CRLF, columns in any order, optional files missing")
    func formats() async throws {
        try await withTransit(feed: nil) { gateway in
            var files = FeedFiles.minimal
            files["agency.txt"] = "agency_name,agency_url,agency_timezone\nTest Transit,http://example.com,America/Los_Angeles\n"
            files["stops.txt"] = "\u{FEFF}stop_lon,stop_lat,stop_name,stop_id,extra_column\r\n"
                + "-116.7,36.9,\"First, \"\"Main\"\" Street\",A,x\r\n"
                + "-116.71,36.91,\"Second\nStreet\",B,\r\n"
                + "-116.72,36.92, Third Street ,C,\r\n"
            let result = try await importFeed(gateway, files)
            #expect(result.rejected.isEmpty)
            #expect(result.summary.stops == 3)
            let stops = try await gateway.send(.get, "/v1/transit/stops/near?lat=36.9&lon=-116.7&radius=5000")
            #expect(stops.items.compactMap { $0["name"]?.stringValue } == ["First, \"Main\" Street", "Second\nStreet", "Third Street"])
            // No agency_id: the feed's id names the agency.
            #expect(stops.items.first?["id"]?.stringValue == "test_A")
        }
    }

    @Test("stop times past midnight belong to their service day; noon − 12 h across the change to summer time")
    func serviceDays() async throws {
        try await withTransit(feed: nil) { gateway in
            var files = FeedFiles.minimal
            files["trips.txt"] = "route_id,service_id,trip_id\nR,ALL,LATE\nR,ALL,NOON\n"
            files["stop_times.txt"] = """
                trip_id,arrival_time,departure_time,stop_id,stop_sequence
                LATE,23:50:00,23:50:00,A,1
                LATE,25:10:00,25:10:00,B,2
                NOON,12:00:00,12:00:00,A,1
                NOON,12:30:00,12:30:00,C,2

                """
            _ = try await importFeed(gateway, files)
            // 25:10 on the service day 2010-06-01 is 01:10 PDT on 2010-06-02 (08:10 UTC).
            let late = try await gateway.send(.get, "/v1/transit/stops/TST_B/arrivals?time=2010-06-02T08:10:00Z&minutesBefore=1&minutesAfter=1")
            #expect(late.items.map { $0["serviceDate"]?.stringValue } == ["2010-06-01"])
            #expect(late.items.first?["scheduledArrival"]?.stringValue == "2010-06-02T08:10:00Z")
            // Noon is noon on each side of the change to summer time (2010-03-14 in Los Angeles).
            for (date, utc) in [("2010-03-13", "2010-03-13T20:00:00Z"), ("2010-03-14", "2010-03-14T19:00:00Z"), ("2010-03-15", "2010-03-15T19:00:00Z")] {
                let schedule = try await gateway.send(.get, "/v1/transit/stops/TST_A/schedule?date=\(date)")
                let noon = schedule.items.first { $0["trip"]?.stringValue == "TST_NOON" }
                #expect(noon?["scheduledDeparture"]?.stringValue == utc, "\(date)")
            }
        }
    }

    @Test("stop times without times between timepoints are interpolated")
    func interpolation() async throws {
        try await withTransit(feed: nil) { gateway in
            var files = FeedFiles.minimal
            files["stop_times.txt"] = """
                trip_id,arrival_time,departure_time,stop_id,stop_sequence
                T1,08:00:00,08:00:00,A,1
                T1,,,B,2
                T1,08:20:00,08:20:00,C,3

                """
            _ = try await importFeed(gateway, files)
            let trip = try await gateway.send(.get, "/v1/transit/trips/TST_T1?serviceDate=2010-06-01")
            #expect(trip["stopTimes"]?.arrayValue?.map { $0["scheduledArrival"]?.stringValue }
                    == ["2010-06-01T15:00:00Z", "2010-06-01T15:10:00Z", "2010-06-01T15:20:00Z"])
        }
    }

    @Test("bad records are rejected with their file and line; --strict stops at the first; nothing half-imported")
    func rejections() async throws {
        try await withTransit(feed: nil) { gateway in
            var files = FeedFiles.minimal
            files["stop_times.txt"] = """
                trip_id,arrival_time,departure_time,stop_id,stop_sequence
                T1,08:00:00,08:00:00,A,1
                T1,08:1x:00,08:11:00,B,2
                T1,08:20:00,08:20:00,NOWHERE,3
                GHOST,08:20:00,08:20:00,C,4
                T1,08:30:00,08:30:00,C,5

                """
            let result = try await importFeed(gateway, files)
            #expect(result.summary.stopTimes == 2)
            #expect(result.summary.rejected == 3)
            #expect(result.rejected.map(\.line) == [3, 4, 5])
            #expect(result.rejected[0].reason.contains("stop_times.txt") && result.rejected[0].reason.contains("arrival_time '08:1x:00'"))
            #expect(result.rejected[1].reason.contains("stop_id NOWHERE is not in stops.txt"))
            #expect(result.rejected[2].reason.contains("trip_id GHOST is not in trips.txt"))

            // Strict: the first bad record stops the import, naming its file and line; the served feed stays.
            let message = try await failure(gateway, files, strict: true)
            #expect(message.contains("stop_times.txt line 3"), "\(message)")
            #expect(try gateway.transitPlugin.runtime.network.stStop.count == 2)
        }
    }

    @Test("missing files and columns, bad dates, a corrupt zip, a feed with nothing to serve: clear errors, the served feed kept",
          arguments: TestStorage.available)
    func badFeeds(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            var noStops = FeedFiles.minimal
            noStops["stops.txt"] = nil
            #expect(try await failure(gateway, noStops).contains("stops.txt: is missing from the feed"))

            var noCalendar = FeedFiles.minimal
            noCalendar["calendar.txt"] = nil
            #expect(try await failure(gateway, noCalendar).contains("calendar_dates.txt"))

            var noColumn = FeedFiles.minimal
            noColumn["stop_times.txt"] = "trip_id,arrival_time,departure_time,stop_id\nT1,08:00:00,08:00:00,A\n"
            #expect(try await failure(gateway, noColumn).contains("stop_times.txt line 1: lacks the required column stop_sequence"))

            var badZone = FeedFiles.minimal
            badZone["agency.txt"] = "agency_name,agency_url,agency_timezone\nX,http://x,Mars/Olympus\n"
            #expect(try await failure(gateway, badZone).contains("agency.txt line 2: agency_timezone 'Mars/Olympus' is not an IANA time zone"))

            var badDate = FeedFiles.minimal
            badDate["calendar.txt"] = FeedFiles.calendar.replacingOccurrences(of: "20101231", with: "20101331")
            let dated = try await failure(gateway, badDate)
            #expect(dated.contains("stop_times.txt"), "a bad date rejects its service, and then every trip of it: \(dated)")
            let report = try await failure(gateway, badDate, strict: true)
            #expect(report.contains("calendar.txt line 2: end_date '20101331' is not a date"), "\(report)")

            let corrupt = FileManager.default.temporaryDirectory.appendingPathComponent("corrupt-\(UUID().uuidString).zip")
            try Data("PK\u{03}\u{04} this is not a zip archive at all".utf8).write(to: corrupt)
            do {
                _ = try await gateway.transitPlugin.feeds.importFile(corrupt, feed: "test", source: "test", strict: false, progress: { _, _ in })
                Issue.record("a corrupt zip imported")
            } catch let error as GatewayError {
                #expect(error.status == 422)
                #expect(error.detail.contains("is not a readable zip archive"))
            }

            // Through HTTP: a 422 problem naming the file; the example feed is still served whole.
            let admin = try await gateway.administrator()
            let bad = try await gateway.send(.put, "/v1/transit/feeds/sample", token: admin, body: ByteBuffer(data: try Data(contentsOf: try FeedFiles.zip(noStops))),
                                             contentType: "application/zip")
            #expect(bad.status == 422)
            #expect(bad.text.contains("stops.txt: is missing from the feed"))
            #expect(try gateway.transitPlugin.runtime.network.stStop.count == 600)
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_STAGECOACH").status == 200)
        }
    }

    @Test("damaged archives — a deflate stream cut short (found by fuzzing), a wrong CRC, data past the end — fail at once with a clear error; ZIP64 records are read",
          .timeLimit(.minutes(10)))  // a guard against a reader that spins for ever; the test may first wait its turn for a database (TestSlots)
    func damagedArchives() async throws {
        try await withTransit(feed: nil) { gateway in
            func problem(_ zip: URL) async throws -> String {
                do {
                    _ = try await gateway.transitPlugin.feeds.importFile(zip, feed: "damaged", source: "test", strict: false, progress: { _, _ in })
                    Issue.record("a damaged zip imported")
                    return ""
                } catch let error as GatewayError {
                    #expect(error.status == 422)
                    return error.detail
                }
            }
            // ZIPFoundation spun for ever on this one.
            let cut = try await problem(projectRoot.appendingPathComponent("Fuzz/Corpus/gtfs-zip/fuzz-truncated-deflate.zip"))
            #expect(cut.contains("cannot be extracted") || cut.contains("not a readable zip"), "\(cut)")

            // The central directory of a good feed, edited: stops.txt's CRC, then its compressed size.
            let good = try Data(contentsOf: try FeedFiles.zip(FeedFiles.minimal))
            let directory = try #require(good.range(of: Data("PK\u{01}\u{02}".utf8))).lowerBound
            var record = directory
            while !good[(record + 46)...].starts(with: Data("stops.txt".utf8)) {
                record = try #require(good.range(of: Data("PK\u{01}\u{02}".utf8), in: (record + 4)..<good.endIndex)).lowerBound
            }
            func edited(_ offset: Int, _ bytes: [UInt8]) throws -> URL {
                var copy = good
                copy.replaceSubrange((record + offset)..<(record + offset + bytes.count), with: bytes)
                let url = FileManager.default.temporaryDirectory.appendingPathComponent("damaged-\(UUID().uuidString).zip")
                try copy.write(to: url)
                return url
            }
            let checksum = try await problem(try edited(16, [0xDE, 0xAD, 0xBE, 0xEF]))
            #expect(checksum.contains("stops.txt") && checksum.contains("CRC-32"), "\(checksum)")
            let pastEnd = try await problem(try edited(20, [0xFF, 0xFF, 0xFF, 0x7F]))
            #expect(pastEnd.contains("stops.txt") && pastEnd.contains("past the end"), "\(pastEnd)")
            #expect(try gateway.transitPlugin.runtime.network.feeds.isEmpty)

            // The sample feed zipped with ZIP64 records throughout (Python's zipfile, its limits lowered), in a folder.
            let plain = try await gateway.transitPlugin.feeds.importFile(sampleFeed, feed: "sample", source: "test", strict: false, progress: { _, _ in })
            let zip64 = try await gateway.transitPlugin.feeds.importFile(projectRoot.appendingPathComponent("Tests/TransitPluginTests/Fixtures/gtfs-sample-zip64.zip"),
                                                                           feed: "sample", source: "zip64", strict: false, progress: { _, _ in })
            #expect(zip64.summary == plain.summary)
            #expect(zip64.summary.stopTimes > 0)
        }
    }

    @Test("a zip bomb stops at the configured uncompressed size")
    func zipBomb() async throws {
        let yaml = transitYAML.replacingOccurrences(of: "transit: {}", with: "transit:\n    config:\n      maxFeedSize: 1MB")
        try await withTransit(yaml: yaml, feed: nil) { gateway in
            var files = FeedFiles.minimal.mapValues { Data($0.utf8) }
            // 8 MB of one repeated line compresses to a few kilobytes.
            files["shapes.txt"] = Data(("shape_id,shape_pt_lat,shape_pt_lon,shape_pt_sequence\n" + String(repeating: "S,1.0,1.0,1\n", count: 700_000)).utf8)
            let zip = try FeedFiles.zip(files)
            #expect(try FileManager.default.attributesOfItem(atPath: zip.path)[.size] as? Int ?? 0 < 200_000)
            do {
                _ = try await gateway.transitPlugin.feeds.importFile(zip, feed: "bomb", source: "test", strict: false, progress: { _, _ in })
                Issue.record("the bomb imported")
            } catch let error as GatewayError {
                #expect(error.detail.contains("larger than 1 MB uncompressed"), "\(error.detail)")
            }
            #expect(try gateway.transitPlugin.runtime.network.feeds.isEmpty)
        }
    }

    @Test("re-importing replaces the feed in one step; its old rows are gone; deleting a feed stops serving it", arguments: TestStorage.available)
    func reimport(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let admin = try await gateway.administrator()
            var files = FeedFiles.minimal
            files["agency.txt"] = FeedFiles.agency.replacingOccurrences(of: "TST,", with: "NEW,")
            let upload = try await gateway.send(.put, "/v1/transit/feeds/sample", token: admin,
                                                body: ByteBuffer(data: try Data(contentsOf: try FeedFiles.zip(files))), contentType: "application/zip")
            #expect(upload.status == 200, "\(upload.text)")
            #expect(upload["imported"]?.numberValue == 3)
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_STAGECOACH").status == 404)
            #expect(try await gateway.send(.get, "/v1/transit/stops/NEW_A").status == 200)
            let database = try gateway.transitPlugin.context.database
            let rows = try await database.raw("SELECT COUNT(*) AS n FROM transit_stop_times").first()?.decode(column: "n", as: Int.self)
            #expect(rows == 3, "only the served version's rows remain")
            let versions = try await database.raw("SELECT COUNT(*) AS n FROM transit_imports").first()?.decode(column: "n", as: Int.self)
            #expect(versions == 1)

            // Another feed may not claim an agency a feed already serves.
            let clash = try await gateway.send(.put, "/v1/transit/feeds/other", token: admin,
                                               body: ByteBuffer(data: try Data(contentsOf: try FeedFiles.zip(files))), contentType: "application/zip")
            #expect(clash.status == 422)
            #expect(clash.text.contains("agency NEW is already served by feed sample"))

            let feeds = try await gateway.send(.get, "/v1/transit/feeds", token: admin)
            #expect(feeds.items.compactMap { $0["id"]?.stringValue } == ["sample"])
            #expect(try await gateway.send(.delete, "/v1/transit/feeds/sample", token: admin).status == 204)
            #expect(try await gateway.send(.get, "/v1/transit/stops/NEW_A").status == 404)
            #expect(try await gateway.send(.delete, "/v1/transit/feeds/sample", token: admin).status == 404)
            let left = try await database.raw("SELECT COUNT(*) AS n FROM transit_stops").first()?.decode(column: "n", as: Int.self)
            #expect(left == 0)
        }
    }

    @Test("feed administration is for administrators only")
    func administration() async throws {
        try await withTransit { gateway in
            let user = try await gateway.register("rider")
            let zip = ByteBuffer(data: try Data(contentsOf: try FeedFiles.zip(FeedFiles.minimal)))
            for (method, path) in [(HTTPRequest.Method.put, "/v1/transit/feeds/x"), (.delete, "/v1/transit/feeds/sample"), (.get, "/v1/transit/feeds"),
                                   (.post, "/v1/transit/feeds/sample/realtime")] {
                let body: ByteBuffer? = method == .get || method == .delete ? nil : zip
                let type: String? = body == nil ? nil : (path.hasSuffix("realtime") ? "application/x-protobuf" : "application/zip")
                #expect(try await gateway.send(method, path, body: body, contentType: type).status == 401, "\(path)")
                #expect(try await gateway.send(method, path, token: user.token, body: body, contentType: type).status == 403, "\(path)")
            }
        }
    }

    @Test("the import command's importer: --feed names the feed, progress reaches the end")
    func importer() async throws {
        try await withTransit(feed: nil) { gateway in
            let importer = try #require(try gateway.transitPlugin.importers.first)
            #expect(importer.accepts(sampleFeed))
            let progress = RecordedProgress()
            let report = try await importer.importFile(sampleFeed, options: ["feed": "demo", "strict": ""], progress: progress.update)
            #expect(report.imported == 600)
            #expect(progress.last.map { $0.0 == $0.1 } == true)
            #expect(try gateway.transitPlugin.runtime.network.feeds.map(\.id) == ["demo"])
            do {
                _ = try await importer.importFile(sampleFeed, options: ["feed": "Not A Feed"], progress: progress.update)
                Issue.record("a bad feed id was taken")
            } catch let error as GatewayError {
                #expect(error.status == 422)
            }
        }
    }
}

/// Progress an import reports.
final class RecordedProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var updates: [(Int, Int?)] = []
    func update(done: Int, total: Int?) { lock.withLock { updates.append((done, total)) } }
    var last: (Int, Int?)? { lock.withLock { updates.last } }
}
