import Foundation

/// A file format a plugin can load with `gateway import <plugin> FILE`.
///
/// Importers must never abort a whole file for a bad line: they count and report each rejected
/// line with its number, and they make a re-import atomic (readers see the old data or the new,
/// never half of it).
public protocol Importer: Sendable {
    /// The format's name (`gtfs`, `tsv`, `csv`).
    var format: String { get }
    /// One line for `--help`.
    var summary: String { get }
    /// Whether this importer reads `file` (by extension or a sniff of its start).
    func accepts(_ file: URL) -> Bool
    /// Loads `file`. `options` come from the command line (`--feed 504` → `["feed": "504"]`);
    /// `progress` hears that `done` units of `total` (nil when unknown) are processed (the CLI
    /// draws a bar from it).
    func importFile(_ file: URL, options: [String: String], progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> ImportReport
}

/// What an import did.
public struct ImportReport: Sendable, Codable, Equatable {
    /// One rejected line.
    public struct Rejection: Sendable, Codable, Equatable {
        public var line: Int
        public var reason: String
        public init(line: Int, reason: String) {
            self.line = line
            self.reason = reason
        }
    }

    public var imported: Int
    public var rejected: [Rejection]
    public init(imported: Int, rejected: [Rejection] = []) {
        self.imported = imported
        self.rejected = rejected
    }
}
