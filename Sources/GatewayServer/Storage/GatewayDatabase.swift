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
            let writer = EventLoopConnectionPool(source: source, maxConnections: 1, requestTimeout: .seconds(30), pruneInterval: nil, logger: logger,
                                                 on: eventLoopGroup.any())
            let sql = PooledSQLiteDatabase(pool: pools, writer: writer, queue: SQLiteWriteQueue(writer: writer, logger: logger), logger: logger)
                .sql(queryLogLevel: .trace)
            // Both pools are always shut down, even when closing the writer fails (a pool must be
            // shut down before it is released).
            let shutdown: @Sendable () async throws -> Void = {
                var failure: (any Error)?
                do { try await writer.close().get() } catch { failure = error }
                try await pools.shutdownAsync()
                if let failure { throw failure }
            }
            // WAL is a property of the file: set it once, before any other connection uses it.
            do {
                let mode = try await sql.raw("PRAGMA journal_mode=WAL").first()
                logger.debug("sqlite opened", metadata: ["path": "\(file)", "journal": "\((try? mode?.decode(column: "journal_mode", as: String.self)) ?? "?")"])
            } catch {
                try? await shutdown()
                throw error
            }
            return GatewayDatabase(sql: sql, location: location, shutdown: shutdown)
        case .postgres(let url):
            let configuration = try SQLPostgresConfiguration(url: url)
            let pools = EventLoopGroupConnectionPool(source: PostgresConnectionSource(sqlConfiguration: configuration),
                                                     maxConnectionsPerEventLoop: 8, requestTimeout: .seconds(30), logger: logger, on: eventLoopGroup)
            let sql = pools.database(logger: logger).sql(queryLogLevel: .trace)
            do {
                _ = try await sql.raw("SELECT 1").all()
            } catch {
                try? await pools.shutdownAsync()
                throw error
            }
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
/// foreign keys on, `synchronous=NORMAL`, which is durable under WAL against process crashes, and
/// reads through a memory map of up to 256 MiB of the file (pages come straight from the OS's
/// cache instead of a read call each; writes still go through the WAL).
private struct TunedSQLiteSource: ConnectionPoolSource {
    let path: String

    func makeConnection(logger: Logger, on eventLoop: any EventLoop) -> EventLoopFuture<SQLiteConnection> {
        SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, logger: logger, on: eventLoop).flatMap { connection in
            connection.query("PRAGMA busy_timeout = 10000").flatMap { _ in
                connection.query("PRAGMA foreign_keys = ON")
            }.flatMap { _ in
                connection.query("PRAGMA synchronous = NORMAL")
            }.flatMap { _ in
                connection.query("PRAGMA mmap_size = 268435456")
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
///
/// SQLite lets one connection write at a time, and a connection that finds the write lock taken
/// sleeps in its busy handler for milliseconds. So writes queue here instead, in process, for
/// the one writer connection: statements that change something go through ``SQLiteWriteQueue``
/// (which commits the statements waiting together in one transaction), and every session takes
/// the writer connection for its whole life (a transaction takes the write lock with
/// `BEGIN IMMEDIATE`). Reads run on the pool beside it, as WAL allows.
private struct PooledSQLiteDatabase: SQLiteDatabase {
    let pool: EventLoopGroupConnectionPool<TunedSQLiteSource>
    let writer: EventLoopConnectionPool<TunedSQLiteSource>
    let queue: SQLiteWriteQueue
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
            return queue.submit(query, binds, onRow: onRow)
        }
        return pool.withConnection(logger: logger) { $0.query(query, binds, logger: logger, onRow) }
    }

    func query(_ query: String, _ binds: [SQLiteData], _ onRow: @escaping @Sendable (SQLiteRow) -> Void) async throws {
        try await self.query(query, binds, logger: logger, onRow).get()
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        writer.withConnection(logger: logger, closure)
    }

    func withConnection<T>(_ closure: @escaping @Sendable (SQLiteConnection) async throws -> T) async throws -> T {
        let connection = try await writer.requestConnection(logger: logger).get()
        defer { writer.releaseConnection(connection, logger: logger) }
        return try await closure(connection)
    }
}

/// Group commit for SQLite: write statements submitted while others run are executed together,
/// in order, inside one `BEGIN IMMEDIATE` … `COMMIT`, so that a burst of small writes costs one
/// commit instead of one each. Each statement still succeeds or fails on its own (SQLite undoes a
/// failed statement and keeps the transaction), and no caller hears of success before the commit
/// that makes its statement durable.
private final class SQLiteWriteQueue: Sendable {
    struct Pending: Sendable {
        let sql: String
        let binds: [SQLiteData]
        let onRow: @Sendable (SQLiteRow) -> Void
        let promise: EventLoopPromise<Void>
    }

