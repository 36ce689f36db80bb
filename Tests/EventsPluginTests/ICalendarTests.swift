import Foundation
import Testing

@testable import EventsPlugin

/// Builders shared by the iCalendar tests.
enum ICalendarSamples {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/recurrence")

    /// A calendar around the given VEVENT lines, with CRLF line ends.
    static func calendar(_ lines: [String], header: [String] = []) -> Data {
        let all = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//test//EN"] + header + lines + ["END:VCALENDAR"]
        return Data((all.joined(separator: "\r\n") + "\r\n").utf8)
    }

    static func event(_ lines: [String], uid: String = "e1@test") -> [String] {
        ["BEGIN:VEVENT", "UID:\(uid)", "DTSTAMP:20260101T000000Z"] + lines + ["END:VEVENT"]
    }

    static func instant(_ text: String) -> Date {
        // Tests only spell valid instants; a typo shows up as a failed comparison with the distant past.
        (try? Date(text, strategy: .iso8601)) ?? .distantPast
    }

    static func iso(_ date: Date) -> String {
        date.formatted(.iso8601)
    }

    static let utc = TimeZone(identifier: "UTC")!

    /// A temporary file, removed when `body` returns.
    static func withTemporaryFile<T>(_ write: (FileHandle) throws -> Void, _ body: (URL) throws -> T) throws -> T {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("icalendar-\(UUID().uuidString).ics")
        #expect(FileManager.default.createFile(atPath: url.path, contents: nil))
        defer { try? FileManager.default.removeItem(at: url) }
        let handle = try FileHandle(forWritingTo: url)
        try write(handle)
        try handle.close()
        return try body(url)
    }
}

/// The expected occurrences of the fixtures in Fixtures/recurrence, written by its generate.py from an
/// established RFC 5545 implementation (recurring_ical_events on dateutil), checked against the RFC.
struct RecurrenceFixture: Decodable, Sendable {
    struct Window: Decodable, Sendable {
        var from: String
        var to: String
    }

    struct Occurrence: Decodable, Sendable, Equatable, CustomStringConvertible {
        var start: String
        var end: String
        var allDay: Bool
        var summary: String

        var description: String { "\(start)–\(end)\(allDay ? " all-day" : "") \(summary)" }
    }

    var window: Window
    var defaultTimeZone: String
    var correction: String?
    var occurrences: [Occurrence]

    static let all: [String: RecurrenceFixture] = {
        let url = ICalendarSamples.fixtures.appendingPathComponent("expected.json")
        guard let data = try? Data(contentsOf: url), let fixtures = try? JSONDecoder().decode([String: RecurrenceFixture].self, from: data)
        else {
            return [:]
        }
        return fixtures
    }()

    static var names: [String] { all.keys.sorted() }
}

@Suite("iCalendar recurrence matches an established RFC 5545 implementation")
struct ICalendarRecurrenceFixtureTests {
    @Test("the fixtures and their expected occurrences are there")
    func fixturesPresent() {
        #expect(RecurrenceFixture.all.count >= 25)
    }

    @Test("each fixture expands to the occurrences in expected.json", arguments: RecurrenceFixture.names)
    func fixture(name: String) throws {
        let fixture = try #require(RecurrenceFixture.all[name])
        let calendar = try ICalendarParser(strict: true).parse(contentsOf: ICalendarSamples.fixtures.appendingPathComponent(name))
        #expect(calendar.problems.isEmpty)
        let defaultTimeZone = try #require(TimeZone(identifier: fixture.defaultTimeZone))
        var actual: [RecurrenceFixture.Occurrence] = []
        for event in calendar.events {
            let occurrences = event.occurrences(
                from: ICalendarSamples.instant(fixture.window.from), to: ICalendarSamples.instant(fixture.window.to),
                defaultTimeZone: defaultTimeZone, limit: 10_000)
            for occurrence in occurrences {
                actual.append(
                    RecurrenceFixture.Occurrence(
                        start: ICalendarSamples.iso(occurrence.start), end: ICalendarSamples.iso(occurrence.end), allDay: occurrence.allDay,
                        summary: occurrence.override?.summary ?? event.summary ?? ""))
            }
        }
        actual.sort { ($0.start, $0.end) < ($1.start, $1.end) }
        #expect(actual == fixture.occurrences, "\(name)")
    }
}

@Suite("iCalendar content lines")
struct ICalendarContentLineTests {
    @Test("folded lines are unfolded whatever the line ends (CRLF, LF, CR) and a byte order mark is skipped")
    func unfolding() throws {
        let body =
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nUID:a\nDTSTART:20260101T090000Z\nSUMMARY:Hello\n  wor\n\tld\n"
            + "DESCRIPTION:one \n two\nEND:VEVENT\nEND:VCALENDAR\n"
        for lineEnd in ["\r\n", "\n", "\r"] {
            var data = Data([0xEF, 0xBB, 0xBF])
            data.append(Data(body.replacingOccurrences(of: "\n", with: lineEnd).utf8))
            let calendar = try ICalendarParser(strict: true).parse(data)
            let event = try #require(calendar.events.first)
            #expect(event.summary == "Hello world", "line end \(lineEnd.debugDescription)")
            #expect(event.description == "one two")
        }
    }

    @Test("a fold inside a multi-byte character joins back into the character")
    func unfoldingMultiByte() throws {
        // "é" is C3 A9; split between the two bytes, as a careless writer would.
        var bytes = Array("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:a\r\nDTSTART:20260101T090000Z\r\nSUMMARY:Caf".utf8)
        bytes += [0xC3, 0x0D, 0x0A, 0x20, 0xA9]
        bytes += Array(" 東京\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n".utf8)
        let calendar = try ICalendarParser(strict: true).parse(Data(bytes))
        #expect(calendar.events.first?.summary == "Café 東京")
    }

