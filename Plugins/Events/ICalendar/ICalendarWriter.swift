import Foundation

/// An event to export: its fields and the occurrences it has, already expanded.
public struct ICalendarExportEvent: Sendable, Hashable {
    /// One occurrence to export.
    public struct Occurrence: Sendable, Hashable {
        public var start: Date
        public var end: Date
        /// Written as DATE values: `start` and `end` should be midnights in the writer's `timeZone`.
        public var allDay: Bool

        public init(start: Date, end: Date, allDay: Bool) {
            self.start = start
            self.end = end
            self.allDay = allDay
        }
    }

    public var uid: String
    public var summary: String
    public var description: String?
    public var location: String?
    public var url: String?
    public var categories: [String]
    public var geo: ICalendarGeo?
    public var status: String?
    public var occurrences: [Occurrence]

    public init(
        uid: String, summary: String, description: String? = nil, location: String? = nil, url: String? = nil, categories: [String] = [],
        geo: ICalendarGeo? = nil, status: String? = nil, occurrences: [Occurrence]
    ) {
        self.uid = uid
        self.summary = summary
        self.description = description
        self.location = location
        self.url = url
        self.categories = categories
        self.geo = geo
        self.status = status
        self.occurrences = occurrences
    }
}

/// Writes events as an RFC 5545 calendar that any calendar application can subscribe to.
///
/// Each event becomes one VEVENT: its first occurrence is DTSTART and DTEND (UTC, or DATE for an all-day
/// occurrence), and every other occurrence an RDATE, so occurrences need not follow any rule. Timed
/// occurrences are `RDATE;VALUE=PERIOD` values, each keeping its own length. All-day occurrences as long
/// as the first are `RDATE;VALUE=DATE` values; one of another length (or an all-day occurrence among
/// timed ones, when longer than a day) is an RDATE plus an override VEVENT with that RECURRENCE-ID and
/// its own DTSTART and DTEND, which is how RFC 5545 spells an instance that differs from its siblings.
///
/// Output uses CRLF line ends, escapes TEXT values and folds lines at 75 octets without splitting a
/// UTF-8 sequence. Reading the output with `ICalendarParser` and expanding each event over a window
/// that covers the occurrences gives back the same fields and occurrences (occurrences form a set: two
/// that start at the same instant are written once).
public struct ICalendarWriter: Sendable {
    /// PRODID, naming the program that wrote the calendar.
    public var productIdentifier: String
    /// Written as X-WR-CALNAME when set.
    public var calendarName: String?
    /// The zone all-day occurrences are dates in.
    public var timeZone: TimeZone
    /// Whether `timeZone` is written as X-WR-TIMEZONE, so readers (this parser included) read the dates
    /// in the same zone.
    public var writesTimeZone: Bool
    /// DTSTAMP of every VEVENT: when the calendar was produced.
    public var timestamp: Date

    /// How many RDATE values go on one line before another RDATE line starts.
    static let valuesPerLine = 8

    public init(
        productIdentifier: String = "-//Gateway//Events Plugin//EN", calendarName: String? = nil, timeZone: TimeZone,
        writesTimeZone: Bool = true, timestamp: Date = Date()
    ) {
        self.productIdentifier = productIdentifier
        self.calendarName = calendarName
        self.timeZone = timeZone
        self.writesTimeZone = writesTimeZone
        self.timestamp = timestamp
    }

    /// The calendar as text. Events without occurrences are left out (a VEVENT needs a DTSTART).
    public func write(_ events: [ICalendarExportEvent]) -> String {
        var output = ""
        line("BEGIN:VCALENDAR", to: &output)
        line("VERSION:2.0", to: &output)
        line("PRODID:" + ICalendarText.escape(productIdentifier), to: &output)
        line("CALSCALE:GREGORIAN", to: &output)
        if let calendarName { line("X-WR-CALNAME:" + ICalendarText.escape(calendarName), to: &output) }
        if writesTimeZone { line("X-WR-TIMEZONE:" + timeZone.identifier, to: &output) }
        for event in events {
            write(event, to: &output)
        }
        line("END:VCALENDAR", to: &output)
        return output
    }

