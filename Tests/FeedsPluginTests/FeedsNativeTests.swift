import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import FeedsPlugin
import Testing

@Suite("feeds native API")
struct FeedsNativeTests {
    @Test("feeds: create, read, update (read-only members ignored), list filters, private feeds, delete", arguments: TestStorage.available)
    func feedLifecycle(storage: TestStorage) async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
        try await withFeeds(storage, clock: clock) { gateway in
            let ann = try await gateway.register("ann")
            let bob = try await gateway.register("bob")

            #expect(try await gateway.call(.post, "/v1/feeds", body: #"{"title": "x"}"#).status == 401, "guests cannot create feeds")
            let invalid = try await gateway.call(.post, "/v1/feeds", token: ann.token,
                                                 body: #"{"description": 5, "tags": ["ok", 3], "location": {"lat": 100, "domain": "moon"}, "private": "maybe", "colour": "red"}"#)
            #expect(invalid.status == 422)
            let pointers = Set((invalid.json["errors"]?.arrayValue ?? []).compactMap { $0["pointer"]?.string })
            #expect(pointers == ["/title", "/description", "/tags/1", "/location/lat", "/location/domain", "/private", "/colour"])

            let created = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: """
                {"title": "Office", "description": "Sensors in the office", "website": "https://example.com/office", "tags": ["Temperature", "office"],
                 "location": {"name": "desk", "domain": "physical", "exposure": "indoor", "disposition": "fixed", "lat": 51.52, "lon": -0.08, "ele": "23.0"},
                 "datastreams": [{"id": "temp", "unit": {"label": "Celsius", "symbol": "C", "type": "derivedSI"}, "currentValue": 21.5, "tags": ["air"]},
                                 {"id": "humidity"}]}
                """)
            #expect(created.status == 201)
            let id = try #require(created.json["id"]?.numberValue.map { Int($0) })
            #expect(created.headers[.location] == "/v1/feeds/\(id)")
            #expect(created.json["creator"] == .string("ann"))
            #expect(created.json["status"] == .string("live"))
            #expect(created.json["location"]?["lat"] == .number(51.52))
            let temp = try #require(created.json["datastreams"]?.arrayValue?.first { $0["id"] == .string("temp") })
            #expect(temp["currentValue"] == .number(21.5))
            #expect(temp["minValue"] == .number(21.5) && temp["maxValue"] == .number(21.5))
            #expect(temp["at"] == .string("2023-11-14T22:13:20.000000Z"))

            // Read-only members are ignored; members left out stay.
            let updated = try await gateway.call(.put, "/v1/feeds/\(id)", token: ann.token,
                                                 body: #"{"title": "Main office", "id": 999, "status": "frozen", "created": "2000-01-01T00:00:00Z"}"#)
            #expect(updated.status == 200)
            #expect(updated.json["id"] == .number(Double(id)))
            #expect(updated.json["title"] == .string("Main office"))
            #expect(updated.json["description"] == .string("Sensors in the office"))
            #expect(updated.json["status"] == .string("live"))
            #expect(try await gateway.call(.put, "/v1/feeds/\(id)", token: bob.token, body: #"{"title": "mine"}"#).status == 403)

            let secret = try await gateway.call(.post, "/v1/feeds", token: bob.token, body: #"{"title": "Bob's secret", "private": true, "tags": ["office"]}"#)
            let secretID = try #require(secret.json["id"]?.numberValue.map { Int($0) })
            #expect(try await gateway.call(.get, "/v1/feeds/\(secretID)").status == 404, "a private feed does not exist for guests")
            #expect(try await gateway.call(.get, "/v1/feeds/\(secretID)", token: ann.token).status == 404)
            #expect(try await gateway.call(.get, "/v1/feeds/\(secretID)", token: bob.token).status == 200)
            #expect(try await gateway.call(.get, "/v1/feeds/abc").status == 404)
            #expect(try await gateway.call(.get, "/v1/feeds/99999").status == 404)

            // Filters.
            #expect(try await gateway.call(.get, "/v1/feeds?tag=office").json["total"] == .number(1), "bob's private feed is left out for guests")
            #expect(try await gateway.call(.get, "/v1/feeds?tag=office", token: bob.token).json["total"] == .number(2))
            #expect(try await gateway.call(.get, "/v1/feeds?tag=temperature").json["total"] == .number(1), "tags match without case")
            #expect(try await gateway.call(.get, "/v1/feeds?q=sensors%20office").json["total"] == .number(1))
            #expect(try await gateway.call(.get, "/v1/feeds?q=nothing-like-this").json["total"] == .number(0))
            #expect(try await gateway.call(.get, "/v1/feeds?user=ann").json["total"] == .number(1))
            #expect(try await gateway.call(.get, "/v1/feeds?units=C").json["total"] == .number(1))
            #expect(try await gateway.call(.get, "/v1/feeds?lat=51.5&lon=-0.1&distance=10").json["total"] == .number(1))
            #expect(try await gateway.call(.get, "/v1/feeds?lat=48.85&lon=2.35&distance=10").json["total"] == .number(0), "Paris is not near London")
            #expect(try await gateway.call(.get, "/v1/feeds?lat=48.85&lon=2.35&distance=250&distanceUnits=miles").json["total"] == .number(1))
            #expect(try await gateway.call(.get, "/v1/feeds?lat=91&lon=0").status == 400)
            #expect(try await gateway.call(.get, "/v1/feeds?lat=10").status == 400)
            #expect(try await gateway.call(.get, "/v1/feeds?limit=0").status == 422)
            #expect(try await gateway.call(.get, "/v1/feeds?cursor=later").status == 422)
            #expect(try await gateway.call(.get, "/v1/feeds?status=sleeping").status == 400)
            let summary = try await gateway.call(.get, "/v1/feeds?content=summary&limit=1")
            #expect(summary.json.items.count == 1 && summary.json.items[0]["datastreams"] == nil)
            // The native list shape: items, nextCursor, and the next page linked (RFC 8288).
            let all = try await gateway.call(.get, "/v1/feeds").json["total"]?.numberValue ?? 0
            if all > 1 {
                let cursor = try #require(summary.json["nextCursor"]?.stringValue)
                #expect(summary.headers[.link] == "</v1/feeds?content=summary&limit=1&cursor=\(cursor)>; rel=\"next\"")
            } else {
                #expect(summary.json["nextCursor"] == .null && summary.headers[.link] == nil)
            }

            // Frozen after 15 minutes without an update.
            clock.advance(by: 16 * 60)
            #expect(try await gateway.call(.get, "/v1/feeds/\(id)").json["status"] == .string("frozen"))
            #expect(try await gateway.call(.get, "/v1/feeds?status=frozen").json["total"] == .number(1))
            #expect(try await gateway.call(.post, "/v1/feeds/\(id)/datastreams/temp/datapoints", token: ann.token,
                                            body: #"{"datapoints": [{"value": "22"}]}"#).status == 200)
            #expect(try await gateway.call(.get, "/v1/feeds/\(id)").json["status"] == .string("live"), "a datapoint brings the feed back to life")
            #expect(try await gateway.call(.get, "/v1/feeds?status=live").json["total"] == .number(1))

            #expect(try await gateway.call(.delete, "/v1/feeds/\(id)", token: bob.token).status == 403)
            #expect(try await gateway.call(.delete, "/v1/feeds/\(id)", token: ann.token).status == 204)
            #expect(try await gateway.call(.get, "/v1/feeds/\(id)").status == 404)
            #expect(try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/temp/datapoints").status == 404)
        }
    }

    @Test("datapoints: JSON and CSV ingest, idempotent, all or nothing, current/min/max, single datapoint reads and changes", arguments: TestStorage.available)
    func ingest(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let ann = try await gateway.register("ann")
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Garden", "datastreams": [{"id": "soil"}]}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            let points = "/v1/feeds/\(id)/datastreams/soil/datapoints"

            let first = try await gateway.call(.post, points, token: ann.token,
                                               body: #"{"datapoints": [{"at": "\#(at(-300))", "value": "10.5"}, {"at": "\#(at(-200))", "value": 12}, {"at": "\#(at(-100))", "value": "-3"}]}"#)
            #expect(first.status == 200)
            #expect(first.json["accepted"] == .number(3))
            var stream = try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/soil").json
            #expect(stream["currentValue"] == .number(-3))
            #expect(stream["at"] == .string(at(-100)))
            #expect(stream["minValue"] == .number(-3) && stream["maxValue"] == .number(12))

            // CSV, with an older datapoint (a backfill leaves the current value alone) and a replacement.
            let csv = try await gateway.call(.post, points, token: ann.token, headers: [.contentType: "text/csv"],
                                             body: "\(at(-400)),99\r\n\(at(-200)),13\r\n\n")
            #expect(csv.status == 200, "\(csv.text)")
            stream = try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/soil").json
            #expect(stream["currentValue"] == .number(-3))
            #expect(stream["maxValue"] == .number(99))
            let history = try await gateway.call(.get, "\(points)?start=\(at(-1000))").json
            #expect(history["datapoints"]?.arrayValue?.map { $0["value"] } == [.number(99), .number(10.5), .number(13), .number(-3)],
                    "re-sending the datapoint at -200 replaced its value")

            // Bad input: nothing of a bad batch is stored.
            let before = try await gateway.call(.get, "\(points)?start=\(at(-1000))").text
            let bad = try await gateway.call(.post, points, token: ann.token, body: """
                {"datapoints": [{"at": "\(at(-50))", "value": "1"}, {"at": "\(at(-40))", "value": "warm"}, {"at": "yesterday", "value": "1"},
                 {"at": "\(at(3600))", "value": "1"}, {"at": "\(at(-50))", "value": "2"}, {"value": null}]}
                """)
            #expect(bad.status == 422)
            let pointers = (bad.json["errors"]?.arrayValue ?? []).compactMap { $0["pointer"]?.string }
            #expect(pointers == ["/datapoints/1/value", "/datapoints/2/at", "/datapoints/3/at", "/datapoints/4/at", "/datapoints/5/value"])
            #expect(try await gateway.call(.get, "\(points)?start=\(at(-1000))").text == before, "all or nothing")
            #expect(try await gateway.call(.post, points, token: ann.token, headers: [.contentType: "text/csv"], body: "\(at(-10)),1\nnot-a-time,2\n").json["errors"]?[0]?["pointer"]
                    == .string("line 2"))
            #expect(try await gateway.call(.post, points, token: ann.token, body: #"{"datapoints": [{"at": "2023-11-14T22:13:20Z", "value": "1"}"#).status == 400)
            #expect(try await gateway.call(.post, points, token: ann.token, body: #"{"datapoints": []}"#).status == 422)
            #expect(try await gateway.call(.post, points, token: ann.token, body: #"{"points": []}"#).status == 422)
            #expect(try await gateway.call(.post, points, token: ann.token, headers: [.contentType: "application/xml"], body: "<x/>").status == 415)
            let many = (0..<2_001).map { #"{"at": "\#(at(-3000 + $0))", "value": \#($0)}"# }.joined(separator: ",")
            #expect(try await gateway.call(.post, points, token: ann.token, body: #"{"datapoints": [\#(many)]}"#).status == 413)
            #expect(try await gateway.call(.post, "/v1/feeds/\(id)/datastreams/nope/datapoints", token: ann.token, body: #"{"datapoints": [{"value": 1}]}"#).status == 404)
            #expect(try await gateway.call(.post, "/v1/feeds/999/datastreams/soil/datapoints", token: ann.token, body: #"{"datapoints": [{"value": 1}]}"#).status == 404)
            #expect(try await gateway.call(.post, points, body: #"{"datapoints": [{"value": 1}]}"#).status == 401)
            let bob = try await gateway.register("bob")
            #expect(try await gateway.call(.post, points, token: bob.token, body: #"{"datapoints": [{"value": 1}]}"#).status == 403)

            // One datapoint: read, change, delete; the current value falls back when the latest goes.
            let single = "\(points)/\(at(-100))"
            #expect(try await gateway.call(.get, single).json == .object(["at": .string(at(-100)), "value": .number(-3)]))
            #expect(try await gateway.call(.put, single, token: ann.token, body: #"{"value": "4.25"}"#).status == 200)
            #expect(try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/soil").json["currentValue"] == .number(4.25))
            #expect(try await gateway.call(.put, "\(points)/\(at(-150))", token: ann.token, body: #"{"value": 1}"#).status == 404)
            #expect(try await gateway.call(.put, single, token: ann.token, body: #"{"value": "x"}"#).status == 422)
            #expect(try await gateway.call(.get, "\(points)/not-a-time").status == 400)
            #expect(try await gateway.call(.delete, single, token: ann.token).status == 204)
            #expect(try await gateway.call(.get, single).status == 404)
            stream = try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/soil").json
            #expect(stream["currentValue"] == .number(13))
            #expect(stream["at"] == .string(at(-200)))

            // Range delete.
            #expect(try await gateway.call(.delete, points, token: ann.token).status == 400)
            let removed = try await gateway.call(.delete, "\(points)?start=\(at(-450))&end=\(at(-250))", token: ann.token)
            #expect(removed.json["deleted"] == .number(2))
            #expect(try await gateway.call(.get, "\(points)?start=\(at(-1000))").json["datapoints"]?.arrayValue?.count == 1)
        }
    }