    @Test("a file read in chunks gives the same calendar as the same bytes in memory, even with CRLF split across chunks")
    func chunkBoundaries() throws {
        var lines: [String] = []
        for index in 0..<3000 {
            lines += ICalendarSamples.event(
                ["DTSTART:20260101T090000Z", "SUMMARY:Event \(index) " + String(repeating: "é", count: index % 50)],
                uid: "e\(index)")
        }
        let data = ICalendarSamples.calendar(lines)
        let fromMemory = try ICalendarParser(strict: true).parse(data)
        let fromFile = try ICalendarSamples.withTemporaryFile({ try $0.write(contentsOf: data) }) {
            try ICalendarParser(strict: true).parse(contentsOf: $0)
        }
        #expect(fromMemory.events.count == 3000)
        #expect(fromMemory == fromFile)
    }

    @Test("TEXT escapes are decoded: backslash, semicolon, comma and both spellings of newline")
    func textEscapes() throws {
        let data = ICalendarSamples.calendar(
            ICalendarSamples.event([
                "DTSTART:20260101T090000Z",
                #"SUMMARY:a\\b\;c\,d\ne\Nf"#,
                #"LOCATION:Hall 1\, Main St."#,
                #"CATEGORIES:Music,Jazz\, Blues"#,
                "CATEGORIES:Outdoor",
                "GEO:37.386013;-122.082932",
                "URL:https://example.com/e?a=1,2",
                "STATUS:confirmed",
                "SEQUENCE:3",
            ]))
        let event = try #require(try ICalendarParser(strict: true).parse(data).events.first)
        #expect(event.summary == "a\\b;c,d\ne\nf")
        #expect(event.location == "Hall 1, Main St.")
        #expect(event.categories == ["Music", "Jazz, Blues", "Outdoor"])
        #expect(event.geo == ICalendarGeo(latitude: 37.386013, longitude: -122.082932))
        #expect(event.url == "https://example.com/e?a=1,2")
        #expect(event.status == "CONFIRMED")
        #expect(event.sequence == 3)
    }

    @Test("quoted parameter values may hold ':' ';' and ','; names and parameters are case-insensitive")
    func parameters() throws {
        let data = ICalendarSamples.calendar(
            ICalendarSamples.event([
                #"dtstart;x-note="a:b;c,d";tzid="America/New_York":20260105T090000"#,
                "DTEND;VALUE=DATE-TIME;TZID=America/New_York:20260105T100000",
            ]))
        let event = try #require(try ICalendarParser(strict: true).parse(data).events.first)
        #expect(event.start.zone == .zoned(TimeZone(identifier: "America/New_York")!))
        #expect(event.start.hour == 9)
    }

