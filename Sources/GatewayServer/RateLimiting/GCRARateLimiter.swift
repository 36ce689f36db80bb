import Foundation
import GatewayCore
import HTTPTypes
import NIOConcurrencyHelpers
import SQLKit
import Synchronization

/// Which quota applies to a request: the caller kind's default from plugins.yaml, the plugin's
/// override, or the key's own rate.
public struct RateLimitPolicies: Sendable, Equatable {
    public var defaults: LimitSettings
    public var plugins: [String: LimitOverrides]

    public init(defaults: LimitSettings, plugins: [String: LimitOverrides] = [:]) {
        self.defaults = defaults
        self.plugins = plugins
    }

    /// What a guest's bucket is keyed by: its address, or for IPv6 its network of
    /// `limits.ipv6Prefix` bits (see ``ClientAddressKey``).
    func guestKey(_ address: String) -> String {
        ClientAddressKey.key(for: address, ipv6Prefix: defaults.ipv6Prefix)
    }

    /// Whether a key's own rate is stricter than `rate` (a key's rate only lowers its group's: its
    /// owner may set one up to `limits.key`).
    static func ownRate(of principal: Principal, isStricterThan rate: RateSpec) -> Bool {
        guard let own = principal.quota else { return false }
        // Stricter in both its burst and its rate: 599/min under a group's 10/s would burst 599.
        return own.count <= rate.count && Double(own.count) / own.seconds < Double(rate.count) / rate.period
    }

    /// The first of the caller's consumer groups that `limits.groups` configures, with its limits.
    func group(of principal: Principal) -> (name: String, limits: GroupLimits)? {
        guard !principal.groups.isEmpty, !defaults.groups.isEmpty else { return nil }
        for name in principal.groups { if let limits = defaults.groups[name] { return (name, limits) } }
        return nil
    }

    /// The caller's group quota, when its group has one.
    func quota(of principal: Principal) -> (name: String, quota: QuotaSpec)? {
        guard let group = group(of: principal), let quota = group.limits.quota else { return nil }
        return (group.name, quota)
    }

    /// The policy name (for headers and 429 bodies) and its rate: a key's own rate, else the
    /// caller's group's, else its kind's (the plugin's override or the default).
    public func policy(for principal: Principal, plugin: String) -> (name: String, rate: RateSpec) {
        if let group = group(of: principal), let rate = group.limits.rate, !Self.ownRate(of: principal, isStricterThan: rate) { return (group.name, rate) }
        let overrides = plugins[plugin]
        switch principal.kind {
        case .anonymous:
            return ("anonymous", overrides?.anonymous ?? defaults.anonymous)
        case .user:
            return ("user", overrides?.user ?? defaults.user)
        case .apiKey(let keyID):
            if let quota = principal.quota { return ("key-\(keyID.prefix(8))", RateSpec(count: quota.count, period: quota.seconds)) }
            return ("key", overrides?.key ?? defaults.key)
        case .token:
            // A token acting for an account is that user; one without (a service) is limited as a key.
            return principal.userID != nil ? ("user", overrides?.user ?? defaults.user) : ("key", overrides?.key ?? defaults.key)
        }
    }
}

/// The generic cell rate algorithm, shared by the local and cluster limiters: a quota of `q`
/// requests per `w` seconds admits a request at `now` when its theoretical arrival time, pushed
/// by `cost × w/q`, is no more than `w` ahead of `now`. A full quota is available as a burst; it
/// refills evenly over the window. No schedule ever lets more than `q + elapsed × q/w` through.
enum GCRA {
    struct Outcome {
        var allowed: Bool
        var newTAT: Double
        var remaining: Int
        var resetSeconds: Int
        var retryAfter: Int
    }

    static func evaluate(tat stored: Double?, now: Double, rate: RateSpec, cost: Int) -> Outcome {
        let interval = rate.period / Double(rate.count)
        let tat = max(stored ?? now, now)
        let newTAT = tat + interval * Double(cost)
        let allowAt = newTAT - rate.period
        /// Whole requests in `units` intervals, forgiving the rounding error of the division
        /// (relative to its size: a quota of 10⁹ per minute has intervals of 6·10⁻⁸ s).
        func whole(_ units: Double) -> Int { max(0, Int((units + max(1e-9, abs(units) * 1e-12)).rounded(.down))) }
        if allowAt > now + 1e-9 {
            let remaining = whole((rate.period - (tat - now)) / interval)
            return Outcome(allowed: false, newTAT: tat, remaining: remaining, resetSeconds: Int((tat - now).rounded(.up)),
                           retryAfter: max(1, Int((allowAt - now).rounded(.up))))
        }
        let remaining = whole((rate.period - (newTAT - now)) / interval)
        return Outcome(allowed: true, newTAT: newTAT, remaining: remaining, resetSeconds: Int((newTAT - now).rounded(.up)), retryAfter: 0)
    }

