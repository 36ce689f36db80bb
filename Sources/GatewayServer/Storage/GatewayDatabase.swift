@preconcurrency import AsyncKit
import Foundation
import GatewayCore
import GatewaySupport
import Logging
import NIOCore
import NIOPosix
import PostgresKit
import SQLKit
import SQLiteKit
import SQLiteNIO
import Synchronization

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
            SQLiteFunctions.register()
            let writerLoop = eventLoopGroup.any()
            let watchdog = SQLiteWatchdog(budget: settings.statementTimeout.map { .nanoseconds(Int64($0.seconds * 1_000_000_000)) }, on: writerLoop)
            let source = TunedSQLiteSource(path: file, watchdog: watchdog)
            let writer: SQLiteWriter
            let kinds: SQLiteStatementKinds
            do {
                writer = try await SQLiteWriter.open(path: file, logger: logger, watchdog: watchdog) {
                    try await source.makeConnection(logger: logger, on: writerLoop).get()
                }
                do {
                    kinds = try SQLiteStatementKinds(path: file)
                } catch {
                    await writer.close()
                    throw error
                }
            } catch {
                watchdog.stop()
                throw error
            }
            let perLoop = settings.perEventLoop(loops, fallback: 4)
            let pools = EventLoopGroupConnectionPool(source: source, maxConnectionsPerEventLoop: perLoop,
                                                     requestTimeout: acquireTimeout, logger: logger, on: eventLoopGroup)
            let pooled = PooledSQLiteDatabase(pool: pools, writer: writer, kinds: kinds, watchdog: watchdog, logger: logger)
            // The readers' pool and the one writer.
            let meter = DatabaseMeter(capacity: perLoop * loops + 1)
            let sql = MeteredStatementDatabase(SQLiteStatementDatabase(base: pooled.sql(queryLogLevel: .trace), sqlite: pooled), meter: meter)
            // The pool is shut down after the writer has closed (a pool must be shut down before it is released).
            let shutdown: @Sendable () async throws -> Void = {
                watchdog.stop()
                await writer.close()
                kinds.close()
                try await pools.shutdownAsync()
            }
            // WAL is a property of the file: set it once, before any other connection uses it.
            do {
                let mode = try await sql.raw("PRAGMA journal_mode=WAL").first()
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

/// Opens SQLite connections tuned for a server: a busy timeout instead of an endless spin,
/// foreign keys on, `synchronous=NORMAL`, which is durable under WAL against process crashes, and
/// reads through a memory map of up to 256 MiB of the file (pages come straight from the OS's
/// cache instead of a read call each; writes still go through the WAL). Each connection has the
/// gateway's SQL functions (``SQLiteFunctions``) and is watched for statements past their budget.
struct TunedSQLiteSource: ConnectionPoolSource {
    let path: String
    let watchdog: SQLiteWatchdog

    /// `watchdog`: the one that bounds the connections' statements (by default, none is bounded).
    init(path: String, watchdog: SQLiteWatchdog = SQLiteWatchdog(budget: nil, on: MultiThreadedEventLoopGroup.singleton.any())) {
        self.path = path
        self.watchdog = watchdog
    }

    func makeConnection(logger: Logger, on eventLoop: any EventLoop) -> EventLoopFuture<WatchedSQLiteConnection> {
        SQLiteFunctions.register()
        return SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, logger: logger, on: eventLoop).flatMap { connection in
            connection.query("PRAGMA busy_timeout = 10000").flatMap { _ in
                connection.query("PRAGMA foreign_keys = ON")
            }.flatMap { _ in
                connection.query("PRAGMA synchronous = NORMAL")
            }.flatMap { _ in
                connection.query("PRAGMA mmap_size = 1073741824")
            }.flatMap { _ in
                SQLiteFunctions.handle(of: connection)
            }.map { [watchdog] handle in
                WatchedSQLiteConnection(connection, handle: handle, watchdog: watchdog)
            }.flatMapError { error in
                // A connection that could not be set up (a file that is not a database, no file
                // descriptor left for its journal) is closed, not dropped: its handle would leak.
                let failed: EventLoopFuture<WatchedSQLiteConnection> = eventLoop.makeFailedFuture(error)
                return connection.close().flatMap { failed }.flatMapError { _ in failed }
            }
        }
    }
}

/// An SQLite connection and the watch over its statements (``SQLiteWatchdog``).
final class WatchedSQLiteConnection: ConnectionPoolItem, Sendable {
    let connection: SQLiteConnection
    let watch: SQLiteStatementWatch
    private let watchdog: SQLiteWatchdog

    init(_ connection: SQLiteConnection, handle: SQLiteHandle, watchdog: SQLiteWatchdog) {
        self.connection = connection
        self.watchdog = watchdog
        watch = SQLiteStatementWatch(handle)
        watchdog.watch(watch)
    }

    var eventLoop: any EventLoop { connection.eventLoop }
    var isClosed: Bool { connection.isClosed }