    @Test("X-WR-CALNAME and X-WR-TIMEZONE are read; floating times use X-WR-TIMEZONE")
    func calendarProperties() throws {
        let data = ICalendarSamples.calendar(
            ICalendarSamples.event(["DTSTART:20260105T090000"]),
            header: [#"X-WR-CALNAME:Club\, events"#, "X-WR-TIMEZONE:Asia/Tokyo"])
        let calendar = try ICalendarParser(strict: true).parse(data)
        #expect(calendar.name == "Club, events")
        #expect(calendar.timeZone == TimeZone(identifier: "Asia/Tokyo"))
        let event = try #require(calendar.events.first)
        let occurrences = event.occurrences(
            from: ICalendarSamples.instant("2026-01-01T00:00:00Z"), to: ICalendarSamples.instant("2026-02-01T00:00:00Z"),
            defaultTimeZone: ICalendarSamples.utc, limit: 10)
        #expect(occurrences.map { ICalendarSamples.iso($0.start) } == ["2026-01-05T00:00:00Z"])
    }

    @Test("DURATION values: weeks, days, hours, minutes, seconds and a sign")
    func durations() throws {
        let cases: [(String, ICalendarDuration)] = [
            ("PT1H30M", ICalendarDuration(seconds: 5400)), ("P1D", ICalendarDuration(days: 1)), ("P1W", ICalendarDuration(days: 7)),
            ("-PT15M", ICalendarDuration(seconds: -900)), ("P1DT2H3M4S", ICalendarDuration(days: 1, seconds: 7384)),
            ("+PT0S", ICalendarDuration()),
        ]
        for (text, expected) in cases {
            #expect(try ICalendarValueReader.duration(text[...]) == expected, "\(text)")
        }
        for text in ["PT", "1H", "P1H", "PT1D", "P", "PTXM"] {
            #expect(throws: ICalendarContentLine.Malformed.self, "\(text)") { try ICalendarValueReader.duration(text[...]) }
        }
    }
}

@Suite("iCalendar problems")
struct ICalendarProblemTests {
    static let sample = ICalendarSamples.calendar(
        ICalendarSamples.event(["DTSTART:20260105T090000Z", "this line has no colon", "SUMMARY:kept"])
            + ICalendarSamples.event(["DTSTART:2026-01-05", "SUMMARY:no start"], uid: "e2@test")
            + ICalendarSamples.event(
                ["DTSTART;TZID=Mars/Olympus_Mons:20260105T090000", "GEO:200;0", "RRULE:FREQ=FORTNIGHTLY"], uid: "e3@test")
            + ["END:VTODO"])
    // Lines: 1 BEGIN:VCALENDAR, 2 VERSION, 3 PRODID, 4 BEGIN:VEVENT, 5 UID, 6 DTSTAMP, 7 DTSTART, 8 bad, 9 SUMMARY, 10 END,
    // 11 BEGIN:VEVENT, 12 UID, 13 DTSTAMP, 14 DTSTART (bad), 15 SUMMARY, 16 END, 17 BEGIN:VEVENT, 18 UID, 19 DTSTAMP,
    // 20 DTSTART (unknown TZID), 21 GEO (bad), 22 RRULE (bad), 23 END:VEVENT, 24 END:VTODO, 25 END:VCALENDAR.

    @Test("malformed lines are reported with their line number and skipped; the rest is read")
    func lenient() throws {
        let calendar = try ICalendarParser().parse(Self.sample)
        #expect(calendar.problems.map(\.line) == [8, 14, 11, 20, 21, 22, 24])
        #expect(calendar.problems[0].reason.contains("no ':'"))
        #expect(calendar.problems[2].reason.contains("no DTSTART"))
        #expect(calendar.problems[3].reason.contains("Mars/Olympus_Mons"))
        #expect(calendar.events.map(\.uid) == ["e1@test", "e3@test"])
        #expect(calendar.events[0].summary == "kept")
        #expect(calendar.events[1].start.zone == .floating, "an unknown TZID is read as floating time")
        #expect(calendar.events[1].geo == nil)
        #expect(calendar.events[1].recurrenceRule == nil)
    }

    @Test("strict mode throws the first problem, with its line number")
    func strict() {
        #expect {
            try ICalendarParser(strict: true).parse(Self.sample)
        } throws: { error in
            guard let error = error as? ICalendarError else { return false }
            return error.kind == .malformed && error.line == 8 && error.reason.contains("no ':'")
        }
    }

    @Test("BEGIN and END that do not match are problems; unknown and nested components are skipped")
    func components() throws {
        let data = ICalendarSamples.calendar([
            "BEGIN:VTIMEZONE", "TZID:Custom", "BEGIN:STANDARD", "DTSTART:19701025T030000", "TZOFFSETFROM:+0100", "TZOFFSETTO:+0100",
            "END:STANDARD", "END:VTIMEZONE",
            "BEGIN:VTODO", "UID:todo", "DTSTART:20260101T090000Z", "END:VTODO",
            "BEGIN:X-VENDOR", "BEGIN:VEVENT", "UID:hidden", "DTSTART:20260101T090000Z", "END:VEVENT", "END:X-VENDOR",
            "BEGIN:VEVENT", "UID:a", "DTSTART:20260101T090000Z",
            "BEGIN:VALARM", "TRIGGER:-PT15M", "ACTION:DISPLAY", "DESCRIPTION:alarm", "END:VALARM",
            "SUMMARY:with alarm", "END:VEVENT",
            "BEGIN:VEVENT", "UID:b", "DTSTART:20260101T090000Z", "BEGIN:VALARM", "END:VEVENT",
            "END:VJOURNAL",
        ])
        let calendar = try ICalendarParser().parse(data)
        #expect(calendar.events.map(\.uid) == ["a", "b"])
        #expect(calendar.events[0].summary == "with alarm")
        #expect(calendar.events[0].description == nil, "the alarm's DESCRIPTION is not the event's")
        #expect(calendar.problems.map(\.line) == [36, 37])
        #expect(calendar.problems[0].reason.contains("BEGIN:VALARM at line 35"))
        #expect(calendar.problems[1].reason.contains("END:VJOURNAL"))
    }

    @Test("an event left open at the end of the file is reported and skipped")
    func truncated() throws {
        let data = Data("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:a\r\nDTSTART:20260101T090000Z\r\n".utf8)
        let calendar = try ICalendarParser().parse(data)
        #expect(calendar.events.isEmpty)
        #expect(calendar.problems.contains { $0.line == 2 && $0.reason.contains("no END:VEVENT") })
    }

    @Test("DTEND before DTSTART, DTEND with DURATION and a DATE DTEND for a DATE-TIME start are reported")
    func inconsistentTimes() throws {
        let data = ICalendarSamples.calendar(
            ICalendarSamples.event(["DTSTART:20260105T090000Z", "DTEND:20260105T080000Z"], uid: "a")
                + ICalendarSamples.event(["DTSTART:20260105T090000Z", "DTEND:20260105T100000Z", "DURATION:PT2H"], uid: "b")
                + ICalendarSamples.event(["DTSTART:20260105T090000Z", "DTEND;VALUE=DATE:20260106"], uid: "c"))
        let calendar = try ICalendarParser().parse(data)
        #expect(calendar.problems.map(\.line) == [8, 15, 21])
        #expect(
            calendar.events.map(\.end) == [
                nil, ICalendarDateTime(year: 2026, month: 1, day: 5, hour: 10, minute: 0, second: 0, zone: .utc), nil,
            ])
        #expect(calendar.events[1].duration == nil)
    }

    @Test("of two VEVENTs with one UID the higher SEQUENCE is kept and the other reported")
    func duplicateUID() throws {
        let data = ICalendarSamples.calendar(
            ICalendarSamples.event(["DTSTART:20260105T090000Z", "SUMMARY:old", "SEQUENCE:1"], uid: "same")
                + ICalendarSamples.event(["DTSTART:20260105T090000Z", "SUMMARY:new", "SEQUENCE:2"], uid: "same"))
        let calendar = try ICalendarParser().parse(data)
        #expect(calendar.events.map(\.summary) == ["new"])
        #expect(calendar.problems.map(\.line) == [4])
    }
}

