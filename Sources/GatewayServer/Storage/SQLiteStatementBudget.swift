import Foundation
import GRDBSQLite
import GatewayCore
import GatewaySupport
import NIOCore
import Synchronization

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

/// The SQL functions the gateway adds to every SQLite connection it opens (``SQLiteStore``):
///
/// - `regexp(pattern, value)`, behind SQLite's `value REGEXP pattern`: ``LinearRegex``, so a
///   match takes time linear in the value whatever the pattern. Non-text operands do not match.
///   The compiled pattern is kept with the statement (SQLite's auxiliary data) and in
///   ``LinearRegex/cached(_:)``. A pattern outside its syntax fails the statement.
enum SQLiteFunctions {
    /// Adds the functions to one connection.
    static func install(on handle: OpaquePointer) {
        sqlite3_create_function_v2(handle, "regexp", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, { context, count, arguments in
            guard let context else { return }
            guard count == 2, let arguments,
                  sqlite3_value_type(arguments[0]) == SQLITE_TEXT, sqlite3_value_type(arguments[1]) == SQLITE_TEXT,
                  let valueText = sqlite3_value_text(arguments[1]) else {
                sqlite3_result_int(context, 0)
                return
            }
            let regex: LinearRegex
            if let kept = sqlite3_get_auxdata(context, 0) {
                regex = Unmanaged<LinearRegex>.fromOpaque(kept).takeUnretainedValue()
            } else {
                guard let patternText = sqlite3_value_text(arguments[0]) else {
                    sqlite3_result_int(context, 0)
                    return
                }
                let pattern = String(cString: UnsafeRawPointer(patternText).assumingMemoryBound(to: CChar.self))
                do {
                    regex = try LinearRegex.cached(pattern)
                } catch {
                    sqlite3_result_error(context, "REGEXP: \(error)", -1)
                    return
                }
                sqlite3_set_auxdata(context, 0, Unmanaged.passRetained(regex).toOpaque()) { kept in
                    if let kept { Unmanaged<LinearRegex>.fromOpaque(kept).release() }
                }
            }
            let length = Int(sqlite3_value_bytes(arguments[1]))
            let matches = regex.matches(utf8: UnsafeBufferPointer(start: valueText, count: length))
            sqlite3_result_int(context, matches ? 1 : 0)
        }, nil, nil, nil)
    }
}

/// An `sqlite3` handle, passed between threads only to be interrupted (`sqlite3_interrupt` is
/// safe to call from any thread while the connection is open).
struct SQLiteHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// One SQLite connection's statement in progress and when it must end: ``SQLiteWatchdog`` looks
/// at it and interrupts the statement once it is overdue. A deadline is set only while a
/// statement runs, inside an access to the connection, so the handle is open whenever it is
/// interrupted.
final class SQLiteStatementWatch: Sendable {
    let handle: SQLiteHandle
    /// When the running statement must have ended (nil: none running, or no limit).
    private let deadline = Mutex<ContinuousClock.Instant?>(nil)

    init(_ handle: SQLiteHandle) { self.handle = handle }

    /// Marks a statement as started, with `budget` to run (nil: no limit).
    func begin(_ budget: Duration?) {
        guard let budget else { return }
        deadline.withLock { $0 = .now + budget }
    }

    /// Marks the statement as ended (before the connection runs anything else).
    func end() {
        deadline.withLock { $0 = nil }
    }

    /// Interrupts the running statement if it is past its deadline. Under the lock, so that the
    /// interrupt cannot reach a later statement: `end()` waits for it, and SQLite ignores an
    /// interrupt that arrives when no statement runs.
    func interruptIfOverdue(now: ContinuousClock.Instant) {
        deadline.withLock { deadline in
            guard let due = deadline, due <= now else { return }
            sqlite3_interrupt(handle.pointer)
            deadline = nil
        }
    }
}

/// Interrupts SQLite statements that run past their budget: every `tick` it looks at the watched
/// connections' statements (a lock each) and interrupts the overdue ones. A statement may so run
/// up to one tick longer than its budget.
final class SQLiteWatchdog: Sendable {
    /// How long a statement may run (nil: no limit); ``StatementBudget/exempt(_:)`` lifts it.
    let budget: Duration?
    /// One watch per connection the process has used, by its handle (the pool's connections
    /// live as long as the pool: its readers are persistent).
    private let watches = Mutex<[UInt: SQLiteStatementWatch]>([:])
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

    /// The watch over the connection whose handle is `handle`.
    func watch(for handle: OpaquePointer) -> SQLiteStatementWatch {
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))
        return watches.withLock { watches in
            if let known = watches[key] { return known }
            let watch = SQLiteStatementWatch(SQLiteHandle(handle))
            watches[key] = watch
            return watch
        }
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
