@preconcurrency import AsyncKit
import Foundation
import GatewayCore
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
            let source = TunedSQLiteSource(path: file)
            let writerLoop = eventLoopGroup.any()
            let writer = try await SQLiteWriter.open(path: file, logger: logger) {
                try await source.makeConnection(logger: logger, on: writerLoop).get()
            }
            let perLoop = settings.perEventLoop(loops, fallback: 4)
            let pools = EventLoopGroupConnectionPool(source: source, maxConnectionsPerEventLoop: perLoop,
                                                     requestTimeout: acquireTimeout, logger: logger, on: eventLoopGroup)
            let pooled = PooledSQLiteDatabase(pool: pools, writer: writer, logger: logger)
            // The readers' pool and the one writer.
            let meter = DatabaseMeter(capacity: perLoop * loops + 1)
            let sql = MeteredStatementDatabase(SQLiteStatementDatabase(base: pooled.sql(queryLogLevel: .trace), sqlite: pooled), meter: meter)
            // The pool is shut down after the writer has closed (a pool must be shut down before it is released).
            let shutdown: @Sendable () async throws -> Void = {
                await writer.close()
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
        guard sql.isSQLite else { return true }
        let row = try await sql.raw("PRAGMA integrity_check").first()
        return (try row?.decode(column: "integrity_check", as: String.self)) == "ok"
    }
}

/// Opens SQLite connections tuned for a server: a busy timeout instead of an endless spin,
/// foreign keys on, `synchronous=NORMAL`, which is durable under WAL against process crashes, and
/// reads through a memory map of up to 256 MiB of the file (pages come straight from the OS's
/// cache instead of a read call each; writes still go through the WAL).
struct TunedSQLiteSource: ConnectionPoolSource {
    let path: String

    func makeConnection(logger: Logger, on eventLoop: any EventLoop) -> EventLoopFuture<SQLiteConnection> {
        SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, logger: logger, on: eventLoop).flatMap { connection in
            connection.query("PRAGMA busy_timeout = 10000").flatMap { _ in
                connection.query("PRAGMA foreign_keys = ON")
            }.flatMap { _ in
                connection.query("PRAGMA synchronous = NORMAL")
            }.flatMap { _ in
                connection.query("PRAGMA mmap_size = 1073741824")
            }.flatMap { _ in
                connection.install(customFunction: SQLiteRegularExpressions.function)
            }.map { _ in connection }.flatMapError { error in
                // A connection that could not be set up (a file that is not a database, no file
                // descriptor left for its journal) is closed, not dropped: its handle would leak.
                let failed: EventLoopFuture<SQLiteConnection> = eventLoop.makeFailedFuture(error)
                return connection.close().flatMap { failed }.flatMapError { _ in failed }
            }
        }
    }
}

/// `value REGEXP pattern` for SQLite, which has the operator but no function behind it: ICU
/// regular expressions, compiled once per pattern. PostgreSQL has its own (`~`). Plugins that let
/// clients send patterns must bound them first (length, nested quantifiers): the engine backtracks.
enum SQLiteRegularExpressions {
    private static let compiled = Mutex<[String: NSRegularExpression]>([:])

    static let function = SQLiteCustomFunction("regexp", argumentCount: 2, pure: true) { arguments in
        guard case .text(let pattern) = arguments[0], case .text(let value) = arguments[1] else { return 0 }
        return try matches(pattern: pattern, value: value) ? 1 : 0
    }

    /// Whether `value` matches the ICU regular expression `pattern`.
    static func matches(pattern: String, value: String) throws -> Bool {
        let expression: NSRegularExpression
        if let known = compiled.withLock({ $0[pattern] }) {
            expression = known
        } else {
            expression = try NSRegularExpression(pattern: pattern)
            compiled.withLock { cache in
                if cache.count >= 256 { cache.removeAll() }
                cache[pattern] = expression
            }
        }
        let range = NSRange(value.startIndex..<value.endIndex, in: value)
        return expression.firstMatch(in: value, range: range) != nil
    }
}

/// The SQLite database as SQLKit sees it, which also runs finished statements directly
/// (``SQLStatementRunner``): binds become `SQLiteData` without SQLKit's serializer or its
/// `Encodable` encoder.
private struct SQLiteStatementDatabase: SQLStatementRunner, PassThroughSQLDatabase {
    let base: any SQLDatabase
    let sqlite: PooledSQLiteDatabase

    var forwarded: any SQLDatabase { base }

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
/// SQLite lets one connection write at a time, so statements that change something go to
/// ``SQLiteWriter`` (which commits the statements waiting together in one transaction), and every
/// session takes the writer's connection for its whole life (a transaction takes the write lock
/// with `BEGIN IMMEDIATE`). Reads run on the pool beside it, as WAL allows.
private struct PooledSQLiteDatabase: SQLiteDatabase {
    let pool: EventLoopGroupConnectionPool<TunedSQLiteSource>
    let writer: SQLiteWriter
    let logger: Logger

    var eventLoop: any EventLoop { pool.eventLoopGroup.any() }

    /// Whether `sql` may change the database: anything but `SELECT`, `EXPLAIN` and `VALUES`.
    static func writes(_ sql: String) -> Bool {
        var words = sql.utf8.drop { $0 == 32 || $0 == 10 || $0 == 13 || $0 == 9 || $0 == 40 }.prefix(7).makeIterator()
        var first: [UInt8] = []
        while let byte = words.next(), byte != 32, byte != 10, byte != 13, byte != 9 { first.append(byte | 0x20) }
        switch String(decoding: first, as: UTF8.self) {
        case "select", "explain", "values": return false
        default: return true
        }
    }

    func query(_ query: String, _ binds: [SQLiteData], logger: Logger, _ onRow: @escaping @Sendable (SQLiteRow) -> Void) -> EventLoopFuture<Void> {
        if Self.writes(query) {
            if let session = SQLiteWriter.current, session.isOpen { return session.connection.query(query, binds, logger: logger, onRow) }
            let promise = eventLoop.makePromise(of: Void.self)
            writer.submit(query, binds, onRow: onRow, completion: .promise(promise))
            return promise.futureResult
        }
        return pool.withConnection(logger: logger) { $0.query(query, binds, logger: logger, onRow) }
    }

    func query(_ query: String, _ binds: [SQLiteData], _ onRow: @escaping @Sendable (SQLiteRow) -> Void) async throws {
        if Self.writes(query) {
            if let session = SQLiteWriter.current, session.isOpen {
                try await session.connection.query(query, binds, logger: logger, onRow).get()
                return
            }
            // Resumed by the writer's thread itself: no future, no event loop in between.
            try await withUnsafeThrowingContinuation { continuation in
                writer.submit(query, binds, onRow: onRow, completion: .continuation(continuation))
            }
            return
        }
        try await pool.withConnection(logger: logger) { $0.query(query, binds, logger: logger, onRow) }.get()
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        writer.withConnection(closure)
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) async throws -> T) async throws -> T {
        try await writer.withConnection(closure)
    }
}