    @Test("history: ranges, newest, find_previous, sampled intervals, discrete, and aggregates", arguments: TestStorage.available)
    func history(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let ann = try await gateway.register("ann")
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Meter", "datastreams": [{"id": "power"}]}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            let points = "/v1/feeds/\(id)/datastreams/power/datapoints"
            // One datapoint every 10 minutes for 10 hours before now: value = minutes / 10.
            let body = (0..<60).map { #"{"at": "\#(at(-36_000 + $0 * 600))", "value": \#($0)}"# }.joined(separator: ",")
            #expect(try await gateway.call(.post, points, token: ann.token, body: "[\(body)]").status == 200)
            func values(_ query: String) async throws -> [Double] {
                let reply = try await gateway.call(.get, "\(points)?\(query)")
                #expect(reply.status == 200, "\(query): \(reply.text)")
                return (reply.json["datapoints"]?.arrayValue ?? []).compactMap { $0["value"]?.numberValue }
            }
            func times(_ query: String) async throws -> [String] {
                (try await gateway.call(.get, "\(points)?\(query)").json["datapoints"]?.arrayValue ?? []).compactMap { $0["at"]?.string }
            }
            #expect(try await values("limit=3") == [57, 58, 59], "without a start: the newest, oldest first")
            #expect(try await values("") .count == 60)
            #expect(try await values("start=\(at(-36_000))&limit=2") == [0, 1])
            #expect(try await values("start=\(at(-35_700))&duration=20minutes") == [1, 2])
            #expect(try await values("end=\(at(-34_800))&duration=10minutes") == [1, 2])
            #expect(try await values("duration=35minutes") == [57, 58, 59])
            #expect(try await values("start=\(at(-35_700))&duration=20minutes&find_previous=true") == [0, 1, 2])
            #expect(try await values("start=\(at(-36_000))&end=\(at(-36_000))") == [0])

            // Sampling: the value in force at each point.
            #expect(try await values("start=\(at(-35_900))&duration=1hour&interval=1800") == [3, 6], "no datapoint of the range is in force at the first point")
            #expect(try await times("start=\(at(-35_900))&duration=1hour&interval=1800") == [at(-34_200), at(-32_400)], "each datapoint at its own time")
            #expect(try await values("start=\(at(-35_900))&duration=1hour&interval=1800&find_previous=true") == [0, 3, 6])
            #expect(try await times("start=\(at(-35_900))&duration=1hour&interval=1800&interval_type=discrete&find_previous=true")
                    == [at(-35_900), at(-34_100), at(-32_300)])
            #expect(try await values("start=\(at(-35_900))&duration=1hour&interval=1800&interval_type=discrete") == [3, 6], "points before the first datapoint of the range are skipped")
            #expect(try await values("start=\(at(-36_000))&duration=10hours&interval=3600&limit=3") == [0, 6, 12])
            #expect(try await values("start=\(at(-36_000))&duration=3hours&interval=240&interval_type=discrete").count == 46, "several points may share a datapoint")

            // Aggregates per interval.
            #expect(try await values("start=\(at(-36_000))&duration=1hour&interval=1800&function=avg") == [1, 4, 6])
            #expect(try await values("start=\(at(-36_000))&duration=1hour&interval=1800&function=sum") == [3, 12, 6])
            #expect(try await values("start=\(at(-36_000))&duration=1hour&interval=1800&function=count") == [3, 3, 1])
            #expect(try await values("start=\(at(-36_000))&duration=1hour&interval=1800&function=min") == [0, 3, 6])
            #expect(try await values("start=\(at(-36_000))&duration=1hour&interval=1800&function=max") == [2, 5, 6])
            #expect(try await values("start=\(at(-36_000))&duration=1hour&interval=1800&function=first") == [0, 3, 6])
            #expect(try await values("start=\(at(-36_000))&duration=1hour&interval=1800&function=last") == [2, 5, 6])
            #expect(try await times("start=\(at(-36_000))&duration=1hour&interval=1800&function=last") == [at(-36_000), at(-34_200), at(-32_400)])

            // A range that ends before it starts holds nothing.
            #expect(try await values("start=\(at(0))&end=\(at(-10))") == [])

            // Bad parameters name themselves.
            for (query, parameter) in [("start=yesterday", "start"), ("duration=5fortnights", "duration"), ("limit=0", "limit"), ("limit=1001", "limit"),
                                       ("limit=abc", "limit"), ("interval=-5&duration=1hour", "interval"), ("interval=60", "interval"),
                                       ("function=median&interval=60&duration=1hour", "function"), ("function=avg", "function"),
                                       ("start=\(at(-10))&end=\(at(0))&duration=1hour", "duration"),
                                       ("interval_type=continuous", "interval_type"), ("find_previous=perhaps", "find_previous")] {
                let reply = try await gateway.call(.get, "\(points)?\(query)")
                #expect(reply.status == 400, "\(query)")
                #expect(reply.json["errors"]?[0]?["pointer"] == .string("query.\(parameter)"), "\(query): \(reply.text)")
            }
        }
    }
}

