import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import SQLKit
import Synchronization
import Testing

/// `database.statementTimeout`: a statement past it is stopped (a 503 for its request) and the
/// connection works afterwards; operator work (migrations) is not bounded by it. And SQLite
/// statements go to the writer by what they do, not by their first word.
/// Serialized: its slow statements would hold SQLite's connections and the machine's two cores from the routing test.
@Suite("statement budget and statement routing", .serialized)
struct StatementBudgetTests {
    /// Opens a fresh database of `storage` whose statements may run `budget` seconds.
    static func withDatabase<R>(_ storage: TestStorage, budget: Double, _ body: (GatewayDatabase) async throws -> R) async throws -> R {
        try await storage.withFreshLocation { location, directory in
            let settings = DatabasePoolSettings(statementTimeout: ConfigDuration(seconds: budget))
            let database = try await GatewayDatabase.open(location, baseDirectory: directory, logger: TestStorage.quietLogger, pool: settings)
            do {
                let result = try await body(database)
                await database.shutdown()
                return result
            } catch {
                await database.shutdown()
                throw error
            }
        }
    }

    /// A statement that runs for seconds: a long recursive count on SQLite, a sleep on PostgreSQL.
    static func slow(_ storage: TestStorage, seconds: Double = 10) -> SQLQueryString {
        storage == .sqlite
            ? "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(unsafeRaw: String(Int(seconds * 20_000_000)))) SELECT count(*) AS n FROM c"
            : "SELECT pg_sleep(\(unsafeRaw: String(seconds)))"
    }

