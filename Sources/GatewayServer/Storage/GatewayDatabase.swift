@preconcurrency import AsyncKit
import Foundation
import GatewayCore
import GatewaySupport
import Logging
import NIOCore
import NIOPosix
import PostgresKit
import SQLKit

/// The gateway's database connection pool, on SQLite (embedded, the default) or PostgreSQL.
///
/// Owns the pool: ``shutdown()`` must be called once when the gateway stops. ``sql`` is the
/// `SQLDatabase` every plugin receives; it hands out pooled connections per query and a single
/// connection inside `withSession` / `transaction`.
public final class GatewayDatabase: Sendable {
    /// The database as plugins see it.
    public let sql: any SQLDatabase
    /// Where it is.
    public let location: StorageLocation
    /// Connections in use and statement durations, for /metrics.
    let meter: DatabaseMeter
    private let shutdownPool: @Sendable () async throws -> Void

    /// Opens (and for SQLite, creates) the database at `location`; relative SQLite paths are resolved against `baseDirectory`.
    public static func open(_ location: StorageLocation, baseDirectory: URL, logger: Logger, pool settings: DatabasePoolSettings = .init(),
                            eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> GatewayDatabase {
        let loops = Array(eventLoopGroup.makeIterator()).count
        let acquireTimeout = TimeAmount.nanoseconds(Int64(settings.acquireTimeout.seconds * 1_000_000_000))
        switch location {
        case .sqlite(let path):
            let file = path.hasPrefix("/") ? path : baseDirectory.appendingPathComponent(path).path
            try FileManager.default.createDirectory(at: URL(fileURLWithPath: file).deletingLastPathComponent(), withIntermediateDirectories: true)
            let watchdog = SQLiteWatchdog(budget: settings.statementTimeout.map { .nanoseconds(Int64($0.seconds * 1_000_000_000)) },
                                          on: eventLoopGroup.any())
            let readers = settings.perEventLoop(loops, fallback: 4) * loops
            let store: SQLiteStore
            do {
                store = try await SQLiteStore.open(path: file, readers: readers, acquireTimeout: .nanoseconds(acquireTimeout.nanoseconds), watchdog: watchdog)
            } catch {
                watchdog.stop()
                throw error
            }
            // The readers and the one writer.
            let meter = DatabaseMeter(capacity: readers + 1)
            let sql = MeteredStatementDatabase(SQLiteSQLDatabase(store: store, logger: logger, eventLoopGroup: eventLoopGroup), meter: meter)
            let shutdown: @Sendable () async throws -> Void = {
                watchdog.stop()
                try await store.close()
            }
            do {
                let mode = try await sql.raw("PRAGMA journal_mode").first()
                logger.debug("sqlite opened", metadata: ["path": "\(file)", "journal": "\((try? mode?.decode(column: "journal_mode", as: String.self)) ?? "?")"])
            } catch {
                try? await shutdown()
                throw error
            }
            return GatewayDatabase(sql: sql, location: location, meter: meter, shutdown: shutdown)
        case .postgres(let url):
            var configuration = try SQLPostgresConfiguration(url: url)
            configuration.coreConfiguration.options.connectTimeout = .nanoseconds(Int64(settings.connectTimeout.seconds * 1_000_000_000))
            if let statementTimeout = settings.statementTimeout {
                configuration.coreConfiguration.options.additionalStartupParameters.append(
                    ("statement_timeout", "\(max(1, Int((statementTimeout.seconds * 1000).rounded())))ms"))
            }
            let perLoop = settings.perEventLoop(loops, fallback: 8)
            let pools = EventLoopGroupConnectionPool(source: PostgresConnectionSource(sqlConfiguration: configuration),
                                                     maxConnectionsPerEventLoop: perLoop,
                                                     requestTimeout: acquireTimeout, logger: logger, on: eventLoopGroup)
            let meter = DatabaseMeter(capacity: perLoop * loops)
            let statements = PostgresStatementDatabase(base: pools.database(logger: logger).sql(queryLogLevel: .trace), pools: pools,
                                                       statements: PreparedStatements())
            let sql = MeteredStatementDatabase(statements, meter: meter)
            do {
                _ = try await sql.raw("SELECT 1").all()
            } catch {
                try? await pools.shutdownAsync()
                throw error
            }
            return GatewayDatabase(sql: sql, location: location, meter: meter) { try await pools.shutdownAsync() }
        }
    }

    private init(sql: any SQLDatabase, location: StorageLocation, meter: DatabaseMeter, shutdown: @escaping @Sendable () async throws -> Void) {
        self.sql = sql
        self.location = location
        self.meter = meter
        self.shutdownPool = shutdown
    }

    /// Closes every connection.
    public func shutdown() async {
        try? await shutdownPool()
    }

    /// Runs the database's own consistency check (`PRAGMA integrity_check` on SQLite); true when it passes.
    public func integrityCheck() async throws -> Bool {
        guard sql.features.integrityCheck else { return true }
        let row = try await sql.raw("PRAGMA integrity_check").first()
        return (try row?.decode(column: "integrity_check", as: String.self)) == "ok"
    }
}
