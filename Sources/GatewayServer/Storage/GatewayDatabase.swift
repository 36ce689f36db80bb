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
    private let shutdownPool: @Sendable () async throws -> Void

    /// Opens (and for SQLite, creates) the database at `location`; relative SQLite paths are resolved against `baseDirectory`.
    public static func open(_ location: StorageLocation, baseDirectory: URL, logger: Logger,
                            eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> GatewayDatabase {
        switch location {
        case .sqlite(let path):
            let file = path.hasPrefix("/") ? path : baseDirectory.appendingPathComponent(path).path
            try FileManager.default.createDirectory(at: URL(fileURLWithPath: file).deletingLastPathComponent(), withIntermediateDirectories: true)
            let source = TunedSQLiteSource(path: file)
            let pools = EventLoopGroupConnectionPool(source: source, maxConnectionsPerEventLoop: 4, requestTimeout: .seconds(30), logger: logger, on: eventLoopGroup)
            let sql = PooledSQLiteDatabase(pool: pools, logger: logger).sql(queryLogLevel: .trace)
            // WAL is a property of the file: set it once, before any other connection uses it.
            let mode = try await sql.raw("PRAGMA journal_mode=WAL").first()
            logger.debug("sqlite opened", metadata: ["path": "\(file)", "journal": "\((try? mode?.decode(column: "journal_mode", as: String.self)) ?? "?")"])
            return GatewayDatabase(sql: sql, location: location) { try await pools.shutdownAsync() }
        case .postgres(let url):
            let configuration = try SQLPostgresConfiguration(url: url)
            let pools = EventLoopGroupConnectionPool(source: PostgresConnectionSource(sqlConfiguration: configuration),
                                                     maxConnectionsPerEventLoop: 8, requestTimeout: .seconds(30), logger: logger, on: eventLoopGroup)
            let sql = pools.database(logger: logger).sql(queryLogLevel: .trace)
            _ = try await sql.raw("SELECT 1").all()
            return GatewayDatabase(sql: sql, location: location) { try await pools.shutdownAsync() }
        }
    }

    private init(sql: any SQLDatabase, location: StorageLocation, shutdown: @escaping @Sendable () async throws -> Void) {
        self.sql = sql
        self.location = location
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
/// foreign keys on, and `synchronous=NORMAL`, which is durable under WAL against process crashes.
private struct TunedSQLiteSource: ConnectionPoolSource {
    let path: String

    func makeConnection(logger: Logger, on eventLoop: any EventLoop) -> EventLoopFuture<SQLiteConnection> {
        SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, logger: logger, on: eventLoop).flatMap { connection in
            connection.query("PRAGMA busy_timeout = 10000").flatMap { _ in
                connection.query("PRAGMA foreign_keys = ON")
            }.flatMap { _ in
                connection.query("PRAGMA synchronous = NORMAL")
            }.flatMap { _ in
                connection.install(customFunction: SQLiteRegularExpressions.function)
            }.map { _ in connection }
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
        return expression.firstMatch(in: value, range: range) == nil ? 0 : 1
    }
}

/// An `SQLiteDatabase` that takes a pooled connection per query, or one for a whole session.
private struct PooledSQLiteDatabase: SQLiteDatabase {
    let pool: EventLoopGroupConnectionPool<TunedSQLiteSource>
    let logger: Logger

    var eventLoop: any EventLoop { pool.eventLoopGroup.any() }

    func query(_ query: String, _ binds: [SQLiteData], logger: Logger, _ onRow: @escaping @Sendable (SQLiteRow) -> Void) -> EventLoopFuture<Void> {
        pool.withConnection(logger: logger) { $0.query(query, binds, logger: logger, onRow) }
    }

    func query(_ query: String, _ binds: [SQLiteData], _ onRow: @escaping @Sendable (SQLiteRow) -> Void) async throws {
        try await self.query(query, binds, logger: logger, onRow).get()
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        pool.withConnection(logger: logger, closure)
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) async throws -> T) async throws -> T {
        let connection = try await pool.requestConnection(logger: logger).get()
        defer { pool.releaseConnection(connection, logger: logger) }
        return try await closure(connection)
    }
}