@Suite("feeds datapoint reading")
struct DatapointReadingTests {
    @Test("values survive the round trip to the database exactly, through the fast reader and the general one", arguments: TestStorage.available)
    func exactValues(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let (token, stream) = try await gateway.feedWithStream("v")
            let points = "\(stream)/datapoints"
            var generator = SystemRandomNumberGenerator()
            var values: [Double] = [0.1, 0.2, 1.0 / 3, -2.5e-300, .greatestFiniteMagnitude, 123456789.123456789, .leastNonzeroMagnitude, 42, -0.0, 9_007_199_254_740_992]
            for _ in 0..<490 { values.append(Double(bitPattern: generator.next() & 0x7FEF_FFFF_FFFF_FFFF | (generator.next() & 0x8000_0000_0000_0000))) }
            // Half as JSON strings of Swift's shortest form, half as long decimal strings (the general parser).
            let body = values.enumerated().map { index, value -> String in
                let text: String = index % 2 == 0 ? String(describing: value) : String(format: "%.17g", value)
                return #"{"at": "\#(at(-10_000 + index))", "value": "\#(text)"}"#
            }.joined(separator: ",")
            let reply = try await gateway.call(.post, points, token: token, body: #"{"datapoints": [\#(body)]}"#)
            #expect(reply.status == 200, "\(reply.text.prefix(300))")
            let read = try await gateway.call(.get, "\(points)?start=\(at(-10_000))&limit=1000")
            let stored = (read.json["datapoints"]?.arrayValue ?? []).compactMap { $0["value"]?.numberValue }
            #expect(stored.count == values.count)
            for (index, (got, sent)) in zip(stored, values).enumerated() where got.bitPattern != sent.bitPattern && !(got == 0 && sent == 0) {
                Issue.record("value \(index): sent \(sent), stored \(got)")
            }
        }
    }