@Suite("iCalendar TZID resolution")
struct ICalendarTimeZoneTests {
    @Test(
        "IANA names in any case, Windows names, vendor prefixes and quotes resolve to the IANA zone",
        arguments: [
            ("America/New_York", "America/New_York"),
            ("america/new_york", "America/New_York"),
            ("EUROPE/BERLIN", "Europe/Berlin"),
            ("\"Europe/Paris\"", "Europe/Paris"),
            ("/mozilla.org/20050126_1/America/New_York", "America/New_York"),
            ("/softwarestudio.org/Olson_20011030_5/Europe/London", "Europe/London"),
            ("Pacific Standard Time", "America/Los_Angeles"),
            ("Taipei Standard Time", "Asia/Taipei"),
            ("W. Europe Standard Time", "Europe/Berlin"),
            ("Eastern Standard Time", "America/New_York"),
            ("China Standard Time", "Asia/Shanghai"),
            ("Tokyo Standard Time", "Asia/Tokyo"),
            ("GMT Standard Time", "Europe/London"),
            ("Central Standard Time", "America/Chicago"),
            ("Mountain Standard Time", "America/Denver"),
            ("Romance Standard Time", "Europe/Paris"),
            ("Central Europe Standard Time", "Europe/Budapest"),
            ("AUS Eastern Standard Time", "Australia/Sydney"),
            ("india standard time", "Asia/Calcutta"),
        ])
    func resolves(tzid: String, identifier: String) throws {
        let zone = try #require(ICalendarTimeZoneResolver.resolveUncached(tzid), "\(tzid)")
        let expected = try #require(TimeZone(identifier: identifier))
        // Compare behaviour, not spelling: aliases (Asia/Calcutta, Asia/Kolkata) are the same zone.
        for instant in [1_767_225_600.0, 1_783_000_000.0] {
            #expect(
                zone.secondsFromGMT(for: Date(timeIntervalSince1970: instant))
                    == expected.secondsFromGMT(for: Date(timeIntervalSince1970: instant)),
                "\(tzid)")
        }
    }

    @Test("UTC spelled as a Windows or IANA name is UTC")
    func utc() throws {
        for tzid in ["UTC", "Etc/UTC", "utc", "GMT"] {
            let zone = try #require(ICalendarTimeZoneResolver.resolveUncached(tzid), "\(tzid)")
            #expect(zone.secondsFromGMT(for: Date(timeIntervalSince1970: 1_783_000_000)) == 0)
        }
    }

    @Test("every Windows zone in the table resolves on this machine")
    func windowsTable() {
        for (windowsName, identifier) in ICalendarWindowsTimeZones.ianaIdentifiers {
            #expect(TimeZone(identifier: identifier) != nil, "\(windowsName) → \(identifier)")
        }
    }

    @Test("an unknown TZID resolves to nothing")
    func unknown() {
        #expect(ICalendarTimeZoneResolver.resolveUncached("Customized Time Zone") == nil)
        #expect(ICalendarTimeZoneResolver.resolveUncached("") == nil)
    }

    /// A VTIMEZONE keeping Central European time (the EU's rules), under `tzid`.
    static func centralEuropean(_ tzid: String) -> [String] {
        ["BEGIN:VTIMEZONE", "TZID:\(tzid)",
         "BEGIN:STANDARD", "DTSTART:19701025T030000", "TZOFFSETFROM:+0200", "TZOFFSETTO:+0100", "RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU", "END:STANDARD",
         "BEGIN:DAYLIGHT", "DTSTART:19700329T020000", "TZOFFSETFROM:+0100", "TZOFFSETTO:+0200", "RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU", "END:DAYLIGHT",
         "END:VTIMEZONE"]
    }

    static func event(_ uid: String, _ start: String) -> [String] { ["BEGIN:VEVENT", "UID:\(uid)", start, "END:VEVENT"] }

    @Test("a TZID that a VTIMEZONE of the file defines means what the definition says (RFC 5545), not the zone its name suggests")
    func definedZone() throws {
        let data = ICalendarSamples.calendar(Self.centralEuropean("Europe/lisbon") + Self.centralEuropean("Europe/Paris")
            + Self.event("winter", "DTSTART;TZID=Europe/lisbon:20260115T100000") + Self.event("summer", "DTSTART;TZID=Europe/lisbon:20260715T100000")
            + Self.event("lisbon", "DTSTART;TZID=Europe/Lisbon:20260715T100000") + Self.event("paris", "DTSTART;TZID=Europe/Paris:20260715T100000"))
        let calendar = try ICalendarParser().parse(data)
        #expect(calendar.problems.isEmpty, "\(calendar.problems)")
        let utc = try #require(TimeZone(identifier: "UTC"))
        let starts = Dictionary(uniqueKeysWithValues: calendar.events.map { ($0.uid, $0.start.instant(floatingTimeZone: utc)) })
        #expect(starts["winter"] == ICalendarSamples.instant("2026-01-15T09:00:00Z"), "CET, not Lisbon's WET")
        #expect(starts["summer"] == ICalendarSamples.instant("2026-07-15T08:00:00Z"), "CEST, not Lisbon's WEST")
        #expect(starts["lisbon"] == ICalendarSamples.instant("2026-07-15T09:00:00Z"), "a TZID no VTIMEZONE defines: the IANA zone of its name")
        #expect(starts["paris"] == ICalendarSamples.instant("2026-07-15T08:00:00Z"))
        if case .zoned(let zone) = calendar.events.first(where: { $0.uid == "paris" })?.start.zone {
            #expect(zone.identifier == "Europe/Paris", "a definition that agrees with its name keeps the named zone")
        } else {
            Issue.record("Europe/Paris is not zoned")
        }
    }

    @Test("a VTIMEZONE whose offsets no zone keeps, or that is incomplete, is reported; its TZID then means what its name means")
    func undefinableZone() throws {
        let odd = ["BEGIN:VTIMEZONE", "TZID:America/New_York", "BEGIN:STANDARD", "DTSTART:19700101T000000", "TZOFFSETFROM:+0117",
                   "TZOFFSETTO:+0117", "END:STANDARD", "END:VTIMEZONE"]
        let incomplete = ["BEGIN:VTIMEZONE", "TZID:Broken", "BEGIN:DAYLIGHT", "DTSTART:19700329T020000", "TZOFFSETTO:+99", "END:DAYLIGHT", "END:VTIMEZONE"]
        // A rule that would give an onset every second for 68 years is no zone's: refused, not expanded.
        let busy = ["BEGIN:VTIMEZONE", "TZID:Busy", "BEGIN:STANDARD", "DTSTART:19700101T000000", "TZOFFSETFROM:+0100", "TZOFFSETTO:+0100",
                    "RRULE:FREQ=SECONDLY", "END:STANDARD", "END:VTIMEZONE"]
        let data = ICalendarSamples.calendar(odd + incomplete + busy + Self.event("odd", "DTSTART;TZID=America/New_York:20260115T100000"))
        let calendar = try ICalendarParser().parse(data)
        let reasons = calendar.problems.map(\.reason)
        #expect(reasons.contains { $0.contains("VTIMEZONE America/New_York keeps offsets no known time zone keeps") }, "\(reasons)")
        #expect(reasons.contains { $0.contains("TZOFFSETTO '+99' is not an offset") }, "\(reasons)")
        #expect(reasons.contains { $0.contains("needs DTSTART, TZOFFSETFROM and TZOFFSETTO") }, "\(reasons)")
        #expect(reasons.contains { $0.contains("RRULE must be FREQ=YEARLY") }, "\(reasons)")
        let utc = try #require(TimeZone(identifier: "UTC"))
        #expect(calendar.events.first?.start.instant(floatingTimeZone: utc) == ICalendarSamples.instant("2026-01-15T15:00:00Z"))
    }
}

