import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import SQLKit
import Testing

/// Consumer groups (`limits.groups`): a group's rate replaces the caller kind's, and its quota per
/// UTC day or month is counted in the database on top of it.
@Suite("consumer groups and quotas")
struct ConsumerGroupTests {
    static let groupsYAML = """
        limits:
          groups:
            partners: { rate: 10/min, quota: 3/day }
            bulk: { rate: 1000/min }
            monthly: { quota: 4/month }

        """
    static let apiKey = HTTPField.Name("X-Api-Key")!
    static let policy = HTTPField.Name("RateLimit-Policy")!
    static let rate = HTTPField.Name("RateLimit")!

    /// A UTC date at `hour`:`minute` of 2026-11-30 (a Monday, the last day of a month).
    static func date(day: Int = 30, month: Int = 11, hour: Int, minute: Int = 0) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar.date(from: DateComponents(year: 2026, month: month, day: day, hour: hour, minute: minute))!
    }

    @Test("groups are read from plugins.yaml; bad names, empty groups and bad quotas are located errors")
    func configuration() throws {
        let parsed = try GatewayConfiguration.parse(Data((Self.groupsYAML + notesYAML).utf8), file: "plugins.yaml", knownPlugins: ["notes"])
        #expect(parsed.limits.groups["partners"] == GroupLimits(rate: RateSpec(count: 10, period: 60), quota: QuotaSpec(count: 3, window: .day)))
        #expect(parsed.limits.groups["monthly"]?.quota == QuotaSpec(count: 4, window: .month))
        #expect(parsed.limits.groups["bulk"]?.quota == nil)
        for (yaml, expected) in [
            ("limits: { groups: { Partners: { rate: 5/min } } }", "not a group name"),
            ("limits: { groups: { user: { rate: 5/min } } }", "not a group name"),
            ("limits: { groups: { partners: {} } }", "needs a rate, a quota or both"),
            ("limits: { groups: { partners: { quota: 5/week } } }", "is not a quota"),
            ("limits: { groups: { partners: { quota: 0/day } } }", "is not a quota"),
            ("limits: { groups: { partners: { rate: lots } } }", "is not a rate"),
        ] {
            do {
                _ = try GatewayConfiguration.parse(Data((yaml + "\n" + notesYAML).utf8), file: "plugins.yaml", knownPlugins: ["notes"])
                Issue.record("accepted: \(yaml)")
            } catch {
                #expect("\(error)".contains(expected), "\(yaml): \(error)")
                #expect("\(error)".contains("limits.groups") || "\(error)".contains("groups"), "\(error)")
            }
        }
    }

    @Test("a key's group: its rate in every plugin, its daily quota on top, a 429 naming the quota, renewed at midnight UTC", arguments: TestStorage.available)
    func keyGroupQuota(storage: TestStorage) async throws {
        let clock = TestClock(Self.date(hour: 23, minute: 30))
        try await TestGateway.with(notes, yaml: Self.groupsYAML + notesYAML, storage: storage, limits: true, configure: { $0.clock = clock }) { gateway in
            let (secret, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "partner", scopes: ["*"]), consumerGroup: "partners")
            var replies: [InProcessResponse] = []
            for _ in 0..<3 {
                replies.append(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: secret]))
            }
            #expect(replies.map(\.status) == [200, 200, 200])
            let first = try #require(replies.first)
            #expect(first.headers[Self.policy] == "\"partners\";q=10;w=60, \"partners:day\";q=3;w=86400", "\(first.headers)")
            let rateValue = try #require(first.headers[Self.rate])
            #expect(rateValue.hasPrefix("\"partners\";r=9;t="))
            #expect(rateValue.hasSuffix(", \"partners:day\";r=2;t=1800"), "\(rateValue)")
            // X-RateLimit-* show the tighter of the two: the quota.
            #expect(replies[2].headers[HTTPField.Name("X-RateLimit-Remaining")!] == "0")
            #expect(replies[2].headers[HTTPField.Name("X-RateLimit-Limit")!] == "3")
            let refused = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: secret])
            #expect(refused.status == 429)
            #expect(refused.headers[.retryAfter] == "1800")
            let problem = refused.object
            #expect(problem["violated-policies"] as? [String] == ["partners:day"])
            #expect((problem["detail"] as? String)?.contains("daily quota of group 'partners' (3 requests) is used up; it renews at 2026-12-01T00:00:00Z") == true,
                    "\(problem)")
            // The next UTC day: a fresh quota.
            clock.advance(by: 31 * 60)
            let renewed = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: secret])
            #expect(renewed.status == 200, "\(renewed.text)")
            #expect(renewed.headers[Self.rate]?.hasSuffix("\"partners:day\";r=2;t=86340") == true, "\(renewed.headers)")
            // A caller without a group keeps its kind's rate and no quota.
            let (plain, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "plain", scopes: ["*"]))
            let other = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: plain])
            #expect(other.headers[Self.policy] == "\"key\";q=6000;w=60")
        }
    }

    @Test("a group's rate replaces the kind's; a rate-only group has no quota; a group unknown to plugins.yaml is ignored")
    func groupRates() async throws {
        try await TestGateway.with(notes, yaml: Self.groupsYAML + notesYAML, limits: true) { gateway in
            let (bulk, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "bulk", scopes: ["*"]), consumerGroup: "bulk")
            let reply = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: bulk])
            #expect(reply.headers[Self.policy] == "\"bulk\";q=1000;w=60")
            let (gone, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "gone", scopes: ["*"]), consumerGroup: "removed-group")
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: gone]).headers[Self.policy] == "\"key\";q=6000;w=60")
            // A key's own rate only lowers its group's: the stricter of the two applies.
            let (own, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "own", scopes: ["*"], rate: "7/min"), consumerGroup: "bulk")
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: own]).headers[Self.policy]?.contains("q=7;w=60") == true)
            let user = try await gateway.register("escaper")
            try await gateway.gateway.accounts.setConsumerGroup(userID: user.userID, "bulk")
            let fast = try await gateway.createKey(token: user.token, grant: #"{"label": "fast", "scopes": ["*"], "rate": "5000/min"}"#)
            let escaped = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: fast.secret])
            #expect(escaped.headers[Self.policy] == "\"bulk\";q=1000;w=60", "\(escaped.headers)")
        }
    }

    @Test("an account's group: its sessions and keys share one monthly quota, renewed on the first of the month", arguments: TestStorage.available)
    func accountGroup(storage: TestStorage) async throws {
        let clock = TestClock(Self.date(hour: 12))
        try await TestGateway.with(notes, yaml: Self.groupsYAML + notesYAML, storage: storage, limits: true, configure: { $0.clock = clock }) { gateway in
            let user = try await gateway.register("member")
            let key = try await gateway.createKey(token: user.token, grant: #"{"label": "mine", "scopes": ["*"]}"#)
            try await gateway.gateway.accounts.setConsumerGroup(userID: user.userID, "monthly")
            gateway.gateway.forgetCredentials(userID: user.userID)
            let session: HTTPFields = [.authorization: "Bearer " + user.token]
            let statuses = [
                try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: session).status,
                try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: key.secret]).status,
                // Another plugin's routes count in the same quota.
                try await gateway.gateway.handle(.get, "/v1/me", headers: session).status,
                try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: key.secret]).status,
                try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: key.secret]).status,
            ]
            #expect(statuses == [200, 200, 200, 200, 429])
            let refused = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: session)
            #expect(refused.object["violated-policies"] as? [String] == ["monthly:month"])
            #expect(refused.headers[.retryAfter] == String(12 * 3600))
            // A monthly quota's window is its month: 30 days of November.
            #expect(refused.headers[Self.policy] == "\"user\";q=600;w=60, \"monthly:month\";q=4;w=2592000", "\(refused.headers)")
            clock.advance(by: 12 * 3600)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: session).status == 200)
            // Out of the group: no quota.
            try await gateway.gateway.accounts.setConsumerGroup(userID: user.userID, nil)
            gateway.gateway.forgetCredentials(userID: user.userID)
            let free = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: session)
            #expect(free.headers[Self.policy] == "\"user\";q=600;w=60")
        }
    }

    @Test("a provider's group claim puts its callers in a group; the account's own group comes first")
    func tokenGroups() async throws {
        try await IdentityProviderTests.withProvider(extra: Self.groupsYAML, limits: true) { provider, gateway in
            let partner = try await provider.token(provider.claims(subject: "p-1", username: "partner", groups: ["staff", "partners"]))
            let first = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: IdentityProviderTests.bearer(partner))
            #expect(first.status == 200, "\(first.text)")
            #expect(first.headers[Self.policy] == "\"partners\";q=10;w=60, \"partners:day\";q=3;w=86400", "\(first.headers)")
            let me = try await gateway.gateway.handle(.get, "/v1/me", headers: IdentityProviderTests.bearer(partner))
            let id = try #require(me.object["id"] as? String)
            try await gateway.gateway.accounts.setConsumerGroup(userID: id, "bulk")
            gateway.gateway.forgetCredentials(userID: id)
            let moved = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: IdentityProviderTests.bearer(partner))
            #expect(moved.headers[Self.policy] == "\"bulk\";q=1000;w=60", "\(moved.headers)")
        }
    }

    @Test("64 concurrent requests on two instances against a quota of 50: exactly 50 pass (cluster)", .enabled(if: TestStorage.available.contains(.postgres)))
    func clusterExact() async throws {
        try await TestStorage.postgres.withFreshLocation { location, directory in
            var configuration = try GatewayConfiguration.parse(
                Data("limits: { policy: cluster, groups: { partners: { quota: 50/day } } }\n\(notesYAML)".utf8), file: "plugins.yaml", knownPlugins: ["notes"])
            configuration.storage = location
            var options = Gateway.Options(baseDirectory: directory)
            options.logger.logLevel = .critical
            options.loadDemoData = false
            try await TestGateway.withTwo(configuration: configuration, registrations: notes, options: options) { first, second in
                let (secret, _) = try await first.accounts.createKey(userID: nil, grant: .init(label: "partner", scopes: ["*"]), consumerGroup: "partners")
                let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                    for index in 0..<64 {
                        let gateway = index.isMultiple(of: 2) ? first : second
                        group.addTask { try await gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: secret]).status }
                    }
                    return try await group.reduce(into: [Int]()) { $0.append($1) }
                }
                #expect(statuses.filter { $0 == 200 }.count == 50, "\(statuses)")
                #expect(statuses.filter { $0 == 429 }.count == 14, "\(statuses)")
            }
        }
    }

    @Test("one instance under concurrency counts exactly (local limits, quota in the database)", arguments: TestStorage.available)
    func localExact(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: "limits: { groups: { partners: { quota: 50/day } } }\n" + notesYAML, storage: storage, limits: true) { gateway in
            let (secret, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "partner", scopes: ["*"]), consumerGroup: "partners")
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<64 {
                    group.addTask { try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: [Self.apiKey: secret]).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 200 }.count == 50, "\(statuses)")
            #expect(statuses.filter { $0 == 429 }.count == 14, "\(statuses)")
            // The use is kept in the database (what another instance, or this one after a restart, reads).
            struct Row: Decodable { var used: Int }
            let used = try await gateway.gateway.database.sql.select().column("used").from("gateway_quota_usage").first(decoding: Row.self)
            #expect(used?.used == 50)
        }
    }

    @Test("a request stamped with the window before the row's counts in the row's window, never resets it (clocks apart at midnight)", arguments: TestStorage.available)
    func windowsNeverGoBack(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            let ahead = QuotaLedger(database: gateway.gateway.database.sql, clock: TestClock(Self.date(day: 1, month: 12, hour: 0, minute: 1)))
            let behind = QuotaLedger(database: gateway.gateway.database.sql, clock: TestClock(Self.date(day: 30, month: 11, hour: 23, minute: 59)))
            let caller = Principal(kind: .apiKey(keyID: "k1"), address: "192.0.2.1")
            let quota = QuotaSpec(count: 4, window: .day)
            var used: [Bool] = []
            for ledger in [behind, ahead, ahead, behind, ahead, behind] {
                used.append(try await ledger.charge(group: "partners", quota: quota, principal: caller, cost: 1).allowed)
            }
            // November's one, then December's four (two of them stamped late by the clock behind), then refused.
            #expect(used == [true, true, true, true, true, false], "\(used)")
        }
    }
}