    @Test("the fast reader takes the usual bodies and leaves everything else to the general one")
    func scanner() {
        let now: Int64 = 1_700_000_000_000_000
        func scan(_ text: String) -> [Datapoint]? { DatapointScanner.scan(ByteBuffer(string: text), now: now) }
        #expect(scan(#"{"datapoints": [{"at": "2023-11-14T22:13:20Z", "value": "12.5"}, {"value": 3, "at": "2023-11-14T22:13:21.5Z"}]}"#)
                == [Datapoint(at: now, value: 12.5), Datapoint(at: now + 1_500_000, value: 3)])
        #expect(scan(#" [ {"value": "-0.125"} ] "#) == [Datapoint(at: now, value: -0.125)])
        #expect(scan(#"{"datapoints": []}"#) == [])
        #expect(scan(#"{"datapoints": [{"at": "2023-11-14T22:13:20Z", "value": "1e3"}]}"#)?.first?.value == 1000)
        for body in [#"{"datapoints": [{"at": "x", "value": "1"}]}"#, #"{"datapoints": [{"value": "warm"}]}"#, #"{"datapoints": [{"value": "1", "extra": 1}]}"#,
                     #"{"datapoints": [{"value": "1"}], "more": 1}"#, #"{"datapoints": [{"value": "\u0031"}]}"#, #"{"datapoints": [{"value": null}]}"#,
                     #"{"datapoints": [{"value": "1"},]}"#, #"{"datapoints": [{"value": "1"}]"#, #"{"datapoints": [{"value": "1"}]} x"#,
                     #"{"datapoints": [{"value": "."}]}"#, #"{"datapoints": [{"value": "1", "value": "2"}]}"#, "", "[", #"{"points": []}"#] {
            #expect(scan(body) == nil, "\(body)")
        }
    }
}