    /// Runs `statement`, expecting it to be stopped within a second and mapped to a 503.
    static func expectStopped(_ statement: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async {
        let start = ContinuousClock.now
        do {
            try await statement()
            Issue.record("the statement ran to its end", sourceLocation: sourceLocation)
        } catch {
            let took = ContinuousClock.now - start
            #expect(DatabaseErrorText.overload(error)?.status == 503, "\(DatabaseErrorText.describe(error))", sourceLocation: sourceLocation)
            // Far below what the statement would take (10 s and more); generous for a loaded machine.
            #expect(took < .seconds(6), "stopped after \(took)", sourceLocation: sourceLocation)
        }
    }

    @Test("a statement past its budget is a 503, and the same connection works afterwards", arguments: TestStorage.available)
    func statementPastItsBudget(storage: TestStorage) async throws {
        try await Self.withDatabase(storage, budget: 0.3) { database in
            let sql = database.sql
            try await sql.raw("CREATE TABLE probe_budget (x BIGINT)").run()
            // On the pool.
            await Self.expectStopped { try await sql.raw(Self.slow(storage)).run() }
            #expect(try await sql.raw("SELECT 1 AS one").first()?.decode(column: "one", as: Int.self) == 1)
            // In a session (on SQLite, the writer's connection): the same connection, before and after.
            try await sql.withSession { session in
                await Self.expectStopped { try await session.raw(Self.slow(storage)).run() }
                #expect(try await session.raw("SELECT 2 AS two").first()?.decode(column: "two", as: Int.self) == 2)
                try await session.raw("INSERT INTO probe_budget (x) VALUES (1)").run()
            }
            // A write (on SQLite, on the writer outside a session), stopped; the next write is stored.
            let slowWrite: SQLQueryString = storage == .sqlite
                ? "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000000) INSERT INTO probe_budget (x) SELECT count(*) FROM c"
                : "INSERT INTO probe_budget (x) SELECT 1 FROM pg_sleep(10)"
            await Self.expectStopped { try await sql.raw(slowWrite).run() }
            try await sql.raw("INSERT INTO probe_budget (x) VALUES (2)").run()
            struct Row: Decodable { var x: Int }
            #expect(try await sql.raw("SELECT x FROM probe_budget ORDER BY x").all(decoding: Row.self).map(\.x) == [1, 2])
        }
    }

    @Test("migrations are not cut by the request budget", arguments: TestStorage.available)
    func migrationsAreExempt(storage: TestStorage) async throws {
        try await Self.withDatabase(storage, budget: 0.05) { database in
            let step = Migration(1, "slow step") { db in
                try await db.raw(Self.slow(storage, seconds: 0.15)).run()
                try await db.raw("CREATE TABLE probe_slow_migration (x BIGINT)").run()
            }
            let start = ContinuousClock.now
            let applied = try await MigrationRunner(database: database.sql, logger: TestStorage.quietLogger).migrate([(owner: "probe", steps: [step])])
            #expect(applied.count == 1)
            #expect(ContinuousClock.now - start > .milliseconds(100), "the slow step really ran longer than the budget")
            // And the budget holds again afterwards, on the connection the migration used too.
            await Self.expectStopped { try await database.sql.raw(Self.slow(storage)).run() }
        }
    }

    @Test("database.statementTimeout defaults to 5 s and is read from plugins.yaml")
    func setting() throws {
        #expect(DatabasePoolSettings().statementTimeout?.seconds == 5)
        let parsed = try GatewayConfiguration.parse(Data("database: { maxConnections: 4 }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        #expect(parsed.database.statementTimeout?.seconds == 5)
        let set = try GatewayConfiguration.parse(Data("database: { statementTimeout: 250ms }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        #expect(set.database.statementTimeout?.seconds == 0.25)
    }

    @Test("SQLite: a WITH … SELECT reads beside the writer; a WITH … INSERT waits for it")
    func routingByWhatAStatementDoes() async throws {
        try await TestStorage.sqlite.withDatabase { database in
            let sql = database.sql
            try await sql.raw("CREATE TABLE probe_routing (x BIGINT)").run()
            let read: SQLQueryString = "WITH v(x) AS (SELECT 41) SELECT x + 1 AS y FROM v"
            let write: SQLQueryString = "WITH v(x) AS (SELECT 7) INSERT INTO probe_routing (x) SELECT x FROM v"
            let (readTook, writeTook) = try await withThrowingTaskGroup(of: (String, Duration).self) { group in
                let start = ContinuousClock.now
                group.addTask {
                    // Holds the writer for 8 s: long beside what the read takes even on a busy machine.
                    try await sql.withSession { _ in try await Task.sleep(for: .milliseconds(8000)) }
                    return ("session", ContinuousClock.now - start)
                }
                try await Task.sleep(for: .milliseconds(100))
                group.addTask {
                    let answer = try await sql.raw(read).first()?.decode(column: "y", as: Int.self)
                    #expect(answer == 42)
                    return ("read", ContinuousClock.now - start)
                }
                group.addTask {
                    try await sql.raw(write).run()
                    return ("write", ContinuousClock.now - start)
                }
                var took: [String: Duration] = [:]
                for try await (name, duration) in group { took[name] = duration }
                return (took["read"]!, took["write"]!)
            }
            // (Generous: SQLite's statements share the machine with every other test running.)
            #expect(readTook < .milliseconds(5000), "the WITH … SELECT waited for the writer: \(readTook)")
            #expect(writeTook >= .milliseconds(7950), "the WITH … INSERT did not wait for the writer: \(writeTook)")
            struct Row: Decodable { var x: Int }
            #expect(try await sql.raw("SELECT x FROM probe_routing").all(decoding: Row.self).map(\.x) == [7])
        }
    }

    @Test("SQLite: statements that write run on the writer, as SQLite says of the prepared statement")
    func statementKinds() async throws {
        for reads in ["SELECT 1", " (SELECT 1)", "values (1)", "EXPLAIN SELECT 1", "WITH a AS (SELECT 1) SELECT * FROM a"] {
            #expect(!SQLiteStore.writesAlways(reads), "\(reads)")
        }
        for writes in ["INSERT INTO probe_kinds VALUES (1)", "BEGIN IMMEDIATE", "COMMIT", "PRAGMA journal_mode=WAL", "CREATE TABLE other (x)", "UPDATE x", ""] {
            #expect(SQLiteStore.writesAlways(writes), "\(writes)")
        }
        try await TestStorage.sqlite.withDatabase { database in
            let sql = database.sql
            try await sql.raw("CREATE TABLE probe_kinds (x BIGINT)").run()
            // A WITH that writes reaches the writer (a reader's connection is read-only: it would fail there).
            try await sql.raw("WITH a AS (SELECT 1) INSERT INTO probe_kinds SELECT * FROM a").run()
            try await sql.raw("WITH a AS (SELECT 2) INSERT INTO probe_kinds SELECT * FROM a RETURNING x").run()
            try await sql.raw("WITH a AS (SELECT 1) DELETE FROM probe_kinds WHERE x IN (SELECT * FROM a)").run()
            struct Row: Decodable { var x: Int }
            let rows = try await sql.raw("with recursive c(x) as (select 1 union all select x + 1 from c where x < 3) select x from probe_kinds where x in (select x from c)")
                .all(decoding: Row.self)
            #expect(rows.map(\.x) == [2])
            // A statement that does not prepare fails with SQLite's reason; two statements in one text are refused.
            let missing = await #expect(throws: (any Error).self) { try await sql.raw("WITH a AS (SELECT 1) SELECT * FROM no_such_table").run() }
            #expect(DatabaseErrorText.describe(missing!).contains("no such table"), "\(DatabaseErrorText.describe(missing!))")
            await #expect(throws: (any Error).self) { try await sql.raw("INSERT INTO probe_kinds VALUES (5); DELETE FROM probe_kinds").run() }
            #expect(try await sql.raw("SELECT x FROM probe_kinds").all(decoding: Row.self).map(\.x) == [2])
            // A transaction is a session's: one a lone statement begins is rolled back and refused.
            await #expect(throws: (any Error).self) { try await sql.raw("BEGIN").run() }
            await #expect(throws: (any Error).self) { try await sql.raw("SAVEPOINT s1").run() }
            try await sql.raw("INSERT INTO probe_kinds VALUES (6)").run()
            #expect(try await sql.raw("SELECT x FROM probe_kinds ORDER BY x").all(decoding: Row.self).map(\.x) == [2, 6])
            // A kept statement sees a column added since (on the writer, in a session, and on the readers).
            let everything: SQLQueryString = "SELECT * FROM probe_kinds ORDER BY x"
            #expect(try await sql.withSession { try await $0.raw(everything).first()?.allColumns } == ["x"])
            #expect(try await sql.raw(everything).first()?.allColumns == ["x"])
            try await sql.raw("ALTER TABLE probe_kinds ADD COLUMN y TEXT DEFAULT 'new'").run()
            #expect(try await sql.withSession { try await $0.raw(everything).first()?.allColumns } == ["x", "y"])
            #expect(try await sql.raw(everything).first()?.decode(column: "y", as: String.self) == "new")
        }
    }

    @Test("SQLite: statement texts past the kept limit start a new generation of kept statements, and every statement still runs")
    func keptStatementGenerations() async throws {
        let kept = KeptStatementTexts()
        for index in 0..<KeptStatementTexts.limit { #expect(!kept.keep("SELECT \(index)")) }
        #expect(!kept.keep("SELECT 0"), "a text already counted")
        #expect(kept.keep("SELECT -1"), "the text past the limit starts a new generation")
        #expect(kept.count == 1)

        try await TestStorage.sqlite.withDatabase { database in
            let sql = database.sql
            try await sql.raw("CREATE TABLE probe_kept (x BIGINT)").run()
            struct Row: Decodable { var x: Int }
            // Texts shaped by values, as a request's query can make them: reads and writes past the limit.
            for index in 0..<(KeptStatementTexts.limit + 100) {
                if index.isMultiple(of: 2) {
                    try await sql.raw("INSERT INTO probe_kept VALUES (\(literal: index))").run()
                } else {
                    let rows = try await sql.raw("SELECT \(literal: index) AS x").all(decoding: Row.self)
                    #expect(rows.map(\.x) == [index])
                }
            }
            let count = try await sql.raw("SELECT COUNT(*) AS x FROM probe_kept").first(decoding: Row.self)
            #expect(count?.x == (KeptStatementTexts.limit + 100) / 2)
        }
    }

    @Test("SQLite: a session of one database inside a session of another keeps both; the outer one's statements still run on its writer",
          .timeLimit(.minutes(2)))
    func nestedSessionsOfTwoStores() async throws {
        try await TestStorage.sqlite.withDatabase { first in
            try await TestStorage.sqlite.withDatabase { second in
                try await first.sql.raw("CREATE TABLE probe_outer (x BIGINT)").run()
                try await second.sql.raw("CREATE TABLE probe_inner (x BIGINT)").run()
                try await first.sql.transaction { _ in
                    try await first.sql.raw("INSERT INTO probe_outer VALUES (1)").run()
                    try await second.sql.transaction { _ in
                        // Through the plain database, not the session's: the task's sessions route it.
                        try await first.sql.raw("INSERT INTO probe_outer VALUES (2)").run()
                        try await second.sql.raw("INSERT INTO probe_inner VALUES (3)").run()
                    }
                }
                struct Row: Decodable { var x: Int }
                #expect(try await first.sql.raw("SELECT x FROM probe_outer ORDER BY x").all(decoding: Row.self).map(\.x) == [1, 2])
                #expect(try await second.sql.raw("SELECT x FROM probe_inner").all(decoding: Row.self).map(\.x) == [3])
            }
        }
    }

    @Test("a gate hands its place on without recursing: ten thousand waiters that give it back at once all get it")
    func gateHandsOnWithoutRecursion() async throws {
        let gate = AsyncGate(width: 1)
        let granted = Mutex(0)
        let done = AsyncStream<Void>.makeStream()
        gate.enter {}  // holds the one place while the waiters queue
        for _ in 0..<10_000 {
            gate.enter {
                let count = granted.withLock { count in
                    count += 1
                    return count
                }
                gate.leave()
                if count == 10_000 { done.continuation.finish() }
            }
        }
        gate.leave()
        for await _ in done.stream {}
        #expect(granted.withLock { $0 } == 10_000)
    }
}
