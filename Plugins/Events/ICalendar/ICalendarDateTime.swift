import Foundation

/// An iCalendar DATE or DATE-TIME value as written, before any time zone is applied.
///
/// RFC 5545 has three kinds of DATE-TIME (§3.3.5): UTC (`19980119T070000Z`), local with a `TZID`
/// (`TZID=America/New_York:19980119T020000`) and floating (no zone, "the same hour wherever you are").
/// A DATE (`19971102`) is a whole day. Recurrence rules are expanded on the wall-clock fields kept here,
/// so that a 09:00 meeting stays at 09:00 across a daylight-saving change; only then is each instance
/// turned into an instant with `instant(floatingTimeZone:)`.
public struct ICalendarDateTime: Sendable, Hashable {
    /// How a value's wall-clock fields become an instant.
    public enum Zone: Sendable, Hashable {
        /// The fields are UTC (the value ended in `Z`).
        case utc
        /// No zone was given, or the value is a DATE: the calendar's `X-WR-TIMEZONE`, else the caller's
        /// default zone, applies.
        case floating
        /// A `TZID` parameter named this zone.
        case zoned(TimeZone)
    }

    public var year: Int
    public var month: Int
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int
    /// True for a DATE value (an all-day value); the time fields are then zero and `zone` is `.floating`.
    public var isDate: Bool
    public var zone: Zone

    /// A DATE value.
    public init(year: Int, month: Int, day: Int) {
        self.init(year: year, month: month, day: day, hour: 0, minute: 0, second: 0, isDate: true, zone: .floating)
    }

    /// A DATE-TIME value.
    public init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, zone: Zone) {
        self.init(year: year, month: month, day: day, hour: hour, minute: minute, second: second, isDate: false, zone: zone)
    }

    init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, isDate: Bool, zone: Zone) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
        self.isDate = isDate
        self.zone = zone
    }

    /// The value's fields as wall-clock seconds (see `CivilCalendar`).
    var wallClock: Int {
        CivilCalendar.dayNumber(year: year, month: month, day: day) * CivilCalendar.secondsPerDay + hour * 3600 + minute * 60 + second
    }

    var dayNumber: Int {
        CivilCalendar.dayNumber(year: year, month: month, day: day)
    }

    /// The zone whose wall clock the fields are read on.
    func clock(floatingTimeZone: TimeZone) -> ICalendarZoneClock {
        switch zone {
        case .utc: return .utc
        case .floating: return ICalendarZoneClock(floatingTimeZone)
        case .zoned(let timeZone): return ICalendarZoneClock(timeZone)
        }
    }

    /// The instant this value names; a DATE names its midnight. A local time that does not exist (skipped
    /// by a daylight-saving change) is read with the offset in force before the change, as RFC 5545 §3.3.5
    /// requires, which moves it later by the length of the gap.
    public func instant(floatingTimeZone: TimeZone) -> Date {
        Date(timeIntervalSince1970: Double(clock(floatingTimeZone: floatingTimeZone).instant(wallClock: wallClock)))
    }
}

/// A wall clock in one zone: converts between wall-clock seconds and instants (seconds since 1970 UTC).
///
/// `TimeZone` only answers "what is the offset at this instant"; going the other way needs care at
/// daylight-saving changes. A wall-clock time that happens twice (the autumn overlap) is the first of
/// the two, and one that never happens (the spring gap) uses the offset before the gap (RFC 5545 §3.3.5).
struct ICalendarZoneClock: Sendable {
    /// Nil for UTC, which needs no lookups.
    let timeZone: TimeZone?

    static let utc = ICalendarZoneClock(nil)
    private static let utcIdentifiers: Set<String> = ["GMT", "UTC", "Etc/UTC", "Etc/GMT", "Etc/Universal", "Etc/Zulu"]

    init(_ timeZone: TimeZone?) {
        if let timeZone, Self.utcIdentifiers.contains(timeZone.identifier) {
            self.timeZone = nil
        } else {
            self.timeZone = timeZone
        }
    }

    private func offset(atInstant seconds: Int) -> Int {
        guard let timeZone else { return 0 }
        return timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(seconds)))
    }

    func instant(wallClock: Int) -> Int {
        guard timeZone != nil else { return wallClock }
        // Zone offsets change at most once within two days in every zone of the IANA database, so the
        // offsets a day either side are the only candidates.
        let before = offset(atInstant: wallClock - CivilCalendar.secondsPerDay)
        let after = offset(atInstant: wallClock + CivilCalendar.secondsPerDay)
        let withBefore = wallClock - before
        if before == after {
            let actual = offset(atInstant: withBefore)
            if actual == before { return withBefore }
            // A change and its reversal within two days: fall through with the offset actually in force.
            return wallClock - actual
        }
        let withAfter = wallClock - after
        let beforeFits = offset(atInstant: withBefore) == before
        let afterFits = offset(atInstant: withAfter) == after
        switch (beforeFits, afterFits) {
        case (true, true): return min(withBefore, withAfter)
        case (false, true): return withAfter
        default: return withBefore
        }
    }

    func wallClock(instant: Int) -> Int {
        instant + offset(atInstant: instant)
    }
}

/// An RFC 5545 DURATION (§3.3.6), such as `PT1H30M`, `P1D`, `P2W` or `-PT15M`.
///
/// Days and weeks are nominal (a day across a daylight-saving change is 23 or 25 hours long, and `P1D`
/// after 09:00 is 09:00 the next day); hours, minutes and seconds are exact. That is why the two parts
/// are kept apart instead of as one number of seconds.
public struct ICalendarDuration: Sendable, Hashable {
    /// Whole days, weeks counted as seven; negative for a negative duration.
    public var days: Int
    /// Exact seconds; negative for a negative duration.
    public var seconds: Int

    public init(days: Int = 0, seconds: Int = 0) {
        self.days = days
        self.seconds = seconds
    }

    public var isNegative: Bool { days < 0 || seconds < 0 }
}

/// One RDATE value: a DATE, a DATE-TIME, or a PERIOD with an explicit end or duration.
public struct ICalendarRecurrenceDate: Sendable, Hashable {
    public var start: ICalendarDateTime
    /// The end of a PERIOD written as `start/end`.
    public var end: ICalendarDateTime?
    /// The length of a PERIOD written as `start/duration`.
    public var duration: ICalendarDuration?

    public init(start: ICalendarDateTime, end: ICalendarDateTime? = nil, duration: ICalendarDuration? = nil) {
        self.start = start
        self.end = end
        self.duration = duration
    }
}