    /// The calendar as UTF-8 bytes.
    public func data(_ events: [ICalendarExportEvent]) -> Data {
        Data(write(events).utf8)
    }

    private func write(_ event: ICalendarExportEvent, to output: inout String) {
        var seenStarts: Set<Date> = []
        let occurrences = event.occurrences.sorted { ($0.start, $0.end) < ($1.start, $1.end) }.filter {
            seenStarts.insert($0.start).inserted
        }
        guard let first = occurrences.first else { return }
        let clock = ICalendarZoneClock(timeZone)
        let stamp = utcText(timestamp)
        let firstDays = first.allDay ? dayCount(first, clock: clock) : 0

        var periods: [String] = []
        var dates: [String] = []
        var odd: [ICalendarExportEvent.Occurrence] = []
        for occurrence in occurrences.dropFirst() {
            if !occurrence.allDay {
                periods.append(utcText(occurrence.start) + "/" + utcText(occurrence.end))
            } else if first.allDay ? dayCount(occurrence, clock: clock) == firstDays : dayCount(occurrence, clock: clock) == 1 {
                dates.append(dateText(occurrence.start, clock: clock))
            } else {
                dates.append(dateText(occurrence.start, clock: clock))
                odd.append(occurrence)
            }
        }

        line("BEGIN:VEVENT", to: &output)
        line("UID:" + ICalendarText.escape(event.uid), to: &output)
        line("DTSTAMP:" + stamp, to: &output)
        writeTimes(first, clock: clock, to: &output)
        for batch in stride(from: 0, to: periods.count, by: Self.valuesPerLine) {
            line(
                "RDATE;VALUE=PERIOD:" + periods[batch..<min(batch + Self.valuesPerLine, periods.count)].joined(separator: ","), to: &output)
        }
        for batch in stride(from: 0, to: dates.count, by: Self.valuesPerLine) {
            line("RDATE;VALUE=DATE:" + dates[batch..<min(batch + Self.valuesPerLine, dates.count)].joined(separator: ","), to: &output)
        }
        writeFields(event, to: &output)
        line("END:VEVENT", to: &output)

        for occurrence in odd {
            line("BEGIN:VEVENT", to: &output)
            line("UID:" + ICalendarText.escape(event.uid), to: &output)
            line("DTSTAMP:" + stamp, to: &output)
            line("RECURRENCE-ID;VALUE=DATE:" + dateText(occurrence.start, clock: clock), to: &output)
            writeTimes(occurrence, clock: clock, to: &output)
            writeFields(event, to: &output)
            line("END:VEVENT", to: &output)
        }
    }

    private func writeTimes(_ occurrence: ICalendarExportEvent.Occurrence, clock: ICalendarZoneClock, to output: inout String) {
        if occurrence.allDay {
            line("DTSTART;VALUE=DATE:" + dateText(occurrence.start, clock: clock), to: &output)
            line("DTEND;VALUE=DATE:" + dateText(occurrence.end, clock: clock), to: &output)
        } else {
            line("DTSTART:" + utcText(occurrence.start), to: &output)
            line("DTEND:" + utcText(occurrence.end), to: &output)
        }
    }