@Suite("feeds import")
struct FeedsImportTests {
    final class Progress: @unchecked Sendable {
        var updates: [(Int, Int?)] = []
        func update(done: Int, total: Int?) { updates.append((done, total)) }
    }

    @Test("CSV import: a header picks the columns, bad lines are reported by number, a second import changes nothing", arguments: TestStorage.available)
    func importSeries(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let ann = try await gateway.register("ann")
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Sensor"}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("series-\(UUID().uuidString).csv")
            defer { try? FileManager.default.removeItem(at: file) }
            try "isig,datetime,glucose\r\n22.5,2010-03-24 09:51:00,258\r\n22.5,2010-03-24 09:56:00,260\r\nbad,not a time,1\r\n22.1,2010-03-24 10:01:00,high\r\n22.0,2010-03-24 09:56:00,999\r\n21.9,2010-03-24 10:06:00,254\r\n"
                .write(to: file, atomically: true, encoding: .utf8)
            let importer = try #require(try gateway.feedsPlugin.importers.first { $0.accepts(file) })
            let progress = Progress()
            let report = try await importer.importFile(file, options: ["feed": "\(id)", "datastream": "glucose"], progress: progress.update)
            #expect(report.imported == 3)
            #expect(report.rejected.map(\.line) == [4, 5, 6], "\(report.rejected)")
            #expect(report.rejected[2].reason.contains("line 3"))
            #expect(progress.updates.last.map { $0.0 == $0.1 } == true)
            let history = try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/glucose/datapoints?start=2010-03-24T00:00:00Z&duration=1day")
            #expect(history.json["datapoints"]?.arrayValue?.compactMap { $0["value"]?.numberValue } == [258, 260, 254])
            #expect(history.json["datapoints"]?[0]?["at"] == .string("2010-03-24T09:51:00.000000Z"), "times without a zone are UTC")
            let again = try await importer.importFile(file, options: ["feed": "\(id)", "datastream": "glucose"], progress: progress.update)
            #expect(again.imported == 3)
            #expect(try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/glucose/datapoints?start=2010-03-24T00:00:00Z&duration=1day").text == history.text)
            await #expect(throws: GatewayError.self) {
                try await importer.importFile(file, options: ["feed": "999", "datastream": "x"], progress: progress.update)
            }
            await #expect(throws: GatewayError.self) {
                try await importer.importFile(file, options: ["datastream": "x"], progress: progress.update)
            }
        }
    }
}