    /// Runs one statement, interrupted once it runs past `budget` (nil: no limit).
    func query(_ sql: String, _ binds: [SQLiteData], budget: Duration?, logger: Logger,
               _ onRow: @escaping @Sendable (SQLiteRow) -> Void) -> EventLoopFuture<Void> {
        guard budget != nil else { return connection.query(sql, binds, logger: logger, onRow) }
        watch.begin(budget)
        return connection.query(sql, binds, logger: logger, onRow).always { [watch] _ in watch.end() }
    }

    func close() -> EventLoopFuture<Void> {
        watch.retire()
        watchdog.unwatch(watch)
        return connection.close()
    }
}

/// A session's connection (the writer's, lent): every statement on it has the budget of the
/// task that runs it.
private struct SQLiteSessionDatabase: SQLiteDatabase {
    let watched: WatchedSQLiteConnection
    let watchdog: SQLiteWatchdog
    let logger: Logger

    var eventLoop: any EventLoop { watched.eventLoop }

    func query(_ query: String, _ binds: [SQLiteData], logger: Logger, _ onRow: @escaping @Sendable (SQLiteRow) -> Void) -> EventLoopFuture<Void> {
        watched.query(query, binds, budget: watchdog.current, logger: logger, onRow)
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        closure(watched.connection)
    }
}

/// The SQLite database as SQLKit sees it, which also runs finished statements directly
/// (``SQLStatementRunner``): binds become `SQLiteData` without SQLKit's serializer or its
/// `Encodable` encoder.
private struct SQLiteStatementDatabase: SQLStatementRunner, PassThroughSQLDatabase {
    let base: any SQLDatabase
    let sqlite: PooledSQLiteDatabase

    var forwarded: any SQLDatabase { base }

    /// The writer's connection for `closure`'s whole life, each statement on it with its budget.
    func withSession<R>(_ closure: @escaping @Sendable (any SQLDatabase) async throws -> R) async throws -> R {
        let sqlite = sqlite, queryLogLevel = base.queryLogLevel
        return try await sqlite.writer.withConnection { watched in
            try await closure(SQLiteSessionDatabase(watched: watched, watchdog: sqlite.watchdog, logger: sqlite.logger).sql(queryLogLevel: queryLogLevel))
        }
    }

    func runStatement(_ sql: String, _ values: [StatementValue]) async throws {
        let binds = values.map { value -> SQLiteData in
            switch value {
            case .text(let text): .text(text)
            case .integer(let integer): .integer(Int(integer))
            case .real(let real): .float(real)
            case .blob(let bytes): .blob(ByteBuffer(bytes: bytes))
            case .null: .null
            }
        }
        try await sqlite.query(sql, binds) { _ in }
    }
}

/// An `SQLiteDatabase` that reads on pooled connections and writes through the one writer.
///
/// SQLite lets one connection write at a time, so statements that change something (as SQLite
/// says: ``SQLiteStatementKinds``) go to ``SQLiteWriter`` (which commits the statements waiting
/// together in one transaction), and every session takes the writer's connection for its whole
/// life (a transaction takes the write lock with `BEGIN IMMEDIATE`). Reads run on the pool beside
/// it, as WAL allows. Every statement has the budget of the task that runs it (``SQLiteWatchdog``).
private struct PooledSQLiteDatabase: SQLiteDatabase {
    let pool: EventLoopGroupConnectionPool<TunedSQLiteSource>
    let writer: SQLiteWriter
    let kinds: SQLiteStatementKinds
    let watchdog: SQLiteWatchdog
    let logger: Logger

    var eventLoop: any EventLoop { pool.eventLoopGroup.any() }

    func query(_ query: String, _ binds: [SQLiteData], logger: Logger, _ onRow: @escaping @Sendable (SQLiteRow) -> Void) -> EventLoopFuture<Void> {
        let budget = watchdog.current
        if kinds.writes(query) {
            if let session = SQLiteWriter.current, session.isOpen { return session.connection.query(query, binds, budget: budget, logger: logger, onRow) }
            let promise = eventLoop.makePromise(of: Void.self)
            writer.submit(query, binds, budget: budget, onRow: onRow, completion: .promise(promise))
            return promise.futureResult
        }
        return pool.withConnection(logger: logger) { $0.query(query, binds, budget: budget, logger: logger, onRow) }
    }

    func query(_ query: String, _ binds: [SQLiteData], _ onRow: @escaping @Sendable (SQLiteRow) -> Void) async throws {
        let budget = watchdog.current
        if kinds.writes(query) {
            if let session = SQLiteWriter.current, session.isOpen {
                try await session.connection.query(query, binds, budget: budget, logger: logger, onRow).get()
                return
            }
            // Resumed by the writer's thread itself: no future, no event loop in between.
            try await withUnsafeThrowingContinuation { continuation in
                writer.submit(query, binds, budget: budget, onRow: onRow, completion: .continuation(continuation))
            }
            return
        }
        try await pool.withConnection(logger: logger) { $0.query(query, binds, budget: budget, logger: logger, onRow) }.get()
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        writer.withConnection { closure($0.connection) }
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) async throws -> T) async throws -> T {
        try await writer.withConnection { try await closure($0.connection) }
    }
}
