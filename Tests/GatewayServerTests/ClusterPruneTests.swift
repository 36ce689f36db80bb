import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import SQLKit
import Testing

@Suite("cluster rate-limit table pruning")
struct ClusterPruneTests {
    @Test("prune deletes expired buckets a bounded batch at a time and keeps live ones", .enabled(if: TestStorage.available.contains(.postgres)))
    func boundedPrune() async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: .postgres) { gateway in
            let database = gateway.gateway.database.sql
            let clock = TestClock()
            var settings = LimitSettings()
            settings.anonymous = RateSpec(count: 10, period: 60)
            let limiter = ClusterRateLimiter(policies: RateLimitPolicies(defaults: settings), database: database, clock: clock,
                                             pruneInterval: 3600, pruneBatch: 10)
            for index in 0..<25 {
                _ = try await limiter.acquire(principal: .anonymous(address: "192.0.2.\(index)"), plugin: "notes", cost: 1)
            }
            // A minute later these have their quota back; five new guests are still within theirs.
            clock.advance(by: 61)
            for index in 0..<5 {
                _ = try await limiter.acquire(principal: .anonymous(address: "198.51.100.\(index)"), plugin: "notes", cost: 1)
            }
            #expect(try await limiter.prune() == 10)
            #expect(try await limiter.prune() == 10)
            #expect(try await limiter.prune() == 5)
            #expect(try await limiter.prune() == 0)
            struct Row: Decodable { var bucket: String }
            let kept = try await database.raw("SELECT bucket FROM gateway_rate_limits ORDER BY bucket").all(decoding: Row.self).map(\.bucket)
            #expect(kept == (0..<5).map { "notes|addr:198.51.100.\($0)" })
            // A kept guest's use is still counted.
            let decision = try await limiter.acquire(principal: .anonymous(address: "198.51.100.0"), plugin: "notes", cost: 1)
            #expect(decision.headers.contains { $0.name.rawName == "x-ratelimit-remaining" && $0.value == "8" })
        }
    }
}