@Suite("iCalendar recurrence")
struct ICalendarRecurrenceTests {
    static let from = ICalendarSamples.instant("2026-01-01T00:00:00Z")
    static let to = ICalendarSamples.instant("2027-01-01T00:00:00Z")

    static func event(_ lines: [String]) throws -> ICalendarEvent {
        let calendar = try ICalendarParser(strict: true).parse(ICalendarSamples.calendar(ICalendarSamples.event(lines)))
        return try #require(calendar.events.first)
    }

    @Test("FREQ=SECONDLY without an end stops at the occurrence limit, quickly")
    func endlessSecondly() throws {
        let event = try Self.event(["DTSTART:20260101T000000Z", "RRULE:FREQ=SECONDLY"])
        let clock = ContinuousClock()
        let started = clock.now
        let expansion = event.expand(from: Self.from, to: Self.to, defaultTimeZone: ICalendarSamples.utc, limit: .max)
        #expect(clock.now - started < .seconds(2))
        #expect(expansion.occurrences.count == ICalendarLimits().maxOccurrencesPerEvent)
        #expect(expansion.truncation == .occurrenceLimit)
        #expect(expansion.occurrences.last.map { ICalendarSamples.iso($0.start) } == "2026-01-01T02:46:39Z")
    }

    @Test(
        "a rule that never matches (February 30th) ends without looping",
        arguments: [
            "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "RRULE:FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30",
            "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30", "RRULE:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",
        ])
    func neverMatching(rule: String) throws {
        let event = try Self.event(["DTSTART:20260228T090000Z", rule])
        let clock = ContinuousClock()
        let started = clock.now
        let expansion = event.expand(
            from: Self.from, to: ICalendarSamples.instant("2100-01-01T00:00:00Z"), defaultTimeZone: ICalendarSamples.utc,
            limit: 100)
        #expect(clock.now - started < .seconds(2))
        #expect(expansion.occurrences.map { ICalendarSamples.iso($0.start) } == ["2026-02-28T09:00:00Z"], "only DTSTART")
    }

    @Test("COUNT of a billion is bounded by the iteration limit")
    func hugeCount() throws {
        let event = try Self.event(["DTSTART:20000101T090000Z", "RRULE:FREQ=MINUTELY;COUNT=1000000000"])
        let expansion = event.expand(from: Self.from, to: Self.to, defaultTimeZone: ICalendarSamples.utc, limit: 100)
        #expect(expansion.occurrences.isEmpty)
        #expect(expansion.truncation == .iterationLimit)
    }

