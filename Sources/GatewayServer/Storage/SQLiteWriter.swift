import Foundation
import Logging
@preconcurrency import NIOCore
import SQLiteNIO
import Synchronization
import VaporCSQLite

/// The one connection that writes to an SQLite database, on a thread of its own.
///
/// SQLite lets one connection write at a time, and a connection that finds the write lock taken
/// sleeps in its busy handler for milliseconds. So every write of the process queues here, in
/// order, and this thread runs them one after another:
///
/// - **Group commit.** The statements that queued while the thread worked run together inside
///   one `BEGIN IMMEDIATE` … `COMMIT`, so a burst of small writes costs one commit instead of one
///   each. Each statement still succeeds or fails on its own: SQLite undoes a failed statement
///   and keeps the transaction (and when a failure undoes the whole transaction, the statements
///   before it run again), and no caller hears of success before the commit that makes its
///   statement durable.
/// - **No hops.** Statements without result rows (`INSERT`, `UPDATE`, `DELETE`, DDL) run on the
///   thread's own `sqlite3` handle, from prepared statements kept for reuse, and their callers are
///   resumed straight from here. Through SQLiteNIO a statement costs a hop to its thread pool and
///   one back to an event loop, and each hop is a wake-up, which costs more than a small INSERT.
/// - **Rows and sessions.** Statements that return rows (`RETURNING`, `PRAGMA`) run on an
///   SQLiteNIO connection to the same file that the thread also owns (SQLiteNIO builds the rows),
///   and sessions (transactions) borrow that connection while the thread waits: so the process
///   never contends with itself for SQLite's lock.
///
/// A session must not write through the shared database while it holds the connection (its
/// writes would queue behind it): it writes through the connection it was given, as SQLKit's
/// `transaction` does.
///
/// Each statement carries the budget of the task that queued it (``SQLiteWatchdog``): the
/// watchdog interrupts one that runs longer, on either connection, and it fails alone (when the
/// interruption undoes the open transaction, the statements before it run again, as above).
final class SQLiteWriter: @unchecked Sendable {
    /// How a queued statement's caller hears of its outcome.
    enum Completion: Sendable {
        case promise(EventLoopPromise<Void>)
        case continuation(UnsafeContinuation<Void, any Error>)

        func complete(_ error: (any Error)?) {
            switch (self, error) {
            case (.promise(let promise), nil): promise.succeed(())
            case (.promise(let promise), let error?): promise.fail(error)
            case (.continuation(let continuation), nil): continuation.resume()
            case (.continuation(let continuation), let error?): continuation.resume(throwing: error)
            }
        }
    }

    private struct Statement {
        let sql: String
        let binds: [SQLiteData]
        /// How long it may run (nil: no limit).
        let budget: Duration?
        let onRow: @Sendable (SQLiteRow) -> Void
        let completion: Completion
    }

    private enum Item {
        case statement(Statement)
        /// Lends the SQLiteNIO connection; the thread waits until ``giveBack()``.
        case session(@Sendable (Result<WatchedSQLiteConnection, any Error>) -> Void)
    }

    /// The most statements one transaction takes.
    static let maximumBatch = 512
    /// The most prepared statements kept (the gateway's write statements are few distinct texts).
    static let statementCacheSize = 128

    private let condition = NSCondition()
    // Guarded by `condition`.
    private var items: [Item] = []
    private var lent = false
    private var stopping = false
    private var stopped = false
    private var closing: [CheckedContinuation<Void, Never>] = []

    // Used only on the writer thread (after `init`).
    private let handle: OpaquePointer
    private let connection: WatchedSQLiteConnection
    /// The watch over statements on `handle`.
    private let watch: SQLiteStatementWatch
    private let watchdog: SQLiteWatchdog
    private var statements: [String: OpaquePointer] = [:]
    private let logger: Logger

    /// Opens both connections to the SQLite file at `path` and starts the thread.
    static func open(path: String, logger: Logger, watchdog: SQLiteWatchdog,
                     connection open: () async throws -> WatchedSQLiteConnection) async throws -> SQLiteWriter {
        let connection = try await open()
        do {
            let handle = try openHandle(path: path)
            return SQLiteWriter(handle: handle, connection: connection, watchdog: watchdog, logger: logger)
        } catch {
            try? await connection.close().get()
            throw error
        }
    }