    // Lowercase, as HTTP/2 writes every name (HTTP/1.1 names are case-insensitive): a lowercase
    // literal is its own canonical form, so the name holds two immortal strings. A mixed-case name
    // would hold a canonical copy made at run time, and every reply's copy of the field would
    // count references to it, a count all threads serving replies contend for.
    static let policyField = HTTPField.Name("ratelimit-policy")!
    static let rateLimitField = HTTPField.Name("ratelimit")!
    static let limitField = HTTPField.Name("x-ratelimit-limit")!
    static let remainingField = HTTPField.Name("x-ratelimit-remaining")!
    static let resetField = HTTPField.Name("x-ratelimit-reset")!

    /// The fields that depend on the policy alone (`RateLimit-Policy`, `X-RateLimit-Limit`), made
    /// once per policy: most requests share a handful of policies.
    private struct PolicyKey: Hashable {
        var name: String
        var count: Int
        var period: Double
    }
    private static let policyFields = NIOLockedValueBox<[PolicyKey: (policy: HTTPField, limit: HTTPField)]>([:])

    fileprivate static func fields(policy: String, rate: RateSpec) -> (policy: HTTPField, limit: HTTPField) {
        let key = PolicyKey(name: policy, count: rate.count, period: rate.period)
        if let known = policyFields.withLockedValue({ $0[key] }) { return known }
        let made = (HTTPField(name: policyField, value: "\"\(policy)\";q=\(rate.count);w=\(Int(rate.period))"),
                    HTTPField(name: limitField, value: String(rate.count)))
        policyFields.withLockedValue { table in
            // Keys with their own rates each add a policy: keep the table bounded.
            if table.count >= 4096 { table.removeAll(keepingCapacity: true) }
            table[key] = made
        }
        return made
    }

    /// A policy with the fields that depend on it alone made in advance (the local limiter
    /// resolves one per plugin and caller kind at start).
    final class ResolvedPolicy: Sendable {
        let name: String
        let rate: RateSpec
        let policyField: HTTPField
        let limitField: HTTPField
        /// `"name";r=` — the start of every `RateLimit` value of this policy.
        let ratePrefix: String

        init(name: String, rate: RateSpec) {
            self.name = name
            self.rate = rate
            (policyField, limitField) = GCRA.fields(policy: name, rate: rate)
            ratePrefix = "\"\(name)\";r="
        }

        /// The `RateLimit` value, `"name";r=<remaining>;t=<reset>`, written into one string of
        /// the right size rather than grown by appends.
        func rateValue(remaining: String, reset: String) -> String {
            var prefix = ratePrefix
            var remaining = remaining
            var reset = reset
            return prefix.withUTF8 { prefix in
                remaining.withUTF8 { remaining in
                    reset.withUTF8 { reset in
                        let count = prefix.count + remaining.count + 3 + reset.count
                        return String(unsafeUninitializedCapacity: count) { buffer in
                            var index = 0
                            func put(_ bytes: UnsafeBufferPointer<UInt8>) {
                                for byte in bytes {
                                    buffer[index] = byte
                                    index += 1
                                }
                            }
                            put(prefix)
                            put(remaining)
                            for byte in ";t=".utf8 {
                                buffer[index] = byte
                                index += 1
                            }
                            put(reset)
                            return index
                        }
                    }
                }
            }
        }
    }

    static func decision(_ outcome: Outcome, policy: ResolvedPolicy) -> RateLimitDecision {
        let remaining = String(outcome.remaining)
        let reset = String(outcome.resetSeconds)
        let rateValue = policy.rateValue(remaining: remaining, reset: reset)
        let headers = [
            policy.policyField,
            HTTPField(name: rateLimitField, value: rateValue),
            policy.limitField,
            HTTPField(name: remainingField, value: remaining),
            HTTPField(name: resetField, value: reset),
        ]
        return RateLimitDecision(allowed: outcome.allowed, headers: headers, policy: policy.name, retryAfter: outcome.retryAfter)
    }

    static func decision(_ outcome: Outcome, policy: String, rate: RateSpec) -> RateLimitDecision {
        decision(outcome, policy: ResolvedPolicy(name: policy, rate: rate))
    }
}

