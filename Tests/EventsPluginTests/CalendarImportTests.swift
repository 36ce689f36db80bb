import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import EventsPlugin
import SQLKit
import Testing

/// Progress an import reports, for checking that it reports some.
final class RecordedProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var updates: [(Int, Int?)] = []
    func update(done: Int, total: Int?) { lock.withLock { updates.append((done, total)) } }
    var last: (Int, Int?)? { lock.withLock { updates.last } }
}

@Suite("events: iCalendar import and export")
struct CalendarImportTests {
    static let holidays = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("data/demo/USHolidays.ics")

    /// A weekly concert (four Wednesdays at 19:30 in Taipei) at a venue with a point, in the
    /// configured category 音樂, and a one-off all-day fair on a floating date.
    static func concerts(title: String = "Weekly concert", count: Int = 4, extra: String = "") -> String {
        """
        BEGIN:VCALENDAR\r
        VERSION:2.0\r
        PRODID:-//test//EN\r
        BEGIN:VEVENT\r
        UID:weekly-1@example.com\r
        DTSTAMP:20260101T000000Z\r
        DTSTART;TZID=Asia/Taipei:20261125T193000\r
        DTEND;TZID=Asia/Taipei:20261125T213000\r
        RRULE:FREQ=WEEKLY;COUNT=\(count)\r
        SUMMARY:\(title)\r
        DESCRIPTION:Brass\\, strings\\nand a choir\r
        LOCATION:高雄市文化中心\r
        GEO:22.627;120.3176\r
        CATEGORIES:音樂,Classical\r
        URL:https://example.com/concert\r
        END:VEVENT\r
        BEGIN:VEVENT\r
        UID:fair@example.com\r
        DTSTAMP:20260101T000000Z\r
        DTSTART;VALUE=DATE:20261128\r
        SUMMARY:Book fair\r
        \(extra)END:VEVENT\r
        END:VCALENDAR\r

        """
    }

    func importer(_ gateway: TestGateway) throws -> CalendarImporter { try gateway.eventsPlugin.calendarImporter }

    func write(_ text: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("events-\(UUID().uuidString).ics")
        try text.write(to: url, atomically: true, encoding: .utf8)
        return url
    }

