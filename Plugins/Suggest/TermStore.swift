import Foundation
#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Metrics
import NIOCore
import Synchronization
import SQLKit

/// The terms in the plugin's table, and the index built from them. Every change goes to the table
/// first and then to the index: one term through the index's overlay at once (no rebuild of
/// hundreds of thousands of terms for each edit), a whole dictionary by a rebuild that replaces the
/// index in one step, so readers see the old dictionary or the new one.
final class TermStore: Sendable {
    let database: any SQLDatabase
    let index = LayeredIndex(terms: [])
    /// Tells the other instances on the database (``TermChange``); the event bus carries it.
    let events: (any EventBus)?
    /// This instance, so that it skips its own announcements.
    let instance = UUID().uuidString

    /// `suggest_index_terms` (the base index's terms) and `suggest_index_pending_changes` (changes
    /// in the overlay until the next rebuild).
    let termsGauge: Gauge?
    let pendingGauge: Gauge?

    init(database: any SQLDatabase, events: (any EventBus)? = nil, metrics: (any MetricsFactory)? = nil) {
        self.database = database
        self.events = events
        termsGauge = metrics.map { Gauge(label: "suggest_index_terms", factory: $0) }
        pendingGauge = metrics.map { Gauge(label: "suggest_index_pending_changes", factory: $0) }
    }

    /// Records the index's sizes in the gauges.
    private func measure() {
        guard let termsGauge, let pendingGauge else { return }
        let sizes = index.sizes
        termsGauge.record(sizes.base)
        pendingGauge.record(sizes.pending)
    }

    /// A change of the table another instance must apply to its index: one term (read back from
    /// the table), or a whole dictionary (a rebuild).
    struct TermChange: Codable, Sendable {
        var origin: String
        var dictionary: String
        var keyword: String?
    }

    static let changesTopic = "suggest/terms"

    private func announce(dictionary: String, keyword: String?) async {
        guard let events, let payload = try? JSONEncoder().encode(TermChange(origin: instance, dictionary: dictionary, keyword: keyword)) else { return }
        await events.publish(GatewayEvent(topic: Self.changesTopic, payload: ByteBuffer(bytes: payload)))
    }

    /// Applies another instance's change: the term as the table now holds it, or the dictionary rebuilt.
    func applyRemote(_ event: GatewayEvent) async throws {
        guard let change = try? JSONDecoder().decode(TermChange.self, from: Data(event.payload.readableBytesView)), change.origin != instance else { return }
        guard let keyword = change.keyword else { return try await reload() }
        let row = try await database.select().columns("dictionary", "keyword", "text", "weight").from("suggest_terms")
            .where("dictionary", .equal, change.dictionary).where("keyword", .equal, keyword).first(decoding: Row.self)
        apply(.init(dictionary: change.dictionary, keyword: keyword), term: row.map { Term(dictionary: $0.dictionary, keyword: $0.keyword, text: $0.text, weight: $0.weight) })
    }

    private struct Row: Codable {
        var dictionary: String
        var keyword: String
        var text: String
        var weight: Double
    }

    /// The index of the table's terms. Rows are turned into terms as they arrive, so that the
    /// database's rows for hundreds of thousands of terms are never all held at once.
    private func readIndex() async throws -> SuggestionIndex {
        let terms = Mutex<[Term]>([])
        let failure = Mutex<(any Error)?>(nil)
        try await database.select().columns("dictionary", "keyword", "text", "weight").from("suggest_terms").run { row in
            do {
                let term = Term(dictionary: try row.decode(column: "dictionary", as: String.self), keyword: try row.decode(column: "keyword", as: String.self),
                                text: try row.decode(column: "text", as: String.self), weight: try row.decode(column: "weight", as: Double.self))
                terms.withLock { $0.append(term) }
            } catch {
                failure.withLock { $0 = $0 ?? error }
            }
        }
        if let error = failure.withLock({ $0 }) { throw error }
        // A large build hands back the memory it freed itself (see `IndexMemory.returnFreedMemory`).
        return SuggestionIndex(terms: terms.withLock { $0 })
    }

    /// Rebuilds the index from the table.
    func reload() async throws {
        index.reset(to: try await readIndex())
        measure()
        // The index replaced is freed now.
        IndexMemory.returnFreedMemory()
    }

    /// Puts one change into the index; when enough have gathered, rebuilds the base in the background.
    private func apply(_ key: LayeredIndex.TermKey, term: Term?) {
        let due = index.apply(key, term: term)
        measure()
        guard due else { return }
        let position = index.position
        Task {
            do {
                index.rebuilt(try await readIndex(), through: position)
                measure()
            } catch {
                index.rebuildFailed()
            }
        }
    }

    /// Adds or replaces one term.
    func upsert(_ term: Term) async throws {
        try await database.insert(into: "suggest_terms").model(Row(dictionary: term.dictionary, keyword: term.keyword, text: term.text, weight: term.weight))
            .onConflict(with: ["dictionary", "keyword"]) { $0.set(excludedValueOf: "text").set(excludedValueOf: "weight") }
            .run()
        apply(.init(dictionary: term.dictionary, keyword: term.keyword), term: term)
        await announce(dictionary: term.dictionary, keyword: term.keyword)
    }

    /// Removes one term; false when there was none.
    func delete(dictionary: String, keyword: String) async throws -> Bool {
        struct Found: Decodable { var keyword: String }
        guard try await database.select().column("keyword").from("suggest_terms").where("dictionary", .equal, dictionary)
            .where("keyword", .equal, keyword).first(decoding: Found.self) != nil else { return false }
        try await database.delete(from: "suggest_terms").where("dictionary", .equal, dictionary).where("keyword", .equal, keyword).run()
        apply(.init(dictionary: dictionary, keyword: keyword), term: nil)
        await announce(dictionary: dictionary, keyword: keyword)
        return true
    }

    /// Replaces a whole dictionary in one transaction: readers see the old one or the new one. A
    /// keyword given twice keeps its last text and weight (PostgreSQL refuses a statement that
    /// would update one row twice, so duplicates are merged before the rows are sent).
    func replace(dictionary: String, with given: [Term]) async throws {
        var position: [String: Int] = [:]
        var merged: [Term] = []
        merged.reserveCapacity(given.count)
        for term in given {
            if let index = position[term.keyword] {
                merged[index] = term
            } else {
                position[term.keyword] = merged.count
                merged.append(term)
            }
        }
        let terms = merged
        try await database.transaction { db in
            try await db.delete(from: "suggest_terms").where("dictionary", .equal, dictionary).run()
            for chunk in stride(from: 0, to: terms.count, by: 500).map({ Array(terms[$0..<min($0 + 500, terms.count)]) }) {
                try await db.insert(into: "suggest_terms").models(chunk.map { Row(dictionary: dictionary, keyword: $0.keyword, text: $0.text, weight: $0.weight) })
                    .onConflict(with: ["dictionary", "keyword"]) { $0.set(excludedValueOf: "text").set(excludedValueOf: "weight") }
                    .run()
            }
        }
        try await reload()
        await announce(dictionary: dictionary, keyword: nil)
    }

    /// The dictionaries and how many terms each holds.
    func dictionaries() async throws -> [(name: String, terms: Int)] {
        struct Count: Decodable {
            var dictionary: String
            var count: Int
        }
        return try await database.select().column("dictionary").column(SQLFunction("COUNT", args: SQLLiteral.all), as: "count")
            .from("suggest_terms").groupBy("dictionary").orderBy("dictionary").all(decoding: Count.self).map { ($0.dictionary, $0.count) }
    }
}
