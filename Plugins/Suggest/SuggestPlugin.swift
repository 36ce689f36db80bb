import Foundation
import GatewayCore

/// Search-as-you-type suggestions (seed 002): every keystroke asks for suggestions, each a
/// `keyword` to search for and a `text` to show, in Chinese as well as Latin scripts. Serves the
/// native API under `/v1/suggest` and the KKBOX dialect at `/ajax/ac_search.php`.
public struct SuggestPlugin: ServicePlugin {
    public static let id = "suggest"
    public static let summary = "Search-as-you-type suggestions, with the KKBOX dialect"
    public static let migrations = TermStore.migrations

    public struct Configuration: Decodable, Sendable {
        /// Dictionary files loaded as demo data (relative to plugins.yaml).
        public var dictionaries: [String] = []

        enum CodingKeys: String, CodingKey { case dictionaries }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            dictionaries = try container.decodeIfPresent([String].self, forKey: .dictionaries) ?? []
        }
    }

    let configuration: Configuration
    let context: PluginContext
    let store: TermStore

    public init(configuration: Configuration, context: PluginContext) async throws {
        for (index, path) in configuration.dictionaries.enumerated() where !FileManager.default.isReadableFile(atPath: context.resolve(path: path).path) {
            throw ConfigurationError(key: "dictionaries[\(index)]", "\(path) cannot be read")
        }
        self.configuration = configuration
        self.context = context
        store = TermStore(database: context.database)
        try await store.reload()
    }

    public var importers: [any Importer] { [TermImporter(store: store)] }

    public func loadDemoData() async throws {
        for path in configuration.dictionaries {
            let report = try await TermImporter(store: store).importFile(context.resolve(path: path), options: [:], progress: NoProgress())
            context.logger.info("loaded demo dictionary", metadata: ["file": "\(path)", "terms": "\(report.imported)", "rejected": "\(report.rejected.count)"])
        }
    }

    public func health() async -> PluginHealth {
        store.index.terms.isEmpty ? .degraded("no terms loaded") : .ok
    }

    // MARK: Native API

    struct CompleteQuery: Codable, Sendable, ValidatableInput {
        var q: String?
        var limit: Int?

        func validate() -> [GatewayError.FieldError] {
            var problems: [GatewayError.FieldError] = []
            if let limit, !(1...50).contains(limit) { problems.append(.init(pointer: "limit", detail: "must be between 1 and 50")) }
            if let q, q.count > 200 { problems.append(.init(pointer: "q", detail: "must be at most 200 characters")) }
            return problems
        }
    }

    struct Suggestion: Codable, Sendable {
        var keyword: String
        var text: String
        var weight: Double
        var highlight: [[Int]]
    }

    struct Suggestions: Codable, Sendable, JSONWritable {
        var query: String
        var items: [Suggestion]
        var tookMicros: Int

        /// What `JSONEncoder` would write, several times faster (this is the plugin's hot path).
        func writeJSON(into bytes: inout [UInt8]) {
            bytes.append(contentsOf: #"{"items":["#.utf8)
            for (index, item) in items.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                bytes.append(contentsOf: #"{"highlight":["#.utf8)
                for (spanIndex, span) in item.highlight.enumerated() {
                    if spanIndex > 0 { bytes.append(UInt8(ascii: ",")) }
                    bytes.append(UInt8(ascii: "["))
                    for (valueIndex, value) in span.enumerated() {
                        if valueIndex > 0 { bytes.append(UInt8(ascii: ",")) }
                        bytes.append(contentsOf: String(value).utf8)
                    }
                    bytes.append(UInt8(ascii: "]"))
                }
                bytes.append(contentsOf: #"],"keyword":"#.utf8)
                JSONValue.write(string: item.keyword, into: &bytes)
                bytes.append(contentsOf: #","text":"#.utf8)
                JSONValue.write(string: item.text, into: &bytes)
                bytes.append(contentsOf: #","weight":"#.utf8)
                JSONValue.write(number: item.weight, into: &bytes)
                bytes.append(UInt8(ascii: "}"))
            }
            bytes.append(contentsOf: #"],"query":"#.utf8)
            JSONValue.write(string: query, into: &bytes)
            bytes.append(contentsOf: #","tookMicros":"#.utf8)
            bytes.append(contentsOf: String(tookMicros).utf8)
            bytes.append(UInt8(ascii: "}"))
        }
    }

    struct NewTerm: Codable, Sendable, ValidatableInput {
        var dictionary: String?
        var keyword: String
        var text: String?
        var weight: Double?

        func validate() -> [GatewayError.FieldError] {
            var problems: [GatewayError.FieldError] = []
            if keyword.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty || keyword.count > 200 {
                problems.append(.init(pointer: "/keyword", detail: "must be 1 to 200 characters"))
            }
            if let text, text.count > 500 { problems.append(.init(pointer: "/text", detail: "must be at most 500 characters")) }
            if let weight, !weight.isFinite || weight < 0 { problems.append(.init(pointer: "/weight", detail: "must be a non-negative number")) }
            if let dictionary, dictionary.isEmpty || dictionary.count > 64 { problems.append(.init(pointer: "/dictionary", detail: "must be 1 to 64 characters")) }
            return problems
        }
    }

    struct TermKey: Codable, Sendable {
        var dictionary: String
        var keyword: String
    }

    struct Dictionary: Codable, Sendable {
        var name: String
        var terms: Int
    }

    struct DictionaryList: Codable, Sendable { var items: [Dictionary] }

    /// Suggestions for `query`, as both APIs serve them.
    func complete(_ query: String, limit: Int) -> [SuggestionIndex.Match] {
        store.index.suggestions(for: query, limit: limit)
    }

    public var operations: [ServiceOperation] {
        let store = self.store
        return [
            ServiceOperation.define("suggest.complete", .get, "", summary: "Suggestions for what the user has typed so far")
                .cache(.shared(ttl: .seconds(300), tags: ["suggest:terms"]))
                .query(CompleteQuery.self)
                .returns(Suggestions.self) { input, _ in
                    let started = ContinuousClock.now
                    let query = input.query.q ?? ""
                    let matches = store.index.suggestions(for: query, limit: input.query.limit ?? 10)
                    let elapsed = ContinuousClock.now - started
                    return Suggestions(
                        query: query,
                        items: matches.map { Suggestion(keyword: $0.term.keyword, text: $0.term.text, weight: $0.term.weight,
                                                        highlight: SuggestionIndex.highlight(query, in: $0.term.text)) },
                        tookMicros: Int(elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000))
                },
            ServiceOperation.define("suggest.terms.put", .put, "/terms", summary: "Add or replace a term")
                .access(.scope("suggest:write"))
                .cache(.invalidating(["suggest:terms"]))
                .body(NewTerm.self)
                .returns(Term.self) { input, _ in
                    let term = Term(dictionary: input.body.dictionary ?? "custom", keyword: input.body.keyword.trimmingCharacters(in: .whitespacesAndNewlines),
                                    text: input.body.text ?? input.body.keyword, weight: input.body.weight ?? 0)
                    try await store.upsert(term)
                    return term
                },
            ServiceOperation.define("suggest.terms.delete", .delete, "/terms/{dictionary}/{keyword}", summary: "Remove a term")
                .access(.scope("suggest:write"))
                .cache(.invalidating(["suggest:terms"]))
                .path(TermKey.self)
                .returns(NoContent.self) { input, _ in
                    guard try await store.delete(dictionary: input.path.dictionary, keyword: input.path.keyword) else {
                        throw GatewayError.notFound("No term '\(input.path.keyword)' in \(input.path.dictionary).")
                    }
                    return NoContent()
                },
            ServiceOperation.define("suggest.dictionaries", .get, "/dictionaries", summary: "The dictionaries and their term counts")
                .returns(DictionaryList.self) { _, _ in
                    DictionaryList(items: try await store.dictionaries().map { Dictionary(name: $0.name, terms: $0.terms) })
                },
        ]
    }

    // MARK: KKBOX dialect

    public var dialects: [Dialect] {
        let store = self.store
        return [
            Dialect(
                name: "kkbox",
                routes: [
                    DialectRoute(.get, "/ajax/ac_search.php", summary: "keyword<TAB>text lines for ?query=") { request, _ in
                        // A missing or blank query is an empty reply, as the old service gave.
                        let query = request.query("query")?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
                        guard !query.isEmpty, query.count <= 200 else { return .text("") }
                        let lines = store.index.suggestions(for: query, limit: 10).map { match in
                            // Tabs and line breaks inside a term would break the old client's parsing.
                            func clean(_ value: String) -> String {
                                value.replacingOccurrences(of: "\t", with: " ").replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "\r", with: " ")
                            }
                            return clean(match.term.keyword) + "\t" + clean(match.term.text)
                        }
                        return .text(lines.joined(separator: "\n"))
                    },
                ],
                renderError: { error in .text(error.detail, status: error.status) })
        ]
    }
}

/// A progress sink that ignores updates (demo data loads quietly).
struct NoProgress: ImportProgress {
    func update(done: Int, total: Int?) {}
}