    @Test("a calendar's events, recurrences, venues and categories; a re-import updates by UID", arguments: TestStorage.available)
    func importAndReimport(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let file = try write(Self.concerts())
            defer { try? FileManager.default.removeItem(at: file) }
            let progress = RecordedProgress()
            let report = try await importer(gateway).importFile(file, options: ["city": "15"], progress: progress.update)
            #expect(report == ImportReport(imported: 2, rejected: []))
            #expect(progress.last?.0 == 2 && progress.last?.1 == 2)

            let week = try await gateway.call(.get, "/v1/events?city=15&from=2026-11-25&to=2026-12-31")
            #expect(week.json.items.map { $0["title"]?.string } == ["Weekly concert", "Book fair"], "\(week.text)")
            let concert = try #require(week.json.items.first)
            let id = try #require(concert["id"]?.int)
            #expect(concert["categories"]?.arrayValue?.compactMap(\.numberValue) == [1])
            let detail = try await gateway.call(.get, "/v1/events/\(id)")
            #expect(detail.json["showings"]?.arrayValue?.compactMap { $0["start"]?.string } == [
                "2026-11-25T11:30:00Z", "2026-12-02T11:30:00Z", "2026-12-09T11:30:00Z", "2026-12-16T11:30:00Z"])
            #expect(detail.json["description"]?.string == "Brass, strings\nand a choir")
            #expect(detail.json["infoSource"]?.string == "https://example.com/concert")
            #expect(detail.json["tags"]?.arrayValue?.compactMap(\.stringValue) == ["音樂", "Classical"])
            #expect(detail.json["uid"]?.string == "weekly-1@example.com")
            #expect(detail.json["showings"]?[0]?["venue"]?["name"]?.string == "高雄市文化中心")
            #expect(detail.json["showings"]?[0]?["venue"]?["lat"]?.numberValue == 22.627)
            // The all-day fair: midnight to midnight in Kaohsiung (the city's zone; the file has no X-WR-TIMEZONE).
            let fair = try #require(week.json.items.last?["showings"]?[0])
            #expect(fair["start"]?.string == "2026-11-27T16:00:00Z")
            #expect(fair["end"]?.string == "2026-11-28T16:00:00Z")
            #expect(fair["allDay"] == .bool(true))
            // Near the venue's point.
            #expect(try await gateway.call(.get, "/v1/events/near?lat=22.627&lon=120.3176&radius=500&to=2026-12-31").json.items.count == 1)

            // A reservation on the third concert survives a re-import that drops it.
            let ann = try await gateway.register("ann")
            let third = try #require(detail.json["showings"]?[2]?["id"]?.int)
            #expect(try await gateway.call(.post, "/v1/events/showings/\(third)/reservations", token: ann.token, json: "{}").status == 201)

            let changed = try write(Self.concerts(title: "Weekly concert (new hall)", count: 2))
            defer { try? FileManager.default.removeItem(at: changed) }
            #expect(try await importer(gateway).importFile(changed, options: ["city": "15"], progress: RecordedProgress().update).imported == 2)
            let again = try await gateway.call(.get, "/v1/events/\(id)")
            #expect(again.json["title"]?.string == "Weekly concert (new hall)", "the same event, updated")
            #expect(again.json["showings"]?.arrayValue?.compactMap { $0["start"]?.string } == [
                "2026-11-25T11:30:00Z", "2026-12-02T11:30:00Z", "2026-12-09T11:30:00Z"], "two from the calendar, one kept for its reservation")
            let count = try await gateway.gateway.database.sql.raw("SELECT COUNT(*) AS n FROM events_events").first()?.decode(column: "n", as: Int.self)
            #expect(count == 2, "no duplicates")
            let venues = try await gateway.gateway.database.sql.raw("SELECT COUNT(*) AS n FROM events_venues").first()?.decode(column: "n", as: Int.self)
            #expect(venues == 1, "the venue is found again, not made twice")
        }
    }

    @Test("the US holidays calendar: 723 all-day events, none rejected, none duplicated on a second import", arguments: TestStorage.available)
    func holidays(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let report = try await importer(gateway).importFile(Self.holidays, options: [:], progress: RecordedProgress().update)
            #expect(report == ImportReport(imported: 723, rejected: []))
            _ = try await importer(gateway).importFile(Self.holidays, options: [:], progress: RecordedProgress().update)
            let count = try await gateway.gateway.database.sql.raw("SELECT COUNT(*) AS n FROM events_events").first()?.decode(column: "n", as: Int.self)
            #expect(count == 723)
            // Thanksgiving 2026 (26 November), a day in the plugin's zone.
            let day = try await gateway.call(.get, "/v1/events?from=2026-11-26&to=2026-11-26")
            #expect(day.json.items.compactMap { $0["title"]?.string }.contains { $0.hasPrefix("Thanksgiving") }, "\(day.text)")
        }
    }

    @Test("malformed lines are reported with their numbers and skipped; strict stops at the first", arguments: TestStorage.available)
    func malformed(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            let broken = Self.concerts(extra: "DTEND;VALUE=DATE:2026-11-29\r\n")
            let brokenLine = broken.components(separatedBy: "\r\n").firstIndex { $0.hasPrefix("DTEND;VALUE=DATE:2026") }.map { $0 + 1 }
            var headers: HTTPFields = [.authorization: "Bearer \(root.token)", .contentType: "text/calendar"]
            let lenient = try await gateway.gateway.handle(.post, "/v1/events/import?city=15", headers: headers, body: ByteBuffer(string: broken))
            #expect(lenient.status == 200, "\(String(buffer: lenient.body))")
            let report = try JSONDecoder().decode(ImportReport.self, from: Data(buffer: lenient.body))
            #expect(report.imported == 2)
            #expect(report.rejected.map(\.line) == [try #require(brokenLine)], "\(report)")

            let strict = try await gateway.gateway.handle(.post, "/v1/events/import?city=15&strict=true", headers: headers, body: ByteBuffer(string: broken))
            #expect(strict.status == 422)
            #expect(String(buffer: strict.body).contains("Line \(brokenLine ?? 0)"), "\(String(buffer: strict.body))")

            let noTitle = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nUID:x\r\nDTSTART:20261201T100000Z\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
            let untitled = try await gateway.gateway.handle(.post, "/v1/events/import", headers: headers, body: ByteBuffer(string: noTitle))
            let untitledReport = try JSONDecoder().decode(ImportReport.self, from: Data(buffer: untitled.body))
            #expect(untitledReport.imported == 0)
            #expect(untitledReport.rejected.first?.line == 3)
            #expect(try await gateway.gateway.handle(.post, "/v1/events/import?city=3", headers: headers, body: ByteBuffer(string: noTitle)).status == 422)
            headers[.contentType] = "application/json"
            #expect(try await gateway.gateway.handle(.post, "/v1/events/import", headers: headers, body: ByteBuffer(string: "{}")).status == 415)

            // Options of the command line.
            let file = try write(broken)
            defer { try? FileManager.default.removeItem(at: file) }
            await #expect(throws: GatewayError.self) { try await importer(gateway).importFile(file, options: ["strict": "true"], progress: RecordedProgress().update) }
            await #expect(throws: GatewayError.self) { try await importer(gateway).importFile(file, options: ["city": "x"], progress: RecordedProgress().update) }
            await #expect(throws: GatewayError.self) { try await importer(gateway).importFile(file, options: ["cty": "15"], progress: RecordedProgress().update) }
        }
    }

    @Test("a hostile calendar (hundreds of rules that never match, an endless SECONDLY rule) imports in bounded work")
    func hostile() async throws {
        try await withEvents { gateway in
            // The endless rule first: it gets its 10,000 showings; then the rules that never match
            // spend the file's budget of recurrence steps, and the rest keep just their DTSTART.
            var text = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\n"
            text += "BEGIN:VEVENT\r\nUID:seconds\r\nDTSTART:20261201T100000Z\r\nRRULE:FREQ=SECONDLY\r\nSUMMARY:Every second\r\nEND:VEVENT\r\n"
            for n in 0..<300 {
                text += "BEGIN:VEVENT\r\nUID:never-\(n)\r\nDTSTART:20261201T100000Z\r\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30\r\nSUMMARY:Never \(n)\r\nEND:VEVENT\r\n"
            }
            text += "END:VCALENDAR\r\n"
            let report = try await gateway.eventsPlugin.calendarImporter.importCalendar(Data(text.utf8), city: nil, category: nil, strict: false,
                                                                                        progress: RecordedProgress().update)
            #expect(report.imported == 301)
            let showings = try await gateway.gateway.database.sql.raw("SELECT COUNT(*) AS n FROM events_showings").first()?.decode(column: "n", as: Int.self)
            #expect(showings == 10_000 + 300)
        }
    }

    @Test("floating times are read in X-WR-TIMEZONE, else the city's zone")
    func floating() async throws {
        try await withEvents { gateway in
            let text = { (header: String) in
                "BEGIN:VCALENDAR\r\nVERSION:2.0\r\n\(header)BEGIN:VEVENT\r\nUID:f\(header.count)\r\nDTSTART:20261201T100000\r\nSUMMARY:Floating\(header.count)\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
            }
            let inNewYork = try write(text("X-WR-TIMEZONE:America/New_York\r\n"))
            let inCity = try write(text(""))
            defer { for file in [inNewYork, inCity] { try? FileManager.default.removeItem(at: file) } }
            _ = try await importer(gateway).importFile(inNewYork, options: ["city": "15"], progress: RecordedProgress().update)
            _ = try await importer(gateway).importFile(inCity, options: ["city": "99"], progress: RecordedProgress().update)
            let starts = try await gateway.gateway.database.sql.raw("SELECT starts_at FROM events_showings ORDER BY id").all()
                .map { Date(timeIntervalSince1970: Double(try $0.decode(column: "starts_at", as: Int64.self))) }
            #expect(starts.map { UTCTimestamp.format($0) } == ["2026-12-01T15:00:00Z", "2026-12-01T15:00:00Z"])
        }
    }

    @Test("export: one event and a subscribable calendar, valid iCalendar that reads back into the same events", arguments: TestStorage.available)
    func export(storage: TestStorage) async throws {
        let exported = try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue))
            let one = try await gateway.call(.get, "/v1/events/\(event.id).ics")
            #expect(one.status == 200)
            #expect(one.headers[.contentType] == "text/calendar; charset=utf-8")
            #expect(one.text.hasPrefix("BEGIN:VCALENDAR\r\n"))
            #expect(one.text.contains("UID:\(event.id)@events\r\n"))
            #expect(one.text.contains("SUMMARY:港都管樂之夜\r\n"))
            #expect(one.text.components(separatedBy: "\r\n").allSatisfy { $0.utf8.count <= 75 }, "lines are folded at 75 octets")
            #expect(try await gateway.call(.get, "/v1/events/\(event.id + 1000).ics").status == 404)

            let feed = try await gateway.call(.get, "/v1/events.ics?city=15&category=1&from=2026-11-24&to=2026-12-31")
            #expect(feed.status == 200, "\(feed.text)")
            #expect(feed.text.contains("UID:\(event.id)@events"))
            #expect(try await gateway.call(.get, "/v1/events.ics?city=15&category=6").text.contains("VEVENT") == false)
            #expect(try await gateway.call(.get, "/v1/events.ics?from=nonsense").status == 422)
            let detail = try await gateway.call(.get, "/v1/events/\(event.id)")
            return (feed.text, detail.json["showings"]?.arrayValue?.compactMap { [$0["start"]?.string, $0["end"]?.string] } ?? [])
        }
        // The exported calendar, imported into a fresh gateway: the same event and showings.
        try await withEvents(storage) { gateway in
            let report = try await gateway.eventsPlugin.calendarImporter.importCalendar(Data(exported.0.utf8), city: 15, category: nil, strict: true,
                                                                                        progress: RecordedProgress().update)
            #expect(report == ImportReport(imported: 1, rejected: []))
            let listed = try await gateway.call(.get, "/v1/events?city=15&from=2026-11-24&to=2026-12-31")
            let id = try #require(listed.json.items.first?["id"]?.int)
            let detail = try await gateway.call(.get, "/v1/events/\(id)")
            #expect(detail.json["title"]?.string == "港都管樂之夜")
            #expect(detail.json["categories"]?.arrayValue?.compactMap { $0["id"]?.int } == [1, 17])
            #expect(detail.json["showings"]?.arrayValue?.compactMap { [$0["start"]?.string, $0["end"]?.string] } == exported.1)
            #expect(detail.json["showings"]?[0]?["venue"]?["name"]?.string == "衛武營國家藝術文化中心")
        }
    }
}
