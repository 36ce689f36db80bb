@preconcurrency import AsyncKit
import Foundation
import GRDB
import GRDBSQLite
import GatewaySupport
import Synchronization

/// The gateway's SQLite file, through GRDB's `DatabasePool`: WAL mode, one connection that writes
/// and readers beside it, each connection used by one thread at a time.
///
/// - **Where a statement runs.** A statement that only reads (as SQLite says of the prepared
///   statement: `sqlite3_stmt_readonly`) runs on a reader; every other one on the writer. The
///   writer is taken in turn (first come, first served) by groups of queued writes and by
///   sessions. A session (``session(_:)``, behind SQLKit's `withSession` and
///   the gateway's `transaction`) holds the writer for its whole life, and every statement its
///   task runs goes there, so the process never contends with itself for SQLite's write lock.
/// - **Waiting.** Reads wait at most `database.acquireTimeout` for a reader (then the request is a
///   503); writes queue in order, and those that queue while the writer works are committed
///   together (``runGroup(_:on:)``).
/// - **Time.** Each statement carries the budget of the task that runs it (``SQLiteWatchdog``),
///   and is interrupted past it.
/// - **Running.** GRDB prepares and keeps the statements; the values are bound and the rows read
///   with SQLite's C API on GRDB's prepared statement (GRDB's own binding cuts text at a NUL byte,
///   and its rows would be converted twice).
final class SQLiteStore: Sendable {
    /// The oldest SQLite the gateway's SQL runs on: `RETURNING`, and the JSON `->` operators (3.38).
    static let minimumVersion: Int32 = 3_038_000

    /// A session in progress, as its task (and its child tasks) see it.
    final class Session: Sendable {
        /// The store whose writer it holds (a task may reach more than one gateway's store).
        let store: ObjectIdentifier
        /// The session the task held when this one began (another store's), still its own there.
        let outer: Session?
        init(store: ObjectIdentifier, outer: Session?) {
            self.store = store
            self.outer = outer
        }
        private let open = Atomic<Bool>(true)
        var isOpen: Bool { open.load(ordering: .acquiring) }
        func end() { open.store(false, ordering: .releasing) }
    }

    /// The sessions the current task holds, innermost first (through ``Session/outer``).
    @TaskLocal static var current: Session?

    let watchdog: SQLiteWatchdog
    private let pool: DatabasePool
    private let readers: AsyncGate
    private let writer = AsyncGate(width: 1)
    private let acquireTimeout: Duration
    private let kept = KeptStatementTexts()
    private let queue = Mutex(WriteQueue())

    /// Opens (creating it if need be) the database at `path` with up to `readers` reading
    /// connections. GRDB opens and closes synchronously: both run on a dispatch queue, never on
    /// a thread of Swift's cooperative pool (which has one per core, and every task waits for them).
    static func open(path: String, readers: Int, acquireTimeout: Duration, watchdog: SQLiteWatchdog) async throws -> SQLiteStore {
        try await offTheCooperativePool {
            try SQLiteStore(path: path, readers: readers, acquireTimeout: acquireTimeout, watchdog: watchdog)
        }
    }

