@testable import GatewayServer
import Testing

@Suite("combined INSERTs for SQLite group commit")
struct CombinedInsertTests {
    @Test("numbered placeholders move past the rows before them; bare ones stay; literals are left alone")
    func renumbering() {
        #expect(CombinedInsert.sql("INSERT INTO t (a, b) VALUES (?1, ?2)", rows: 3, bindsPerRow: 2)
                == "INSERT INTO t (a, b) VALUES (?1, ?2), (?3, ?4), (?5, ?6)")
        #expect(CombinedInsert.sql("INSERT INTO t (a, b, c) VALUES (?1, json(?2), 'x?1$2')", rows: 2, bindsPerRow: 2)
                == "INSERT INTO t (a, b, c) VALUES (?1, json(?2), 'x?1$2'), (?3, json(?4), 'x?1$2')")
        #expect(CombinedInsert.sql("INSERT INTO t (a) VALUES ($1)", rows: 2, bindsPerRow: 1) == "INSERT INTO t (a) VALUES ($1), ($2)")
        #expect(CombinedInsert.sql("INSERT INTO t (a, b) VALUES (?, ?)", rows: 2, bindsPerRow: 2) == "INSERT INTO t (a, b) VALUES (?, ?), (?, ?)")
    }

    @Test("what cannot be combined safely is not")
    func refusals() {
        #expect(CombinedInsert.sql("INSERT INTO t (a) VALUES (?1)", rows: 1, bindsPerRow: 1) == nil, "one row needs no combining")
        #expect(CombinedInsert.sql("INSERT INTO t (a, b) VALUES (?, ?2)", rows: 2, bindsPerRow: 2) == nil, "bare and numbered mixed")
        #expect(CombinedInsert.sql("INSERT INTO t (a) VALUES ($name)", rows: 2, bindsPerRow: 1) == nil, "named placeholders")
        #expect(CombinedInsert.sql("INSERT INTO t (a) VALUES (?1) RETURNING a", rows: 2, bindsPerRow: 1) == nil)
        #expect(CombinedInsert.sql("INSERT INTO t (a) VALUES (?1) ON CONFLICT DO NOTHING", rows: 2, bindsPerRow: 1) == nil)
        #expect(CombinedInsert.sql("INSERT INTO t (a) SELECT ?1", rows: 2, bindsPerRow: 1) == nil)
        #expect(CombinedInsert.sql("UPDATE t SET a = ?1", rows: 2, bindsPerRow: 1) == nil)
    }
}