    private init(handle: OpaquePointer, connection: WatchedSQLiteConnection, watchdog: SQLiteWatchdog, logger: Logger) {
        self.handle = handle
        self.connection = connection
        self.watchdog = watchdog
        watch = SQLiteStatementWatch(SQLiteHandle(handle))
        watchdog.watch(watch)
        self.logger = logger
        let thread = Thread { [self] in run() }
        thread.name = "sqlite-writer"
        thread.start()
    }

    /// A raw connection tuned as the pool's are (see `TunedSQLiteSource`); the gateway's SQL
    /// functions (`regexp`) come with it (``SQLiteFunctions``).
    private static func openHandle(path: String) throws -> OpaquePointer {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let status = sqlite_nio_sqlite3_open_v2(path, &handle, flags, nil)
        guard status == SQLITE_OK, let handle else {
            let message = handle.flatMap { sqlite_nio_sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "status \(status)"
            sqlite_nio_sqlite3_close_v2(handle)
            throw SQLiteWriteError(code: status, message: "cannot open the SQLite database at \(path): \(message)")
        }
        sqlite_nio_sqlite3_extended_result_codes(handle, 1)
        sqlite_nio_sqlite3_busy_timeout(handle, 10_000)
        for pragma in ["PRAGMA foreign_keys = ON", "PRAGMA synchronous = NORMAL", "PRAGMA mmap_size = 1073741824"] {
            let status = sqlite_nio_sqlite3_exec(handle, pragma, nil, nil, nil)
            guard status == SQLITE_OK else {
                let error = SQLiteWriteError(code: status, handle: handle)
                sqlite_nio_sqlite3_close_v2(handle)
                throw error
            }
        }
        return handle
    }

    // MARK: Callers

    /// Queues a write statement; `completion` hears of it once it is committed (or has failed).
    func submit(_ sql: String, _ binds: [SQLiteData], budget: Duration?, onRow: @escaping @Sendable (SQLiteRow) -> Void, completion: Completion) {
        guard enqueue(.statement(Statement(sql: sql, binds: binds, budget: budget, onRow: onRow, completion: completion))) else {
            completion.complete(SQLiteWriteError(code: SQLITE_MISUSE, message: "the database is closed"))
            return
        }
    }

    /// A session in progress, as its task (and its child tasks) see it.
    final class Session: Sendable {
        let connection: WatchedSQLiteConnection
        private let open = Atomic<Bool>(true)
        var isOpen: Bool { open.load(ordering: .acquiring) }

        init(_ connection: WatchedSQLiteConnection) { self.connection = connection }
        func end() { open.store(false, ordering: .releasing) }
    }

    /// The session the current task holds, if any: its writes through the shared database run on
    /// the session's connection (queued, they would wait for the session to end, which waits for them).
    @TaskLocal static var current: Session?

    /// Runs `closure` with the write connection, once every write queued before it has run; writes
    /// queued meanwhile wait for it. Within a session, another session runs on the same connection.
    func withConnection<T>(_ closure: (WatchedSQLiteConnection) async throws -> T) async throws -> T {
        if let session = Self.current, session.isOpen { return try await closure(session.connection) }
        let connection = try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<WatchedSQLiteConnection, any Error>) in
            guard enqueue(.session({ continuation.resume(with: $0) })) else {
                continuation.resume(throwing: SQLiteWriteError(code: SQLITE_MISUSE, message: "the database is closed"))
                return
            }
        }
        let session = Session(connection)
        defer {
            session.end()
            giveBack()
        }
        return try await Self.$current.withValue(session) { try await closure(connection) }
    }

    /// ``withConnection(_:)-(async)`` for futures, on the connection's event loop (the closure's
    /// future must complete there, as SQLiteNIO's own futures do).
    func withConnection<T>(_ closure: @escaping @Sendable (WatchedSQLiteConnection) -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        let loop = connection.eventLoop
        let result = loop.makePromise(of: T.self)
        let granted: @Sendable (Result<WatchedSQLiteConnection, any Error>) -> Void = { granted in
            switch granted {
            case .failure(let error):
                result.fail(error)
            case .success(let connection):
                let future = closure(connection)
                _ = future.always { outcome in
                    self.giveBack()
                    switch outcome {
                    case .success(let value) where loop.inEventLoop: result.assumeIsolated().succeed(value)
                    case .success: result.fail(SQLiteWriteError(code: SQLITE_MISUSE, message: "a session's future completed on another event loop"))
                    case .failure(let error): result.fail(error)
                    }
                }
            }
        }
        guard enqueue(.session(granted)) else {
            return loop.makeFailedFuture(SQLiteWriteError(code: SQLITE_MISUSE, message: "the database is closed"))
        }
        return result.futureResult
    }

    /// Runs what is queued, then closes both connections and ends the thread.
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            condition.lock()
            if stopped {
                condition.unlock()
                continuation.resume()
                return
            }
            closing.append(continuation)
            stopping = true
            condition.broadcast()
            condition.unlock()
        }
    }

    private func enqueue(_ item: Item) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopping else { return false }
        items.append(item)
        if items.count == 1 { condition.broadcast() }
        return true
    }

    private func giveBack() {
        condition.lock()
        lent = false
        condition.broadcast()
        condition.unlock()
    }

    // MARK: The thread

    private enum Work {
        case statements([Statement])
        case session(@Sendable (Result<WatchedSQLiteConnection, any Error>) -> Void)
    }

    private func run() {
        while let work = next() {
            switch work {
            case .statements(let statements): execute(statements)
            case .session(let grant): lend(grant)
            }
        }
        for statement in statements.values { sqlite_nio_sqlite3_finalize(statement) }
        statements.removeAll()
        watch.retire()
        watchdog.unwatch(watch)
        sqlite_nio_sqlite3_close_v2(handle)
        do { try connection.close().wait() } catch { logger.warning("closing the SQLite write connection failed", metadata: ["error": "\(error)"]) }
        condition.lock()
        stopped = true
        let waiting = closing
        closing = []
        condition.unlock()
        for continuation in waiting { continuation.resume() }
    }

    /// The next statements (up to the next session), or the next session; nil once stopping with nothing left.
    private func next() -> Work? {
        condition.lock()
        defer { condition.unlock() }
        while items.isEmpty {
            if stopping { return nil }
            condition.wait()
        }
        if case .session(let grant) = items[0] {
            items.removeFirst()
            return .session(grant)
        }
        var batch: [Statement] = []
        var taken = 0
        for item in items {
            guard case .statement(let statement) = item, batch.count < Self.maximumBatch else { break }
            batch.append(statement)
            taken += 1
        }
        items.removeFirst(taken)
        return .statements(batch)
    }

    private func lend(_ grant: @Sendable (Result<WatchedSQLiteConnection, any Error>) -> Void) {
        condition.lock()
        lent = true
        condition.unlock()
        grant(.success(connection))
        condition.lock()
        while lent { condition.wait() }
        condition.unlock()
    }

    /// Runs `batch` in order: plain statements in one transaction, committed at the end (one
    /// alone runs in its own), and statements with rows on the SQLiteNIO connection, after
    /// committing what ran before them. Statements that queue meanwhile wait for the next batch:
    /// taking them into this one would hold back every caller in it until the queue runs dry,
    /// and their callers' work would no longer overlap the writer's.
    private func execute(_ batch: [Statement]) {
        // No statement is in use between batches: a full cache starts again.
        if statements.count > Self.statementCacheSize {
            for statement in statements.values { sqlite_nio_sqlite3_finalize(statement) }
            statements.removeAll()
        }
        for statement in batch {
            let prepared: OpaquePointer
            do {
                prepared = try self.prepared(statement.sql)
            } catch {
                statement.completion.complete(error)
                continue
            }
            if sqlite_nio_sqlite3_column_count(prepared) == 0 {
                if batch.count == 1 {
                    statement.completion.complete(step(prepared, statement.binds, budget: statement.budget))
                } else {
                    runInTransaction(statement, prepared)
                }
                continue
            }
            commit()
            do {
                try connection.query(statement.sql, statement.binds, budget: statement.budget, logger: logger, statement.onRow).wait()
                statement.completion.complete(nil)
            } catch {
                statement.completion.complete(error)
            }
        }
        commit()
    }

    // The open transaction (writer thread only): whether there is one, and the statements that
    // succeeded in it, whose callers hear of it at the commit.
    private var transactionOpen = false
    private var uncommitted: [Statement] = []

    /// Runs a plain statement in the open transaction (opening one first).
    private func runInTransaction(_ statement: Statement, _ prepared: OpaquePointer) {
        if !transactionOpen {
            if let error = control("BEGIN IMMEDIATE") {
                statement.completion.complete(error)
                return
            }
            transactionOpen = true
        }
        guard let error = step(prepared, statement.binds, budget: statement.budget) else {
            uncommitted.append(statement)
            return
        }
        statement.completion.complete(error)
        // SQLite undid the failed statement alone, unless the failure undid the whole
        // transaction: then the statements before it run again, in a new one.
        guard sqlite_nio_sqlite3_get_autocommit(handle) != 0 else { return }
        transactionOpen = false
        let again = uncommitted
        uncommitted = []
        for statement in again {
            do {
                runInTransaction(statement, try self.prepared(statement.sql))
            } catch {
                statement.completion.complete(error)
            }
        }
    }

    /// Commits the open transaction and tells its statements' callers.
    private func commit() {
        guard transactionOpen else { return }
        transactionOpen = false
        let done = uncommitted
        uncommitted = []
        if let error = control("COMMIT") {
            if sqlite_nio_sqlite3_get_autocommit(handle) == 0 { _ = control("ROLLBACK") }
            for statement in done { statement.completion.complete(error) }
        } else {
            for statement in done { statement.completion.complete(nil) }
        }
    }

    /// Runs a transaction statement (`BEGIN IMMEDIATE`, `COMMIT`, `ROLLBACK`), prepared once.
    private func control(_ sql: String) -> (any Error)? {
        do {
            return step(try prepared(sql), [])
        } catch {
            return error
        }
    }

    /// Binds and steps a prepared statement without rows, for at most `budget`; nil when it succeeded.
    private func step(_ prepared: OpaquePointer, _ binds: [SQLiteData], budget: Duration? = nil) -> (any Error)? {
        defer {
            sqlite_nio_sqlite3_reset(prepared)
            sqlite_nio_sqlite3_clear_bindings(prepared)
        }
        for (index, bind) in binds.enumerated() {
            let position = Int32(index + 1)
            let status: Int32
            switch bind {
            case .blob(let value):
                status = value.withUnsafeReadableBytes {
                    sqlite_nio_sqlite3_bind_blob64(prepared, position, $0.baseAddress, UInt64($0.count), Self.transient)
                }
            case .float(let value):
                status = sqlite_nio_sqlite3_bind_double(prepared, position, value)
            case .integer(let value):
                status = sqlite_nio_sqlite3_bind_int64(prepared, position, Int64(value))
            case .null:
                status = sqlite_nio_sqlite3_bind_null(prepared, position)
            case .text(let value):
                var value = value
                status = value.withUTF8 { bytes in
                    // A null pointer would bind NULL: the empty string gets a real one.
                    let text = UnsafeRawPointer(bytes.baseAddress ?? Self.emptyText).assumingMemoryBound(to: CChar.self)
                    return sqlite_nio_sqlite3_bind_text64(prepared, position, text, UInt64(bytes.count), Self.transient, UInt8(SQLITE_UTF8))
                }
            }
            guard status == SQLITE_OK else { return SQLiteWriteError(code: status, handle: handle) }
        }
        watch.begin(budget)
        let status = sqlite_nio_sqlite3_step(prepared)
        watch.end()
        guard status == SQLITE_DONE || status == SQLITE_ROW else { return SQLiteWriteError(code: status, handle: handle) }
        return nil
    }

    /// The statement for `sql`, prepared once and kept.
    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let known = statements[sql] { return known }
        var statement: OpaquePointer?
        let status = sqlite_nio_sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else {
            sqlite_nio_sqlite3_finalize(statement)
            throw SQLiteWriteError(code: status == SQLITE_OK ? SQLITE_MISUSE : status, handle: handle,
                                   fallback: "an empty statement")
        }
        statements[sql] = statement
        return statement
    }

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    private static var emptyText: UnsafePointer<UInt8> { ("" as StaticString).utf8Start }
}

/// A failure of a statement on the SQLite write connection: SQLite's result code and message.
struct SQLiteWriteError: Error, CustomStringConvertible {
    let code: Int32
    let message: String

    init(code: Int32, message: String) {
        self.code = code
        self.message = message
    }

    init(code: Int32, handle: OpaquePointer, fallback: String? = nil) {
        self.code = code
        let text = sqlite_nio_sqlite3_errmsg(handle).map { String(cString: $0) }
        message = (code == SQLITE_MISUSE ? fallback : nil) ?? text ?? fallback ?? "SQLite error \(code)"
    }

    var description: String { "SQLite error \(code): \(message)" }
}