    private init(path: String, readers: Int, acquireTimeout: Duration, watchdog: SQLiteWatchdog) throws {
        guard sqlite3_libversion_number() >= Self.minimumVersion else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE,
                                message: "SQLite \(String(cString: sqlite3_libversion())) is older than 3.38, which the gateway needs")
        }
        var configuration = Configuration()
        configuration.label = "gateway"
        configuration.busyMode = .timeout(10)
        configuration.maximumReaderCount = max(1, readers)
        // A session's transaction spans several of GRDB's accesses to the writer.
        configuration.allowsUnsafeTransactions = true
        // Readers stay open for the pool's life: a new generation of kept statements
        // (``KeptStatementTexts``) empties their caches instead of closing them.
        configuration.persistentReadOnlyConnections = true
        configuration.prepareDatabase { db in
            // Reads through a memory map of up to 1 GiB of the file: pages come straight from the
            // OS's cache instead of a read call each (writes still go through the WAL).
            try db.execute(sql: "PRAGMA mmap_size = 1073741824")
            if let handle = db.sqliteConnection { SQLiteFunctions.install(on: handle) }
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        self.readers = AsyncGate(width: max(1, readers))
        self.acquireTimeout = acquireTimeout
        self.watchdog = watchdog
    }

    /// Closes every connection (once nothing runs on them).
    func close() async throws {
        try await Self.offTheCooperativePool { [pool] in try pool.close() }
    }

    private static func offTheCooperativePool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }

    // MARK: Statements

    /// Runs one statement where it belongs, `onRow` called with each row it returns; inside
    /// `session` (or the current task's session), on the session's writer.
    func execute(_ sql: String, _ values: [StatementValue], session: Session? = nil,
                 onRow: @escaping @Sendable (SQLiteRow) -> Void) async throws {
        let budget = watchdog.current
        if let session = session ?? ownSession, session.isOpen {
            _ = try await onWriter { db in try self.run(sql, values, on: db, budget: budget, onRow: onRow) }
            return
        }
        if !Self.writesAlways(sql), try await read(sql, values, budget: budget, onRow: onRow) { return }
        // A transaction belongs to a session: one a lone statement began would take in the writes
        // queued after it.
        guard !Self.controlsTransactions(sql) else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "a transaction is begun and ended inside a session (transaction or withSession), not by a lone statement", sql: sql)
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let write = QueuedWrite(sql: sql, values: values, budget: budget, onRow: onRow, continuation: continuation)
            let starts = queue.withLock { queue in
                queue.writes.append(write)
                defer { queue.draining = true }
                return !queue.draining
            }
            if starts { drain() }
        }
    }

    /// Runs `body` holding the writer: every statement its task runs goes to the writer, after the
    /// writes queued before it; writes queued meanwhile wait for it. A transaction it leaves open
    /// is rolled back. Within a session of this store, another session is the same one.
    func session<R>(_ body: (Session) async throws -> R) async throws -> R {
        if let session = ownSession { return try await body(session) }
        await writer.enter()
        let session = Session(store: ObjectIdentifier(self), outer: Self.current)
        let outcome: Result<R, any Error>
        do {
            outcome = .success(try await Self.$current.withValue(session) { try await body(session) })
        } catch {
            outcome = .failure(error)
        }
        session.end()
        // An open transaction is rolled back, and the writer given back, on GRDB's queue.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            pool.asyncWriteWithoutTransaction { db in
                if db.isInsideTransaction { try? db.execute(sql: "ROLLBACK") }
                self.writer.leave()
                continuation.resume()
            }
        }
        return try outcome.get()
    }

    /// The current task's open session on this store, if it holds one.
    private var ownSession: Session? {
        var session = Self.current
        while let candidate = session {
            if candidate.store == ObjectIdentifier(self) { return candidate.isOpen ? candidate : nil }
            session = candidate.outer
        }
        return nil
    }

    // MARK: Writes, committed in groups

    /// A write waiting for the writer.
    private struct QueuedWrite: Sendable {
        let sql: String
        let values: [StatementValue]
        let budget: Duration?
        let onRow: @Sendable (SQLiteRow) -> Void
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct WriteQueue {
        var writes: [QueuedWrite] = []
        /// Whether a task is taking writes from the queue (it stops when the queue is empty).
        var draining = false
    }

    /// The most writes one transaction takes.
    static let maximumBatch = 512

    /// Takes the queued writes to the writer in groups: everything queued when the writer comes
    /// free, up to ``maximumBatch``, runs in one access (``runGroup(_:on:)``). The writer is
    /// given back between groups, so a session waiting for it comes next. No task is involved:
    /// the writes run on GRDB's writer queue as soon as the writer is free, whatever the load on
    /// Swift's cooperative threads.
    private func drain() {
        writer.enter { [self] in
            let group = queue.withLock { queue -> [QueuedWrite] in
                let taken = Array(queue.writes.prefix(Self.maximumBatch))
                queue.writes.removeFirst(taken.count)
                if taken.isEmpty { queue.draining = false }
                return taken
            }
            guard !group.isEmpty else {
                writer.leave()
                return
            }
            pool.asyncWriteWithoutTransaction { db in
                self.runGroup(group, on: db)
                self.writer.leave()
                self.drain()
            }
        }
    }

    /// Runs a group of writes in order. Statements that change rows (`INSERT`, `UPDATE`, `DELETE`,
    /// `REPLACE`, a `WITH` that writes) run together in one `BEGIN IMMEDIATE` … `COMMIT`, so a
    /// burst of small writes costs one commit instead of one each; any other statement (DDL,
    /// `PRAGMA`) runs alone, after the open transaction commits. Each write still succeeds or
    /// fails on its own: SQLite undoes a failed statement and keeps the transaction, and when a
    /// failure undoes the whole transaction (an `INSERT OR ROLLBACK`, an interrupt) the writes
    /// before it run again. No caller hears of success, or gets its rows, before the commit.
    private func runGroup(_ group: [QueuedWrite], on db: Database) {
        var transactionOpen = false
        var succeeded: [(write: QueuedWrite, rows: [SQLiteRow])] = []

        func runCollecting(_ write: QueuedWrite) throws -> [SQLiteRow] {
            var rows: [SQLiteRow] = []
            _ = try run(write.sql, write.values, on: db, budget: write.budget) { rows.append($0) }
            return rows
        }
        func control(_ sql: String) throws {
            _ = try run(sql, [], on: db, budget: nil) { _ in }
        }
        func runInTransaction(_ write: QueuedWrite) {
            if !transactionOpen {
                do {
                    try control("BEGIN IMMEDIATE")
                } catch {
                    write.continuation.resume(throwing: error)
                    return
                }
                transactionOpen = true
            }
            do {
                succeeded.append((write, try runCollecting(write)))
            } catch {
                write.continuation.resume(throwing: error)
                guard !db.isInsideTransaction else { return }
                transactionOpen = false
                let again = succeeded
                succeeded = []
                for (write, _) in again { runInTransaction(write) }
            }
        }
        func commit() {
            guard transactionOpen else { return }
            transactionOpen = false
            let done = succeeded
            succeeded = []
            do {
                try control("COMMIT")
                for (write, rows) in done {
                    for row in rows { write.onRow(row) }
                    write.continuation.resume()
                }
            } catch {
                if db.isInsideTransaction { try? control("ROLLBACK") }
                for (write, _) in done { write.continuation.resume(throwing: error) }
            }
        }

        for write in group {
            if group.count > 1, Self.changesRows(write.sql) {
                runInTransaction(write)
                continue
            }
            commit()
            do {
                for row in try runCollecting(write) { write.onRow(row) }
                write.continuation.resume()
            } catch {
                write.continuation.resume(throwing: error)
            }
        }
        commit()
    }

    /// Statements that only change rows, and so may share a transaction.
    static func changesRows(_ sql: String) -> Bool {
        switch firstWord(sql) {
        case "insert", "update", "delete", "replace", "with": true
        default: false
        }
    }

    /// Statements that change the schema (after them the writer's kept statements are dropped).
    static func changesSchema(_ sql: String) -> Bool {
        switch firstWord(sql) {
        case "create", "alter", "drop": true
        default: false
        }
    }

    /// Statements that begin or end a transaction (or a savepoint).
    static func controlsTransactions(_ sql: String) -> Bool {
        switch firstWord(sql) {
        case "begin", "commit", "end", "rollback", "savepoint", "release": true
        default: false
        }
    }

    /// Statements that change the database or its connection whatever they contain: everything
    /// but `SELECT`, `VALUES`, `EXPLAIN` and `WITH` (which SQLite is asked about, prepared on a reader).
    static func writesAlways(_ sql: String) -> Bool {
        switch firstWord(sql) {
        case "select", "values", "explain", "with": false
        default: true
        }
    }

    /// The first word of `sql`, lowercased (after white space and opening parentheses).
    static func firstWord(_ sql: String) -> String {
        var bytes = sql.utf8.drop { $0 == 32 || $0 == 10 || $0 == 13 || $0 == 9 || $0 == 40 }.prefix(16).makeIterator()
        var word: [UInt8] = []
        while let byte = bytes.next(), byte != 32, byte != 10, byte != 13, byte != 9, byte != 40 { word.append(byte | 0x20) }
        return String(decoding: word, as: UTF8.self)
    }

    /// Runs `sql` on a reader if it only reads; false (without running it) when it writes.
    private func read(_ sql: String, _ values: [StatementValue], budget: Duration?,
                      onRow: @escaping @Sendable (SQLiteRow) -> Void) async throws -> Bool {
        try await withCheckedThrowingContinuation { continuation in
            readers.enter(timeout: acquireTimeout, timedOut: { continuation.resume(throwing: ConnectionPoolTimeoutError.connectionRequestTimeout) }) {
                self.pool.asyncUnsafeRead { access in
                    let result = Result { try self.run(sql, values, on: try access.get(), readOnly: true, budget: budget, onRow: onRow) }
                    // The place is given back before the task resumes: it never waits for a cooperative thread.
                    self.readers.leave()
                    continuation.resume(with: result)
                }
            }
        }
    }

    private func onWriter<T: Sendable>(_ work: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            pool.asyncWriteWithoutTransaction { db in
                continuation.resume(with: Result { try work(db) })
            }
        }
    }

    /// Runs `sql` on `db`, for at most `budget`; false (without running it) when `readOnly` and
    /// the statement writes.
    private func run(_ sql: String, _ values: [StatementValue], on db: Database, readOnly: Bool = false, budget: Duration?,
                     onRow: (SQLiteRow) -> Void) throws -> Bool {
        guard let connection = db.sqliteConnection else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "the database is closed", sql: sql)
        }
        if kept.keep(sql) { pool.releaseMemoryEventually() }
        let statement = try db.cachedStatement(sql: sql)
        if readOnly, !statement.isReadonly { return false }
        let prepared = statement.sqliteStatement
        sqlite3_reset(prepared)
        sqlite3_clear_bindings(prepared)
        defer {
            sqlite3_reset(prepared)
            sqlite3_clear_bindings(prepared)
        }
        for (index, value) in values.enumerated() {
            let code = Self.bind(value, at: Int32(index + 1), to: prepared)
            guard code == SQLITE_OK else { throw Self.error(code, connection, sql) }
        }
        // A statement whose tables changed since it was kept (`ALTER TABLE`, here or in another
        // process) is prepared again by SQLite inside its first step: the columns are read after it.
        var columns: SQLiteColumns?
        let watch = watchdog.watch(for: connection)
        watch.begin(budget)
        defer {
            watch.end()
            // GRDB forgets kept statements after a schema change only when it runs them itself.
            if !readOnly, Self.changesSchema(sql) { db.clearSchemaCache() }
        }
        while true {
            let code = sqlite3_step(prepared)
            if code == SQLITE_DONE { return true }
            guard code == SQLITE_ROW else { throw Self.error(code, connection, sql) }
            let names = columns ?? SQLiteColumns((0..<sqlite3_column_count(prepared)).map { sqlite3_column_name(prepared, $0).map { String(cString: $0) } ?? "" })
            columns = names
            onRow(SQLiteRow(columns: names, values: (0..<Int32(names.names.count)).map { Self.value(prepared, $0) }))
        }
    }

    private static func bind(_ value: StatementValue, at position: Int32, to prepared: OpaquePointer) -> Int32 {
        switch value {
        case .null:
            return sqlite3_bind_null(prepared, position)
        case .integer(let integer):
            return sqlite3_bind_int64(prepared, position, integer)
        case .real(let real):
            return sqlite3_bind_double(prepared, position, real)
        case .text(let text):
            var text = text
            return text.withUTF8 { bytes in
                sqlite3_bind_text64(prepared, position, copy(UnsafeRawBufferPointer(bytes)).assumingMemoryBound(to: CChar.self),
                                    UInt64(bytes.count), free, UInt8(SQLITE_UTF8))
            }
        case .blob(let data):
            return data.withUnsafeBytes { bytes in
                sqlite3_bind_blob64(prepared, position, copy(bytes), UInt64(bytes.count), free)
            }
        }
    }

    private static func value(_ prepared: OpaquePointer, _ column: Int32) -> StatementValue {
        switch sqlite3_column_type(prepared, column) {
        case SQLITE_INTEGER:
            return .integer(sqlite3_column_int64(prepared, column))
        case SQLITE_FLOAT:
            return .real(sqlite3_column_double(prepared, column))
        case SQLITE_TEXT:
            guard let text = sqlite3_column_text(prepared, column) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(prepared, column))), as: UTF8.self))
        case SQLITE_BLOB:
            guard let bytes = sqlite3_column_blob(prepared, column) else { return .blob(Data()) }
            return .blob(Data(bytes: bytes, count: Int(sqlite3_column_bytes(prepared, column))))
        default:
            return .null
        }
    }

    private static func error(_ code: Int32, _ connection: OpaquePointer, _ sql: String) -> DatabaseError {
        DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }

    /// A bound value's bytes, copied for SQLite, which frees them (`free` as the destructor: the
    /// same one copy as SQLITE_TRANSIENT, which Swift cannot name without a cast). Never null,
    /// so an empty string or blob binds as one, not as NULL.
    private static func copy(_ bytes: UnsafeRawBufferPointer) -> UnsafeMutableRawPointer {
        guard let copy = malloc(max(1, bytes.count)) else { fatalError("out of memory for a bound value of \(bytes.count) bytes") }
        if let base = bytes.baseAddress, bytes.count > 0 { copy.copyMemory(from: base, byteCount: bytes.count) }
        return copy
    }
}

/// The statement texts whose prepared statements the connections keep (GRDB's caches), counted
/// in generations: the text past ``limit`` distinct ones starts a new generation, and the store
/// has every connection drop what it kept (`releaseMemoryEventually`). The gateway's own
/// statements are a few hundred texts and are kept again at their next run; texts shaped by
/// requests (a todo query's `where`) can neither grow the caches without end nor crowd the hot
/// statements out for good.
final class KeptStatementTexts: Sendable {
    static let limit = 2000
    private let texts = Mutex<Set<String>>([])

    /// Counts `sql` in this generation; true when it starts a new one (the caller drops the kept
    /// statements).
    func keep(_ sql: String) -> Bool {
        texts.withLock { texts in
            guard texts.insert(sql).inserted, texts.count > Self.limit else { return false }
            texts = [sql]
            return true
        }
    }

    /// The texts counted in this generation.
    var count: Int { texts.withLock { $0.count } }
}
