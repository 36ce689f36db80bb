import Foundation
import GatewayCore
import SQLKit

/// A value bound to a statement that ``SQLStatementRunner`` runs.
public enum StatementValue: Sendable, Equatable {
    case text(String)
    case integer(Int64)
    case real(Double)
    /// Bytes: a `BLOB` on SQLite, a `bytea` on PostgreSQL.
    case blob(Data)
    case null
}

/// A database that also runs a statement given as finished SQL text and plain values, without
/// SQLKit's query building and its `Encodable` binds: for a plugin's hottest statements, where
/// those (and, on PostgreSQL, parsing and planning the statement each time) are a large share of
/// the request's work.
///
/// The database the gateway hands to plugins conforms, on SQLite and on PostgreSQL, and so does a
/// transaction's session (`transaction { db in … }`: its statements run on the transaction's
/// connection). Rather than looking the conformance up, plugins usually call
/// ``SQLKit/SQLDatabase/run(statement:_:)`` and ``SQLKit/SQLDatabase/rows(statement:_:)``, which
/// use it where it is there and bind the values through SQLKit where it is not. Statements run
/// this way are not logged at the database's query log level.
///
/// - SQLite: a statement that only reads (as SQLite says of it) runs on a reading connection, any
///   other on the gateway's one writer, committed with the writes queued beside it; inside a
///   transaction, on the writer the transaction holds.
/// - PostgreSQL: the statement is prepared once on each connection and kept (parsed and planned
///   once, not on every run). Outside a session it runs on a pooled connection of its own, outside
///   any transaction. Each placeholder takes the type of its value (`text`, `bigint`, `double
///   precision`, `bytea`; a null the type its place gives it), so a column of another type needs a
///   cast: `CAST(? AS jsonb)`.
public protocol SQLStatementRunner: SQLDatabase {
    /// Runs `sql`, whose `?` placeholders take `values` in order, for its effect: rows it returns
    /// are ignored. Errors are the database driver's, as through SQLKit.
    func runStatement(_ sql: String, _ values: [StatementValue]) async throws

    /// Runs `sql`, whose `?` placeholders take `values` in order, and returns its rows (decoded as
    /// SQLKit decodes them). The default binds the values through SQLKit.
    func statementRows(_ sql: String, _ values: [StatementValue]) async throws -> [any SQLRow]
}

extension SQLStatementRunner {
    public func statementRows(_ sql: String, _ values: [StatementValue]) async throws -> [any SQLRow] {
        try await raw(Self.boundQuery(sql, values)).all()
    }
}

extension SQLDatabase {
    /// Runs `sql`, whose `?` placeholders take `values` in order, for its effect: through
    /// ``SQLStatementRunner`` where this database is one (prepared and kept on PostgreSQL), and
    /// otherwise through SQLKit with the values bound. Write each statement as one constant text
    /// (a prepared statement is kept per text).
    public func run(statement sql: String, _ values: [StatementValue]) async throws {
        if let runner = self as? any SQLStatementRunner {
            try await runner.runStatement(sql, values)
        } else {
            try await raw(Self.boundQuery(sql, values)).run()
        }
    }

    /// The rows of `sql`, whose `?` placeholders take `values` in order: through
    /// ``SQLStatementRunner`` where this database is one, and otherwise through SQLKit with the
    /// values bound.
    public func rows(statement sql: String, _ values: [StatementValue]) async throws -> [any SQLRow] {
        if let runner = self as? any SQLStatementRunner {
            return try await runner.statementRows(sql, values)
        }
        return try await raw(Self.boundQuery(sql, values)).all()
    }

    /// `sql` as SQLKit's query, each `?` placeholder (outside quoted literals and identifiers)
    /// taking the next of `values` as a bind; a placeholder without a value binds null.
    public static func boundQuery(_ sql: String, _ values: [StatementValue]) -> SQLQueryString {
        var query = SQLQueryString("")
        let bytes = sql.utf8
        // Bytes, not characters: a quote or `?` is one ASCII byte, never part of a longer character.
        var start = bytes.startIndex
        var number = 0
        var quote: UInt8?
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if let open = quote {
                if byte == open { quote = nil }
            } else if byte == UInt8(ascii: "'") || byte == UInt8(ascii: "\"") {
                quote = byte
            } else if byte == UInt8(ascii: "?") {
                query.appendLiteral(String(sql[start..<index]))
                switch number < values.count ? values[number] : .null {
                case .text(let text): query.appendInterpolation(bind: text)
                case .integer(let integer): query.appendInterpolation(bind: integer)
                case .real(let real): query.appendInterpolation(bind: real)
                case .blob(let bytes): query.appendInterpolation(bind: bytes)
                case .null: query.appendInterpolation(SQLLiteral.null)
                }
                number += 1
                start = bytes.index(after: index)
            }
            index = bytes.index(after: index)
        }
        query.appendLiteral(String(sql[start...]))
        return query
    }
}