    @Test("a rule without COUNT that began long ago is expanded from the window, not from DTSTART")
    func fastForward() throws {
        let event = try Self.event(["DTSTART;TZID=Europe/Berlin:19000101T090000", "RRULE:FREQ=DAILY"])
        let expansion = event.expand(
            from: Self.from, to: ICalendarSamples.instant("2026-01-04T00:00:00Z"), defaultTimeZone: ICalendarSamples.utc,
            limit: 100)
        #expect(expansion.truncation == nil)
        #expect(
            expansion.occurrences.map { ICalendarSamples.iso($0.start) } == [
                "2026-01-01T08:00:00Z", "2026-01-02T08:00:00Z", "2026-01-03T08:00:00Z",
            ])
    }

    @Test("a calendar of rules that never match is bounded as a whole by maxCalendarRecurrenceIterations")
    func calendarBudget() throws {
        var lines: [String] = []
        for index in 0..<200 {
            lines += ICalendarSamples.event(
                ["DTSTART:20260228T090000Z", "RRULE:FREQ=WEEKLY;BYDAY=MO;BYMONTHDAY=31;BYMONTH=2"], uid: "e\(index)")
        }
        let calendar = try ICalendarParser(strict: true).parse(ICalendarSamples.calendar(lines))
        let limits = ICalendarLimits(maxRecurrenceIterations: 10_000, maxCalendarRecurrenceIterations: 50_000)
        let expansions = calendar.expandAll(
            from: Self.from, to: Self.to, defaultTimeZone: ICalendarSamples.utc, limitPerEvent: 100, limits: limits)
        #expect(expansions.count == 200)
        #expect(expansions.reduce(0) { $0 + $1.steps } <= 50_000)
        #expect(expansions.allSatisfy { $0.truncation == .iterationLimit })
        #expect(expansions.allSatisfy { $0.occurrences.count == 1 }, "DTSTART is an occurrence whatever the budget")
    }

    @Test("the caller's limit caps the occurrences")
    func callerLimit() throws {
        let event = try Self.event(["DTSTART:20260101T090000Z", "RRULE:FREQ=DAILY"])
        let expansion = event.expand(from: Self.from, to: Self.to, defaultTimeZone: ICalendarSamples.utc, limit: 5)
        #expect(expansion.occurrences.count == 5)
        #expect(expansion.truncation == .occurrenceLimit)
    }

    @Test("an all-day EXDATE given as a DATE removes that day; overrides report their master's instant as recurrenceID")
    func exdateDateAndOverride() throws {
        let data = ICalendarSamples.calendar(
            ICalendarSamples.event([
                "DTSTART;VALUE=DATE:20260105", "RRULE:FREQ=DAILY;COUNT=4", "EXDATE;VALUE=DATE:20260106", "SUMMARY:master",
            ])
                + ICalendarSamples.event([
                    "RECURRENCE-ID;VALUE=DATE:20260107", "DTSTART;VALUE=DATE:20260110", "DTEND;VALUE=DATE:20260112",
                    "SUMMARY:moved",
                ]))
        let calendar = try ICalendarParser(strict: true).parse(data)
        #expect(calendar.events.count == 1)
        let occurrences = try #require(calendar.events.first).occurrences(
            from: Self.from, to: Self.to, defaultTimeZone: ICalendarSamples.utc,
            limit: 10)
        #expect(
            occurrences.map { ICalendarSamples.iso($0.start) } == ["2026-01-05T00:00:00Z", "2026-01-08T00:00:00Z", "2026-01-10T00:00:00Z"])
        #expect(occurrences.allSatisfy { $0.allDay })
        #expect(occurrences[2].override?.summary == "moved")
        #expect(ICalendarSamples.iso(occurrences[2].recurrenceID) == "2026-01-07T00:00:00Z")
        #expect(ICalendarSamples.iso(occurrences[2].end) == "2026-01-12T00:00:00Z")
    }

    @Test("DURATION days are wall-clock days: P1D from 09:00 ends at 09:00 the next day across a DST change")
    func nominalDuration() throws {
        let event = try Self.event(["DTSTART;TZID=America/New_York:20260307T090000", "DURATION:P1D"])
        let occurrence = try #require(
            event.occurrences(from: Self.from, to: Self.to, defaultTimeZone: ICalendarSamples.utc, limit: 1).first)
        #expect(occurrence.end.timeIntervalSince(occurrence.start) == 23 * 3600)
    }
}

@Suite("iCalendar limits")
struct ICalendarLimitTests {
    @Test("a 100 MB line is skipped as a problem without holding it, and the events around it are read")
    func hugeLine() throws {
        let calendar = try ICalendarSamples.withTemporaryFile({ handle in
            try handle.write(contentsOf: Data("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:a\r\nDTSTART:20260101T090000Z\r\nDESCRIPTION:".utf8))
            let chunk = Data(repeating: UInt8(ascii: "x"), count: 1 << 20)
            for _ in 0..<100 { try handle.write(contentsOf: chunk) }
            try handle.write(contentsOf: Data("\r\nSUMMARY:after\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n".utf8))
        }) { url in
            try ICalendarParser().parse(contentsOf: url)
        }
        #expect(calendar.problems.count == 1)
        #expect(calendar.problems.first?.line == 5)
        #expect(calendar.problems.first?.reason.contains("DESCRIPTION content line longer than") == true)
        #expect(calendar.events.first?.summary == "after")
        #expect(calendar.events.first?.description == nil)
    }

    @Test("a line of exactly the limit is kept and one byte more is not")
    func lineLimitEdge() throws {
        let limits = ICalendarLimits(maxContentLineBytes: 40)
        let exact = "SUMMARY:" + String(repeating: "a", count: 32)
        let over = "SUMMARY:" + String(repeating: "a", count: 33)
        let keep = try ICalendarParser(limits: limits).parse(
            ICalendarSamples.calendar(ICalendarSamples.event(["DTSTART:20260101T090000Z", exact])))
        #expect(keep.events.first?.summary?.count == 32)
        let skip = try ICalendarParser(limits: limits).parse(
            ICalendarSamples.calendar(ICalendarSamples.event(["DTSTART:20260101T090000Z", over])))
        #expect(skip.events.first?.summary == nil)
        #expect(skip.problems.count == 1)
    }

