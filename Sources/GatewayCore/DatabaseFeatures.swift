import SQLKit

/// What the database in use can do, where SQLite and PostgreSQL differ. Statements that must
/// differ ask for the feature they need, not for the database's name, as sql-kit's `SQLDialect`
/// describes its dialects (`db.features.rowLocks`, not "is this PostgreSQL").
public struct DatabaseFeatures: Sendable, Equatable {
    /// How JSON documents are stored and queried.
    public enum JSONStorage: Sendable, Equatable {
        /// `JSONB` columns and their operators (`#>`, `#>>`, `jsonb_typeof`), indexable natively.
        case jsonb
        /// JSON text read by the JSON1 functions (`json_extract`, `json_type`, `json_each`).
        case json1
    }

    /// The column definition of an integer primary key that numbers new rows itself.
    public var serialPrimaryKey: String
    /// The column type of raw bytes.
    public var binaryType: String
    public var json: JSONStorage
    /// The column type of a JSON document (see ``json``).
    public var jsonType: String { json == .jsonb ? "JSONB" : "TEXT" }
    /// What follows a table's definition for a table stored in its primary key's order (SQLite's
    /// `WITHOUT ROWID`); empty where every table is a heap with its indexes beside it.
    public var keyOrderedTable: String
    /// Whether `SELECT … FOR UPDATE` locks rows. Without row locks a writing transaction holds the
    /// whole database from its start (`transaction { … }` begins `IMMEDIATE`), so
    /// writes are serialized anyway.
    public var rowLocks: Bool
    /// Whether a statement's `WITH` clause may itself write (a data-modifying common table
    /// expression), so that two writes go in one statement.
    public var writingCTEs: Bool
    /// Whether a table takes storage parameters (PostgreSQL's `SET STORAGE`, `toast_tuple_target`).
    public var storageParameters: Bool
    /// Whether a transaction may lift its own statement timeout and take advisory locks.
    public var transactionSettings: Bool
    /// Whether the gateway's database layer already commits concurrent single writes together
    /// (SQLite's writer), so that a plugin gains nothing by combining them itself.
    public var combinesWrites: Bool
    /// Whether the database checks its own file's consistency (`PRAGMA integrity_check`).
    public var integrityCheck: Bool

    public static let sqlite = DatabaseFeatures(
        serialPrimaryKey: "INTEGER PRIMARY KEY AUTOINCREMENT", binaryType: "BLOB", json: .json1, keyOrderedTable: " WITHOUT ROWID",
        rowLocks: false, writingCTEs: false, storageParameters: false, transactionSettings: false, combinesWrites: true, integrityCheck: true)

    public static let postgreSQL = DatabaseFeatures(
        serialPrimaryKey: "BIGSERIAL PRIMARY KEY", binaryType: "BYTEA", json: .jsonb, keyOrderedTable: "",
        rowLocks: true, writingCTEs: true, storageParameters: true, transactionSettings: true, combinesWrites: false, integrityCheck: false)
}

extension SQLDatabase {
    /// The features of this database (the gateway runs on SQLite or PostgreSQL).
    public var features: DatabaseFeatures { dialect.name == "sqlite" ? .sqlite : .postgreSQL }
}
