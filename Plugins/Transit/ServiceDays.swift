import Foundation
import GatewayCore

/// Civil dates as days since 1970-01-01, and the GTFS service day.
///
/// A GTFS stop time counts seconds from "noon minus 12 hours" of its service date in the agency's
/// time zone, not from midnight: on the days clocks change, midnight and noon − 12 h differ by an
/// hour, and `25:10:00` stays 1 h 10 min after the next day's noon − 12 h.
enum ServiceDay {
    /// The instant (UTC seconds) a service date starts: noon local time minus 12 hours.
    static func start(of day: Int32, in zone: TimeZone) -> Int64 {
        let noonUTC = Int64(day) * 86_400 + 43_200
        var offset = Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(noonUTC))))
        let corrected = Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(noonUTC - offset))))
        if corrected != offset { offset = corrected }
        return noonUTC - offset - 43_200
    }

    /// The local date of `instant` in `zone`.
    static func day(of instant: Int64, in zone: TimeZone) -> Int32 {
        let offset = Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(instant))))
        return Int32((instant + offset).floorDiv(86_400))
    }

    /// `yyyy-MM-dd`.
    static func format(_ day: Int32) -> String {
        let civil = UTCTimestamp.civil(days: Int64(day))
        return String(format: "%04d-%02d-%02d", Int(civil.year), Int(civil.month), Int(civil.day))
    }

    /// `yyyyMMdd` (GTFS and GTFS-realtime).
    static func compact(_ day: Int32) -> String {
        let civil = UTCTimestamp.civil(days: Int64(day))
        return String(format: "%04d%02d%02d", Int(civil.year), Int(civil.month), Int(civil.day))
    }

    /// `yyyy-MM-dd` (or GTFS's `yyyyMMdd`): days since 1970, nil when not a date.
    static func parse(_ text: String) -> Int32? {
        let bytes = Array(text.utf8)
        if bytes.count == 8 { return GTFSFormat.date(text) }
        guard bytes.count == 10, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-") else { return nil }
        return GTFSFormat.date(String(decoding: bytes[0..<4] + bytes[5..<7] + bytes[8..<10], as: UTF8.self))
    }

    /// Monday 0 ... Sunday 6 (1970-01-01 was a Thursday).
    static func weekday(_ day: Int32) -> Int {
        Int((Int64(day) + 3).floorMod(7))
    }
}

/// The civil-date arithmetic GTFS dates need.
enum CivilDate {
    static func days(year: Int, month: Int, day: Int) -> Int {
        Int(UTCTimestamp.days(year: Int64(year), month: Int64(month), day: Int64(day)))
    }

    static func civil(_ days: Int) -> (year: Int, month: Int, day: Int) {
        let civil = UTCTimestamp.civil(days: Int64(days))
        return (Int(civil.year), Int(civil.month), Int(civil.day))
    }
}

extension Int64 {
    func floorDiv(_ divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }

    func floorMod(_ divisor: Int64) -> Int64 {
        let remainder = self % divisor
        return remainder < 0 ? remainder + divisor : remainder
    }
}

/// Which dates a GTFS service runs: calendar.txt's weekdays between two dates, with
/// calendar_dates.txt's exceptions (added or removed dates; a service may have exceptions only).
struct ServiceCalendar: Sendable {
    /// Bit 0 Monday ... bit 6 Sunday.
    var weekdays: UInt8 = 0
    var firstDay: Int32 = .max
    var lastDay: Int32 = .min
    var added: Set<Int32> = []
    var removed: Set<Int32> = []

    func runs(on day: Int32) -> Bool {
        if !removed.isEmpty, removed.contains(day) { return false }
        if !added.isEmpty, added.contains(day) { return true }
        guard day >= firstDay, day <= lastDay else { return false }
        return weekdays & (1 << UInt8(ServiceDay.weekday(day))) != 0
    }
}