/// Rate limits kept in this process's memory (`limits.policy: local`), sharded to keep lock
/// contention low. Idle buckets (whose quota has fully returned) are equivalent to absent ones
/// and are evicted, so memory stays bounded under millions of distinct addresses.
public final class LocalRateLimiter: RateLimiter, Sendable {
    public let policies: RateLimitPolicies
    /// When a shard holds more buckets than this, its idle ones are swept.
    public let sweepThreshold: Int
    /// A bucket: one caller's use of one plugin. The caller is its kind and its address, user id
    /// or key id (the parts of ``Principal/limitKey``, without building that string).
    private struct Bucket: Hashable {
        var plugin: String
        var kind: UInt8
        var caller: String
        /// FNV-1a of the three parts, computed once: the shard is chosen and the bucket looked up
        /// by it, rather than by hashing both strings with SipHash for each.
        let digest: UInt64

        init(plugin: String, kind: UInt8, caller: String) {
            self.plugin = plugin
            self.kind = kind
            self.caller = caller
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            func add(_ byte: UInt8) {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01b3
            }
            for byte in plugin.utf8 { add(byte) }
            add(0)
            add(kind)
            for byte in caller.utf8 { add(byte) }
            digest = hash
        }

        static func == (left: Bucket, right: Bucket) -> Bool {
            left.digest == right.digest && left.kind == right.kind && left.plugin == right.plugin && left.caller == right.caller
        }

        func hash(into hasher: inout Hasher) { hasher.combine(digest) }
    }
    /// The policies of one plugin (or the defaults), per caller kind, resolved once. A class, so
    /// that taking a plugin's policies is one reference count, not three.
    private final class KindPolicies: Sendable {
        init(anonymous: GCRA.ResolvedPolicy, user: GCRA.ResolvedPolicy, key: GCRA.ResolvedPolicy) {
            self.anonymous = anonymous
            self.user = user
            self.key = key
        }

        let anonymous: GCRA.ResolvedPolicy
        let user: GCRA.ResolvedPolicy
        let key: GCRA.ResolvedPolicy
    }
    /// One shard's buckets and their lock. (Shards padded to cache lines in raw memory were
    /// measured against this array on `Benchmarks/run`, 2-core machine, 2026-11-28:
    /// `protected-cached` over `/healthz` 0.599 and 0.605 with them, 0.586, 0.664 and 0.670
    /// without, so the plain array stays.)
    private final class Shard: Sendable {
        let buckets = Mutex<[Bucket: Double]>([:])
    }
    private static let shardCount = 32
    private let shards = (0..<LocalRateLimiter.shardCount).map { _ in Shard() }
    private let defaultPolicies: KindPolicies
    private let pluginPolicies: [String: KindPolicies]
    /// The rates of consumer groups that have one, resolved once.
    private let groupPolicies: [String: GCRA.ResolvedPolicy]
    /// Where group quotas are counted (nil: no group has a quota, or no database).
    private let quotas: QuotaLedger?

    public init(policies: RateLimitPolicies, quotas: QuotaLedger? = nil, sweepThreshold: Int = 65_536) {
        self.policies = policies
        self.sweepThreshold = sweepThreshold
        self.quotas = quotas
        groupPolicies = policies.defaults.groups.compactMapValues { $0.rate }.reduce(into: [:]) { $0[$1.key] = .init(name: $1.key, rate: $1.value) }
        func resolve(_ overrides: LimitOverrides?) -> KindPolicies {
            KindPolicies(anonymous: .init(name: "anonymous", rate: overrides?.anonymous ?? policies.defaults.anonymous),
                         user: .init(name: "user", rate: overrides?.user ?? policies.defaults.user),
                         key: .init(name: "key", rate: overrides?.key ?? policies.defaults.key))
        }
        defaultPolicies = resolve(nil)
        pluginPolicies = policies.plugins.mapValues(resolve)
    }

    /// Seconds on the monotonic clock.
    private var now: Double { MonotonicClock.seconds }

    public func acquire(principal: Principal, plugin: String, cost: Int) async throws -> RateLimitDecision {
        let decision = decide(principal: principal, plugin: plugin, cost: cost)
        guard let quotas, let quota = policies.quota(of: principal) else { return decision }
        return try await quotas.apply(decision, group: quota, principal: principal, cost: cost)
    }

    /// Nil for a caller whose group has a quota (counted in the database, so awaited).
    public func acquireNow(principal: Principal, plugin: String, cost: Int) -> RateLimitDecision? {
        if quotas != nil, !principal.groups.isEmpty, policies.quota(of: principal) != nil { return nil }
        return decide(principal: principal, plugin: plugin, cost: cost)
    }

