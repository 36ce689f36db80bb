import Synchronization
import VaporCSQLite

/// Which statements change an SQLite database, as SQLite itself says: the statement is prepared
/// (never run) on a read-only connection of its own and `sqlite3_stmt_readonly` answers. So a
/// `WITH … SELECT` reads on the pool beside the writer, while a `WITH … INSERT` still goes to the
/// writer. Answers are kept per statement text (up to ``cacheSize`` texts; a full cache starts
/// again).
///
/// `SELECT`, `VALUES` and `EXPLAIN` read without asking; statements that start with any other
/// word than `WITH` write (transaction control, `PRAGMA` and DDL included, as
/// `sqlite3_stmt_readonly` would not say of all of them); a `WITH` statement that does not
/// prepare (a table not there yet) is taken for a write, as before.
final class SQLiteStatementKinds: Sendable {
    static let cacheSize = 512

    private struct State: ~Copyable {
        var handle: OpaquePointer?
        var readOnly: [String: Bool] = [:]
    }

    private let state: Mutex<State>

    /// Opens the read-only connection to the database at `path`.
    init(path: String) throws {
        var handle: OpaquePointer?
        let status = sqlite_nio_sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
        guard status == SQLITE_OK, let handle else {
            let message = handle.flatMap { sqlite_nio_sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "status \(status)"
            sqlite_nio_sqlite3_close_v2(handle)
            throw SQLiteWriteError(code: status, message: "cannot open the SQLite database at \(path) to read: \(message)")
        }
        state = Mutex(State(handle: handle))
    }

    /// Closes the connection; afterwards every statement not yet known is taken for a write.
    func close() {
        state.withLock { state in
            sqlite_nio_sqlite3_close_v2(state.handle)
            state.handle = nil
        }
    }

    /// Whether `sql` may change the database (and so must run on the writer).
    func writes(_ sql: String) -> Bool {
        switch Self.firstWord(sql) {
        case "select", "values", "explain": return false
        case "with": return !readOnly(sql)
        default: return true
        }
    }

    /// The first word of `sql`, lowercased (after white space and opening parentheses).
    static func firstWord(_ sql: String) -> String {
        var bytes = sql.utf8.drop { $0 == 32 || $0 == 10 || $0 == 13 || $0 == 9 || $0 == 40 }.prefix(8).makeIterator()
        var word: [UInt8] = []
        while let byte = bytes.next(), byte != 32, byte != 10, byte != 13, byte != 9, byte != 40 { word.append(byte | 0x20) }
        return String(decoding: word, as: UTF8.self)
    }

    private func readOnly(_ sql: String) -> Bool {
        state.withLock { state in
            if let known = state.readOnly[sql] { return known }
            guard let handle = state.handle else { return false }
            var statement: OpaquePointer?
            let status = sqlite_nio_sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
            defer { sqlite_nio_sqlite3_finalize(statement) }
            guard status == SQLITE_OK, let statement else { return false }
            let readOnly = sqlite_nio_sqlite3_stmt_readonly(statement) != 0
            if state.readOnly.count >= Self.cacheSize { state.readOnly.removeAll(keepingCapacity: true) }
            state.readOnly[sql] = readOnly
            return readOnly
        }
    }
}
