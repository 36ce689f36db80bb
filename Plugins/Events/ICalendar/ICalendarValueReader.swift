import Foundation

/// Reads the typed values of RFC 5545 §3.3 that the events plugin uses: DATE, DATE-TIME, DURATION,
/// PERIOD and FLOAT pairs (GEO). Every function throws the reason a value is malformed, which the parser
/// reports against the line it came from.
enum ICalendarValueReader {
    typealias Malformed = ICalendarContentLine.Malformed

    /// A DATE (`19991231`) or DATE-TIME (`19991231T235959`, with `Z` for UTC). The shape decides which,
    /// whatever the VALUE parameter claims, since producers get VALUE wrong more often than the digits.
    /// `zone` applies to a DATE-TIME without `Z`.
    static func dateTime(_ text: Substring, zone: ICalendarDateTime.Zone) throws(Malformed) -> ICalendarDateTime {
        let bytes = Array(text.utf8)
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let digit = Int(bytes[index]) - 0x30
                guard digit >= 0, digit <= 9 else { return nil }
                value = value * 10 + digit
            }
            return value
        }
        guard bytes.count >= 8, let year = number(0..<4), let month = number(4..<6), let day = number(6..<8) else {
            throw Malformed(reason: "'\(text)' is not a DATE or DATE-TIME (expected YYYYMMDD or YYYYMMDDTHHMMSS)")
        }
        guard year >= 1, (1...12).contains(month), day >= 1, day <= CivilCalendar.daysInMonth(year: year, month: month) else {
            throw Malformed(reason: "'\(text)' is not a valid date")
        }
        if bytes.count == 8 {
            return ICalendarDateTime(year: year, month: month, day: day)
        }
        let isUTC = bytes.count == 16 && (bytes[15] == UInt8(ascii: "Z") || bytes[15] == UInt8(ascii: "z"))
        guard bytes.count == 15 || isUTC, bytes[8] == UInt8(ascii: "T") || bytes[8] == UInt8(ascii: "t"),
            let hour = number(9..<11), let minute = number(11..<13), let second = number(13..<15)
        else {
            throw Malformed(reason: "'\(text)' is not a DATE or DATE-TIME (expected YYYYMMDD or YYYYMMDDTHHMMSS)")
        }
        guard hour <= 23, minute <= 59, second <= 60 else {
            throw Malformed(reason: "'\(text)' is not a valid time of day")
        }
        // A leap second (:60) cannot be represented in POSIX time; it stands for the second before.
        return ICalendarDateTime(
            year: year, month: month, day: day, hour: hour, minute: minute, second: min(second, 59),
            zone: isUTC ? .utc : zone)
    }

    /// A DURATION such as `P1W`, `P1DT2H`, `PT1H30M` or `-PT15M`.
    static func duration(_ text: Substring) throws(Malformed) -> ICalendarDuration {
        let malformed = Malformed(reason: "'\(text)' is not a DURATION (expected e.g. PT1H30M, P1D, P1W or -PT15M)")
        var bytes = text.utf8[...]
        var sign = 1
        if let first = bytes.first, first == UInt8(ascii: "+") || first == UInt8(ascii: "-") {
            sign = first == UInt8(ascii: "-") ? -1 : 1
            bytes = bytes.dropFirst()
        }
        guard let designator = bytes.first, designator == UInt8(ascii: "P") || designator == UInt8(ascii: "p") else { throw malformed }
        bytes = bytes.dropFirst()
        var days = 0
        var seconds = 0
        var inTime = false
        var pending: Int?
        var sawComponent = false
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                let digit = Int(byte) - 0x30
                let value = (pending ?? 0)
                guard value < 100_000_000 else { throw malformed }
                pending = value * 10 + digit
            case UInt8(ascii: "T"), UInt8(ascii: "t"):
                guard !inTime, pending == nil else { throw malformed }
                inTime = true
            default:
                guard let value = pending else { throw malformed }
                switch (byte | 0x20, inTime) {
                case (UInt8(ascii: "w"), false): days += value * 7
                case (UInt8(ascii: "d"), false): days += value
                case (UInt8(ascii: "h"), true): seconds += value * 3600
                case (UInt8(ascii: "m"), true): seconds += value * 60
                case (UInt8(ascii: "s"), true): seconds += value
                default: throw malformed
                }
                pending = nil
                sawComponent = true
            }
        }
        guard sawComponent, pending == nil else { throw malformed }
        return ICalendarDuration(days: sign * days, seconds: sign * seconds)
    }

    /// One RDATE value: a PERIOD (`start/end` or `start/duration`) when it has a slash, else a DATE or
    /// DATE-TIME.
    static func recurrenceDate(_ text: Substring, zone: ICalendarDateTime.Zone) throws(Malformed) -> ICalendarRecurrenceDate {
        guard let slash = text.firstIndex(of: "/") else {
            return ICalendarRecurrenceDate(start: try dateTime(text, zone: zone))
        }
        let start = try dateTime(text[..<slash], zone: zone)
        let rest = text[text.index(after: slash)...]
        guard !start.isDate else {
            throw Malformed(reason: "'\(text)': a PERIOD must start with a DATE-TIME")
        }
        if let first = rest.first, first == "P" || first == "p" || first == "+" || first == "-" {
            let length = try duration(rest)
            guard !length.isNegative else { throw Malformed(reason: "'\(text)': a PERIOD cannot have a negative duration") }
            return ICalendarRecurrenceDate(start: start, duration: length)
        }
        let end = try dateTime(rest, zone: zone)
        guard !end.isDate else { throw Malformed(reason: "'\(text)': a PERIOD must end with a DATE-TIME") }
        return ICalendarRecurrenceDate(start: start, end: end)
    }

    /// GEO: `latitude;longitude` in degrees.
    static func geo(_ text: String) throws(Malformed) -> ICalendarGeo {
        let parts = text.split(separator: ";", omittingEmptySubsequences: false)
        guard parts.count == 2,
            let latitude = Double(ICalendarText.trimmed(parts[0])),
            let longitude = Double(ICalendarText.trimmed(parts[1])),
            (-90...90).contains(latitude), (-180...180).contains(longitude)
        else {
            throw Malformed(reason: "GEO '\(text)' is not latitude;longitude in degrees")
        }
        return ICalendarGeo(latitude: latitude, longitude: longitude)
    }

    /// An INTEGER.
    static func integer(_ text: String, property: String) throws(Malformed) -> Int {
        guard let value = Int(ICalendarText.trimmed(text)) else {
            throw Malformed(reason: "\(property) '\(text)' is not an integer")
        }
        return value
    }
}