@Suite("feeds retention")
struct FeedsRetentionTests {
    @Test("a feed's retention removes older datapoints (the retention service's pass); the current value follows", arguments: TestStorage.available)
    func retention(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let ann = try await gateway.register("ann")
            #expect(try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "R", "retention": "forever"}"#).status == 422)
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "R", "retention": "2hours", "datastreams": [{"id": "x"}]}"#)
            #expect(feed.json["retention"] == .string("7200s"))
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            let kept = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Kept", "datastreams": [{"id": "x"}]}"#)
            let keptID = try #require(kept.json["id"]?.numberValue.map { Int($0) })
            let body = #"[{"at": "\#(at(-4 * 3600))", "value": 1}, {"at": "\#(at(-3 * 3600))", "value": 2}, {"at": "\#(at(-3600))", "value": 3}, {"at": "\#(at(-60))", "value": 4}]"#
            for feedID in [id, keptID] {
                #expect(try await gateway.call(.post, "/v1/feeds/\(feedID)/datastreams/x/datapoints", token: ann.token, body: body).status == 200)
            }
            let removed = try await gateway.feedsPlugin.service.store.applyRetention()
            #expect(removed == 2)
            let left = try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/x/datapoints?duration=1day")
            #expect(left.json["datapoints"]?.arrayValue?.compactMap { $0["value"]?.numberValue } == [3, 4])
            #expect(try await gateway.call(.get, "/v1/feeds/\(keptID)/datastreams/x/datapoints?duration=1day").json["datapoints"]?.arrayValue?.count == 4)
            #expect(try await gateway.call(.get, "/v1/feeds/\(id)/datastreams/x").json["currentValue"] == .number(4))
            #expect(try await gateway.call(.put, "/v1/feeds/\(id)", token: ann.token, body: #"{"retention": null}"#).json["retention"] == nil)
        }
    }
}