    private struct State {
        var pending: [Pending] = []
        var draining = false
    }

    private let state = Mutex(State())
    private let writer: EventLoopConnectionPool<TunedSQLiteSource>
    private let logger: Logger
    /// The most statements one transaction takes.
    static let maximumBatch = 512

    init(writer: EventLoopConnectionPool<TunedSQLiteSource>, logger: Logger) {
        self.writer = writer
        self.logger = logger
    }

    /// Queues a statement. Everything after this runs on the writer connection's event loop, as
    /// one chain of futures: no task to start and no hop between threads beyond the thread pool
    /// SQLite runs on (each hop is a wake-up, which costs more than a small INSERT).
    func submit(_ sql: String, _ binds: [SQLiteData], onRow: @escaping @Sendable (SQLiteRow) -> Void) -> EventLoopFuture<Void> {
        let eventLoop = writer.eventLoop
        let promise = eventLoop.makePromise(of: Void.self)
        let start = state.withLock { state -> Bool in
            state.pending.append(Pending(sql: sql, binds: binds, onRow: onRow, promise: promise))
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        if start { eventLoop.execute { self.drain() } }
        return promise.futureResult
    }

    /// Takes the next batch, or ends the drain when nothing waits.
    private func nextBatch() -> [Pending]? {
        state.withLock { state in
            guard !state.pending.isEmpty else {
                state.draining = false
                return nil
            }
            let batch = Array(state.pending.prefix(Self.maximumBatch))
            state.pending.removeFirst(batch.count)
            return batch
        }
    }

    private func requeue(_ items: ArraySlice<Pending>) {
        state.withLock { $0.pending.insert(contentsOf: items, at: 0) }
    }

    /// Runs the waiting batches one after another on the writer connection (on its event loop).
    private func drain() {
        writer.requestConnection(logger: logger).whenComplete { result in
            switch result {
            case .failure(let error):
                while let batch = self.nextBatch() { for item in batch { item.promise.fail(error) } }
            case .success(let connection):
                self.drainBatches(on: connection)
            }
        }
    }

    private func drainBatches(on connection: SQLiteConnection) {
        guard let batch = nextBatch() else {
            writer.releaseConnection(connection, logger: logger)
            return
        }
        // The chain never fails; each caller's promise carries its outcome.
        execute(batch, on: connection).whenComplete { _ in self.drainBatches(on: connection) }
    }

    private func execute(_ batch: [Pending], on connection: SQLiteConnection) -> EventLoopFuture<Void> {
        if let combined = Self.combinedInsert(batch) {
            // One multi-row INSERT instead of one statement per row; if it fails (a row breaks a
            // constraint), the rows run one by one so that each gets its own answer.
            return connection.query(combined.sql, combined.binds, logger: logger) { _ in }
                .map { for item in batch { item.promise.succeed(()) } }
                .flatMapError { _ in
                    connection.query("BEGIN IMMEDIATE", [], logger: self.logger) { _ in }
                        .flatMap { self.statements(batch, from: 0, on: connection) }
                        .recover { error in for item in batch { item.promise.fail(error) } }
                }
        }
        if batch.count == 1 {
            let item = batch[0]
            return connection.query(item.sql, item.binds, logger: logger, item.onRow)
                .map { item.promise.succeed(()) }
                .recover { item.promise.fail($0) }
        }
        return connection.query("BEGIN IMMEDIATE", [], logger: logger) { _ in }
            .flatMap { self.statements(batch, from: 0, on: connection) }
            .recover { error in for item in batch { item.promise.fail(error) } }
    }

    /// The batch as one statement when it is several single-row `INSERT`s of the same text.
    static func combinedInsert(_ batch: [Pending]) -> (sql: String, binds: [SQLiteData])? {
        guard batch.count > 1, let first = batch.first, batch.allSatisfy({ $0.sql == first.sql }),
              batch.count * first.binds.count <= 30_000,
              let sql = CombinedInsert.sql(first.sql, rows: batch.count, bindsPerRow: first.binds.count) else { return nil }
        return (sql, batch.flatMap(\.binds))
    }

    /// Runs `batch[index...]` in the open transaction and commits.
    private func statements(_ batch: [Pending], from index: Int, on connection: SQLiteConnection) -> EventLoopFuture<Void> {
        guard index < batch.count else { return commit(batch[...], on: connection) }
        let item = batch[index]
        return connection.query(item.sql, item.binds, logger: logger, item.onRow)
            .map { Optional<any Error>.none }
            .recover { Optional.some($0) }
            .flatMap { failure in
                guard let failure else { return self.statements(batch, from: index + 1, on: connection) }
                // Commit what ran before it. If the failure rolled the whole transaction back, the
                // commit fails and so do they; the statements after it wait for the next batch.
                item.promise.fail(failure)
                self.requeue(batch[(index + 1)...])
                return self.commit(batch[..<index], on: connection)
            }
    }

    private func commit(_ done: ArraySlice<Pending>, on connection: SQLiteConnection) -> EventLoopFuture<Void> {
        connection.query("COMMIT", [], logger: logger) { _ in }
            .map { for item in done { item.promise.succeed(()) } }
            .flatMapError { error in
                for item in done { item.promise.fail(error) }
                return connection.query("ROLLBACK", [], logger: self.logger) { _ in }.recover { _ in }
            }
    }
}

/// One multi-row `INSERT` from copies of a single-row one (no `RETURNING`, no `ON CONFLICT`, no
/// `SELECT`): `INSERT … VALUES (?1, …), (?10, …), …`. Each row's numbered placeholders (`?N`, `$N`,
/// as SQLKit writes them) move past the rows before it; bare `?` placeholders stay, as their
/// positions already follow the binds.
enum CombinedInsert {
    static func sql(_ single: String, rows: Int, bindsPerRow: Int) -> String? {
        guard rows > 1, single.hasPrefix("INSERT INTO "), single.hasSuffix(")") else { return nil }
        let upper = single.uppercased()
        guard !upper.contains("RETURNING"), !upper.contains("ON CONFLICT"), !upper.contains("SELECT"),
              let values = single.range(of: " VALUES (", options: .backwards),
              single.components(separatedBy: " VALUES (").count == 2 else { return nil }
        let tuple = Array(single[single.index(before: values.upperBound)...].utf8)
        var sql = Array(single[..<values.upperBound].dropLast().utf8)
        for row in 0..<rows {
            if row > 0 { sql.append(contentsOf: Array(", ".utf8)) }
            guard renumber(tuple, by: row * bindsPerRow, into: &sql) else { return nil }
        }
        return String(decoding: sql, as: UTF8.self)
    }

    /// Appends `tuple` with every numbered placeholder outside string literals raised by `offset`.
    /// False for what cannot be moved safely: named placeholders, or bare and numbered ones mixed.
    static func renumber(_ tuple: [UInt8], by offset: Int, into sql: inout [UInt8]) -> Bool {
        var index = 0
        var quoted = false
        var bare = false
        var numbered = false
        while index < tuple.count {
            let byte = tuple[index]
            index += 1
            if byte == UInt8(ascii: "'") { quoted.toggle() }
            guard !quoted, byte == UInt8(ascii: "?") || byte == UInt8(ascii: "$") else {
                sql.append(byte)
                continue
            }
            var number = 0
            var digits = 0
            while index < tuple.count, tuple[index] >= UInt8(ascii: "0"), tuple[index] <= UInt8(ascii: "9") {
                number = number * 10 + Int(tuple[index] - UInt8(ascii: "0"))
                digits += 1
                index += 1
            }
            sql.append(byte)
            if digits == 0 {
                guard byte == UInt8(ascii: "?") else { return false }
                bare = true
            } else {
                numbered = true
                sql.append(contentsOf: Array(String(number + offset).utf8))
            }
        }
        return !(bare && numbered)
    }
}
