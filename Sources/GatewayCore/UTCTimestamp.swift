import Foundation

/// RFC 3339 timestamps in UTC, as microseconds since 1970: parsed and written with integer
/// arithmetic only (no calendars, no formatters), fast enough for a hot ingest path.
public enum UTCTimestamp {
    /// Microseconds since 1970 of `date`, rounded.
    public static func micros(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded()) }

    /// The date of `micros`.
    public static func date(micros: Int64) -> Date { Date(timeIntervalSince1970: Double(micros) / 1_000_000) }

    /// `2013-01-01T14:14:55.118845Z` (six fraction digits), `2013-08-27T05:19:16.000Z` (three) or
    /// `2013-08-27T05:19:16Z` (none). Fractions are truncated, never rounded up past the second.
    public static func format(micros: Int64, fractionDigits: Int = 6) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(27)
        write(micros: micros, fractionDigits: fractionDigits, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the text of ``format(micros:fractionDigits:)`` to `bytes`.
    public static func write(micros: Int64, fractionDigits: Int = 6, into bytes: inout [UInt8]) {
        let seconds = micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000
        let fraction = micros - seconds * 1_000_000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civil(days: days)
        func put(_ value: Int64, width: Int) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                bytes.append(UInt8(truncatingIfNeeded: 48 + rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        put(year, width: 4)
        bytes.append(UInt8(ascii: "-"))
        put(month, width: 2)
        bytes.append(UInt8(ascii: "-"))
        put(day, width: 2)
        bytes.append(UInt8(ascii: "T"))
        put(secondOfDay / 3_600, width: 2)
        bytes.append(UInt8(ascii: ":"))
        put(secondOfDay % 3_600 / 60, width: 2)
        bytes.append(UInt8(ascii: ":"))
        put(secondOfDay % 60, width: 2)
        if fractionDigits > 0 {
            let digits = min(fractionDigits, 6)
            var scaled = fraction
            for _ in digits..<6 { scaled /= 10 }
            bytes.append(UInt8(ascii: "."))
            put(scaled, width: digits)
        }
        bytes.append(UInt8(ascii: "Z"))
    }

    /// Parses RFC 3339 (`2013-08-27T05:19:16Z`, a fraction of up to 9 digits, `Z` or an offset;
    /// a space may stand for the `T`) and plain dates (`2013-08-27`, midnight UTC). Digits past
    /// microseconds are dropped. Nil for anything else, including impossible dates (`02-30`).
    public static func parse(_ text: some StringProtocol) -> Int64? {
        var text = String(text)
        return text.withUTF8 { parse(bytes: $0) }
    }

    /// ``parse(_:)`` over UTF-8 bytes.
    public static func parse(bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        let count = bytes.count
        func number(_ from: Int, _ width: Int) -> Int64? {
            guard from + width <= count else { return nil }
            var value: Int64 = 0
            for index in from..<(from + width) {
                let byte = bytes[index]
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            return value
        }
        guard count >= 10, let year = number(0, 4), bytes[4] == 45, let month = number(5, 2), bytes[7] == 45, let day = number(8, 2),
              (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year) else { return nil }
        var micros = days(year: year, month: month, day: day) * 86_400_000_000
        guard count > 10 else { return micros }
        guard bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t") || bytes[10] == 32,
              let hour = number(11, 2), count > 13, bytes[13] == 58, let minute = number(14, 2),
              count > 16, bytes[16] == 58, let second = number(17, 2),
              hour < 24, minute < 60, second < 61 else { return nil }
        micros += ((hour * 60 + minute) * 60 + min(second, 59)) * 1_000_000
        var index = 19
        if index < count, bytes[index] == 46 {
            index += 1
            let start = index
            var fraction: Int64 = 0
            while index < count, bytes[index] >= 48, bytes[index] <= 57 {
                if index - start < 6 { fraction = fraction * 10 + Int64(bytes[index] - 48) }
                index += 1
            }
            guard index > start, index - start <= 9 else { return nil }
            for _ in min(index - start, 6)..<6 { fraction *= 10 }
            micros += fraction
        }
        guard index < count else { return nil }
        if bytes[index] == UInt8(ascii: "Z") || bytes[index] == UInt8(ascii: "z") {
            index += 1
        } else if bytes[index] == 43 || bytes[index] == 45, let hours = number(index + 1, 2), count > index + 3, bytes[index + 3] == 58,
                  let minutes = number(index + 4, 2), hours < 24, minutes < 60 {
            let offset = (hours * 60 + minutes) * 60_000_000
            micros += bytes[index] == 45 ? offset : -offset
            index += 6
        } else {
            return nil
        }
        return index == count ? micros : nil
    }

    /// The days of `month` (1–12) in proleptic Gregorian `year`.
    public static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm), exact for every
    /// proleptic Gregorian date: plain integer arithmetic where `Calendar` would lock and allocate.
    public static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The civil date of a day count since 1970-01-01 (the inverse of ``days(year:month:day:)``).
    public static func civil(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}

// Dates: RFC 3339's `date-time` (the OpenAPI document's `format`), as JSON bodies carry them.
extension UTCTimestamp {
    /// Parses `2024-05-01T10:00:00Z`, with optional fractional seconds and any offset. Nothing
    /// else: RFC 3339's `date-time`, which the OpenAPI document's `format` promises (Foundation's
    /// parser alone also takes what follows a valid time, `...-04:15*`).
    public static func date(_ text: String) -> Date? {
        // Foundation's parser rolls impossible fields over (`12:99` becomes `13:39`): the fields'
        // ranges are checked first (``parse(_:)``).
        guard isDateTime(text), parse(text) != nil else { return nil }
        // RFC 3339 lets `T` and `Z` be lowercase; Foundation reads them uppercase.
        let text = text.uppercased()
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return date }
        return try? Date(text, strategy: Date.ISO8601FormatStyle())
    }

    /// Whether `text` has the shape of an RFC 3339 `date-time`: `yyyy-MM-ddTHH:mm:ss`, optional
    /// fractional seconds, then `Z` or `±HH:mm` and nothing after.
    static func isDateTime(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        func digits(_ range: Range<Int>) -> Bool { range.upperBound <= bytes.count && range.allSatisfy { (0x30...0x39).contains(bytes[$0]) } }
        guard bytes.count >= 20, digits(0..<4), bytes[4] == 0x2D, digits(5..<7), bytes[7] == 0x2D, digits(8..<10),
              bytes[10] == 0x54 || bytes[10] == 0x74, digits(11..<13), bytes[13] == 0x3A, digits(14..<16), bytes[16] == 0x3A, digits(17..<19)
        else { return false }
        var index = 19
        if bytes[index] == 0x2E {
            index += 1
            let first = index
            while index < bytes.count, (0x30...0x39).contains(bytes[index]) { index += 1 }
            guard index > first else { return false }
        }
        guard index < bytes.count else { return false }
        if bytes[index] == 0x5A || bytes[index] == 0x7A { return index + 1 == bytes.count }
        return (bytes[index] == 0x2B || bytes[index] == 0x2D) && bytes.count == index + 6
            && digits(index + 1..<index + 3) && bytes[index + 3] == 0x3A && digits(index + 4..<index + 6)
    }

    /// Formats as `2024-05-01T10:00:00Z`, or with milliseconds when the date has a fraction.
    public static func format(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        guard seconds.rounded(.down) == seconds else { return date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)) }
        // Whole seconds from 1583 (where Foundation's calendar is Gregorian, not Julian) to 9999:
        // integer arithmetic, no calendar.
        guard (-12_212_553_600 ... 253_402_300_799).contains(seconds) else { return date.formatted(Date.ISO8601FormatStyle()) }
        return format(micros: Int64(seconds) * 1_000_000, fractionDigits: 0)
    }
}
