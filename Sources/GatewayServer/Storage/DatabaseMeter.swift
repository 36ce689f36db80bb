import GatewaySupport
import Logging
import NIOCore
import SQLKit
import Synchronization
import GatewayCore
import Tracing

/// How busy the database is, for /metrics: statements running and connections held (the pool's
/// use: a statement holds a connection while it runs, a session or transaction for its whole
/// life), and how long each statement took. The recorder is attached once the gateway's metrics
/// exist; until then statements are only counted.
final class DatabaseMeter: Sendable {
    /// Connections taken from the pool now.
    let connectionsInUse = Atomic<Int>(0)
    /// Statements that failed.
    let failures = Atomic<Int>(0)
    /// Connections the pool may open.
    let capacity: Int
    private let recorder = Mutex<StoredClosure<@Sendable (Duration) -> Void>?>(nil)

    init(capacity: Int) {
        self.capacity = capacity
    }

    /// Where statement durations go (a histogram of /metrics).
    func attach(_ record: @escaping @Sendable (Duration) -> Void) {
        recorder.withLock { $0 = StoredClosure(record) }
    }

    func finished(after duration: Duration, failed: Bool) {
        if failed { failures.add(1, ordering: .relaxed) }
        recorder.withLock { $0 }?.call(duration)
    }

    /// Runs a statement in a client span named by its first word (`SELECT`), its text attached.
    static func traced<T>(_ sql: String, system: String, _ body: () async throws -> T) async throws -> T {
        let verb = sql.drop { $0 == " " || $0 == "\n" || $0 == "(" }.prefix { $0.isLetter }.uppercased()
        return try await withSpan(verb.isEmpty ? "SQL" : verb, ofKind: .client) { span in
            span.attributes["db.system.name"] = system == "postgresql" ? "postgresql" : system
            span.attributes["db.query.text"] = String(sql.prefix(2000))
            return try await body()
        }
    }

    /// Runs one statement, counted and timed; `holdsConnection` when it takes a connection of its own.
    func measure<T>(holdsConnection: Bool, _ body: () async throws -> T) async throws -> T {
        if holdsConnection { connectionsInUse.add(1, ordering: .relaxed) }
        defer { if holdsConnection { connectionsInUse.subtract(1, ordering: .relaxed) } }
        let start = ContinuousClock.now
        do {
            let result = try await body()
            finished(after: ContinuousClock.now - start, failed: false)
            return result
        } catch {
            finished(after: ContinuousClock.now - start, failed: true)
            throw error
        }
    }
}

/// A database that answers SQLKit's questions about itself (its logger, event loop, version,
/// dialect, log level) with another's answers.
protocol ForwardingSQLDatabase: SQLDatabase {
    var forwarded: any SQLDatabase { get }
}

extension ForwardingSQLDatabase {
    var logger: Logger { forwarded.logger }
    var eventLoop: any EventLoop { forwarded.eventLoop }
    var version: (any SQLDatabaseReportedVersion)? { forwarded.version }
    var dialect: any SQLDialect { forwarded.dialect }
    var queryLogLevel: Logger.Level? { forwarded.queryLogLevel }
}

/// A database that sends every statement and session on to ``ForwardingSQLDatabase/forwarded``
/// unchanged (and adds something else, such as running finished statements).
protocol PassThroughSQLDatabase: ForwardingSQLDatabase {}

extension PassThroughSQLDatabase {
    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) -> EventLoopFuture<Void> {
        forwarded.execute(sql: query, onRow)
    }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) async throws {
        try await forwarded.execute(sql: query, onRow)
    }

    func withSession<R>(_ closure: @escaping @Sendable (any SQLDatabase) async throws -> R) async throws -> R {
        try await forwarded.withSession(closure)
    }
}

/// A database whose statements the meter counts and times. Inside a session (one connection held
/// for its whole life) statements are timed, and the session counts as one connection in use.
struct MeteredDatabase: ForwardingSQLDatabase {
    let base: any SQLDatabase
    let meter: DatabaseMeter
    /// Whether each statement takes a pooled connection (false inside a session).
    let pooled: Bool

    var forwarded: any SQLDatabase { base }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) -> EventLoopFuture<Void> {
        let meter = self.meter, pooled = self.pooled
        if pooled { meter.connectionsInUse.add(1, ordering: .relaxed) }
        let start = ContinuousClock.now
        return base.execute(sql: query, onRow).always { result in
            if pooled { meter.connectionsInUse.subtract(1, ordering: .relaxed) }
            if case .failure = result {
                meter.finished(after: ContinuousClock.now - start, failed: true)
            } else {
                meter.finished(after: ContinuousClock.now - start, failed: false)
            }
        }
    }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) async throws {
        guard GatewayTracing.isEnabled else {
            try await meter.measure(holdsConnection: pooled) { try await base.execute(sql: query, onRow) }
            return
        }
        var serializer = SQLSerializer(database: base)
        query.serialize(to: &serializer)
        try await DatabaseMeter.traced(serializer.sql, system: base.dialect.name) {
            try await meter.measure(holdsConnection: pooled) { try await base.execute(sql: query, onRow) }
        }
    }

    func withSession<R>(_ closure: @escaping @Sendable (any SQLDatabase) async throws -> R) async throws -> R {
        let meter = self.meter
        meter.connectionsInUse.add(1, ordering: .relaxed)
        defer { meter.connectionsInUse.subtract(1, ordering: .relaxed) }
        return try await base.withSession { session in
            if let runner = session as? any SQLStatementRunner {
                try await closure(MeteredStatementDatabase(runner, meter: meter, pooled: false))
            } else {
                try await closure(MeteredDatabase(base: session, meter: meter, pooled: false))
            }
        }
    }
}

/// ``MeteredDatabase`` over a database that also runs finished statements (the pool's, or a
/// session's on PostgreSQL).
struct MeteredStatementDatabase: SQLStatementRunner, PassThroughSQLDatabase {
    let metered: MeteredDatabase
    let runner: any SQLStatementRunner

    /// `pooled`: whether each statement takes a pooled connection (false inside a session).
    init(_ runner: any SQLStatementRunner, meter: DatabaseMeter, pooled: Bool = true) {
        self.runner = runner
        metered = MeteredDatabase(base: runner, meter: meter, pooled: pooled)
    }

    /// Statements and sessions go through the meter; its answers about the database are the runner's.
    var forwarded: any SQLDatabase { metered }

    func runStatement(_ sql: String, _ values: [StatementValue]) async throws {
        try await measured(sql) { try await runner.runStatement(sql, values) }
    }

    func statementRows(_ sql: String, _ values: [StatementValue]) async throws -> [any SQLRow] {
        try await measured(sql) { try await runner.statementRows(sql, values) }
    }

    private func measured<T>(_ sql: String, _ body: () async throws -> T) async throws -> T {
        guard GatewayTracing.isEnabled else {
            return try await metered.meter.measure(holdsConnection: metered.pooled, body)
        }
        return try await DatabaseMeter.traced(sql, system: runner.dialect.name) {
            try await metered.meter.measure(holdsConnection: metered.pooled, body)
        }
    }
}
