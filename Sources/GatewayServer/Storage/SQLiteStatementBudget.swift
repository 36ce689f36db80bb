import Foundation
import GatewayCore
import GatewaySupport
import NIOCore
import SQLiteNIO
import Synchronization
import VaporCSQLite

/// The time a statement may run, for statements run on behalf of requests and services
/// (`database.statementTimeout`, default 5 s). Work an operator starts is not bounded by it:
/// migrations run inside ``exempt(_:)`` (and on PostgreSQL lift the limit for their transaction
/// with `SET LOCAL statement_timeout = 0`), and the command line's `import` and `migrate` open the
/// database without the limit (their process serves no requests).
///
/// PostgreSQL enforces the limit itself (`statement_timeout`, set on every pooled connection);
/// SQLite has no such setting, so ``SQLiteWatchdog`` interrupts a statement that runs too long.
/// Either way the statement fails, the caller gets a 503 (``DatabaseErrorText/overload(_:)``) and
/// the connection stays usable.
enum StatementBudget {
    /// Whether the current task's statements run without the limit.
    @TaskLocal static var isExempt = false

    /// Runs `body` with the statements it runs (on this task and its children) unbounded in time.
    static func exempt<R>(_ body: () async throws -> R) async rethrows -> R {
        try await $isExempt.withValue(true) { try await body() }
    }
}

/// The SQL functions the gateway adds to every SQLite connection of the process, registered once
/// as an automatic extension (so the pool's connections, the writer's and any other get them the
/// moment they open):
///
/// - `regexp(pattern, value)`, behind SQLite's `value REGEXP pattern`: ``LinearRegex``, so a
///   match takes time linear in the value whatever the pattern. Non-text operands do not match.
///   The compiled pattern is kept with the statement (SQLite's auxiliary data) and in
///   ``LinearRegex/cached(_:)``. A pattern outside its syntax fails the statement.
/// - `gateway_connection_handle()`: the connection's own `sqlite3` handle, as an integer, which
///   is how the gateway finds the handle of a connection SQLiteNIO opened (to interrupt it).
enum SQLiteFunctions {
    /// Registers the functions for every connection opened from now on (once per process).
    static func register() {
        _ = registered
    }

    private static let registered: Bool = {
        let entry: @convention(c) (OpaquePointer?, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, OpaquePointer?) -> Int32 = { handle, _, _ in
            guard let handle else { return SQLITE_OK }
            SQLiteFunctions.install(on: handle)
            return SQLITE_OK
        }
        return sqlite_nio_sqlite3_auto_extension(unsafeBitCast(entry, to: (@convention(c) () -> Void).self)) == SQLITE_OK
    }()

    /// Adds the functions to one connection.
    static func install(on handle: OpaquePointer) {
        sqlite_nio_sqlite3_create_function_v2(handle, "regexp", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, { context, count, arguments in
            guard let context else { return }
            guard count == 2, let arguments,
                  sqlite_nio_sqlite3_value_type(arguments[0]) == SQLITE_TEXT, sqlite_nio_sqlite3_value_type(arguments[1]) == SQLITE_TEXT,
                  let valueText = sqlite_nio_sqlite3_value_text(arguments[1]) else {
                sqlite_nio_sqlite3_result_int(context, 0)
                return
            }
            let regex: LinearRegex
            if let kept = sqlite_nio_sqlite3_get_auxdata(context, 0) {
                regex = Unmanaged<LinearRegex>.fromOpaque(kept).takeUnretainedValue()
            } else {
                guard let patternText = sqlite_nio_sqlite3_value_text(arguments[0]) else {
                    sqlite_nio_sqlite3_result_int(context, 0)
                    return
                }
                let pattern = String(cString: UnsafeRawPointer(patternText).assumingMemoryBound(to: CChar.self))
                do {
                    regex = try LinearRegex.cached(pattern)
                } catch {
                    sqlite_nio_sqlite3_result_error(context, "REGEXP: \(error)", -1)
                    return
                }
                sqlite_nio_sqlite3_set_auxdata(context, 0, Unmanaged.passRetained(regex).toOpaque()) { kept in
                    if let kept { Unmanaged<LinearRegex>.fromOpaque(kept).release() }
                }
            }
            let length = Int(sqlite_nio_sqlite3_value_bytes(arguments[1]))
            let matches = regex.matches(utf8: UnsafeBufferPointer(start: valueText, count: length))
            sqlite_nio_sqlite3_result_int(context, matches ? 1 : 0)
        }, nil, nil, nil)
        sqlite_nio_sqlite3_create_function_v2(handle, "gateway_connection_handle", 0, SQLITE_UTF8, nil, { context, _, _ in
            guard let context else { return }
            let handle = sqlite_nio_sqlite3_context_db_handle(context)
            sqlite_nio_sqlite3_result_int64(context, Int64(Int(bitPattern: handle.map { UnsafeRawPointer($0) })))
        }, nil, nil, nil)
    }