@Suite("feeds configuration")
struct FeedsConfigurationTests {
    func decode(_ block: String) throws -> FeedsPlugin.Configuration {
        let yaml = "plugins:\n  feeds:\n    config: { \(block) }\n"
        let configuration = try GatewayConfiguration.parse(Data(yaml.utf8), file: "plugins.yaml", knownPlugins: ["feeds"])
        try PluginRegistration(FeedsPlugin.self).validate(configuration.plugins["feeds"]?.config)
        return try #require(try configuration.plugins["feeds"]?.config?.decode(FeedsPlugin.Configuration.self))
    }

    @Test("every duration setting takes the gateway's spellings; the others keep their defaults")
    func durations() throws {
        let settings = try decode("frozenAfter: 1hour, maxFutureSkew: 300seconds, retentionEvery: 2days, triggerTimeout: 5000ms")
        #expect(settings.frozenAfterSeconds == 3600 && settings.maxFutureSkewSeconds == 300)
        #expect(settings.retentionEverySeconds == 172_800 && settings.triggerTimeoutSeconds == 5)
        #expect(settings.maxDatapointsPerRequest == 10_000 && settings.triggerAttempts == 5)
        #expect(throws: ConfigurationFileError.self) { try decode("triggerTimeout: 2m") }
        #expect(throws: ConfigurationFileError.self) { try decode("frozenAfter: later") }
    }
}

