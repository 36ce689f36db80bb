import Foundation
import GatewayCore
@testable import GatewayServer
import GatewaySupport
import GatewayTesting
import NIOFoundationCompat
import NotesFixturePlugin
import SQLKit
import NIOPosix
import NIOCore
import Testing

@Suite("storage and migrations")
struct StorageTests {
    static let steps = [
        Migration(1, "create t") { db in
            try await db.create(table: "probe_t").column("id", type: .bigint, .primaryKey(autoIncrement: false)).column("name", type: .text).run()
        },
        Migration(2, "add index") { db in
            try await db.create(index: "probe_t_name").on("probe_t").column("name").run()
        },
    ]

    @Test("an SQLite file that is not a database fails to open with the reason, and again the same way (nothing is left open)")
    func unusableSQLiteFile() async throws {
        let directory = FileManager.default.temporaryDirectory
        let name = "not-a-database-\(UUID().uuidString).db"
        let path = directory.appendingPathComponent(name).path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }).write(to: URL(fileURLWithPath: path))
        for _ in 0..<3 {
            let error = await #expect(throws: (any Error).self) {
                _ = try await GatewayDatabase.open(.sqlite(path: path), baseDirectory: directory, logger: .init(label: "test"))
            }
            #expect(error.map { DatabaseErrorText.describe($0) }?.contains("not a database") == true, "\(String(describing: error))")
        }
    }

    @Test("concurrent writes each get their own outcome: a duplicate key fails alone, every other row is stored", arguments: TestStorage.available)
    func concurrentWrites(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let sql = database.sql
            _ = try await MigrationRunner(database: sql, logger: .init(label: "test")).migrate([(owner: "probe", steps: Self.steps)])
            // 400 single-row inserts at once (on SQLite, queued for its one writer); id 7 is inserted twice.
            let ids = Array(0..<400) + [7]
            let outcomes = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
                for id in ids {
                    group.addTask {
                        do {
                            try await sql.insert(into: "probe_t").columns("id", "name").values(SQLBind(id), SQLBind("row \(id)")).run()
                            return (id, true)
                        } catch {
                            return (id, false)
                        }
                    }
                }
                return try await group.reduce(into: [(Int, Bool)]()) { $0.append($1) }
            }
            #expect(outcomes.filter { !$0.1 }.map(\.0) == [7], "exactly one of the two inserts of id 7 fails")
            struct Count: Decodable { var n: Int }
            let stored = try await sql.raw("SELECT COUNT(*) AS n FROM probe_t").first(decoding: Count.self)
            #expect(stored?.n == 400)
            // Every row has its own values (the rows of a combined INSERT take their own binds).
            let matching = try await sql.raw("SELECT COUNT(*) AS n FROM probe_t WHERE name = 'row ' || id").first(decoding: Count.self)
            #expect(matching?.n == 400)
            // Updates with RETURNING still report per statement.
            let updated = try await withThrowingTaskGroup(of: Bool.self) { group in
                for id in [1, 2, 1_000] {
                    group.addTask { try await sql.raw("UPDATE probe_t SET name = 'x' WHERE id = \(bind: id) RETURNING id").first() != nil }
                }
                return try await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(updated.filter { $0 }.count == 2)
        }
    }

    @Test("SQLite's writer: a failure that undoes the whole group's transaction fails alone, and the writes before it run again")
    func sqliteWholeTransactionFailure() async throws {
        try await TestStorage.sqlite.withDatabase { database in
            let sql = database.sql
            _ = try await MigrationRunner(database: sql, logger: .init(label: "test")).migrate([(owner: "probe", steps: Self.steps)])
            try await sql.insert(into: "probe_t").columns("id", "name").values(SQLBind(1_000), SQLBind("taken")).run()
            // A session holds the writer while 100 inserts queue, and among them (after the first
            // 50) an `INSERT OR ROLLBACK` of a taken id: when the session ends they run as one
            // group's transaction, which that failure rolls back.
            async let session: Void = sql.transaction { _ in try await Task.sleep(for: .milliseconds(800)) }
            try await Task.sleep(for: .milliseconds(100))
            let outcomes = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
                func insert(_ id: Int) {
                    group.addTask {
                        do {
                            if id == 150 {
                                try await sql.raw("INSERT OR ROLLBACK INTO probe_t (id, name) VALUES (1000, 'again')").run()
                            } else {
                                try await sql.insert(into: "probe_t").columns("id", "name").values(SQLBind(id), SQLBind("row \(id)")).run()
                            }
                            return (id, true)
                        } catch {
                            return (id, false)
                        }
                    }
                }
                for id in 100..<150 { insert(id) }
                try await Task.sleep(for: .milliseconds(200))
                insert(150)
                try await Task.sleep(for: .milliseconds(100))
                for id in 151..<201 { insert(id) }
                return try await group.reduce(into: [(Int, Bool)]()) { $0.append($1) }
            }
            try await session
            #expect(outcomes.filter { !$0.1 }.map(\.0) == [150])
            struct Count: Decodable { var n: Int }
            let stored = try await sql.raw("SELECT COUNT(*) AS n FROM probe_t WHERE name = 'row ' || id").first(decoding: Count.self)
            #expect(stored?.n == 100, "every other insert is stored, as reported")
            #expect(try await database.integrityCheck())
        }
    }

    @Test("SQLite's writer: sessions take turns with queued writes; text binds keep empty strings; REGEXP works in writes; bad SQL fails alone")
    func sqliteWriterDetails() async throws {
        try await TestStorage.sqlite.withDatabase { database in
            let sql = database.sql
            _ = try await MigrationRunner(database: sql, logger: .init(label: "test")).migrate([(owner: "probe", steps: Self.steps)])
            // Transactions and single writes at once: every one of them lands, none waits on SQLite's busy handler.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<20 {
                    group.addTask {
                        try await sql.transaction { db in
                            try await db.insert(into: "probe_t").columns("id", "name").values(SQLBind(index), SQLBind("tx")).run()
                            try await db.update("probe_t").set("name", to: SQLBind("tx \(index)")).where("id", .equal, SQLBind(index)).run()
                        }
                    }
                    group.addTask {
                        try await sql.insert(into: "probe_t").columns("id", "name").values(SQLBind(100 + index), SQLBind("")).run()
                    }
                }
                try await group.waitForAll()
            }
            struct Count: Decodable { var n: Int }
            #expect(try await sql.raw("SELECT COUNT(*) AS n FROM probe_t WHERE name LIKE 'tx %'").first(decoding: Count.self)?.n == 20)
            #expect(try await sql.raw("SELECT COUNT(*) AS n FROM probe_t WHERE name = ''").first(decoding: Count.self)?.n == 20,
                    "an empty string is stored as one, not as NULL")
            try await sql.raw("DELETE FROM probe_t WHERE name REGEXP \(bind: "^tx 1[0-9]\\z")").run()
            #expect(try await sql.raw("SELECT COUNT(*) AS n FROM probe_t WHERE name LIKE 'tx %'").first(decoding: Count.self)?.n == 10)
            await #expect(throws: (any Error).self) { try await sql.raw("UPDATE no_such_table SET x = 1").run() }
            await #expect(throws: (any Error).self) { try await sql.raw("DELETE FROM probe_t WHERE name REGEXP '('").run() }
            try await sql.insert(into: "probe_t").columns("id", "name").values(SQLBind(500), SQLBind("after")).run()
            #expect(try await sql.raw("SELECT COUNT(*) AS n FROM probe_t").first(decoding: Count.self)?.n == 31)
        }
    }

    @Test("SQLite: inside a transaction, writes through the shared database join it instead of waiting for it; a nested transaction fails")
    func sqliteWritesInsideTransaction() async throws {
        try await TestStorage.sqlite.withDatabase { database in
            let sql = database.sql
            _ = try await MigrationRunner(database: sql, logger: .init(label: "test")).migrate([(owner: "probe", steps: Self.steps)])
            try await sql.transaction { _ in
                try await sql.insert(into: "probe_t").columns("id", "name").values(SQLBind(1), SQLBind("kept")).run()
            }
            await #expect(throws: GatewayError.self) {
                try await sql.transaction { _ in
                    try await sql.insert(into: "probe_t").columns("id", "name").values(SQLBind(2), SQLBind("rolled back")).run()
                    throw GatewayError.conflict("abort")
                }
            }
            await #expect(throws: (any Error).self) {
                try await sql.transaction { _ in try await sql.transaction { _ in } }
            }
            struct Row: Decodable { var name: String }
            #expect(try await sql.select().column("name").from("probe_t").all(decoding: Row.self).map(\.name) == ["kept"])
        }
    }

    @Test("finished statements: SQLite runs them through its writer (joining a transaction), PostgreSQL as statements prepared once per connection; every value kind, failing alone",
          arguments: TestStorage.available)
    func statementRunner(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let sql = database.sql
            let runner = try #require(sql as? any SQLStatementRunner)
            try await sql.raw(SQLQueryString((sql.dialect.name == "sqlite")
                ? "CREATE TABLE runner_t (id INTEGER PRIMARY KEY, name TEXT, size REAL, note TEXT, doc TEXT)"
                : "CREATE TABLE runner_t (id BIGINT PRIMARY KEY, name TEXT, size DOUBLE PRECISION, note TEXT, doc JSONB)")).run()
            let insert = (sql.dialect.name == "sqlite") ? "INSERT INTO runner_t (id, name, size, note, doc) VALUES (?, ?, ?, ?, ?)"
                : "INSERT INTO runner_t (id, name, size, note, doc) VALUES (?, ?, ?, ?, CAST(? AS jsonb))"
            try await runner.runStatement(insert, [.integer(1), .text("一 'quoted' ?"), .real(2.5), .null, .text(#"{"a": [1, "?"]}"#)])
            try await runner.runStatement(insert, [.integer(Int64.max), .text(""), .real(-0.125), .text("n"), .null])
            // A `?` inside a literal is not a placeholder.
            try await runner.runStatement("INSERT INTO runner_t (id, name, note) VALUES (?, ?, 'what?')", [.integer(Int64.min), .text("min")])
            await #expect(throws: (any Error).self) {
                try await runner.runStatement("INSERT INTO runner_t (id, name) VALUES (?, ?)", [.integer(1), .text("duplicate")])
            }
            if !(sql.dialect.name == "sqlite") {
                await #expect(throws: (any Error).self) { try await runner.runStatement(insert, [.integer(5), .text("x"), .null, .null, .text("not json")]) }
            }
            // SQLite's writer runs it inside the transaction; on PostgreSQL it has a connection of its own.
            await #expect(throws: GatewayError.self) {
                try await sql.transaction { _ in
                    try await runner.runStatement("INSERT INTO runner_t (id, name) VALUES (?, ?)", [.integer(3), .text("inside")])
                    throw GatewayError.conflict("abort")
                }
            }
            struct Row: Decodable, Equatable { var id: Int64; var name: String; var size: Double?; var note: String?; var doc: String? }
            let rows = try await sql.raw(SQLQueryString("SELECT id, name, size, note, \(unsafeRaw: (sql.dialect.name == "sqlite") ? "doc" : "doc::text AS doc") FROM runner_t ORDER BY id"))
                .all(decoding: Row.self)
            var expected = [Row(id: Int64.min, name: "min", size: nil, note: "what?", doc: nil),
                            Row(id: 1, name: "一 'quoted' ?", size: 2.5, note: nil, doc: #"{"a": [1, "?"]}"#),
                            Row(id: Int64.max, name: "", size: -0.125, note: "n", doc: nil)]
            if !(sql.dialect.name == "sqlite") { expected.insert(Row(id: 3, name: "inside", size: nil, note: nil, doc: nil), at: 2) }
            #expect(rows == expected)

            guard !(sql.dialect.name == "sqlite") else { return }
            // Prepared once per connection and kept: every run finds its statement prepared, at the
            // same time as the earlier runs on that connection.
            try await sql.raw("CREATE TABLE runner_p (pid INTEGER, prepared TEXT)").run()
            let probe = "INSERT INTO runner_p (pid, prepared) SELECT pg_backend_pid(), prepare_time::text FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO runner_p%'"
            for _ in 0..<24 { try await runner.runStatement(probe, []) }
            struct Probe: Decodable { var pid: Int; var prepared: String }
            let probes = try await sql.raw("SELECT pid, prepared FROM runner_p").all(decoding: Probe.self)
            #expect(probes.count == 24)
            for (_, runs) in Dictionary(grouping: probes, by: \.pid) {
                #expect(Set(runs.map(\.prepared)).count == 1, "a connection prepared the statement again")
            }
        }
    }

    @Test("finished statements with rows, and in a transaction: every value kind comes back as SQLKit reads it; on PostgreSQL a transaction's statements are prepared on its connection",
          arguments: TestStorage.available)
    func statementRows(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let sql = database.sql
            try await sql.raw(SQLQueryString((sql.dialect.name == "sqlite")
                ? "CREATE TABLE rows_t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, size REAL, bytes BLOB, note TEXT)"
                : "CREATE TABLE rows_t (id BIGINT PRIMARY KEY, name TEXT NOT NULL, size DOUBLE PRECISION, bytes BYTEA, note TEXT)")).run()
            let insert = "INSERT INTO rows_t (id, name, size, bytes, note) VALUES (?, ?, ?, ?, ?)"
            let everyByte = Data((0...255).map(UInt8.init))
            try await sql.run(statement: insert, [.integer(Int64.min), .text("一 'quoted' ?"), .real(-0.125), .blob(everyByte), .null])
            try await sql.run(statement: insert, [.integer(7), .text(""), .null, .blob(Data()), .text("n")])
            try await sql.run(statement: "INSERT INTO rows_t (id, name, note) VALUES (?, ?, 'what?')", [.integer(Int64.max), .text("max")])

            struct Row: Equatable, Sendable { var id: Int64; var name: String; var size: Double?; var bytes: Data?; var note: String? }
            @Sendable func read(_ db: any SQLDatabase, from id: Int64) async throws -> [Row] {
                try await db.rows(statement: "SELECT id, name, size, bytes, note FROM rows_t WHERE id >= ? ORDER BY id", [.integer(id)]).map { row in
                    Row(id: try row.decode(column: "id", as: Int64.self), name: try row.decode(column: "name", as: String.self),
                        size: try row.decode(column: "size", as: Double?.self), bytes: try row.decode(column: "bytes", as: Data?.self),
                        note: try row.decode(column: "note", as: String?.self))
                }
            }
            let expected = [Row(id: Int64.min, name: "一 'quoted' ?", size: -0.125, bytes: everyByte, note: nil),
                            Row(id: 7, name: "", size: nil, bytes: Data(), note: "n"),
                            Row(id: Int64.max, name: "max", size: nil, bytes: nil, note: "what?")]
            #expect(try await read(sql, from: Int64.min) == expected)
            #expect(try await read(sql, from: 8) == [expected[2]])
            let row = try #require(try await sql.rows(statement: "SELECT id, note FROM rows_t WHERE id = ?", [.integer(Int64.min)]).first)
            #expect(row.contains(column: "note") && !row.contains(column: "size"))
            #expect(try row.decodeNil(column: "note"))
            #expect(throws: (any Error).self) { try row.decode(column: "size", as: Double.self) }
            // A `?` in a literal stays; a missing value is null.
            let literal = try #require(try await sql.rows(statement: "SELECT ? AS a, '?' AS b, ? AS c", [.text("é?")]).first)
            #expect(try literal.decode(column: "a", as: String.self) == "é?")
            #expect(try literal.decode(column: "b", as: String.self) == "?")
            #expect(try literal.decodeNil(column: "c"))

            // Inside a transaction the statements are part of it: seen inside, gone after a rollback.
            await #expect(throws: GatewayError.self) {
                try await sql.transaction { db in
                    #expect((sql.dialect.name == "sqlite") || db is any SQLStatementRunner)
                    try await db.run(statement: insert, [.integer(8), .text("inside"), .real(1), .blob(Data([0])), .null])
                    #expect(try await read(db, from: 8).map(\.name) == ["inside", "max"])
                    throw GatewayError.conflict("abort")
                }
            }
            try await sql.transaction { db in
                try await db.run(statement: insert, [.integer(9), .text("committed"), .null, .null, .null])
            }
            #expect(try await read(sql, from: 8).map(\.name) == ["committed", "max"])

            guard !(sql.dialect.name == "sqlite") else { return }
            // A transaction's statements are prepared once on its connection and kept there.
            let probe = "SELECT pg_backend_pid() AS pid, prepare_time::text AS prepared FROM pg_prepared_statements WHERE statement LIKE 'SELECT pg_backend_pid() AS pid%'"
            let (pid, times) = try await sql.transaction { db in
                var times: Set<String> = []
                var pids: Set<Int> = []
                for _ in 0..<6 {
                    let rows = try await db.rows(statement: probe, [])
                    #expect(rows.count == 1)
                    for row in rows {
                        pids.insert(try row.decode(column: "pid", as: Int.self))
                        times.insert(try row.decode(column: "prepared", as: String.self))
                    }
                }
                return (pids, times)
            }
            #expect(pid.count == 1 && times.count == 1)
        }
    }

    @Test("database: pool size, acquire timeout and statement timeout from plugins.yaml; what they refuse is a 503 to clients",
          .enabled(if: TestStorage.available.contains(.postgres)))
    func poolSettings() async throws {
        try await TestStorage.postgres.withFreshLocation { location, directory in
            // One connection per event loop, a wait of 100 ms: one more slow query than there are loops must time out.
            let pool = DatabasePoolSettings(maxConnections: 1, acquireTimeout: ConfigDuration(seconds: 0.1), statementTimeout: ConfigDuration(seconds: 0.5))
            // Opening checks a first connection within the same 100 ms: a busy machine may need a few tries.
            var opened: GatewayDatabase?
            for _ in 0..<30 where opened == nil {
                do {
                    opened = try await GatewayDatabase.open(location, baseDirectory: directory, logger: .init(label: "test"), pool: pool)
                } catch where DatabaseErrorText.describe(error).contains("connectionRequestTimeout") {
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            let database = try #require(opened)
            let loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator()).count
            let outcomes = await withTaskGroup(of: (any Error)?.self) { group in
                for _ in 0...loops {
                    group.addTask {
                        do { try await database.sql.raw("SELECT pg_sleep(0.3)").run(); return nil } catch { return error }
                    }
                }
                var errors: [(any Error)?] = []
                for await outcome in group { errors.append(outcome) }
                return errors
            }
            let refused = outcomes.compactMap { $0 }
            #expect(!refused.isEmpty, "a query waited past acquireTimeout for the one connection of its loop")
            #expect(refused.allSatisfy { DatabaseErrorText.overload($0)?.status == 503 })
            // A statement past statementTimeout is cancelled by the server: a 503 too. (On a busy
            // machine the connection may not be free within the 100 ms yet: that try is repeated.)
            var cancelled: (any Error)?
            for _ in 0..<50 where cancelled == nil {
                do {
                    try await database.sql.raw("SELECT pg_sleep(2)").run()
                    Issue.record("the statement ran past its timeout")
                    break
                } catch where DatabaseErrorText.describe(error).contains("connectionRequestTimeout") {
                    try await Task.sleep(for: .milliseconds(100))
                } catch {
                    cancelled = error
                }
            }
            let error = try #require(cancelled)
            #expect(DatabaseErrorText.overload(error)?.status == 503, "\(DatabaseErrorText.describe(error))")
            #expect(DatabaseErrorText.describe(error).contains("57014"))
            // And the pool recovers (each try may wait only the 100 ms acquire timeout: a busy machine gets a few).
            let recovered = try await eventually(within: .seconds(10)) { (try? await database.sql.raw("SELECT pg_sleep(0.05)").run()) != nil }
            #expect(recovered)
            await database.shutdown()
        }
    }

    @Test("database: settings are read and checked at their line")
    func poolSettingsParsed() throws {
        let parsed = try GatewayConfiguration.parse(Data("database: { maxConnections: 20, acquireTimeout: 5s, connectTimeout: 2s, statementTimeout: 30s }\n".utf8),
                                                    file: "plugins.yaml", knownPlugins: [])
        #expect(parsed.database.maxConnections == 20)
        #expect(parsed.database.acquireTimeout.seconds == 5)
        #expect(parsed.database.connectTimeout.seconds == 2)
        #expect(parsed.database.statementTimeout?.seconds == 30)
        #expect(parsed.database.perEventLoop(4, fallback: 8) == 5)
        #expect(DatabasePoolSettings().perEventLoop(4, fallback: 8) == 8)
        for bad in ["database: { maxConnections: 0 }", "database: { acquireTimeout: 0s }", "database: { pool: 3 }"] {
            #expect(throws: ConfigurationFileError.self, "\(bad)") {
                try GatewayConfiguration.parse(Data((bad + "\n").utf8), file: "plugins.yaml", knownPlugins: [])
            }
        }
    }

    @Test("SQLite: writes after shutdown fail at once instead of hanging")
    func sqliteWriteAfterShutdown() async throws {
        try await TestStorage.sqlite.withFreshLocation { location, directory in
            let database = try await GatewayDatabase.open(location, baseDirectory: directory, logger: .init(label: "test"))
            try await database.sql.raw("CREATE TABLE t (a TEXT)").run()
            // Shut down twice at once: both calls return.
            async let first: Void = database.shutdown()
            async let second: Void = database.shutdown()
            _ = await (first, second)
            await #expect(throws: (any Error).self) { try await database.sql.raw("INSERT INTO t (a) VALUES ('x')").run() }
            await #expect(throws: (any Error).self) { try await database.sql.transaction { _ in } }
        }
    }

    @Test("migrations apply once, in order, and are recorded", arguments: TestStorage.available)
    func migrationsApplyOnce(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let runner = MigrationRunner(database: database.sql, logger: .init(label: "test"))
            let first = try await runner.migrate([(owner: "probe", steps: Self.steps)])
            #expect(first.map(\.version) == [1, 2])
            let second = try await runner.migrate([(owner: "probe", steps: Self.steps)])
            #expect(second.isEmpty)
            let third = try await runner.migrate([(owner: "probe", steps: Self.steps + [Migration(3, "seed") { db in
                try await db.insert(into: "probe_t").columns("id", "name").values(SQLBind(1), SQLBind("one")).run()
            }])])
            #expect(third.map(\.version) == [3])
        }
    }

    @Test("a failing migration leaves nothing half-applied", arguments: TestStorage.available)
    func failingMigrationRollsBack(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let runner = MigrationRunner(database: database.sql, logger: .init(label: "test"))
            let broken = Self.steps + [Migration(3, "broken") { db in
                try await db.insert(into: "probe_t").columns("id", "name").values(SQLBind(1), SQLBind("one")).run()
                try await db.raw("THIS IS NOT SQL").run()
            }]
            await #expect(throws: (any Error).self) { try await runner.migrate([(owner: "probe", steps: broken)]) }
            // Everything of that run was rolled back, including steps 1 and 2.
            let applied = try await runner.migrate([(owner: "probe", steps: Self.steps)])
            #expect(applied.map(\.version) == [1, 2])
        }
    }

    @Test("the host's schema is one list, numbered once in increasing order, and a fresh database gets every step", arguments: TestStorage.available)
    func hostMigrations(storage: TestStorage) async throws {
        let versions = Gateway.hostMigrations.map(\.version)
        #expect(versions == versions.sorted() && Set(versions).count == versions.count, "\(versions)")
        try await storage.withDatabase { database in
            let runner = MigrationRunner(database: database.sql, logger: .init(label: "test"))
            let applied = try await runner.migrate([(owner: "gateway", steps: Gateway.hostMigrations)])
            #expect(applied.map(\.version) == versions)
            #expect(try await runner.migrate([(owner: "gateway", steps: Gateway.hostMigrations)]).isEmpty)
            for table in ["gateway_users", "gateway_sessions", "gateway_api_keys", "gateway_notifications", "gateway_rate_limits", "gateway_leases",
                          "gateway_password_resets", "gateway_realm_members", "gateway_user_grants", "gateway_email_verifications",
                          "gateway_generated_secrets"] {
                _ = try await database.sql.raw("SELECT COUNT(*) AS n FROM \(unsafeRaw: table)").first()
            }
        }
    }

    @Test("two instances migrating at once on one database both succeed and apply each step once", arguments: TestStorage.available)
    func concurrentMigrations(storage: TestStorage) async throws {
        try await storage.withFreshLocation { location, directory in
            let databases = [
                try await GatewayDatabase.open(location, baseDirectory: directory, logger: .init(label: "a")),
                try await GatewayDatabase.open(location, baseDirectory: directory, logger: .init(label: "b")),
            ]
            let applied = try await withThrowingTaskGroup(of: [MigrationRunner.Applied].self) { group in
                for database in databases {
                    group.addTask {
                        try await MigrationRunner(database: database.sql, logger: .init(label: "test")).migrate([(owner: "probe", steps: Self.steps)])
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(applied.map(\.version).sorted() == [1, 2])
            for database in databases { await database.shutdown() }
        }
    }

    @Test("the notes plugin stores and reads through the gateway on every database", arguments: TestStorage.available)
    func pluginStore(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            for index in 0..<3 {
                let created = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: .json,
                                                               body: #"{"title": "n\#(index)", "body": "b"}"#.buffer)
                #expect(created.status == 201)
            }
            let page = try await gateway.gateway.handle(.get, "/v1/notes/notes?limit=2")
            let list = try JSONCoding.decoder.decode(NoteList.self, from: Data(buffer: page.body))
            #expect(list.items.count == 2)
            let cursor = try #require(list.nextCursor)
            let rest = try await gateway.gateway.handle(.get, "/v1/notes/notes?limit=2&cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")")
            let remaining = try JSONCoding.decoder.decode(NoteList.self, from: Data(buffer: rest.body))
            #expect(remaining.items.count == 1)
            #expect(remaining.nextCursor == nil)
            #expect(Set((list.items + remaining.items).map(\.title)) == ["n0", "n1", "n2"])
        }
    }

    @Test("a transaction commits on return and rolls back on error", arguments: TestStorage.available)
    func transactions(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            try await MigrationRunner(database: database.sql, logger: .init(label: "test")).migrate([(owner: "probe", steps: Self.steps)])
            try await database.sql.transaction { db in
                try await db.insert(into: "probe_t").columns("id", "name").values(SQLBind(1), SQLBind("kept")).run()
            }
            await #expect(throws: GatewayError.self) {
                try await database.sql.transaction { db in
                    try await db.insert(into: "probe_t").columns("id", "name").values(SQLBind(2), SQLBind("dropped")).run()
                    throw GatewayError.conflict("abort")
                }
            }
            struct Row: Decodable { var name: String }
            let rows = try await database.sql.select().column("name").from("probe_t").all(decoding: Row.self)
            #expect(rows.map(\.name) == ["kept"])
        }
    }

    @Test("SQLite runs in WAL mode and passes its integrity check")
    func sqliteWAL() async throws {
        try await TestStorage.sqlite.withDatabase { database in
            struct Mode: Decodable { var journal_mode: String }
            let mode = try await database.sql.raw("PRAGMA journal_mode").first(decoding: Mode.self)
            #expect(mode?.journal_mode == "wal")
            #expect(try await database.integrityCheck())
        }
    }

    @Test("demo data loads once per database")
    func demoDataOnce() async throws {
        try await TestStorage.sqlite.withFreshLocation { location, directory in
            var configuration = GatewayConfiguration(storage: location, demo: true)
            configuration.plugins = ["notes": PluginSettings()]
            var options = Gateway.Options(baseDirectory: directory)
            options.logger.logLevel = .critical
            for _ in 0..<2 {
                let gateway = try await Gateway.start(configuration: configuration, registrations: notes, options: options)
                let page = try? await gateway.handle(.get, "/v1/notes/notes")
                await gateway.shutdown()
                let list = try JSONCoding.decoder.decode(NoteList.self, from: Data(buffer: try #require(page).body))
                #expect(list.items.map(\.title) == ["Welcome"])
            }
        }
    }
}
