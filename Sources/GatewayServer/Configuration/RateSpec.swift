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
