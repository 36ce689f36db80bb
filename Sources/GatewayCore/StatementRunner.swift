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
/// The SQLite database the gateway hands to plugins conforms; PostgreSQL and a transaction's
/// session do not. Look the conformance up once (`database as? any SQLStatementRunner`) and keep
/// an SQLKit path for when it is absent. Statements run this way are not logged at the
/// database's query log level.
public protocol SQLStatementRunner: SQLDatabase {
    /// Runs `sql`, whose `?` placeholders take `values` in order, for its effect: rows it returns
    /// are ignored. Errors are the database driver's, as through SQLKit.
    func runStatement(_ sql: String, _ values: [StatementValue]) async throws
}
