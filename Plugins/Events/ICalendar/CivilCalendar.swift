import GatewayCore

/// Proleptic Gregorian arithmetic on plain integers: day numbers (days since 1970-01-01) and wall-clock
/// seconds (`dayNumber * 86_400 + secondsOfDay`, in no zone).
///
/// Recurrence expansion visits hundreds of candidate days per rule; doing that with `Calendar` would cost
/// a locked, allocating call per day. These functions are exact for years 1 through 9999, the range an
/// iCalendar DATE can spell, and are only ever combined with a `TimeZone` at the very end (see
/// `ICalendarZoneClock`).
enum CivilCalendar {
    static let secondsPerDay = 86_400

    /// The day number of a valid date.
    static func dayNumber(year: Int, month: Int, day: Int) -> Int {
        Int(UTCTimestamp.days(year: Int64(year), month: Int64(month), day: Int64(day)))
    }

    /// The date of a day number.
    static func date(dayNumber: Int) -> (year: Int, month: Int, day: Int) {
        let date = UTCTimestamp.civil(days: Int64(dayNumber))
        return (Int(date.year), Int(date.month), Int(date.day))
    }

    /// The weekday of a day number, 0 for Monday through 6 for Sunday (1970-01-01 was a Thursday).
    static func weekday(dayNumber: Int) -> Int {
        ((dayNumber % 7) + 7 + 3) % 7
    }

    static func isLeapYear(_ year: Int) -> Bool {
        (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    }

    static func daysInMonth(year: Int, month: Int) -> Int {
        Int(UTCTimestamp.daysIn(month: Int64(month), year: Int64(year)))
    }

    static func daysInYear(_ year: Int) -> Int {
        isLeapYear(year) ? 366 : 365
    }

    /// Floor division, so that wall-clock seconds before 1970 still map to the right day.
    static func floorDivide(_ value: Int, _ divisor: Int) -> Int {
        value >= 0 ? value / divisor : -((-value + divisor - 1) / divisor)
    }

    /// The earliest and latest instants handled (0001-01-01 and 9999-12-31T23:59:59, UTC), in seconds
    /// since 1970: instants outside are clamped, so no conversion to `Int` can trap.
    static let supportedSeconds = -62_135_596_800...253_402_300_799

    /// Whole seconds since 1970 of `timeInterval`, rounded down and clamped to `supportedSeconds`.
    static func clampedSeconds(_ timeInterval: Double) -> Int {
        guard !timeInterval.isNaN else { return 0 }
        let bounded = min(max(timeInterval.rounded(.down), Double(supportedSeconds.lowerBound)), Double(supportedSeconds.upperBound))
        return Int(bounded)
    }

    /// The day number that a wall-clock second falls on.
    static func dayNumber(wallClock seconds: Int) -> Int {
        floorDivide(seconds, secondsPerDay)
    }
}
