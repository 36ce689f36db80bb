import Foundation
import GatewayCore
import Logging
import SQLKit

/// Applies plugins' migrations and records them in `gateway_migrations`.
///
/// Safe when several gateway instances start at once on one PostgreSQL: the whole run holds a
/// transaction-scoped advisory lock, so one instance migrates and the others then find the work
/// done. On SQLite the same exclusivity comes from `BEGIN IMMEDIATE`.
///
/// Migrations are operator work: `database.statementTimeout` does not cut them (a step may rewrite
/// a large table, and waiting for another instance's migration may take long). The whole run is
/// ``StatementBudget/exempt(_:)``, and on PostgreSQL its transaction lifts `statement_timeout`.
public struct MigrationRunner: Sendable {
    public let database: any SQLDatabase
    public let logger: Logger

    public init(database: any SQLDatabase, logger: Logger) {
        self.database = database
        self.logger = logger
    }

    /// One applied step.
    public struct Applied: Sendable, Equatable {
        public var plugin: String
        public var version: Int
        public var name: String
    }

    /// Applies every missing step of `migrations`, grouped by owner (`gateway` for the host's own
    /// tables, or a plugin id), and returns what it applied.
    @discardableResult
    public func migrate(_ migrations: [(owner: String, steps: [Migration])]) async throws -> [Applied] {
        try await StatementBudget.exempt { try await migrateUnbounded(migrations) }
    }

    private func migrateUnbounded(_ migrations: [(owner: String, steps: [Migration])]) async throws -> [Applied] {
        try await database.transaction { db in
            if db.features.transactionSettings {
                // For this transaction only: the connection returns to the pool with its limit.
                try await db.raw("SET LOCAL statement_timeout = 0").run()
                // A constant key: any instance migrating holds it until its transaction ends.
                try await db.raw("SELECT pg_advisory_xact_lock(7412093001)").run()
            }
            try await db.create(table: "gateway_migrations").ifNotExists()
                .column("owner", type: .text, .notNull)
                .column("version", type: .bigint, .notNull)
                .column("name", type: .text, .notNull)
                .column("applied_at", type: .text, .notNull)
                .primaryKey("owner", "version")
                .run()
            var applied: [Applied] = []
            for (owner, steps) in migrations {
                let done = Set(try await db.select().column("version").from("gateway_migrations")
                    .where("owner", .equal, owner).all(decoding: VersionRow.self).map(\.version))
                let versions = steps.map(\.version)
                guard Set(versions).count == versions.count else {
                    throw MigrationError(owner: owner, message: "two migrations share a version")
                }
                for step in steps.sorted(by: { $0.version < $1.version }) where !done.contains(step.version) {
                    logger.info("migrating", metadata: ["owner": "\(owner)", "version": "\(step.version)", "name": "\(step.name)"])
                    do {
                        try await step.up(db)
                    } catch {
                        throw StartupStepError(step: "migration \(step.version) of \(owner) (\(step.name))", cause: error)
                    }
                    try await db.insert(into: "gateway_migrations")
                        .columns("owner", "version", "name", "applied_at")
                        .values(SQLBind(owner), SQLBind(step.version), SQLBind(step.name), SQLBind(UTCTimestamp.format(Date())))
                        .run()
                    applied.append(Applied(plugin: owner, version: step.version, name: step.name))
                }
            }
            return applied
        }
    }

    private struct VersionRow: Decodable { var version: Int }
}

/// A migration set that cannot be applied.
public struct MigrationError: Error, CustomStringConvertible {
    public var owner: String
    public var message: String
    public var description: String { "migrations of \(owner): \(message)" }
}
