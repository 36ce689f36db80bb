import Foundation
import Synchronization

/// What the console's live traffic page and `/v1/admin/metrics/live` show: per second and per
/// plugin, the requests answered, their latency (p50, p99), server errors, rate-limit refusals
/// and cache hits of the last minute, kept in memory by this instance. Prometheus (`/metrics`)
/// keeps the long history; this is for watching the gateway now without one.
///
/// Each second has a slot of a ring of 61; latencies fall in 64 buckets growing by a quarter from
/// 10 µs (to ~16 s), so a percentile is read to within a quarter of its value.
public final class LiveTraffic: Sendable {
    /// The figures of one second, or the average second over several.
    public struct Sample: Codable, Sendable, Equatable {
        /// Requests answered per second.
        public var rate: Double
        /// The median and 99th percentile of their durations, in milliseconds (nil: no request).
        public var p50: Double?
        public var p99: Double?
        /// Replies with a 5xx status, per second.
        public var errors: Double
        /// Requests refused by a rate limit or quota (429), per second.
        public var limited: Double
        /// Replies served from the response cache, per second.
        public var cacheHits: Double
        /// Hits among the cache's lookups (hits and misses; nil: none was looked up).
        public var cacheHitRate: Double?
    }

    /// What this instance answered since it started, per plugin.
    public struct Totals: Codable, Sendable, Equatable {
        public var requests = 0
        public var errors = 0
        public var limited = 0
        public var cacheHits = 0
        public var cacheMisses = 0

        mutating func add(status: Int, cache: CacheOutcome?) {
            requests += 1
            if status >= 500 { errors += 1 }
            if status == 429 { limited += 1 }
            switch cache {
            case .hit?: cacheHits += 1
            case .miss?: cacheMisses += 1
            case nil: break
            }
        }

        mutating func add(_ other: Totals) {
            requests += other.requests
            errors += other.errors
            limited += other.limited
            cacheHits += other.cacheHits
            cacheMisses += other.cacheMisses
        }
    }

    /// Whether a reply came from the cache.
    public enum CacheOutcome: Sendable {
        case hit, miss
    }

    static let slotCount = 61
    static let bucketCount = 64
    private static let smallest = 10.0e-6
    private static let growth = 1.25

    private struct Counts {
        var totals = Totals()
        var latency = [UInt32](repeating: 0, count: LiveTraffic.bucketCount)

        mutating func add(status: Int, bucket: Int, cache: CacheOutcome?) {
            totals.add(status: status, cache: cache)
            latency[bucket] &+= 1
        }

        mutating func add(_ other: Counts) {
            totals.add(other.totals)
            for bucket in 0..<LiveTraffic.bucketCount { latency[bucket] &+= other.latency[bucket] }
        }
    }

    private struct Slot {
        var second = -1
        var plugins: [String: Counts] = [:]
    }

    private struct State {
        var slots = [Slot](repeating: Slot(), count: LiveTraffic.slotCount)
        var totals: [String: Totals] = [:]
    }

    private let state = Mutex(State())
    private let origin = ContinuousClock.now

    public init() {}

    /// When the second after the one `instant` falls in starts: a sample taken then holds that
    /// second whole.
    public func nextSecond(after instant: ContinuousClock.Instant = .now) -> ContinuousClock.Instant {
        origin + .seconds(second(instant) + 1)
    }

    /// The second of the ring `instant` falls in.
    private func second(_ instant: ContinuousClock.Instant) -> Int {
        let elapsed = instant - origin
        return Int(elapsed.components.seconds)
    }

    static func bucket(_ duration: Duration) -> Int {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
        guard seconds > smallest else { return 0 }
        return min(bucketCount - 1, Int(log(seconds / smallest) / log(growth)) + 1)
    }

    /// The upper bound of a bucket, in milliseconds.
    private static func upperBound(_ bucket: Int) -> Double {
        smallest * pow(growth, Double(bucket)) * 1000
    }

    /// Records one reply of `plugin` (`gateway` for the gateway's own endpoints and refusals).
    public func record(plugin: String, status: Int, duration: Duration, cache: CacheOutcome?, at instant: ContinuousClock.Instant = .now) {
        let second = second(instant)
        let bucket = Self.bucket(duration)
        state.withLock { state in
            let index = second % state.slots.count
            if state.slots[index].second != second {
                state.slots[index] = Slot(second: second)
            }
            state.slots[index].plugins[plugin, default: Counts()].add(status: status, bucket: bucket, cache: cache)
            state.totals[plugin, default: Totals()].add(status: status, cache: cache)
        }
    }

    /// The average second of the last `seconds` complete seconds before `instant`, overall and per
    /// plugin (plugins that answered nothing in them are left out).
    public func sample(lastSeconds seconds: Int = 1, at instant: ContinuousClock.Instant = .now) -> (overall: Sample, plugins: [String: Sample]) {
        let now = second(instant)
        let span = max(1, min(seconds, Self.slotCount - 1))
        let wanted = (now - span)..<now
        var perPlugin: [String: Counts] = [:]
        state.withLock { state in
            for slot in state.slots where wanted.contains(slot.second) {
                for (plugin, counts) in slot.plugins { perPlugin[plugin, default: Counts()].add(counts) }
            }
        }
        var overall = Counts()
        for counts in perPlugin.values { overall.add(counts) }
        return (Self.sample(overall, seconds: span), perPlugin.mapValues { Self.sample($0, seconds: span) })
    }

    private static func sample(_ counts: Counts, seconds: Int) -> Sample {
        let span = Double(seconds)
        let lookups = counts.totals.cacheHits + counts.totals.cacheMisses
        return Sample(rate: Double(counts.totals.requests) / span, p50: percentile(0.5, of: counts), p99: percentile(0.99, of: counts),
                      errors: Double(counts.totals.errors) / span, limited: Double(counts.totals.limited) / span,
                      cacheHits: Double(counts.totals.cacheHits) / span,
                      cacheHitRate: lookups == 0 ? nil : Double(counts.totals.cacheHits) / Double(lookups))
    }

    private static func percentile(_ fraction: Double, of counts: Counts) -> Double? {
        let total = counts.latency.reduce(0) { $0 + Int($1) }
        guard total > 0 else { return nil }
        let rank = max(1, Int((fraction * Double(total)).rounded(.up)))
        var seen = 0
        for (bucket, count) in counts.latency.enumerated() {
            seen += Int(count)
            if seen >= rank { return upperBound(bucket) }
        }
        return upperBound(bucketCount - 1)
    }

    /// What each plugin answered since this instance started.
    public var totals: [String: Totals] { state.withLock { $0.totals } }
}
