import Foundation

/// Collects the properties of one VEVENT while it is read, and checks them once its END is reached
/// (properties may come in any order, so DTEND can only be checked against DTSTART then).
final class ICalendarEventBuilder {
    let line: Int
    private var uid: String?
    private var summary: String?
    private var description: String?
    private var location: String?
    private var geo: ICalendarGeo?
    private var url: String?
    private var categories: [String] = []
    private var status: String?
    private var sequence: Int?
    private var start: (value: ICalendarDateTime, line: Int)?
    private var end: (value: ICalendarDateTime, line: Int)?
    private var duration: (value: ICalendarDuration, line: Int)?
    private var recurrenceRule: (value: ICalendarRecurrenceRule, line: Int)?
    private var recurrenceDates: [ICalendarRecurrenceDate] = []
    private var exceptionDates: [ICalendarDateTime] = []
    private var recurrenceID: ICalendarDateTime?

    init(line: Int) {
        self.line = line
    }

    func apply(_ content: ICalendarContentLine, line: Int, state: inout ICalendarParseState) throws(ICalendarError) {
        do {
            try read(content, line: line, state: &state)
        } catch let malformed as ICalendarContentLine.Malformed {
            try state.report(line: line, "\(content.name): \(malformed.reason)")
        } catch let error as ICalendarError {
            throw error
        } catch {
            try state.report(line: line, "\(content.name): \(error)")
        }
    }

    private func read(_ content: ICalendarContentLine, line: Int, state: inout ICalendarParseState) throws {
        let value = content.value
        switch content.name {
        case "UID":
            guard uid == nil else { throw ICalendarContentLine.Malformed(reason: "a VEVENT has one UID; repeated one ignored") }
            let text = String(ICalendarText.trimmed(ICalendarText.unescape(value)))
            guard !text.isEmpty else { throw ICalendarContentLine.Malformed(reason: "empty UID") }
            uid = text
        case "SUMMARY":
            if summary == nil { summary = ICalendarText.unescape(value) }
        case "DESCRIPTION":
            if description == nil { description = ICalendarText.unescape(value) }
        case "LOCATION":
            if location == nil { location = ICalendarText.unescape(value) }
        case "GEO":
            geo = try ICalendarValueReader.geo(value)
        case "URL":
            if url == nil { url = String(ICalendarText.trimmed(value)) }
        case "CATEGORIES":
            categories += ICalendarText.unescapeList(value).map { String(ICalendarText.trimmed($0)) }.filter { !$0.isEmpty }
        case "STATUS":
            status = ICalendarText.trimmed(value).uppercased()
        case "SEQUENCE":
            sequence = try ICalendarValueReader.integer(value, property: "SEQUENCE")
        case "DTSTART":
            guard start == nil else { throw ICalendarContentLine.Malformed(reason: "a VEVENT has one DTSTART; repeated one ignored") }
            start = (try ICalendarValueReader.dateTime(value[...], zone: try zone(of: content, line: line, state: &state)), line)
        case "DTEND":
            guard end == nil else { throw ICalendarContentLine.Malformed(reason: "a VEVENT has one DTEND; repeated one ignored") }
            end = (try ICalendarValueReader.dateTime(value[...], zone: try zone(of: content, line: line, state: &state)), line)
        case "DURATION":
            guard duration == nil else { throw ICalendarContentLine.Malformed(reason: "a VEVENT has one DURATION; repeated one ignored") }
            duration = (try ICalendarValueReader.duration(ICalendarText.trimmed(value)), line)
        case "RRULE":
            guard recurrenceRule == nil else {
                throw ICalendarContentLine.Malformed(reason: "only one RRULE per VEVENT is supported; this one is ignored")
            }
            let (rule, ignoredParts) = try ICalendarRecurrenceRule.parse(String(ICalendarText.trimmed(value)))
            recurrenceRule = (rule, line)
            if !ignoredParts.isEmpty {
                try state.report(line: line, "RRULE: unsupported part \(ignoredParts.joined(separator: ";")) ignored")
            }
        case "RDATE":
            let zone = try zone(of: content, line: line, state: &state)
            var values: [ICalendarRecurrenceDate] = []
            for item in value.split(separator: ",") {
                values.append(try ICalendarValueReader.recurrenceDate(ICalendarText.trimmed(item), zone: zone))
            }
            recurrenceDates += values
        case "EXDATE":
            let zone = try zone(of: content, line: line, state: &state)
            var values: [ICalendarDateTime] = []
            for item in value.split(separator: ",") {
                values.append(try ICalendarValueReader.dateTime(ICalendarText.trimmed(item), zone: zone))
            }
            exceptionDates += values
        case "RECURRENCE-ID":
            guard recurrenceID == nil else {
                throw ICalendarContentLine.Malformed(reason: "a VEVENT has one RECURRENCE-ID; repeated one ignored")
            }
            recurrenceID = try ICalendarValueReader.dateTime(value[...], zone: try zone(of: content, line: line, state: &state))
        default:
            break
        }
    }