@Suite("feeds in the OpenAPI document")
struct FeedsOpenAPITests {
    @Test("every reply of the native API is described member by member (no 'any JSON value')")
    func typedReplies() async throws {
        try await withFeeds { gateway in
            let document = try await gateway.openAPIDocument()
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            let schemas = (document["components"] as? [String: Any])?["schemas"] as? [String: [String: Any]] ?? [:]
            func resolve(_ schema: [String: Any]) -> [String: Any] {
                guard let reference = schema["$ref"] as? String else { return schema }
                return schemas[String(reference.split(separator: "/").last ?? "")] ?? [:]
            }
            var described: [String: [String: Any]] = [:]
            for (path, operations) in paths where path.hasPrefix("/v1/feeds") {
                for case let (_, operation as [String: Any]) in operations {
                    guard let id = operation["operationId"] as? String, let responses = operation["responses"] as? [String: [String: Any]] else { continue }
                    for (_, reply) in responses {
                        guard let schema = ((reply["content"] as? [String: Any])?["application/json"] as? [String: Any])?["schema"] as? [String: Any] else { continue }
                        let resolved = resolve(schema)
                        #expect(resolved["properties"] != nil || resolved["items"] != nil, "\(id): \(resolved)")
                        described[id] = resolved
                    }
                }
            }
            let feed = try #require(resolve(described["feeds.get"] ?? [:])["properties"] as? [String: Any])
            #expect(Set(feed.keys).isSuperset(of: ["id", "title", "tags", "private", "status", "created", "updated", "datastreams"]))
            let history = try #require(described["feeds.datapoints.history"]?["properties"] as? [String: Any])
            #expect(history.keys.contains("datapoints"))
            let list = try #require(described["feeds.list"]?["properties"] as? [String: Any])
            #expect(Set(list.keys) == ["items", "nextCursor", "total"])
        }
    }

    @Test("datapoint values are typed wherever a body takes one: a number or a decimal text, and null where a value may be cleared")
    func typedValues() async throws {
        try await withFeeds { gateway in
            let document = try await gateway.openAPIDocument()
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            let bodies = paths.filter { $0.key.hasPrefix("/v1/feeds") }.flatMap { _, operations in
                operations.values.compactMap { ($0 as? [String: Any])?["requestBody"] }
            }
            let text = String(decoding: try JSONSerialization.data(withJSONObject: bodies, options: [.sortedKeys]), as: UTF8.self)
            #expect(!text.contains("Any JSON value"), "a member described as any JSON value")
            #expect(!text.contains(":{}"), "an empty schema admits anything: \(text.components(separatedBy: ":{}").first?.suffix(200) ?? "")")
            #expect(text.contains(#"{"type":"null"}"#), "currentValue may be null")
        }
    }

    @Test("every JSON body of the native API is described, with the members the plugin reads")
    func typedBodies() async throws {
        try await withFeeds { gateway in
            let document = try await gateway.openAPIDocument()
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            var bodies: [String: [String: [String: Any]]] = [:]
            for (path, operations) in paths where path.hasPrefix("/v1/feeds") {
                for case let (_, operation as [String: Any]) in operations {
                    guard let id = operation["operationId"] as? String,
                          let content = (operation["requestBody"] as? [String: Any])?["content"] as? [String: [String: Any]] else { continue }
                    let schema = try #require(content["application/json"]?["schema"] as? [String: Any], "\(id)")
                    #expect(schema["properties"] != nil, "\(id): \(schema)")
                    bodies[id] = content
                }
            }
            let feed = try #require((bodies["feeds.create"]?["application/json"]?["schema"] as? [String: Any])?["properties"] as? [String: Any])
            #expect(Set(feed.keys) == FeedService.feedMembers)
            // CSV stays text.
            #expect((bodies["feeds.datapoints.ingest"]?["text/csv"]?["schema"] as? [String: Any])?["type"] as? String == "string")
        }
    }
}