    /// The `sqlite3` handle of a connection SQLiteNIO opened.
    static func handle(of connection: SQLiteConnection) -> EventLoopFuture<SQLiteHandle> {
        connection.query("SELECT gateway_connection_handle() AS handle").flatMapThrowing { rows in
            guard let value = rows.first?.column("handle")?.integer, let pointer = OpaquePointer(bitPattern: value) else {
                throw SQLiteWriteError(code: SQLITE_MISUSE, message: "the connection's handle could not be read")
            }
            return SQLiteHandle(pointer)
        }
    }
}

/// An `sqlite3` handle, passed between threads only to be interrupted (`sqlite3_interrupt` is
/// safe to call from any thread while the connection is open).
struct SQLiteHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// One SQLite connection's statement in progress and when it must end: ``SQLiteWatchdog`` looks
/// at it and interrupts the statement once it is overdue.
final class SQLiteStatementWatch: Sendable {
    let handle: SQLiteHandle
    private struct State {
        /// When the running statement must have ended (nil: none running, or no limit).
        var deadline: ContinuousClock.Instant?
        /// Whether the connection is closing (its handle must not be touched again).
        var retired = false
    }
    private let state = Mutex(State())

    init(_ handle: SQLiteHandle) { self.handle = handle }

    /// Marks a statement as started, with `budget` to run (nil: no limit).
    func begin(_ budget: Duration?) {
        guard let budget else { return }
        state.withLock { $0.deadline = .now + budget }
    }

    /// Marks the statement as ended (before the connection runs anything else).
    func end() {
        state.withLock { $0.deadline = nil }
    }

    /// Marks the connection as closing: nothing is interrupted on it any more.
    func retire() {
        state.withLock { $0 = State(deadline: nil, retired: true) }
    }

    /// Interrupts the running statement if it is past its deadline. Under the lock, so that the
    /// interrupt cannot reach a later statement: `end()` waits for it, and SQLite ignores an
    /// interrupt that arrives when no statement runs.
    func interruptIfOverdue(now: ContinuousClock.Instant) {
        state.withLock { state in
            guard !state.retired, let due = state.deadline, due <= now else { return }
            sqlite_nio_sqlite3_interrupt(handle.pointer)
            state.deadline = nil
        }
    }
}

/// Interrupts SQLite statements that run past their budget: every `tick` it looks at the watched
/// connections' statements (a lock each) and interrupts the overdue ones. A statement may so run
/// up to one tick longer than its budget.
final class SQLiteWatchdog: Sendable {
    /// How long a statement may run (nil: no limit); ``StatementBudget/exempt(_:)`` lifts it.
    let budget: Duration?
    private let watches = Mutex<[ObjectIdentifier: SQLiteStatementWatch]>([:])
    private let task = Mutex<RepeatedTask?>(nil)

    init(budget: Duration?, on eventLoop: any EventLoop) {
        self.budget = budget
        guard let budget else { return }
        let tick = TimeAmount.nanoseconds(max(5_000_000, min(100_000_000, budget.nanoseconds / 10)))
        let repeated = eventLoop.scheduleRepeatedTask(initialDelay: tick, delay: tick) { [weak self] _ in
            self?.check()
        }
        task.withLock { $0 = repeated }
    }

    /// The budget of a statement the current task runs now.
    var current: Duration? { StatementBudget.isExempt ? nil : budget }

    func watch(_ watch: SQLiteStatementWatch) {
        watches.withLock { $0[ObjectIdentifier(watch)] = watch }
    }

    func unwatch(_ watch: SQLiteStatementWatch) {
        _ = watches.withLock { $0.removeValue(forKey: ObjectIdentifier(watch)) }
    }

    /// Stops looking (before the connections close).
    func stop() {
        task.withLock { $0?.cancel(); $0 = nil }
    }

    private func check() {
        let now = ContinuousClock.now
        for watch in watches.withLock({ Array($0.values) }) { watch.interruptIfOverdue(now: now) }
    }
}

extension Duration {
    /// The duration in whole nanoseconds (saturating).
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : product + attoseconds / 1_000_000_000
    }
}