    @Test("a million VEVENTs stop at the VEVENT limit with an error naming it, without reading the rest")
    func tooManyEvents() throws {
        let limits = ICalendarLimits(maxEvents: 10_000)
        let clock = ContinuousClock()
        var elapsed = Duration.zero
        try ICalendarSamples.withTemporaryFile({ handle in
            try handle.write(contentsOf: Data("BEGIN:VCALENDAR\r\n".utf8))
            let block = Data(String(repeating: "BEGIN:VEVENT\r\nUID:x\r\nDTSTART:20260101T090000Z\r\nEND:VEVENT\r\n", count: 10_000).utf8)
            for _ in 0..<100 { try handle.write(contentsOf: block) }
            try handle.write(contentsOf: Data("END:VCALENDAR\r\n".utf8))
        }) { url in
            let started = clock.now
            #expect {
                try ICalendarParser(limits: limits).parse(contentsOf: url)
            } throws: { error in
                guard let error = error as? ICalendarError else { return false }
                return error.kind == .limitExceeded && error.reason.contains("maxEvents") && error.line == 2 + 10_000 * 4
            }
            elapsed = clock.now - started
        }
        #expect(elapsed < .seconds(5))
    }

    @Test("the default VEVENT limit is 100,000")
    func defaultEventLimit() throws {
        var text = "BEGIN:VCALENDAR\r\n"
        text += String(repeating: "BEGIN:VEVENT\r\nEND:VEVENT\r\n", count: 100_001)
        // Events without UID are problems; allow them all, so that only the VEVENT limit can stop the parse.
        let limits = ICalendarLimits(maxProblems: 200_000)
        #expect {
            try ICalendarParser(limits: limits).parse(Data(text.utf8))
        } throws: { error in
            (error as? ICalendarError)?.kind == .limitExceeded && (error as? ICalendarError)?.line == 2 + 100_000 * 2
        }
    }

    @Test("components nested more than 16 deep stop the parse")
    func deepNesting() {
        let lines = ["BEGIN:VCALENDAR"] + (1..<17).map { "BEGIN:X-LEVEL\($0)" }
        #expect {
            try ICalendarParser().parse(Data(lines.joined(separator: "\r\n").utf8))
        } throws: { error in
            guard let error = error as? ICalendarError else { return false }
            return error.kind == .limitExceeded && error.line == 17 && error.reason.contains("maxNestingDepth")
        }
        let fine =
            ["BEGIN:VCALENDAR"] + (1..<16).map { "BEGIN:X-LEVEL\($0)" } + (1..<16).reversed().map { "END:X-LEVEL\($0)" } + ["END:VCALENDAR"]
        #expect(throws: Never.self) { try ICalendarParser().parse(Data(fine.joined(separator: "\r\n").utf8)) }
    }

    @Test("input that is not iCalendar stops after maxProblems problems")
    func notICalendar() {
        let html = String(repeating: "<p>not a calendar</p>\n", count: 5000)
        #expect {
            try ICalendarParser().parse(Data(html.utf8))
        } throws: { error in
            (error as? ICalendarError)?.kind == .limitExceeded
        }
    }
}

@Suite("iCalendar writer")
struct ICalendarWriterTests {
    static let zone = TimeZone(identifier: "America/New_York")!

    static let events: [ICalendarExportEvent] = [
        ICalendarExportEvent(
            uid: "concert-1@gateway", summary: "Concert: Bach; Händel, and more — 東京の夜 " + String(repeating: "♪", count: 40),
            description: "Line one\nLine two, with a \\ backslash", location: "Hall 1, Main St.", url: "https://example.com/c?a=1,2",
            categories: ["Music", "Jazz, Blues"], geo: ICalendarGeo(latitude: 40.7128, longitude: -0.00001), status: "confirmed",
            occurrences: [
                .init(
                    start: ICalendarSamples.instant("2026-12-01T19:00:00Z"), end: ICalendarSamples.instant("2026-12-01T21:00:00Z"),
                    allDay: false),
                .init(
                    start: ICalendarSamples.instant("2026-12-03T19:00:00Z"), end: ICalendarSamples.instant("2026-12-03T22:30:00Z"),
                    allDay: false),
                .init(
                    start: ICalendarSamples.instant("2026-11-28T18:00:00Z"), end: ICalendarSamples.instant("2026-11-28T18:45:00Z"),
                    allDay: false),
            ]),
        ICalendarExportEvent(
            uid: "fair@gateway", summary: "Fair",
            occurrences: [
                // Midnights in New York; the second spans two days; the third lasts one, like the first.
                .init(
                    start: ICalendarSamples.instant("2026-03-07T05:00:00Z"), end: ICalendarSamples.instant("2026-03-08T05:00:00Z"),
                    allDay: true),
                .init(
                    start: ICalendarSamples.instant("2026-03-08T05:00:00Z"), end: ICalendarSamples.instant("2026-03-10T04:00:00Z"),
                    allDay: true),
                .init(
                    start: ICalendarSamples.instant("2026-03-14T04:00:00Z"), end: ICalendarSamples.instant("2026-03-15T04:00:00Z"),
                    allDay: true),
                .init(
                    start: ICalendarSamples.instant("2026-03-20T15:00:00Z"), end: ICalendarSamples.instant("2026-03-20T16:00:00Z"),
                    allDay: false),
            ]),
        ICalendarExportEvent(
            uid: "talk@gateway", summary: "Talk",
            occurrences: [
                .init(
                    start: ICalendarSamples.instant("2026-05-01T15:00:00Z"), end: ICalendarSamples.instant("2026-05-01T16:00:00Z"),
                    allDay: false),
                .init(
                    start: ICalendarSamples.instant("2026-05-02T04:00:00Z"), end: ICalendarSamples.instant("2026-05-03T04:00:00Z"),
                    allDay: true),
                .init(
                    start: ICalendarSamples.instant("2026-05-04T04:00:00Z"), end: ICalendarSamples.instant("2026-05-07T04:00:00Z"),
                    allDay: true),
            ]),
    ]

    static func write() -> String {
        ICalendarWriter(calendarName: "Gateway events", timeZone: zone, timestamp: ICalendarSamples.instant("2026-01-01T00:00:00Z")).write(
            events)
    }

