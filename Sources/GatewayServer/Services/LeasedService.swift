import Foundation
import Logging
import ServiceLifecycle
import SQLKit

/// Background work that must run on one instance of the cluster at a time (retention, schedules,
/// polling a source whose result goes to the shared database): `work` runs only while this
/// instance holds the lease `name` in the table `gateway_leases` of the shared database.
///
/// The holder renews its lease every `ttl / 3`; an instance that stops cleanly gives it up at once,
/// and one that dies (`kill -9`, a lost machine) loses it when `ttl` passes without a renewal, after
/// which another instance takes the work over (within `ttl` plus one retry interval). When a
/// renewal fails — the database unreachable, or another instance took the lease after a long
/// pause — the work is cancelled and this instance tries again later, so two instances never both
/// believe they hold it for longer than a renewal interval. On one SQLite file there is one
/// instance, which takes the lease at once. Instances' clocks should agree within a second (NTP).
public struct LeasedService: Service {
    public let name: String
    public let ttl: Duration
    let database: any SQLDatabase
    let holder: String
    let logger: Logger
    let work: any Service

    /// - Parameters:
    ///   - name: the lease, unique in the cluster (`feeds.retention`).
    ///   - holder: this instance, as `gateway_leases.holder` shows it (by default the host, the
    ///     process id and a random part: `web-2 pid 4121 9f3c01aa`).
    ///   - database: where the lease is kept (`gateway_leases`), shared by the instances.
    ///   - ttl: how long a lease lasts unless renewed (at least 300 ms); the holder renews it well before.
    ///   - logger: where taking, losing and failing work are logged.
    ///   - work: the service run while this instance holds the lease, cancelled when it loses it.
    public init(_ name: String, database: any SQLDatabase, ttl: Duration = .seconds(15), holder: String = LeasedService.newHolder(),
                logger: Logger, work: any Service) {
        self.name = name
        self.ttl = max(ttl, .milliseconds(300))
        self.database = database
        self.holder = holder
        self.logger = logger
        self.work = work
    }

    /// A holder name unique to one service of one process, telling an operator which instance holds a lease.
    public static func newHolder() -> String {
        "\(ProcessInfo.processInfo.hostName) pid \(ProcessInfo.processInfo.processIdentifier) \(UUID().uuidString.prefix(8).lowercased())"
    }

    struct LeaseLost: Error {}

    public func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            let held: Bool
            do {
                held = try await acquire()
            } catch {
                logger.warning("lease unavailable", metadata: ["lease": .string(name), "error": .string(String(describing: error))])
                held = false
            }
            if held {
                logger.info("lease taken: running the work here", metadata: ["lease": .string(name)])
                do {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask { try await work.run() }
                        group.addTask {
                            // Renews until the work ends, the lease is lost, or the gateway stops.
                            while !Task.isShuttingDownGracefully && !Task.isCancelled {
                                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: ttl / 3) }
                                if Task.isShuttingDownGracefully || Task.isCancelled { return }
                                guard (try? await acquire()) == true else { throw LeaseLost() }
                            }
                        }
                        // The first to finish ends both: the work (stopped or failed) or the renewer.
                        try await group.next()
                        group.cancelAll()
                    }
                } catch is LeaseLost {
                    logger.warning("lease lost: the work stops here", metadata: ["lease": .string(name)])
                    continue
                } catch {
                    logger.error("leased work failed", metadata: ["lease": .string(name), "error": .string(String(describing: error))])
                }
                await release()
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: ttl / 3) }
        }
        await release()
    }

    /// Takes or renews the lease; true when this instance holds it now.
    func acquire() async throws -> Bool {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let expires = now + Int64(ttl.components.seconds * 1000) + ttl.components.attoseconds / 1_000_000_000_000_000
        let row = try await database.raw("""
            INSERT INTO gateway_leases (name, holder, expires_at) VALUES (\(bind: name), \(bind: holder), \(bind: expires))
            ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
            WHERE gateway_leases.expires_at < \(bind: now) OR gateway_leases.holder = excluded.holder
            RETURNING holder
            """).first()
        return try row?.decode(column: "holder", as: String.self) == holder
    }

    /// Gives the lease up, if held, so that another instance takes it without waiting for it to expire.
    func release() async {
        _ = try? await database.raw("DELETE FROM gateway_leases WHERE name = \(bind: name) AND holder = \(bind: holder)").run()
    }
}
