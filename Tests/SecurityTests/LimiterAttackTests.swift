import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import SQLKit
import Testing

/// The rate limiter's own state as a target: a guest who owns an IPv6 network must not get a
/// bucket per address, and a stream of distinct guests must not grow the shared table forever.
@Suite("security: IPv6 guests and the cluster rate-limit table")
struct LimiterAttackTests {
    /// Guests get three requests a minute; `cluster` shares the buckets through the database.
    static func guestLimit(cluster: Bool) -> @Sendable (String) -> String {
        ShippedGateway.repositoryFiles { yaml in
            var edited = yaml.replacingOccurrences(of: "  anonymous: 60/min", with: "  anonymous: 3/min")
            if cluster { edited = edited.replacingOccurrences(of: "  policy: local", with: "  policy: cluster") }
            return edited
        }
    }

    /// The storages and limiter policies to attack: local everywhere, cluster on PostgreSQL.
    static let setups: [(TestStorage, Bool)] = securityStorages.map { ($0, false) } + (securityStorages.contains(.postgres) ? [(.postgres, true)] : [])

    @Test("guests of one IPv6 /64 share one bucket; another /64 has its own", arguments: setups)
    func ipv6GuestsShareTheirNetwork(storage: TestStorage, cluster: Bool) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.guestLimit(cluster: cluster)) { gateway in
            var statuses: [Int] = []
            // Five addresses of one /64, as a client rotating through its network would use them.
            for host in ["1", "2", "abcd:ef01:2345:6789", "ffff:ffff:ffff:ffff", "42"] {
                let address = host.contains(":") ? "2001:db8:7:8:\(host)" : "2001:db8:7:8::\(host)"
                statuses.append(try await gateway.gateway.handle(.get, "/v1/suggest?q=st\(statuses.count)", from: address).status)
            }
            #expect(statuses == [200, 200, 200, 429, 429], "\(statuses)")
            // A neighbouring network is another customer.
            #expect(try await gateway.gateway.handle(.get, "/v1/suggest?q=x", from: "2001:db8:7:9::1").status == 200)
            // IPv4 guests still count per address.
            #expect(try await gateway.gateway.handle(.get, "/v1/suggest?q=y", from: "192.0.2.1").status == 200)
            #expect(try await gateway.gateway.handle(.get, "/v1/suggest?q=y", from: "192.0.2.2").status == 200)
        }
    }

    @Test("expired rows of the cluster rate-limit table are pruned as it is written", .enabled(if: securityStorages.contains(.postgres)))
    func clusterTableIsPruned() async throws {
        let clock = TestClock()
        try await ShippedGateway.with(storage: .postgres, edit: Self.guestLimit(cluster: true), configure: { $0.clock = clock }) { gateway in
            let database = gateway.gateway.database.sql
            struct Count: Decodable { var count: Int }
            func rows() async throws -> Int {
                try await database.raw("SELECT count(*) AS count FROM gateway_rate_limits").first(decoding: Count.self)?.count ?? -1
            }
            // A stream of distinct guests, one request each: a row each.
            for index in 1...40 {
                #expect(try await gateway.gateway.handle(.get, "/v1/suggest?q=a", from: "198.51.100.\(index)").status == 200)
            }
            let written = try await rows()
            #expect(written >= 40)
            // Their quotas return in a minute; past the prune interval, the next write prunes.
            clock.advance(by: 120)
            #expect(try await gateway.gateway.handle(.get, "/v1/suggest?q=a", from: "203.0.113.1").status == 200)
            let remaining = try await rows()
            print("cluster table: \(written) rows after 40 guests, \(remaining) after the prune")
            #expect(remaining == 1, "\(remaining) rows remain")
        }
    }
}