    @Test("output is valid RFC 5545: CRLF, lines of at most 75 octets folded on character boundaries, required properties")
    func format() throws {
        let text = Self.write()
        #expect(text.hasPrefix("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:"))
        #expect(text.contains("\r\nCALSCALE:GREGORIAN\r\n"))
        #expect(text.contains("\r\nX-WR-CALNAME:Gateway events\r\n"))
        #expect(text.contains("\r\nX-WR-TIMEZONE:America/New_York\r\n"))
        #expect(text.hasSuffix("END:VCALENDAR\r\n"))
        let bytes = Array(text.utf8)
        var lines: [[UInt8]] = []
        var current: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x0D {
                #expect(index + 1 < bytes.count && bytes[index + 1] == 0x0A, "every CR is followed by LF")
                lines.append(current)
                current = []
                index += 2
                continue
            }
            #expect(bytes[index] != 0x0A, "no bare LF")
            current.append(bytes[index])
            index += 1
        }
        #expect(lines.allSatisfy { $0.count <= 75 })
        #expect(lines.allSatisfy { String(validating: $0, as: UTF8.self) != nil }, "no line starts or ends inside a UTF-8 sequence")
        #expect(lines.contains { $0.first == 0x20 }, "the long summary was folded")
        let unfolded = text.replacingOccurrences(of: "\r\n ", with: "")
        #expect(unfolded.contains(#"DESCRIPTION:Line one\nLine two\, with a \\ backslash"#))
        #expect(unfolded.contains(#"CATEGORIES:Music,Jazz\, Blues"#))
        #expect(unfolded.contains("GEO:40.7128;-0.00001"))
        #expect(unfolded.contains("RDATE;VALUE=PERIOD:20261201T190000Z/20261201T210000Z,20261203T190000Z/20261203T223000Z"))
        let vevents = unfolded.components(separatedBy: "BEGIN:VEVENT").count - 1
        #expect(unfolded.components(separatedBy: "DTSTAMP:20260101T000000Z").count - 1 == vevents)
    }

    @Test("parsing what was written gives back the same events and occurrences")
    func roundTrip() throws {
        let calendar = try ICalendarParser(strict: true).parse(Data(Self.write().utf8))
        #expect(calendar.name == "Gateway events")
        #expect(calendar.events.count == Self.events.count)
        for (written, read) in zip(Self.events, calendar.events) {
            #expect(read.uid == written.uid)
            #expect(read.summary == written.summary)
            #expect(read.description == written.description)
            #expect(read.location == written.location)
            #expect(read.url == written.url)
            #expect(read.categories == written.categories)
            #expect(read.geo == written.geo)
            #expect(read.status == written.status?.uppercased())
            let occurrences = read.occurrences(
                from: ICalendarSamples.instant("2020-01-01T00:00:00Z"), to: ICalendarSamples.instant("2030-01-01T00:00:00Z"),
                defaultTimeZone: ICalendarSamples.utc, limit: 1000)
            let expected = written.occurrences.sorted { $0.start < $1.start }
            #expect(occurrences.map(\.start) == expected.map(\.start), "\(written.uid)")
            #expect(occurrences.map(\.end) == expected.map(\.end), "\(written.uid)")
            #expect(occurrences.map(\.allDay) == expected.map(\.allDay), "\(written.uid)")
            for occurrence in occurrences where occurrence.override != nil {
                #expect(occurrence.override?.summary == written.summary)
            }
        }
    }

    @Test("folding splits at 75 octets and never inside a character", arguments: [1, 2, 3, 4])
    func folding(bytesPerCharacter: Int) {
        let character = ["a", "é", "東", "😀"][bytesPerCharacter - 1]
        let content = "SUMMARY:" + String(repeating: character, count: 200)
        let folded = ICalendarWriter.fold(content)
        let lines = folded.components(separatedBy: "\r\n")
        #expect(lines.allSatisfy { $0.utf8.count <= 75 })
        #expect(lines.dropFirst().allSatisfy { $0.hasPrefix(" ") })
        #expect(lines.enumerated().map { $0.offset == 0 ? $0.element : String($0.element.dropFirst()) }.joined() == content)
    }

    @Test("FLOAT values are written without exponents and read back exactly")
    func floats() {
        for value in [0.0, 1.5, -0.00001, 1e-7, 40.712776, -122.082932, 180.0, 12.3e-5] {
            let text = ICalendarWriter.floatText(value)
            #expect(!text.contains("e"), "\(value) → \(text)")
            #expect(Double(text) == value, "\(value) → \(text)")
        }
    }
}

@Suite("iCalendar real data")
struct ICalendarRealDataTests {
    /// The project's copy of the calendar (data/demo, with its provenance in data/demo/README.md).
    static let holidays = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "../../data/demo/USHolidays.ics"
    )
    .standardizedFileURL

    @Test("the US holidays calendar (723 all-day VEVENTs) parses with no problems")
    func usHolidays() throws {
        let calendar = try ICalendarParser(strict: true).parse(contentsOf: Self.holidays)
        #expect(calendar.problems.isEmpty)
        #expect(calendar.events.count == 723)
        #expect(calendar.events.allSatisfy { $0.start.isDate })
        let mlk = try #require(calendar.events.first { $0.uid == "20000117-793b20fd@bokeh.org" })
        #expect(mlk.summary == "Birthday of Martin Luther King, Jr. (US-OPM)")
        let occurrences = mlk.occurrences(
            from: ICalendarSamples.instant("2000-01-01T00:00:00Z"), to: ICalendarSamples.instant("2001-01-01T00:00:00Z"),
            defaultTimeZone: TimeZone(identifier: "America/New_York")!, limit: 10)
        #expect(occurrences.map { ICalendarSamples.iso($0.start) } == ["2000-01-17T05:00:00Z"])
        #expect(occurrences.first?.allDay == true)
    }
}
