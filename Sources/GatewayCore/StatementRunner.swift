/// A value bound to a statement that ``SQLStatementRunner`` runs.
public enum StatementValue: Sendable, Equatable {
    case text(String)
    case integer(Int64)
    case real(Double)
    case null
}

/// A database that also runs a statement given as finished SQL text and plain values, without
/// SQLKit's query building and its `Encodable` binds: for a plugin's hottest write (one insert
/// per request), where those are a large share of the request's work.
///
/// The database the gateway hands to plugins conforms, on SQLite and on PostgreSQL; a
/// transaction's session does not. Look the conformance up once (`database as? any
/// SQLStatementRunner`) and keep an SQLKit path for when it is absent. Statements run this way are
/// not logged at the database's query log level.
///
/// - SQLite: the statement goes through the gateway's one writer, inside a transaction the
///   writer holds for the caller (`transaction` on the same database), and is committed with the
///   statements that wait beside it.
/// - PostgreSQL: the statement is prepared once on each connection and kept (parsed and planned
///   once, not on every run), and runs on a pooled connection of its own, outside any transaction.
///   Each placeholder takes the type of its value (`text`, `bigint`, `double precision`; a null the
///   type its place gives it), so a column of another type needs a cast: `CAST(? AS jsonb)`.
public protocol SQLStatementRunner: SQLDatabase {
    /// Runs `sql`, whose `?` placeholders take `values` in order, for its effect: rows it returns
    /// are ignored. Errors are the database driver's, as through SQLKit.
    func runStatement(_ sql: String, _ values: [StatementValue]) async throws
}
