/// An RRULE (RFC 5545 §3.3.10), such as `FREQ=MONTHLY;BYDAY=-1FR;COUNT=10`.
///
/// All parts are kept as written; defaults that depend on DTSTART (the day of the month for a plain
/// `FREQ=MONTHLY`, for instance) are filled in when the rule is expanded.
public struct ICalendarRecurrenceRule: Sendable, Hashable {
    public enum Frequency: String, Sendable, Hashable, CaseIterable {
        case secondly = "SECONDLY"
        case minutely = "MINUTELY"
        case hourly = "HOURLY"
        case daily = "DAILY"
        case weekly = "WEEKLY"
        case monthly = "MONTHLY"
        case yearly = "YEARLY"
    }

    /// A day of the week, numbered from Monday as `CivilCalendar.weekday` does.
    public enum Weekday: Int, Sendable, Hashable, CaseIterable {
        case monday = 0, tuesday, wednesday, thursday, friday, saturday, sunday

        static let codes = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]

        init?(code: Substring) {
            guard let index = Self.codes.firstIndex(of: code.uppercased()) else { return nil }
            self.init(rawValue: index)
        }
    }

    /// A BYDAY entry: `MO` (every Monday, `ordinal` 0), `2MO` (the second), `-1FR` (the last).
    public struct WeekdayOccurrence: Sendable, Hashable {
        public var weekday: Weekday
        public var ordinal: Int

        public init(_ weekday: Weekday, ordinal: Int = 0) {
            self.weekday = weekday
            self.ordinal = ordinal
        }
    }

    public var frequency: Frequency
    public var interval: Int
    public var count: Int?
    public var until: ICalendarDateTime?
    public var bySecond: [Int]
    public var byMinute: [Int]
    public var byHour: [Int]
    public var byDay: [WeekdayOccurrence]
    public var byMonthDay: [Int]
    public var byYearDay: [Int]
    public var byWeekNumber: [Int]
    public var byMonth: [Int]
    public var bySetPosition: [Int]
    public var weekStart: Weekday

    public init(
        frequency: Frequency, interval: Int = 1, count: Int? = nil, until: ICalendarDateTime? = nil, bySecond: [Int] = [],
        byMinute: [Int] = [], byHour: [Int] = [], byDay: [WeekdayOccurrence] = [], byMonthDay: [Int] = [], byYearDay: [Int] = [],
        byWeekNumber: [Int] = [], byMonth: [Int] = [], bySetPosition: [Int] = [], weekStart: Weekday = .monday
    ) {
        self.frequency = frequency
        self.interval = interval
        self.count = count
        self.until = until
        self.bySecond = bySecond
        self.byMinute = byMinute
        self.byHour = byHour
        self.byDay = byDay
        self.byMonthDay = byMonthDay
        self.byYearDay = byYearDay
        self.byWeekNumber = byWeekNumber
        self.byMonth = byMonth
        self.bySetPosition = bySetPosition
        self.weekStart = weekStart
    }

    /// Reads an RRULE value. Parts that RFC 5545 does not define (RFC 7529's RSCALE and SKIP, typos) are
    /// left out of the rule and listed in `ignoredParts`, so the caller can report them; `X-` parts are
    /// dropped silently, as the RFC asks.
    static func parse(_ text: String) throws(ICalendarContentLine.Malformed) -> (rule: ICalendarRecurrenceRule, ignoredParts: [String]) {
        typealias Malformed = ICalendarContentLine.Malformed
        var rule = ICalendarRecurrenceRule(frequency: .daily)
        var sawFrequency = false
        var ignoredParts: [String] = []

        func integers(_ value: Substring, part: Substring, allowed: ClosedRange<Int>, allowNegative: Bool) throws(Malformed) -> [Int] {
            var result: [Int] = []
            for item in value.split(separator: ",", omittingEmptySubsequences: false) {
                guard let number = Int(item), allowed.contains(abs(number)), number != 0 || allowed.lowerBound == 0,
                    number >= 0 || allowNegative
                else {
                    throw Malformed(reason: "RRULE \(part)=\(value): '\(item)' is out of range")
                }
                result.append(number)
            }
            return result
        }

        for part in text.split(separator: ";", omittingEmptySubsequences: true) {
            guard let equals = part.firstIndex(of: "=") else {
                throw Malformed(reason: "RRULE part '\(part)' has no '='")
            }
            let name = part[..<equals].uppercased()
            let value = part[part.index(after: equals)...]
            switch name {
            case "FREQ":
                guard let frequency = Frequency(rawValue: value.uppercased()) else {
                    throw Malformed(reason: "RRULE FREQ=\(value) is not a frequency")
                }
                rule.frequency = frequency
                sawFrequency = true
            case "INTERVAL":
                guard let interval = Int(value), interval >= 1 else {
                    throw Malformed(reason: "RRULE INTERVAL=\(value) is not a positive integer")
                }
                rule.interval = interval
            case "COUNT":
                guard let count = Int(value), count >= 1 else {
                    throw Malformed(reason: "RRULE COUNT=\(value) is not a positive integer")
                }
                rule.count = count
            case "UNTIL":
                rule.until = try ICalendarValueReader.dateTime(value, zone: .floating)
            case "BYSECOND": rule.bySecond = try integers(value, part: "BYSECOND", allowed: 0...60, allowNegative: false)
            case "BYMINUTE": rule.byMinute = try integers(value, part: "BYMINUTE", allowed: 0...59, allowNegative: false)
            case "BYHOUR": rule.byHour = try integers(value, part: "BYHOUR", allowed: 0...23, allowNegative: false)
            case "BYMONTHDAY": rule.byMonthDay = try integers(value, part: "BYMONTHDAY", allowed: 1...31, allowNegative: true)
            case "BYYEARDAY": rule.byYearDay = try integers(value, part: "BYYEARDAY", allowed: 1...366, allowNegative: true)
            case "BYWEEKNO": rule.byWeekNumber = try integers(value, part: "BYWEEKNO", allowed: 1...53, allowNegative: true)
            case "BYMONTH": rule.byMonth = try integers(value, part: "BYMONTH", allowed: 1...12, allowNegative: false)
            case "BYSETPOS": rule.bySetPosition = try integers(value, part: "BYSETPOS", allowed: 1...366, allowNegative: true)
            case "BYDAY":
                rule.byDay = []
                for item in value.split(separator: ",", omittingEmptySubsequences: false) {
                    let code = item.suffix(2)
                    let ordinalText = item.dropLast(2)
                    guard let weekday = Weekday(code: code) else {
                        throw Malformed(reason: "RRULE BYDAY=\(value): '\(item)' is not a weekday")
                    }
                    var ordinal = 0
                    if !ordinalText.isEmpty {
                        guard let number = Int(ordinalText), number != 0, abs(number) <= 53 else {
                            throw Malformed(reason: "RRULE BYDAY=\(value): '\(item)' has an ordinal out of range")
                        }
                        ordinal = number
                    }
                    rule.byDay.append(WeekdayOccurrence(weekday, ordinal: ordinal))
                }
            case "WKST":
                guard let weekday = Weekday(code: value) else {
                    throw Malformed(reason: "RRULE WKST=\(value) is not a weekday")
                }
                rule.weekStart = weekday
            default:
                if !name.hasPrefix("X-") { ignoredParts.append(String(part)) }
            }
        }
        guard sawFrequency else {
            throw Malformed(reason: "RRULE '\(text)' has no FREQ")
        }
        return (rule, ignoredParts)
    }
}
