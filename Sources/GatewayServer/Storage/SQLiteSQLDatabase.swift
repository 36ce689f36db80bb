import Foundation
import GatewaySupport
import Logging
import NIOCore
import SQLKit
import Synchronization

/// The SQLite database (``SQLiteStore``) as SQLKit sees it, and as a ``SQLStatementRunner``.
///
/// Values cross as SQLite stores them, in the shapes SQLiteKit gave them (so files written before
/// read the same): see ``SQLiteValueCoding``.
struct SQLiteSQLDatabase: SQLStatementRunner {
    let store: SQLiteStore
    let logger: Logger
    let eventLoopGroup: any EventLoopGroup
    /// The session the statements run in (nil: the shared database).
    var session: SQLiteStore.Session?

    var eventLoop: any EventLoop { eventLoopGroup.any() }
    var dialect: any SQLDialect { SQLiteSQLDialect() }
    var queryLogLevel: Logger.Level? { .trace }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) -> EventLoopFuture<Void> {
        eventLoop.makeFutureWithTask { try await self.execute(sql: query, onRow) }
    }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) async throws {
        let (sql, binds) = serialize(query)
        let values = try binds.map { try SQLiteValueCoding.encode($0) }
        if let level = queryLogLevel { logger.log(level: level, "\(sql)") }
        try await store.execute(sql, values, session: session) { onRow($0) }
    }

    func withSession<R>(_ closure: @escaping @Sendable (any SQLDatabase) async throws -> R) async throws -> R {
        // Already a session's (even from a task that does not inherit it): the same one.
        if let session, session.isOpen { return try await closure(self) }
        return try await store.session { session in
            var database = self
            database.session = session
            return try await closure(database)
        }
    }

    func runStatement(_ sql: String, _ values: [StatementValue]) async throws {
        try await store.execute(sql, values, session: session) { _ in }
    }

    func statementRows(_ sql: String, _ values: [StatementValue]) async throws -> [any SQLRow] {
        let rows = Mutex<[any SQLRow]>([])
        try await store.execute(sql, values, session: session) { row in rows.withLock { $0.append(row) } }
        return rows.withLock { $0 }
    }
}

/// A row SQLite returned.
struct SQLiteRow: SQLRow {
    let columns: SQLiteColumns
    let values: [StatementValue]

    var allColumns: [String] { columns.names }

    func contains(column: String) -> Bool { columns.index[column] != nil }

    func decodeNil(column: String) throws -> Bool {
        guard let index = columns.index[column] else { return true }
        return values[index] == .null
    }

    func decode<D: Decodable>(column: String, as type: D.Type) throws -> D {
        guard let index = columns.index[column] else { throw MissingColumn(column: column) }
        return try SQLiteValueCoding.decode(D.self, from: values[index])
    }

    struct MissingColumn: Error, CustomStringConvertible {
        let column: String
        var description: String { "no column \(column) in the row" }
    }
}

/// The column names of a statement's rows; a name that repeats finds its first column.
final class SQLiteColumns: Sendable {
    let names: [String]
    let index: [String: Int]

    init(_ names: [String]) {
        self.names = names
        index = Dictionary(names.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
    }
}

/// SQLite's SQL as SQLKit writes it (what SQLiteKit's dialect says, for SQLite 3.38 and later).
struct SQLiteSQLDialect: SQLDialect {
    var name: String { "sqlite" }
    var identifierQuote: any SQLExpression { SQLRaw(#"""#) }
    var literalStringQuote: any SQLExpression { SQLRaw("'") }
    func bindPlaceholder(at position: Int) -> any SQLExpression { SQLRaw("?\(position)") }
    func literalBoolean(_ value: Bool) -> any SQLExpression { SQLRaw(value ? "TRUE" : "FALSE") }
    var literalDefault: any SQLExpression { SQLLiteral.null }
    var supportsIfExists: Bool { true }
    var supportsDropBehavior: Bool { false }
    var supportsAutoIncrement: Bool { false }
    var autoIncrementClause: any SQLExpression { SQLRaw("AUTOINCREMENT") }
    var enumSyntax: SQLEnumSyntax { .unsupported }
    var triggerSyntax: SQLTriggerSyntax { .init(create: [.supportsBody, .supportsCondition, .supportsUpdateColumns], drop: []) }
    var alterTableSyntax: SQLAlterTableSyntax { .init(allowsBatch: false) }
    var upsertSyntax: SQLUpsertSyntax { .standard }
    var supportsReturning: Bool { true }
    var unionFeatures: SQLUnionFeatures { [.union, .unionAll, .intersect, .except] }

    /// `bigint` is SQLite's plain `INTEGER` (so a 64-bit primary key is the row id).
    func customDataType(for dataType: SQLDataType) -> (any SQLExpression)? {
        if case .bigint = dataType { return SQLDataType.int }
        return nil
    }

    func nestedSubpathExpression(in column: any SQLExpression, for path: [String]) -> (any SQLExpression)? {
        guard !path.isEmpty else { return nil }
        return SQLFunction("json_extract", args: [column, SQLLiteral.string("$.\(path.joined(separator: "."))")])
    }
}
