import GRDB
import GatewayCore
import PostgresKit

/// A database error in words an operator can act on, for logs and the command line (never for
/// clients, who get a plain 500 problem). PostgreSQL's errors describe themselves generically on
/// purpose; this names the SQLSTATE, the server's message and detail, and no bound values.
public enum DatabaseErrorText {
    public static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            var parts: [String] = []
            if let info = error.serverInfo {
                if let state = info[.sqlState] { parts.append("SQLSTATE \(state)") }
                if let message = info[.message] { parts.append(message) }
                if let detail = info[.detail] { parts.append("detail: \(detail)") }
                if let hint = info[.hint] { parts.append("hint: \(hint)") }
                if let table = info[.tableName] { parts.append("table \(table)") }
                if let constraint = info[.constraintName] { parts.append("constraint \(constraint)") }
            }
            if parts.isEmpty {
                parts.append("\(error.code)")
                if let underlying = error.underlying { parts.append(String(describing: underlying)) }
            }
            return "PostgreSQL: " + parts.joined(separator: "; ")
        }
        if let error = error as? DatabaseError {
            return "SQLite: \(error.message ?? "error") (\(error.extendedResultCode))" + (error.sql.map { "; while running `\($0)`" } ?? "")
        }
        return String(describing: error)
    }
}

extension DatabaseErrorText {
    /// A database error a client should retry rather than report: no pooled connection came free
    /// within `database.acquireTimeout`, or a statement ran past `database.statementTimeout`
    /// (PostgreSQL cancelled it, SQLSTATE 57014; or the gateway interrupted it on SQLite). A 503
    /// with `Retry-After`; nil for any other error.
    public static func overload(_ error: any Error) -> GatewayError? {
        if error is ConnectionPoolTimeoutError {
            return GatewayError.unavailable("The database is busy: no connection came free in time. Try again shortly.", retryAfter: 1)
        }
        if isStatementTimeout(error) {
            return GatewayError.unavailable("The database took too long to answer. Try again shortly.", retryAfter: 1)
        }
        return nil
    }

    /// Whether `error` is a statement stopped for running past its time budget.
    static func isStatementTimeout(_ error: any Error) -> Bool {
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] == "57014" }
        if let error = error as? DatabaseError { return error.resultCode == .SQLITE_INTERRUPT }
        return false
    }
}

/// A step of starting the gateway that failed, named, with its cause in words.
struct StartupStepError: Error, CustomStringConvertible {
    var step: String
    var cause: any Error

    var description: String { "\(step) failed: \(DatabaseErrorText.describe(cause))" }
}
