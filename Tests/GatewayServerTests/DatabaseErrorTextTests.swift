import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import SQLKit
import Testing

@Suite("database errors in words an operator can act on")
struct DatabaseErrorTextTests {
    @Test("a refused statement names its SQLSTATE (PostgreSQL) or reason (SQLite) and the server's message", arguments: TestStorage.available)
    func refused(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let db = database.sql
            try await db.raw("CREATE TABLE twice (k TEXT PRIMARY KEY, v TEXT)").run()
            do {
                // The same key twice in one upsert: PostgreSQL refuses it (SQLite takes the last).
                try await db.raw("INSERT INTO twice (k, v) VALUES ('a', '1'), ('a', '2') ON CONFLICT (k) DO UPDATE SET v = excluded.v").run()
                #expect((db.dialect.name == "sqlite"))
            } catch {
                let text = DatabaseErrorText.describe(error)
                #expect(text.hasPrefix("PostgreSQL: SQLSTATE 21000; ON CONFLICT DO UPDATE command cannot affect row a second time"), "\(text)")
                #expect(text.contains("Generic description") == false)
            }
            do {
                try await db.raw("SELECT * FROM nowhere").run()
                Issue.record("a missing table answered")
            } catch {
                let text = DatabaseErrorText.describe(error)
                #expect(text.contains("nowhere"), "\(text)")
                #expect(text.hasPrefix((db.dialect.name == "sqlite") ? "SQLite:" : "PostgreSQL: SQLSTATE 42P01"), "\(text)")
            }
        }
    }
}