    private func decide(principal: Principal, plugin: String, cost: Int) -> RateLimitDecision {
        let kinds = pluginPolicies.isEmpty ? defaultPolicies : pluginPolicies[plugin] ?? defaultPolicies
        var policy: GCRA.ResolvedPolicy
        let key: Bucket
        switch principal.kind {
        case .anonymous:
            policy = kinds.anonymous
            key = Bucket(plugin: plugin, kind: 0, caller: policies.guestKey(principal.address))
        case .user:
            policy = kinds.user
            key = Bucket(plugin: plugin, kind: 1, caller: principal.userID ?? "")
        case .apiKey(let keyID):
            // A key with its own rate has a policy of its own (made per request: such keys are few).
            policy = principal.quota.map { .init(name: "key-\(keyID.prefix(8))", rate: RateSpec(count: $0.count, period: $0.seconds)) } ?? kinds.key
            // A user's keys share their owner's bucket unless one has its own (see ``Principal/rateLimitKey``).
            key = Bucket(plugin: plugin, kind: 2, caller: principal.hasOwnLimit ? keyID : principal.userID.map { "owner:" + $0 } ?? keyID)
        case .token(let provider, let subject):
            // A token acting for an account shares that user's bucket; one without has its own.
            if let userID = principal.userID {
                policy = kinds.user
                key = Bucket(plugin: plugin, kind: 1, caller: userID)
            } else {
                policy = kinds.key
                key = Bucket(plugin: plugin, kind: 3, caller: provider + ":" + subject)
            }
        }
        if !principal.groups.isEmpty, let group = policies.group(of: principal), let groupPolicy = groupPolicies[group.name],
           !RateLimitPolicies.ownRate(of: principal, isStricterThan: groupPolicy.rate) {
            policy = groupPolicy
        }
        let now = self.now
        let rate = policy.rate
        let outcome = shards[Int((key.digest >> 32) % UInt64(Self.shardCount))].buckets.withLock { buckets in
            // One lookup: an existing bucket is updated where it is.
            let index = buckets.index(forKey: key)
            let outcome = GCRA.evaluate(tat: index.map { buckets.values[$0] }, now: now, rate: rate, cost: max(0, cost))
            if outcome.allowed {
                if let index { buckets.values[index] = outcome.newTAT } else { buckets[key] = outcome.newTAT }
            }
            if buckets.count > sweepThreshold { buckets = buckets.filter { $0.value > now } }
            return outcome
        }
        return GCRA.decision(outcome, policy: policy)
    }

    /// Takes over what callers have used of `previous`'s buckets (a reload's new limits start
    /// from the old ones' use, not from full): the share of its period a caller has used stays
    /// used under the new rate (two of three a minute used: twenty of thirty). Where both hold a
    /// bucket, the later theoretical arrival time wins, so no caller gains quota by the swap.
    /// (A key with a rate of its own is scaled by its plugin's key policy, which it does not use;
    /// its used time then carries over in proportion to that policy's change.)
    public func absorb(_ previous: LocalRateLimiter) {
        let now = self.now
        for index in 0..<Self.shardCount {
            let old = previous.shards[index].buckets.withLock { $0 }
            var carried: [Bucket: Double] = [:]
            for (bucket, tat) in old where tat > now {
                let before = previous.period(of: bucket), after = period(of: bucket)
                carried[bucket] = before > 0 ? now + (tat - now) * after / before : tat
            }
            guard !carried.isEmpty else { continue }
            shards[index].buckets.withLock { buckets in
                buckets.merge(carried) { max($0, $1) }
            }
        }
    }

    /// The period of the policy a bucket is counted under.
    private func period(of bucket: Bucket) -> Double {
        let kinds = pluginPolicies[bucket.plugin] ?? defaultPolicies
        switch bucket.kind {
        case 0: return kinds.anonymous.rate.period
        case 1: return kinds.user.rate.period
        default: return kinds.key.rate.period
        }
    }

    /// Buckets held now (for tests and metrics).
    public var bucketCount: Int { (0..<Self.shardCount).reduce(0) { count, index in count + shards[index].buckets.withLock { $0.count } } }
}

/// Rate limits kept in PostgreSQL (`limits.policy: cluster`): every instance on the database
/// shares one bucket per (caller, plugin), updated by a single atomic statement, so the limit is
/// exact across instances. Uses the wall clock, which instances must agree on.
///
/// A bucket whose theoretical arrival time has passed holds a full quota, the same as no bucket:
/// such rows are deleted as the table is written, at most `pruneBatch` of them by one statement,
/// at most once per `pruneInterval` on each instance (again at once while a batch comes back
/// full), so that a stream of distinct guests does not grow the table without end.
public struct ClusterRateLimiter: RateLimiter {
    public let policies: RateLimitPolicies
    public let database: any SQLDatabase
    public let clock: any WallClock
    public let pruneInterval: Double
    public let pruneBatch: Int
    /// Where group quotas are counted.
    let quotas: QuotaLedger
    /// When this instance last pruned (wall-clock seconds); shared by the copies of this value.
    private let lastPrune: NIOLockedValueBox<Double>