    /// The zone a date-time property's TZID names; floating when there is none, and also when it cannot be
    /// resolved (which is reported, and the value still used).
    private func zone(
        of content: ICalendarContentLine, line: Int, state: inout ICalendarParseState
    ) throws(ICalendarError) -> ICalendarDateTime.Zone {
        guard let tzid = content.parameter("TZID") else { return .floating }
        if let timeZone = state.resolveTimeZone(tzid) { return .zoned(timeZone) }
        try state.report(line: line, "\(content.name): TZID '\(tzid)' is not a known time zone; read as floating time")
        return .floating
    }

    /// The finished event, or nil (with the reason reported) when it cannot be used.
    func build(floatingTimeZone: TimeZone?, state: inout ICalendarParseState) throws(ICalendarError) -> ICalendarEvent? {
        guard let uid else {
            try state.report(line: line, "VEVENT has no UID; skipped")
            return nil
        }
        guard let start else {
            try state.report(line: line, "VEVENT \(uid) has no DTSTART; skipped")
            return nil
        }
        var endValue = end?.value
        if let end {
            if end.value.isDate != start.value.isDate {
                try state.report(line: end.line, "DTEND must be a \(start.value.isDate ? "DATE" : "DATE-TIME") like DTSTART; ignored")
                endValue = nil
            } else if Self.isBefore(end.value, start.value) {
                try state.report(line: end.line, "DTEND is before DTSTART; ignored")
                endValue = nil
            }
        }
        var durationValue = duration?.value
        if let duration {
            if end != nil {
                try state.report(line: duration.line, "DURATION ignored: the VEVENT also has DTEND")
                durationValue = nil
            } else if duration.value.isNegative {
                try state.report(line: duration.line, "DURATION is negative; ignored")
                durationValue = nil
            }
        }
        var rule = recurrenceRule?.value
        if let recurrenceRule, start.value.isDate,
            [.hourly, .minutely, .secondly].contains(recurrenceRule.value.frequency)
        {
            try state.report(
                line: recurrenceRule.line, "RRULE FREQ=\(recurrenceRule.value.frequency.rawValue) needs a DATE-TIME DTSTART; ignored")
            rule = nil
        }
        return ICalendarEvent(
            line: line, uid: uid, summary: summary, description: description, location: location, geo: geo, url: url,
            categories: categories, status: status, sequence: sequence, start: start.value, end: endValue, duration: durationValue,
            recurrenceRule: rule, recurrenceDates: recurrenceDates, exceptionDates: exceptionDates, recurrenceID: recurrenceID,
            floatingTimeZone: floatingTimeZone)
    }

    /// Whether `end` is before `start`; values in different zones are compared as instants, with floating
    /// time read as UTC (the same for both, so only a mix of floating and zoned values is approximate).
    private static func isBefore(_ end: ICalendarDateTime, _ start: ICalendarDateTime) -> Bool {
        if end.zone == start.zone { return end.wallClock < start.wallClock }
        return end.instant(floatingTimeZone: .gmt) < start.instant(floatingTimeZone: .gmt)
    }
}
