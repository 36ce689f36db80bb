import Foundation

/// A VTIMEZONE of the file being read. RFC 5545 (§3.6.5) makes it authoritative for the TZID it
/// defines, whatever that TZID looks like: `TZID=Europe/lisbon` whose definition keeps Central
/// European time means Central European time. The definition's observances (STANDARD and DAYLIGHT:
/// onset, offsets, a yearly RRULE or RDATEs) give its transitions, and the zone used is the IANA
/// zone with the same offsets at every transition and every season from 2000 to 2037 — the zone
/// the TZID names when it agrees, else the first that does. (A Foundation `TimeZone` cannot be made
/// from rules; an IANA zone that keeps the same offsets converts every time of those years alike.)
struct ICalendarTimeZoneDefinition: Sendable {
    struct Observance: Sendable {
        /// DTSTART: the local time of the first onset, in the offset before it (`offsetFrom`).
        var start: ICalendarDateTime
        /// Seconds east of UTC before and after each onset.
        var offsetFrom: Int
        var offsetTo: Int
        var rule: ICalendarRecurrenceRule?
        var dates: [ICalendarDateTime] = []
    }

    var tzid: String
    var observances: [Observance] = []

    static let maximumObservances = 20
    static let maximumDates = 100
    /// Onsets a yearly rule gives, at most (1970 to 2037 is 68).
    static let maximumRuleOnsets = 200
    /// The years the offsets are compared over.
    static let comparedYears = 2000...2037

    /// `+0100`, `-0530`, `+013045`: seconds east of UTC.
    static func offset(_ text: String) -> Int? {
        let bytes = Array(text.trimmingCharacters(in: .whitespaces).utf8)
        guard bytes.count == 5 || bytes.count == 7, bytes[0] == UInt8(ascii: "+") || bytes[0] == UInt8(ascii: "-"),
              bytes.dropFirst().allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        func pair(_ at: Int) -> Int { Int(bytes[at] - 0x30) * 10 + Int(bytes[at + 1] - 0x30) }
        let (hours, minutes, seconds) = (pair(1), pair(3), bytes.count == 7 ? pair(5) : 0)
        guard hours < 24, minutes < 60, seconds < 60 else { return nil }
        return (bytes[0] == UInt8(ascii: "-") ? -1 : 1) * (hours * 3600 + minutes * 60 + seconds)
    }

    // MARK: Transitions

    /// Every onset up to the end of `lastYear`, as (UTC seconds, offset from then on), in order.
    func transitions(through lastYear: Int) -> [(at: Int, offset: Int)] {
        let end = CivilCalendar.dayNumber(year: lastYear + 1, month: 1, day: 1) * CivilCalendar.secondsPerDay
        var found: [(at: Int, offset: Int)] = []
        for observance in observances {
            var walls = [observance.start.wallClock] + observance.dates.map(\.wallClock)
            if let rule = observance.rule {
                let until = rule.until.map { $0.zone == .utc ? $0.wallClock : $0.wallClock - observance.offsetFrom }
                var iterator = ICalendarRecurrenceIterator(rule: rule, start: observance.start, maxIterations: Self.maximumRuleOnsets)
                var count = 0
                while let wall = iterator.next(), wall - observance.offsetFrom < end {
                    count += 1
                    if let limit = rule.count, count > limit { break }
                    if let until, wall - observance.offsetFrom > until { break }
                    walls.append(wall)
                }
            }
            for wall in Set(walls) where wall - observance.offsetFrom < end {
                found.append((wall - observance.offsetFrom, observance.offsetTo))
            }
        }
        return found.sorted { $0.at < $1.at }
    }

    /// The offset the definition gives at `instant` (UTC seconds), from `transitions`.
    func offset(at instant: Int, in transitions: [(at: Int, offset: Int)]) -> Int? {
        guard let first = transitions.first else { return nil }
        guard instant >= first.at else {
            // Before the first onset: the offset that onset changes from.
            return observances.first { $0.offsetTo == first.offset }?.offsetFrom ?? first.offset
        }
        var low = 0, high = transitions.count - 1
        while low < high {
            let middle = (low + high + 1) / 2
            if transitions[middle].at <= instant { low = middle } else { high = middle - 1 }
        }
        return transitions[low].offset
    }

    // MARK: Matching an IANA zone