    public init(policies: RateLimitPolicies, database: any SQLDatabase, clock: any WallClock = SystemClock(),
                pruneInterval: Double = 60, pruneBatch: Int = 1000) {
        self.policies = policies
        self.database = database
        self.clock = clock
        self.pruneInterval = pruneInterval
        self.pruneBatch = pruneBatch
        quotas = QuotaLedger(database: database, clock: clock)
        lastPrune = .init(clock.now().timeIntervalSince1970)
    }

    public func acquire(principal: Principal, plugin: String, cost: Int) async throws -> RateLimitDecision {
        do {
            var decision = try await decide(principal: principal, plugin: plugin, cost: cost)
            await pruneIfDue()
            if let quota = policies.quota(of: principal) { decision = try await quotas.apply(decision, group: quota, principal: principal, cost: cost) }
            return decision
        } catch let error as GatewayError {
            throw error
        } catch {
            // The shared buckets cannot be read: refuse for now (503), rather than fail (500) or
            // let the caller through unmetered.
            throw GatewayError.unavailable("The rate-limit store is not answering; try again shortly.", retryAfter: 1)
        }
    }

    private func decide(principal: Principal, plugin: String, cost: Int) async throws -> RateLimitDecision {
        let (policy, rate) = policies.policy(for: principal, plugin: plugin)
        let key = plugin + "|" + (principal.isAnonymous ? "addr:" + policies.guestKey(principal.address) : principal.rateLimitKey)
        let now = clock.now().timeIntervalSince1970
        let step = rate.period / Double(rate.count) * Double(max(0, cost))
        struct Row: Decodable { var tat: Double }
        // One statement: the row lock serialises concurrent callers on every instance, and the
        // WHERE clause refuses the update when it would exceed the quota.
        let updated = try await database.raw("""
            INSERT INTO gateway_rate_limits (bucket, tat) VALUES (\(bind: key), \(bind: now + step))
            ON CONFLICT (bucket) DO UPDATE SET tat = GREATEST(gateway_rate_limits.tat, \(bind: now)) + \(bind: step)
            WHERE GREATEST(gateway_rate_limits.tat, \(bind: now)) + \(bind: step) - \(bind: rate.period) <= \(bind: now)
            RETURNING tat
            """).first(decoding: Row.self)
        if let updated {
            let outcome = GCRA.evaluate(tat: updated.tat - step, now: now, rate: rate, cost: cost)
            return GCRA.decision(outcome, policy: policy, rate: rate)
        }
        let current = try await database.select().column("tat").from("gateway_rate_limits").where("bucket", .equal, key).first(decoding: Row.self)
        var outcome = GCRA.evaluate(tat: current?.tat, now: now, rate: rate, cost: cost)
        outcome.allowed = false
        outcome.retryAfter = max(1, outcome.retryAfter)
        return GCRA.decision(outcome, policy: policy, rate: rate)
    }

    /// Prunes when this instance's interval has passed; a failure waits for the next interval
    /// (the limit itself does not depend on it).
    private func pruneIfDue() async {
        let now = clock.now().timeIntervalSince1970
        let due = lastPrune.withLockedValue { last in
            guard now - last >= pruneInterval else { return false }
            last = now
            return true
        }
        guard due, let deleted = try? await prune() else { return }
        // A full batch: more may be waiting, so the next write prunes again.
        if deleted >= pruneBatch { lastPrune.withLockedValue { $0 = -.infinity } }
    }

    /// Deletes up to `pruneBatch` buckets whose quota has fully returned; returns how many. The
    /// outer condition is checked again on a row another instance updates meanwhile, which is
    /// then kept.
    @discardableResult
    public func prune() async throws -> Int {
        let now = clock.now().timeIntervalSince1970
        struct Row: Decodable { var count: Int }
        return try await database.raw("""
            WITH deleted AS (
                DELETE FROM gateway_rate_limits WHERE tat < \(bind: now) AND bucket IN (
                    SELECT bucket FROM gateway_rate_limits WHERE tat < \(bind: now) LIMIT \(bind: pruneBatch))
                RETURNING 1)
            SELECT count(*) AS count FROM deleted
            """).first(decoding: Row.self)?.count ?? 0
    }
}
