@preconcurrency import AsyncKit
import GatewayCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresKit
import SQLKit

/// PostgreSQL as SQLKit sees it, which also runs finished statements (``SQLStatementRunner``) as
/// prepared statements kept on each connection: a plugin's hottest statement is parsed and planned
/// once per connection instead of once per run, and its values are bound without SQLKit's
/// serializer or its `Encodable` binds. The statement runs on a pooled connection of its own
/// (outside any transaction a caller holds).
struct PostgresStatementDatabase: SQLStatementRunner, PassThroughSQLDatabase {
    let base: any SQLDatabase
    let pools: EventLoopGroupConnectionPool<PostgresConnectionSource>
    let statements: PreparedStatements

    var forwarded: any SQLDatabase { base }

    func runStatement(_ sql: String, _ values: [StatementValue]) async throws {
        let text = Self.numbered(sql, values)
        let binds = values.map(Self.bind)
        let statements = statements
        try await pools.withConnection(logger: base.logger) { connection in
            statements.prepared(text, on: connection).flatMap { $0.execute(binds) { _ in } }
        }.get()
    }

    /// A value as the placeholder numbered by ``numbered(_:_:)`` takes it.
    static func bind(_ value: StatementValue) -> PostgresData {
        switch value {
        case .null: PostgresData(type: .text, value: nil)
        case .text(let string): PostgresData(string: string)
        case .integer(let integer): PostgresData(int64: integer)
        case .real(let real): PostgresData(double: real)
        }
    }

    /// `sql` with its `?` placeholders numbered as PostgreSQL writes them, each with the type of its
    /// value (`$1::text`, `$2::int8`, `$3::float8`; a null's placeholder is left to take the type its
    /// place gives it), so that every statement text has one meaning for the server whatever the
    /// columns around it: a value of another type is written with a cast (`CAST(? AS jsonb)`).
    /// A `?` inside a quoted literal or identifier stays.
    static func numbered(_ sql: String, _ values: [StatementValue]) -> String {
        var result = ""
        result.reserveCapacity(sql.utf8.count + values.count * 8)
        var number = 0
        var quote: Character?
        for character in sql {
            if let open = quote {
                if character == open { quote = nil }
                result.append(character)
            } else if character == "'" || character == "\"" {
                quote = character
                result.append(character)
            } else if character == "?" {
                result += "$\(number + 1)"
                switch number < values.count ? values[number] : .null {
                case .null: break
                case .text: result += "::text"
                case .integer: result += "::int8"
                case .real: result += "::float8"
                }
                number += 1
            } else {
                result.append(character)
            }
        }
        return result
    }
}

/// The statements prepared on each connection, by text; a connection's are forgotten when it
/// closes (PostgreSQL drops them with the session).
final class PreparedStatements: Sendable {
    /// The most statements kept per connection; beyond it the oldest is closed first.
    static let limit = 128
    private let byConnection = NIOLockedValueBox<[ObjectIdentifier: Kept]>([:])

    private struct Kept {
        var queries: [String: PreparedQuery] = [:]
        var order: [String] = []
    }

    /// The statement of `sql` (PostgreSQL's text, `$1` placeholders) on `connection`, prepared when it is not yet.
    func prepared(_ sql: String, on connection: PostgresConnection) -> EventLoopFuture<PreparedQuery> {
        let id = ObjectIdentifier(connection)
        let (known, isNew) = byConnection.withLockedValue { kept -> (PreparedQuery?, Bool) in
            (kept[id]?.queries[sql], kept[id] == nil)
        }
        if let known { return connection.eventLoop.makeSucceededFuture(known) }
        if isNew {
            connection.closeFuture.whenComplete { [byConnection] _ in byConnection.withLockedValue { _ = $0.removeValue(forKey: id) } }
        }
        return connection.prepare(query: sql).flatMap { [byConnection] query in
            let evicted = byConnection.withLockedValue { kept -> PreparedQuery? in
                var entry = kept[id] ?? Kept()
                entry.queries[sql] = query
                entry.order.append(sql)
                var evicted: PreparedQuery?
                if entry.order.count > Self.limit {
                    evicted = entry.queries.removeValue(forKey: entry.order.removeFirst())
                }
                kept[id] = entry
                return evicted
            }
            guard let evicted else { return connection.eventLoop.makeSucceededFuture(query) }
            return evicted.deallocate().map { query }
        }
    }
}
