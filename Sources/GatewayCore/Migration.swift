import SQLKit

/// One versioned step of a plugin's schema.
///
/// The host records applied steps per plugin in `gateway_migrations` and runs the missing ones in
/// version order, each in its own transaction, at start and on `gateway migrate`. Steps must be
/// written so they run on both SQLite and PostgreSQL (SQLKit's builders do that; for raw SQL, check
/// the database's `features` and `dialect`).
public struct Migration: Sendable {
    /// The step's number; unique and increasing within the plugin.
    public let version: Int
    /// What it does, recorded with it.
    public let name: String
    /// The work.
    public let up: @Sendable (any SQLDatabase) async throws -> Void

    public init(_ version: Int, _ name: String, up: @escaping @Sendable (any SQLDatabase) async throws -> Void) {
        self.version = version
        self.name = name
        self.up = up
    }
}

extension SQLDatabase {
    /// Runs `work` in one transaction on one connection: committed when it returns, rolled back
    /// when it throws. Without row locks (SQLite) the transaction takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so concurrent writers queue instead of failing.
    public func transaction<R: Sendable>(_ work: @escaping @Sendable (any SQLDatabase) async throws -> R) async throws -> R {
        try await withSession { session in
            try await session.raw(SQLQueryString(session.features.rowLocks ? "BEGIN" : "BEGIN IMMEDIATE")).run()
            do {
                let result = try await work(session)
                try await session.raw("COMMIT").run()
                return result
            } catch {
                try? await session.raw("ROLLBACK").run()
                throw error
            }
        }
    }
}

extension SQLDataType {
    /// An 8-byte floating point column on every database (`DOUBLE PRECISION`; SQLKit's `.real` is
    /// only 4 bytes on PostgreSQL, too coarse for timestamps).
    public static var double: SQLDataType { .custom(SQLRaw("DOUBLE PRECISION")) }
}
