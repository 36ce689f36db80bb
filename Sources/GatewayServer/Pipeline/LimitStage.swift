import GatewayCore
import HTTPTypes

/// The rate limit and quota: charges the route's cost to the principal's budget for the plugin,
/// and gives the `RateLimit` fields every reply carries, or the 429 (with `Retry-After`) when the
/// budget is spent. Handlers charge further work (each call of a batch) through the same limiter.
struct LimitStage: Sendable {
    let limiter: any RateLimiter
    let metrics: GatewayMetrics

    func run(_ call: inout RouteCall) async throws {
        let (principal, plugin, cost) = (call.principal, call.mounted.pluginID, call.mounted.cost)
        call.limitFields = try await GatewayTracing.span("rate limit") { try await charge(principal, plugin: plugin, cost: cost) }
    }

    /// Charges `cost` units; answered without suspending when the limiter can (limits kept in this
    /// process).
    func charge(_ principal: Principal, plugin: String, cost: Int) async throws -> [HTTPField] {
        let decision: RateLimitDecision
        if let now = limiter.acquireNow(principal: principal, plugin: plugin, cost: cost) {
            decision = now
        } else {
            decision = try await limiter.acquire(principal: principal, plugin: plugin, cost: cost)
        }
        guard decision.allowed else {
            metrics.recordRateLimited(plugin: plugin)
            throw GatewayError.quotaExceeded(policy: decision.policy, retryAfter: decision.retryAfter, detail: decision.detail).adding(headers: HTTPFields(decision.headers))
        }
        return decision.headers
    }
}