    private func writeFields(_ event: ICalendarExportEvent, to output: inout String) {
        line("SUMMARY:" + ICalendarText.escape(event.summary), to: &output)
        if let description = event.description { line("DESCRIPTION:" + ICalendarText.escape(description), to: &output) }
        if let location = event.location { line("LOCATION:" + ICalendarText.escape(location), to: &output) }
        if let url = event.url {
            // A URI has no escapes; control characters cannot be in one and would break the line.
            line("URL:" + String(url.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }), to: &output)
        }
        if !event.categories.isEmpty {
            line("CATEGORIES:" + event.categories.map(ICalendarText.escape).joined(separator: ","), to: &output)
        }
        if let geo = event.geo {
            line("GEO:" + Self.floatText(geo.latitude) + ";" + Self.floatText(geo.longitude), to: &output)
        }
        if let status = event.status { line("STATUS:" + ICalendarText.escape(status.uppercased()), to: &output) }
    }

    /// Days an all-day occurrence spans on the writer's calendar (at least one).
    private func dayCount(_ occurrence: ICalendarExportEvent.Occurrence, clock: ICalendarZoneClock) -> Int {
        max(1, localDay(occurrence.end, clock: clock) - localDay(occurrence.start, clock: clock))
    }

    private func localDay(_ date: Date, clock: ICalendarZoneClock) -> Int {
        CivilCalendar.dayNumber(wallClock: clock.wallClock(instant: Self.seconds(date)))
    }

    private func dateText(_ date: Date, clock: ICalendarZoneClock) -> String {
        let day = CivilCalendar.date(dayNumber: localDay(date, clock: clock))
        return Self.digits(day.year, 4) + Self.digits(day.month, 2) + Self.digits(day.day, 2)
    }

    private func utcText(_ date: Date) -> String {
        let seconds = Self.seconds(date)
        let dayNumber = CivilCalendar.dayNumber(wallClock: seconds)
        let day = CivilCalendar.date(dayNumber: dayNumber)
        let secondOfDay = seconds - dayNumber * CivilCalendar.secondsPerDay
        return Self.digits(day.year, 4) + Self.digits(day.month, 2) + Self.digits(day.day, 2) + "T" + Self.digits(secondOfDay / 3600, 2)
            + Self.digits(secondOfDay % 3600 / 60, 2) + Self.digits(secondOfDay % 60, 2) + "Z"
    }

    /// Whole seconds: iCalendar has no fractions of a second.
    private static func seconds(_ date: Date) -> Int {
        CivilCalendar.clampedSeconds(date.timeIntervalSince1970)
    }

    private static func digits(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    /// A FLOAT in plain decimal notation (RFC 5545 has no exponents), with the fewest digits that read
    /// back as the same `Double`.
    static func floatText(_ value: Double) -> String {
        let text = "\(value)"
        guard let exponentIndex = text.firstIndex(where: { $0 == "e" || $0 == "E" }),
            let exponent = Int(text[text.index(after: exponentIndex)...])
        else {
            return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
        }
        let mantissa = text[..<exponentIndex]
        let negative = mantissa.hasPrefix("-")
        let digits = mantissa.filter(\.isNumber)
        let pointPosition =
            (mantissa.firstIndex(of: ".").map { mantissa.distance(from: mantissa.startIndex, to: $0) } ?? mantissa.count)
            - (negative ? 1 : 0) + exponent
        var plain: String
        if pointPosition <= 0 {
            plain = "0." + String(repeating: "0", count: -pointPosition) + digits
        } else if pointPosition >= digits.count {
            plain = digits + String(repeating: "0", count: pointPosition - digits.count)
        } else {
            plain = String(digits.prefix(pointPosition)) + "." + String(digits.dropFirst(pointPosition))
        }
        while plain.contains("."), plain.hasSuffix("0") { plain.removeLast() }
        if plain.hasSuffix(".") { plain.removeLast() }
        return (negative ? "-" : "") + plain
    }

    /// Appends a content line, folded so that no line exceeds 75 octets (RFC 5545 §3.1): continuation
    /// lines start with a space, and a fold never falls inside a UTF-8 sequence.
    private func line(_ content: String, to output: inout String) {
        output += Self.fold(content)
        output += "\r\n"
    }

    static func fold(_ content: String) -> String {
        let bytes = Array(content.utf8)
        guard bytes.count > 75 else { return content }
        var pieces: [String] = []
        var start = 0
        var limit = 75
        while start < bytes.count {
            var end = min(start + limit, bytes.count)
            // Back up over continuation bytes (10xxxxxx) so the piece ends on a character boundary.
            while end < bytes.count, end > start + 1, bytes[end] & 0xC0 == 0x80 { end -= 1 }
            pieces.append(String(decoding: bytes[start..<end], as: UTF8.self))
            start = end
            limit = 74
        }
        return pieces.joined(separator: "\r\n ")
    }
}