    /// The IANA zone that keeps this definition's offsets (trying `preferred` first), or nil when
    /// none does.
    func matchingZone(preferred: TimeZone?) -> TimeZone? {
        let transitions = self.transitions(through: Self.comparedYears.upperBound)
        guard !transitions.isEmpty else { return nil }
        var instants: [Int] = []
        for year in Self.comparedYears {
            for month in [1, 4, 7, 10] {
                instants.append(CivilCalendar.dayNumber(year: year, month: month, day: 15) * CivilCalendar.secondsPerDay)
            }
        }
        let first = CivilCalendar.dayNumber(year: Self.comparedYears.lowerBound, month: 1, day: 1) * CivilCalendar.secondsPerDay
        for transition in transitions where transition.at >= first {
            instants += [transition.at - 1, transition.at + 1]
        }
        let expected = instants.map { offset(at: $0, in: transitions) }
        func agrees(_ zone: TimeZone) -> Bool {
            for (instant, offset) in zip(instants, expected) where zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(instant))) != offset {
                return false
            }
            return true
        }
        if let preferred, agrees(preferred) { return preferred }
        return Self.knownZones.first(where: agrees)
    }

    /// Every IANA zone, in the order of their names: made once, not for each definition.
    private static let knownZones: [TimeZone] = TimeZone.knownTimeZoneIdentifiers.sorted().compactMap { TimeZone(identifier: $0) }
}

/// The VTIMEZONE being read, and the observance inside it.
struct ICalendarTimeZoneBuilder {
    let line: Int
    var tzid: String?
    var observances: [ICalendarTimeZoneDefinition.Observance] = []
    var observance: ObservanceBuilder?
    /// Observances past ``ICalendarTimeZoneDefinition/maximumObservances``, skipped (reported once).
    var skipped = 0

    struct ObservanceBuilder {
        let line: Int
        var start: ICalendarDateTime?
        var offsetFrom: Int?
        var offsetTo: Int?
        var rule: ICalendarRecurrenceRule?
        var dates: [ICalendarDateTime] = []
    }

    init(line: Int) { self.line = line }

    /// A property of the VTIMEZONE (TZID) or of the observance inside it.
    mutating func apply(_ content: ICalendarContentLine) throws(ICalendarContentLine.Malformed) {
        guard var current = observance else {
            if content.name == "TZID" { tzid = ICalendarText.unescape(content.value).trimmingCharacters(in: .whitespaces) }
            return
        }
        switch content.name {
        case "DTSTART":
            current.start = try ICalendarValueReader.dateTime(Substring(content.value), zone: .floating)
        case "TZOFFSETFROM", "TZOFFSETTO":
            guard let offset = ICalendarTimeZoneDefinition.offset(content.value) else {
                throw ICalendarContentLine.Malformed(reason: "\(content.name) '\(content.value.prefix(20))' is not an offset such as +0100")
            }
            if content.name == "TZOFFSETFROM" { current.offsetFrom = offset } else { current.offsetTo = offset }
        case "RRULE":
            let rule = try ICalendarRecurrenceRule.parse(content.value).rule
            // Zones change their offsets once or twice a year: a rule of another frequency is no zone's.
            guard rule.frequency == .yearly else {
                throw ICalendarContentLine.Malformed(reason: "a VTIMEZONE's RRULE must be FREQ=YEARLY; ignored")
            }
            current.rule = rule
        case "RDATE":
            for value in content.value.split(separator: ",") where current.dates.count < ICalendarTimeZoneDefinition.maximumDates {
                current.dates.append(try ICalendarValueReader.dateTime(value, zone: .floating))
            }
        default:
            break
        }
        observance = current
    }

    /// Ends the observance being read; the reason it is unusable, if it is.
    mutating func endObservance() -> String? {
        guard let current = observance else { return nil }
        observance = nil
        guard let start = current.start, let from = current.offsetFrom, let to = current.offsetTo else {
            return "an observance of a VTIMEZONE needs DTSTART, TZOFFSETFROM and TZOFFSETTO; skipped"
        }
        guard observances.count < ICalendarTimeZoneDefinition.maximumObservances else {
            // Reported at the first one skipped only: a reply must not grow with what it refuses.
            skipped += 1
            return skipped == 1 ? "a VTIMEZONE with more than \(ICalendarTimeZoneDefinition.maximumObservances) observances; the rest skipped" : nil
        }
        observances.append(.init(start: start, offsetFrom: from, offsetTo: to, rule: current.rule, dates: current.dates))
        return nil
    }
}
