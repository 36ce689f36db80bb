import Foundation
import GatewayCore

/// A rate in a configuration file: `60/min`, `30/s`, `1000/h` or `10000/day`.
public struct RateSpec: ConfigurationText, Sendable, Hashable {
    public init(from decoder: any Decoder) throws { try self.init(textFrom: decoder) }
    public func encode(to encoder: any Encoder) throws { try encodeText(to: encoder) }

    /// How many requests...
    public var count: Int
    /// ...per this many seconds.
    public var period: Double

    public init(count: Int, period: Double) {
        self.count = count
        self.period = period
    }

    public static let kind = "rate"
    public static let examples = "60/min, 30/s, 1000/h"

    public init?(parsing text: String) {
        let parts = text.replacingOccurrences(of: " ", with: "").split(separator: "/")
        guard parts.count == 2, let count = Int(parts[0]), count > 0, count <= 1_000_000_000 else { return nil }
        let periods: [String: Double] = ["s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86_400, "day": 86_400]
        guard let period = periods[String(parts[1])] else { return nil }
        self.count = count
        self.period = period
    }

    public var description: String {
        let unit = [1: "s", 60: "min", 3600: "h", 86_400: "day"][Int(period)] ?? "\(period)s"
        return "\(count)/\(unit)"
    }
}

/// A quota in a configuration file: `1000/day` or `1000000/month`, counted per calendar day or
/// month in UTC (a quota renews at midnight, or on the first of the month, UTC).
public struct QuotaSpec: ConfigurationText, Sendable, Hashable {
    public init(from decoder: any Decoder) throws { try self.init(textFrom: decoder) }
    public func encode(to encoder: any Encoder) throws { try encodeText(to: encoder) }

    public enum Window: String, Sendable, Hashable { case day, month }

    /// How many requests (units of cost)...
    public var count: Int
    /// ...per calendar day or month.
    public var window: Window

    public init(count: Int, window: Window) {
        self.count = count
        self.window = window
    }

    public static let kind = "quota"
    public static let examples = "1000/day, 1000000/month"

    public init?(parsing text: String) {
        let parts = text.replacingOccurrences(of: " ", with: "").split(separator: "/")
        guard parts.count == 2, let count = Int(parts[0]), count > 0, count <= 1_000_000_000_000 else { return nil }
        switch parts[1] {
        case "d", "day": window = .day
        case "mo", "month": window = .month
        default: return nil
        }
        self.count = count
    }

    public var description: String { "\(count)/\(window.rawValue)" }

    /// The window holding `date`: its start and its end (UTC calendar day or month).
    public func window(at date: Date) -> (start: Date, end: Date) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let unit: Calendar.Component = window == .day ? .day : .month
        let interval = calendar.dateInterval(of: unit, for: date)!
        return (interval.start, interval.end)
    }
}
