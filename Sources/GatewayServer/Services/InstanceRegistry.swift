import Foundation
import GatewayCore
import Logging
import ServiceLifecycle
import SQLKit

/// The gateway instances serving one database (`gateway_instances`), for `/v1/admin/instances`
/// and the console's overview: each instance writes its row when it starts and every five
/// seconds while it runs — its host, process, version, start and the traffic of its last ten
/// seconds — and deletes it when it stops. Instances not seen for fifteen seconds are not listed
/// (one that was killed); rows not seen for a day are deleted.
public final class InstanceRegistry: Service, Sendable {
    public struct Instance: Codable, Sendable, Equatable {
        public var id: String
        public var host: String
        public var pid: Int
        public var version: String
        public var startedAt: Date
        public var seenAt: Date
        /// Over its last ten seconds: requests per second, their p50 and p99 in milliseconds, 5xx
        /// and 429s per second, the cache's hit rate (nil: no lookup).
        public var rate: Double
        public var p50: Double?
        public var p99: Double?
        public var errors: Double
        public var limited: Double
        public var cacheHitRate: Double?
        /// Whether it is the instance that answers.
        public var current: Bool
    }

    public let id: String
    let database: any SQLDatabase
    let clock: any WallClock
    let live: LiveTraffic
    let startedAt: Date
    let logger: Logger
    static let interval: Duration = .seconds(5)
    static let listedFor: TimeInterval = 15

    init(database: any SQLDatabase, clock: any WallClock, live: LiveTraffic, logger: Logger) {
        id = String(UUID().uuidString.lowercased().prefix(8))
        self.database = database
        self.clock = clock
        self.live = live
        self.startedAt = clock.now()
        self.logger = logger
    }

    private struct Row: Codable {
        var id: String
        var host: String
        var pid: Int
        var version: String
        var started_at: Double
        var seen_at: Double
        var rate: Double
        var p50: Double?
        var p99: Double?
        var errors: Double
        var limited: Double
        var cache_hit_rate: Double?
    }

    /// Writes this instance's row now.
    func beat() async throws {
        let recent = live.sample(lastSeconds: 10).overall
        let row = Row(id: id, host: ProcessInfo.processInfo.hostName, pid: Int(ProcessInfo.processInfo.processIdentifier), version: GatewayVersion.current,
                      started_at: startedAt.timeIntervalSince1970, seen_at: clock.now().timeIntervalSince1970,
                      rate: recent.rate, p50: recent.p50, p99: recent.p99, errors: recent.errors, limited: recent.limited,
                      cache_hit_rate: recent.cacheHitRate)
        // Nil written as NULL: an instance with no request of late has no p99 any more.
        try await database.insert(into: "gateway_instances").model(row, nilEncodingStrategy: .asNil)
            .onConflict(with: ["id"]) { try $0.set(excludedContentOf: row, nilEncodingStrategy: .asNil) }
            .run()
    }

    public func run() async throws {
        do {
            try await beat()
        } catch {
            logger.warning("the instance's row could not be written", metadata: ["error": .string("\(error)")])
        }
        var beats = 0
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.interval) }
            guard !Task.isCancelled && !Task.isShuttingDownGracefully else { break }
            try? await beat()
            beats += 1
            if beats % 720 == 1 {
                try? await database.delete(from: "gateway_instances").where("seen_at", .lessThan, clock.now().timeIntervalSince1970 - 86_400).run()
            }
        }
        try? await database.delete(from: "gateway_instances").where("id", .equal, id).run()
    }

    /// The instances seen in the last fifteen seconds, this one first.
    public func list() async throws -> [Instance] {
        let now = clock.now().timeIntervalSince1970
        let rows = try await database.select().column("*").from("gateway_instances")
            .where("seen_at", .greaterThanOrEqual, now - Self.listedFor)
            .orderBy("started_at")
            .all(decoding: Row.self)
        var instances = rows.map { row in
            Instance(id: row.id, host: row.host, pid: row.pid, version: row.version, startedAt: Date(timeIntervalSince1970: row.started_at),
                     seenAt: Date(timeIntervalSince1970: row.seen_at), rate: row.rate, p50: row.p50, p99: row.p99, errors: row.errors,
                     limited: row.limited, cacheHitRate: row.cache_hit_rate, current: row.id == id)
        }
        // This instance is listed with its figures of now, whether or not its row was written yet.
        let recent = live.sample(lastSeconds: 10).overall
        let current = Instance(id: id, host: ProcessInfo.processInfo.hostName, pid: Int(ProcessInfo.processInfo.processIdentifier),
                               version: GatewayVersion.current, startedAt: startedAt, seenAt: clock.now(), rate: recent.rate, p50: recent.p50,
                               p99: recent.p99, errors: recent.errors, limited: recent.limited, cacheHitRate: recent.cacheHitRate, current: true)
        instances.removeAll { $0.id == id }
        instances.insert(current, at: 0)
        return instances
    }
}
