import Foundation
import GatewayCore
import HTTPTypes
import NIOConcurrencyHelpers
import SQLKit

/// The quotas of consumer groups (`limits.groups.<name>.quota`): what each caller used of its
/// group's quota in the current UTC day or month, kept in the database (`gateway_quota_usage`),
/// so that use survives a restart and every instance on the database counts in the same row,
/// exactly, under either `limits.policy`. One statement per request charges it: the row's lock
/// serialises concurrent callers, and the statement refuses what would exceed the quota.
///
/// A caller is counted per account (its sessions, keys and tokens together), else per key or
/// provider subject; a caller moved to another group starts that group's count.
public struct QuotaLedger: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock
    /// When this instance last deleted the rows of past windows (wall-clock seconds).
    private let lastPrune: NIOLockedValueBox<Double>

    public init(database: any SQLDatabase, clock: any WallClock = SystemClock()) {
        self.database = database
        self.clock = clock
        // The first quota charged prunes (an instance restarted within the hour prunes too).
        lastPrune = .init(-.infinity)
    }

    /// Once an hour per instance, deletes the rows no window can use any more (started more than
    /// 32 days ago: a month's window is at most 31 days), so callers who come once do not grow
    /// the table without end. A failure waits for the next hour.
    private func pruneIfDue(now: Date) async {
        let seconds = now.timeIntervalSince1970
        let due = lastPrune.withLockedValue { last in
            guard seconds - last >= 3600 else { return false }
            last = seconds
            return true
        }
        guard due else { return }
        try? await database.delete(from: "gateway_quota_usage").where("window_start", .lessThan, Int(seconds) - 32 * 86_400).run()
    }

    /// The outcome of one charge: allowed or not, with what is left and when it renews.
    struct Outcome: Sendable {
        var allowed: Bool
        var remaining: Int
        var windowStart: Date
        var windowEnd: Date
        var now: Date
        var resetSeconds: Int { max(1, Int(windowEnd.timeIntervalSince(now).rounded(.up))) }
        var windowSeconds: Int { Int(windowEnd.timeIntervalSince(windowStart).rounded()) }
    }

    /// The bucket of `principal` in `group`.
    static func bucket(group: String, principal: Principal) -> String {
        group + "|" + (principal.userID.map { "user:" + $0 } ?? principal.limitKey)
    }

    /// Charges `cost` units to `principal`'s use of `group`'s `quota`.
    func charge(group: String, quota: QuotaSpec, principal: Principal, cost: Int) async throws -> Outcome {
        let now = clock.now()
        let (start, end) = quota.window(at: now)
        let startSeconds = Int(start.timeIntervalSince1970)
        let bucket = Self.bucket(group: group, principal: principal)
        let cost = max(0, cost)
        struct Row: Decodable {
            var used: Int
            var window_start: Int
        }
        if cost <= quota.count {
            // One statement: a row of an earlier window starts again from this request's cost; a
            // request stamped with an earlier window than the row's (an instance's clock a little
            // behind, a statement overtaken at midnight) counts in the row's window, never resets it.
            let charged = try await database.raw("""
                INSERT INTO gateway_quota_usage (bucket, window_start, used) VALUES (\(bind: bucket), \(bind: startSeconds), \(bind: cost))
                ON CONFLICT (bucket) DO UPDATE SET
                    used = CASE WHEN excluded.window_start > gateway_quota_usage.window_start
                                THEN excluded.used ELSE gateway_quota_usage.used + excluded.used END,
                    window_start = CASE WHEN excluded.window_start > gateway_quota_usage.window_start
                                        THEN excluded.window_start ELSE gateway_quota_usage.window_start END
                WHERE (CASE WHEN excluded.window_start > gateway_quota_usage.window_start
                            THEN 0 ELSE gateway_quota_usage.used END) + excluded.used <= \(bind: quota.count)
                RETURNING used, window_start
                """).first(decoding: Row.self)
            await pruneIfDue(now: now)
            if let charged {
                return Outcome(allowed: true, remaining: max(0, quota.count - charged.used), windowStart: start, windowEnd: end, now: now)
            }
        }
        let current = try await database.select().column("used").column("window_start").from("gateway_quota_usage")
            .where("bucket", .equal, bucket).first(decoding: Row.self)
        let used = current.map { $0.window_start >= startSeconds ? $0.used : 0 } ?? 0
        return Outcome(allowed: false, remaining: max(0, quota.count - used), windowStart: start, windowEnd: end, now: now)
    }

    /// `decision` (the rate's) with `principal`'s group quota charged on top when it has one: the
    /// quota's entries joined to `RateLimit-Policy` and `RateLimit`, the `X-RateLimit-*` fields
    /// those of the tighter of the two, and a refusal naming the quota when it is used up. A
    /// request the rate refuses is not charged to the quota.
    func apply(_ decision: RateLimitDecision, group: (name: String, quota: QuotaSpec), principal: Principal, cost: Int) async throws -> RateLimitDecision {
        guard decision.allowed else { return decision }
        let outcome: Outcome
        do {
            outcome = try await charge(group: group.name, quota: group.quota, principal: principal, cost: cost)
        } catch {
            throw GatewayError.unavailable("The quota store is not answering; try again shortly.", retryAfter: 1)
        }
        let policy = group.name + ":" + group.quota.window.rawValue
        var result = decision
        var fields = HTTPFields(decision.headers)
        func join(_ name: HTTPField.Name, _ entry: String) {
            fields[name] = fields[name].map { $0 + ", " + entry } ?? entry
        }
        join(GCRA.policyField, "\"\(policy)\";q=\(group.quota.count);w=\(outcome.windowSeconds)")
        join(GCRA.rateLimitField, "\"\(policy)\";r=\(outcome.remaining);t=\(outcome.resetSeconds)")
        let rateRemaining = fields[GCRA.remainingField].flatMap { Int($0) } ?? .max
        if outcome.remaining < rateRemaining || !outcome.allowed {
            fields[GCRA.limitField] = String(group.quota.count)
            fields[GCRA.remainingField] = String(outcome.remaining)
            fields[GCRA.resetField] = String(outcome.resetSeconds)
        }
        result.headers = Array(fields)
        if !outcome.allowed {
            result.allowed = false
            result.policy = policy
            result.retryAfter = outcome.resetSeconds
            let renews = ISO8601DateFormatter().string(from: outcome.windowEnd)
            result.detail = "The \(group.quota.window == .day ? "daily" : "monthly") quota of group '\(group.name)' (\(group.quota.count) requests) "
                + "is used up\(outcome.remaining > 0 ? " (\(outcome.remaining) left, fewer than this request costs)" : ""); it renews at \(renews)."
        }
        return result
    }
}
