import Foundation
import GatewayCore

/// An aggregate over each interval (beyond the legacy API, which only sampled).
enum HistoryFunction: String, Sendable, CaseIterable {
    case avg, min, max, sum, count, first, last
}

/// Which datapoints of a datastream a history request selects.
///
/// The legacy semantics: `start`, `end` (default now) and `duration` (`6hours`) give the range —
/// any two of them, or one (`duration` alone ends now; `start` alone runs to now; `end` alone, or
/// nothing, gives the newest `limit` datapoints). `limit` is 1–1000 (default 100). `interval`
/// samples the value in force at each point `start + k·interval`; `interval_type=discrete` reports
/// every point at the point's time, otherwise each sampled datapoint once at its own time.
/// `find_previous` also considers the datapoint before `start`. `function` aggregates each
/// interval instead of sampling it.
struct HistoryQuery: Sendable, Equatable {
    var start: Int64
    var end: Int64
    var limit: Int
    /// Seconds between interval points; nil for raw datapoints.
    var interval: Int64?
    var discrete = false
    var findPrevious = false
    var function: HistoryFunction?
    /// No start was given: the newest `limit` datapoints up to `end`.
    var newest = false
    /// The range ends before it starts (the native API's reading): it holds no datapoints.
    var isEmpty = false

    /// The intervals of the legacy API and the longest range each may cover (seconds).
    static let legacyIntervals: [(interval: Int64, maximumRange: Int64)] = [
        (0, 21_600), (30, 43_200), (60, 86_400), (300, 432_000), (900, 1_209_600), (1_800, 2_678_400),
        (3_600, 2_678_400), (10_800, 7_776_000), (21_600, 15_552_000), (43_200, 31_536_000), (86_400, 31_536_000),
    ]

    static let defaultLimit = 100
    static let maximumLimit = 1_000
    /// The `limit`s a query takes.
    static let limits = 1...maximumLimit
    /// The longest `interval` of the native API: a year.
    static let longestInterval: Int64 = 31_536_000
    /// The most interval points one query may span (range ÷ interval): each costs an index seek.
    static let maximumPoints: Int64 = 20_000

    /// Whether any history parameter is present (a legacy datastream read then includes datapoints).
    static func isRequested(_ parameters: [String: String]) -> Bool {
        ["start", "end", "duration", "interval", "limit", "function", "find_previous"].contains { parameters[$0] != nil }
    }

    /// Reads the parameters. `legacy` rounds an interval up to the legacy set and enforces its
    /// largest range (as the old service did); the native API takes any interval from 1 second to
    /// a year. Problems are 400s naming the parameter.
    init(parameters: [String: String], now: Int64, legacy: Bool) throws {
        func fail(_ name: String, _ detail: String) -> GatewayError {
            GatewayError.badRequest("\(name): \(detail)", errors: [.init(pointer: "query.\(name)", detail: detail)])
        }
        func time(_ name: String) throws -> Int64? {
            guard let text = parameters[name] else { return nil }
            guard let micros = UTCTimestamp.parse(text) else { throw fail(name, "'\(text.prefix(40))' is not an ISO 8601 time such as 2013-01-01T14:14:55.118845Z") }
            return micros
        }
        var duration: Int64?
        if let text = parameters["duration"] {
            guard let seconds = HistoryDuration.seconds(text) else { throw fail("duration", "'\(text.prefix(40))' is not a duration such as 6hours, 2days or 1week") }
            duration = seconds * 1_000_000
        }
        let start = try time("start")
        let end = try time("end")
        switch (start, end, duration) {
        case (let start?, let end?, nil):
            self.start = start
            self.end = end
        case (let start?, nil, let duration?):
            self.start = start
            self.end = start + duration
        case (nil, let end?, let duration?):
            self.start = end - duration
            self.end = end
        case (nil, nil, let duration?):
            self.start = now - duration
            self.end = now
        case (let start?, nil, nil):
            self.start = start
            self.end = Swift.max(now, start)
        case (nil, let end, nil):
            self.start = Int64.min / 2
            self.end = end ?? now
            newest = true
        case (_?, _?, _?):
            throw fail("duration", "give at most two of start, end and duration")
        }
        if self.start > self.end {
            guard !legacy else { throw fail("end", "must not be before start") }
            isEmpty = true
        }

        limit = Self.defaultLimit
        if let text = parameters["limit"] {
            guard let value = Int(text), Self.limits.contains(value) else { throw fail("limit", "must be an integer from 1 to \(Self.maximumLimit)") }
            limit = value
        }
        if let text = parameters["interval"] {
            guard let seconds = Int64(text), seconds >= 0 else { throw fail("interval", "must be a number of seconds") }
            if legacy {
                guard let chosen = Self.legacyIntervals.first(where: { $0.interval >= seconds }) else {
                    throw fail("interval", "must be at most 86400 (one of \(Self.legacyIntervals.map { String($0.interval) }.joined(separator: ", ")))")
                }
                if chosen.interval > 0 {
                    guard !newest, (self.end - self.start) / 1_000_000 <= chosen.maximumRange else {
                        throw fail("interval", "an interval of \(chosen.interval) seconds covers at most \(chosen.maximumRange / 3_600) hours: give start and end or duration within it")
                    }
                    interval = chosen.interval
                }
            } else if seconds > 0 {
                guard seconds <= Self.longestInterval else { throw fail("interval", "must be at most \(Self.longestInterval) (a year)") }
                guard !newest else { throw fail("interval", "needs a range: give start or duration") }
                guard (self.end - self.start) / (seconds * 1_000_000) < Self.maximumPoints else {
                    throw fail("interval", "the range holds more than \(Self.maximumPoints) intervals: give a longer interval or a shorter range")
                }
                interval = seconds
            }
        }
        switch parameters["interval_type"] {
        case nil: break
        case "discrete": discrete = true
        case let other?: throw fail("interval_type", "'\(other.prefix(40))' is not supported (only discrete)")
        }
        switch parameters["find_previous"]?.lowercased() {
        case nil, "false", "0": break
        case "true", "1", "": findPrevious = true
        case let other?: throw fail("find_previous", "'\(other.prefix(40))' is not true or false")
        }
        if let text = parameters["function"] {
            guard let function = HistoryFunction(rawValue: text) else {
                throw fail("function", "must be one of \(HistoryFunction.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard interval != nil else { throw fail("function", "needs an interval") }
            self.function = function
        }
    }
}
