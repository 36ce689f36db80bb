import Foundation
import GatewayCore
import Logging
import ServiceLifecycle

/// Search-as-you-type suggestions (seed 002): every keystroke asks for suggestions, each a
/// `keyword` to search for and a `text` to show, in Chinese as well as Latin scripts. Serves the
/// native API under `/v1/suggest` and the KKBOX dialect at `/ajax/ac_search.php`.
public struct SuggestPlugin: ServicePlugin {
    public static let id = "suggest"
    public static let summary = "Search-as-you-type suggestions, with the KKBOX dialect"
    public static let migrations = SuggestMigrations.all

    public struct Configuration: PluginConfiguration {
        /// Dictionary files loaded as demo data (relative to plugins.yaml).
        public var dictionaries: [String] = []
        /// Upstream mode: the URL of a KKBOX-format suggestion service asked too, its lines merged
        /// after the local suggestions.
        public var upstream: String?
        /// How long a call to the upstream service may take (default 500ms, at most 30s).
        public var upstreamTimeout: ConfigDuration?
        /// Failures in a row that open the circuit (default 3).
        public var upstreamFailures: Int?
        /// How long an open circuit leaves the service alone (default 30s).
        public var upstreamCooldown: ConfigDuration?

        public static let defaults = Configuration()

        public func validate() throws {
            _ = try upstreamSettings()
        }

        func upstreamSettings() throws -> UpstreamSuggestions.Settings? {
            guard let upstream else {
                if upstreamTimeout != nil || upstreamFailures != nil || upstreamCooldown != nil {
                    throw ConfigurationError(key: "upstream", "upstreamTimeout, upstreamFailures and upstreamCooldown need upstream")
                }
                return nil
            }
            guard let url = URL(string: upstream), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
                throw ConfigurationError(key: "upstream", "\(upstream) is not an http(s) URL")
            }
            let timeout = (upstreamTimeout ?? .milliseconds(500)).duration
            guard timeout > .zero, timeout <= .seconds(30) else {
                throw ConfigurationError(key: "upstreamTimeout", "must be more than 0 and at most 30s, such as 300ms")
            }
            let cooldown = (upstreamCooldown ?? ConfigDuration(seconds: 30)).duration
            guard cooldown > .zero else { throw ConfigurationError(key: "upstreamCooldown", "must be more than 0, such as 30s") }
            let failures = upstreamFailures ?? 3
            guard (1...100).contains(failures) else { throw ConfigurationError(key: "upstreamFailures", "must be between 1 and 100") }
            return UpstreamSuggestions.Settings(url: upstream, timeout: timeout, failureThreshold: failures, cooldown: cooldown)
        }
    }

    let configuration: Configuration
    let context: PluginContext
    let store: TermStore
    let upstream: UpstreamSuggestions?

    public init(configuration: Configuration, context: PluginContext) async throws {
        for (index, path) in configuration.dictionaries.enumerated() where !FileManager.default.isReadableFile(atPath: context.resolve(path: path).path) {
            throw ConfigurationError(key: "dictionaries[\(index)]", "\(path) cannot be read")
        }
        upstream = try configuration.upstreamSettings().map { UpstreamSuggestions(settings: $0, http: context.http, clock: context.clock) }
        self.configuration = configuration
        self.context = context
        store = TermStore(database: context.database, events: context.events, metrics: context.metrics)
        try await store.reload()
    }

    public var importers: [any Importer] { [TermImporter(store: store)] }

    /// Applies term changes made through other instances on the same database.
    public var services: [any Service] { [context.events.listener(topic: TermStore.changesTopic, logger: context.logger) { [store] in try await store.applyRemote($0) }] }

    public func loadDemoData() async throws {
        for path in configuration.dictionaries {
            let report = try await TermImporter(store: store).importFile(context.resolve(path: path), options: [:], progress: { _, _ in })
            context.logger.info("loaded demo dictionary", metadata: ["file": "\(path)", "terms": "\(report.imported)", "rejected": "\(report.rejected.count)"])
        }
    }

    public func health() async -> PluginHealth {
        if let upstream, case .open = upstream.circuit {
            return .degraded("the upstream suggestion service is failing: serving local suggestions and remembered answers")
        }
        return store.index.isEmpty ? .degraded("no terms loaded") : .ok
    }

    /// One suggestion as both APIs serve it.
    struct Found: Sendable {
        var keyword: String
        var text: String
        var weight: Double
    }

    /// The local suggestions for `query`, then (in upstream mode) the upstream service's lines
    /// whose keyword is not among them, `limit` in all.
    static func suggestions(for query: String, limit: Int, store: TermStore, upstream: UpstreamSuggestions?) async -> [Found] {
        // Moved out of the matches rather than copied: each copy of a term's strings changes
        // reference counts that every thread serving suggestions shares.
        var matches = store.index.suggestions(for: query, limit: limit)
        var found: [Found] = []
        found.reserveCapacity(matches.count)
        while let match = matches.popLast() { found.append(Found(keyword: match.term.keyword, text: match.term.text, weight: match.term.weight)) }
        found.reverse()
        guard let upstream, found.count < limit else { return found }
        var seen = Set(found.map { SuggestNormalizer.normalize($0.keyword) })
        for line in await upstream.suggestions(for: query) where found.count < limit {
            guard seen.insert(SuggestNormalizer.normalize(line.keyword)).inserted else { continue }
            found.append(Found(keyword: line.keyword, text: line.text, weight: 0))
        }
        return found
    }

    // MARK: Native API

    struct CompleteQuery: Codable, Sendable, ValidatableInput {
        /// The suggestions one call may ask for.
        static let limits = 1...50
        /// The longest query, in characters (Unicode code points, as the document counts them).
        static let longestQuery = 200

        static let fieldRules: [String: FieldRule] = [
            "q": FieldRule.text(maxLength: longestQuery).described("What the user has typed so far."),
            "limit": FieldRule.integer(limits).described("Suggestions wanted, 1 to 50 (default 10)."),
        ]

        var q: String?
        var limit: Int?

        init(q: String? = nil, limit: Int? = nil) {
            self.q = q
            self.limit = limit
        }

        func validate() -> [GatewayError.FieldError] {
            var problems: [GatewayError.FieldError] = []
            if let limit, !Self.limits.contains(limit) { problems.append(.init(pointer: "limit", detail: "must be between 1 and 50")) }
            if let q, q.unicodeScalars.count > Self.longestQuery { problems.append(.init(pointer: "q", detail: "must be at most 200 characters")) }
            return problems
        }
    }

    struct Suggestion: Codable, Sendable {
        var keyword: String
        var text: String
        var weight: Double
        /// Where the query matched (`[[start, end]]`), held without an array in the usual case.
        var spans: HighlightSpans
        var highlight: [[Int]] { spans.pairs }

        init(keyword: String, text: String, weight: Double, spans: HighlightSpans) {
            self.keyword = keyword
            self.text = text
            self.weight = weight
            self.spans = spans
        }

        init(keyword: String, text: String, weight: Double, highlight: [[Int]]) {
            self.init(keyword: keyword, text: text, weight: weight, spans: HighlightSpans(highlight))
        }

        enum CodingKeys: String, CodingKey { case keyword, text, weight, highlight }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(keyword: try container.decode(String.self, forKey: .keyword), text: try container.decode(String.self, forKey: .text),
                      weight: try container.decode(Double.self, forKey: .weight), highlight: try container.decode([[Int]].self, forKey: .highlight))
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(keyword, forKey: .keyword)
            try container.encode(text, forKey: .text)
            try container.encode(weight, forKey: .weight)
            try container.encode(highlight, forKey: .highlight)
        }
    }

    /// The reply of a lookup. It writes itself to bytes (``writeJSON(into:)``), straight from the
    /// index's reply bytes (``TermBytes``): measured (`Benchmarks/suggest/run`, 3 rounds, 2-core
    /// machine, 2026-11-28), `/v1/suggest` over `/healthz` 0.661 so (rounds 0.60–0.69) against
    /// 0.421 through `Codable` (rounds 0.40–0.53).
    struct Suggestions: Codable, Sendable, JSONWritable {
        var query: String
        var tookMicros: Int
        /// The items as values (decoded, or merged with an upstream service's)…
        private var listed: [Suggestion]
        /// …or as the index's lookup, written straight from the index's bytes (see ``TermBytes``).
        private var lookup: LayeredIndex.Lookup?

        var items: [Suggestion] {
            guard let lookup else { return listed }
            return lookup.hits.map { hit in
                let (index, number) = lookup.source(of: hit.term)
                let term = index.terms[number]
                return Suggestion(keyword: term.keyword, text: term.text, weight: term.weight, spans: SuggestionIndex.highlightSpan(query, in: term.text))
            }
        }

        init(query: String, items: [Suggestion], tookMicros: Int) {
            self.query = query
            self.tookMicros = tookMicros
            listed = items
        }

        init(query: String, lookup: LayeredIndex.Lookup, tookMicros: Int) {
            self.query = query
            self.tookMicros = tookMicros
            listed = []
            self.lookup = lookup
        }

        enum CodingKeys: String, CodingKey { case items, query, tookMicros }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(query: try container.decode(String.self, forKey: .query), items: try container.decode([Suggestion].self, forKey: .items),
                      tookMicros: try container.decode(Int.self, forKey: .tookMicros))
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(items, forKey: .items)
            try container.encode(query, forKey: .query)
            try container.encode(tookMicros, forKey: .tookMicros)
        }

        // The fixed parts of the document. Static strings, not arrays: appending a shared array
        // retains its buffer, and under load that count is contended between threads.
        private static let open: StaticString = #"{"items":["#
        private static let itemOpen: StaticString = #"{"highlight":["#
        private static let queryKey: StaticString = #"],"query":"#
        private static let tookKey: StaticString = #","tookMicros":"#

        /// What `JSONEncoder` would write, several times faster (this is the plugin's hot path).
        func writeJSON(into bytes: inout [UInt8]) {
            if let lookup {
                Self.writeItems(lookup.hits, of: lookup.view, query: query, into: &bytes)
            } else {
                // Room for the whole document up front: one allocation instead of a few regrowths.
                bytes.reserveCapacity(bytes.count + listed.reduce(64 + query.utf8.count) { $0 + 64 + $1.keyword.utf8.count + $1.text.utf8.count })
                JSONValue.write(literal: Self.open, into: &bytes)
                for (index, item) in listed.enumerated() {
                    if index > 0 { bytes.append(UInt8(ascii: ",")) }
                    JSONValue.write(literal: Self.itemOpen, into: &bytes)
                    Self.write(item.spans, into: &bytes)
                    _ = TermBytes.writeItemPart(keyword: item.keyword, text: item.text, weight: item.weight, into: &bytes)
                }
            }
            JSONValue.write(literal: Self.queryKey, into: &bytes)
            JSONValue.write(string: query, into: &bytes)
            JSONValue.write(literal: Self.tookKey, into: &bytes)
            JSONValue.write(int64: Int64(tookMicros), into: &bytes)
            bytes.append(UInt8(ascii: "}"))
        }

        /// The items of a lookup, each term's part copied from its index's bytes; the highlight
        /// compares the query, prepared once, with the text's bytes.
        ///
        /// Static, with its inputs passed in: the closure below would otherwise capture a copy of
        /// the whole reply. The indexes' bytes are read through their readers, taken once.
        private static func writeItems(_ hits: [SuggestionIndex.Hit], of view: LayeredIndex.View, query: String, into bytes: inout [UInt8]) {
            do {
                let base = view.base.termBytes.reader
                let overlay = view.overlay.termBytes.reader
                var capacity = 64 + query.utf8.count
                for hit in hits {
                    let (reader, term) = hit.term >= 0 ? (base, Int(hit.term)) : (overlay, Int(-1 - hit.term))
                    capacity += 40 + (reader?.itemPartLength(of: term) ?? Self.itemPartLength(term, of: hit.term >= 0 ? view.base : view.overlay))
                }
                bytes.reserveCapacity(bytes.count + capacity)
                JSONValue.write(literal: Self.open, into: &bytes)
                SuggestionIndex.withHighlightPattern(query) { pattern in
                    for (position, hit) in hits.enumerated() {
                        if position > 0 { bytes.append(UInt8(ascii: ",")) }
                        JSONValue.write(literal: Self.itemOpen, into: &bytes)
                        let (reader, term) = hit.term >= 0 ? (base, Int(hit.term)) : (overlay, Int(-1 - hit.term))
                        if let reader {
                            Self.writeItem(term, from: reader, query: query, pattern: pattern, into: &bytes) {
                                (hit.term >= 0 ? view.base : view.overlay).terms[term].text
                            }
                        } else {
                            Self.writeItem(term, of: hit.term >= 0 ? view.base : view.overlay, query: query, into: &bytes)
                        }
                    }
                }
            }
        }

        /// The length of an item written from the term's strings (when the index keeps no bytes).
        private static func itemPartLength(_ term: Int, of index: SuggestionIndex) -> Int {
            64 + index.terms[term].keyword.utf8.count + index.terms[term].text.utf8.count
        }

        /// One item from its highlight on: `[start,end]],"keyword":…}`, from the index's bytes.
        /// `text` gives the term's text for the highlights the fast path does not handle.
        private static func writeItem(_ term: Int, from reader: TermBytes.Reader, query: String, pattern: UnsafeBufferPointer<UInt32>?,
                                      into bytes: inout [UInt8], text: () -> String) {
            let span = pattern.map { pattern in reader.withText(of: term) { SuggestionIndex.highlightSpanFast(pattern: pattern, in: $0) } }
            switch span ?? .unsupported {
            case .span(let start, let end): write(.single(start, end), into: &bytes)
            case .none: break
            case .unsupported: write(.list(SuggestionIndex.highlight(query, in: text())), into: &bytes)
            }
            reader.writeItemPart(of: term, into: &bytes)
        }

        /// One item from its highlight on, from the term's strings.
        private static func writeItem(_ term: Int, of index: SuggestionIndex, query: String, into bytes: inout [UInt8]) {
            let value = index.terms[term]
            write(SuggestionIndex.highlightSpan(query, in: value.text), into: &bytes)
            _ = TermBytes.writeItemPart(keyword: value.keyword, text: value.text, weight: value.weight, into: &bytes)
        }

        /// `[start,end]` pairs, comma separated.
        private static func write(_ spans: HighlightSpans, into bytes: inout [UInt8]) {
            switch spans {
            case .single(let start, let end):
                bytes.append(UInt8(ascii: "["))
                JSONValue.write(int64: Int64(start), into: &bytes)
                bytes.append(UInt8(ascii: ","))
                JSONValue.write(int64: Int64(end), into: &bytes)
                bytes.append(UInt8(ascii: "]"))
            case .list(let spans):
                for (spanIndex, span) in spans.enumerated() {
                    if spanIndex > 0 { bytes.append(UInt8(ascii: ",")) }
                    bytes.append(UInt8(ascii: "["))
                    for (valueIndex, value) in span.enumerated() {
                        if valueIndex > 0 { bytes.append(UInt8(ascii: ",")) }
                        JSONValue.write(int64: Int64(value), into: &bytes)
                    }
                    bytes.append(UInt8(ascii: "]"))
                }
            }
        }
    }

    struct NewTerm: Codable, Sendable, ValidatableInput {
        /// The longest keyword, text and dictionary name, in characters (Unicode code points).
        static let longestKeyword = 200
        static let longestText = 500
        static let dictionaryNames = 1...64

        static let fieldRules: [String: FieldRule] = [
            "keyword": FieldRule.nonBlank(maxLength: longestKeyword).described("What a chosen suggestion searches for; not blank."),
            "text": FieldRule.text(maxLength: longestText).described("What the suggestion shows (default the keyword)."),
            "weight": FieldRule(keywords: ["minimum": .number(0)]).described("Higher weights come first (default 0)."),
            "dictionary": FieldRule.text(dictionaryNames).described("The dictionary the term belongs to (default `custom`)."),
        ]

        var dictionary: String?
        var keyword: String
        var text: String?
        var weight: Double?

        func validate() -> [GatewayError.FieldError] {
            var problems: [GatewayError.FieldError] = []
            if keyword.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty || keyword.unicodeScalars.count > Self.longestKeyword {
                problems.append(.init(pointer: "/keyword", detail: "must be 1 to 200 characters"))
            }
            if let text, text.unicodeScalars.count > Self.longestText { problems.append(.init(pointer: "/text", detail: "must be at most 500 characters")) }
            if let weight, !weight.isFinite || weight < 0 { problems.append(.init(pointer: "/weight", detail: "must be a non-negative number")) }
            if let dictionary, !Self.dictionaryNames.contains(dictionary.unicodeScalars.count) {
                problems.append(.init(pointer: "/dictionary", detail: "must be 1 to 64 characters"))
            }
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

    static func micros(_ duration: Duration) -> Int {
        Int(duration.components.seconds * 1_000_000 + duration.components.attoseconds / 1_000_000_000_000)
    }

    public var routes: [Route] {
        let store = self.store
        let upstream = self.upstream
        return [
            Route.define("suggest.complete", .get, "", summary: "Suggestions for what the user has typed so far")
                .example("?q=star%20wa&limit=5")
                .cache(.shared(ttl: .seconds(300), tags: ["suggest:terms"]))
                .query(CompleteQuery.self)
                .returns(Suggestions.self) { input, _ in
                    let started = ContinuousClock.now
                    let query = input.query.q ?? ""
                    let limit = input.query.limit ?? 10
                    if upstream == nil {
                        // Local suggestions only: the reply is written from the index's bytes.
                        let lookup = store.index.lookup(query, limit: limit)
                        let elapsed = ContinuousClock.now - started
                        return Suggestions(query: query, lookup: lookup, tookMicros: Self.micros(elapsed))
                    }
                    var matches = await Self.suggestions(for: query, limit: limit, store: store, upstream: upstream)
                    let elapsed = ContinuousClock.now - started
                    var items: [Suggestion] = []
                    items.reserveCapacity(matches.count)
                    while let found = matches.popLast() {
                        let spans = SuggestionIndex.highlightSpan(query, in: found.text)
                        items.append(Suggestion(keyword: found.keyword, text: found.text, weight: found.weight, spans: spans))
                    }
                    items.reverse()
                    return Suggestions(query: query, items: items, tookMicros: Self.micros(elapsed))
                },
            // The dictionaries serve everyone: only administrators and users granted suggest:write change them.
            Route.define("suggest.terms.put", .put, "/terms", summary: "Add or replace a term (administrators, or users granted suggest:write)")
                .access(.granted("suggest:write"))
                .cache(.invalidating(["suggest:terms"]))
                .body(NewTerm.self)
                .returns(Term.self) { input, _ in
                    let term = Term(dictionary: input.body.dictionary ?? "custom", keyword: input.body.keyword.trimmingCharacters(in: .whitespacesAndNewlines),
                                    text: input.body.text ?? input.body.keyword, weight: input.body.weight ?? 0)
                    try await store.upsert(term)
                    return term
                },
            Route.define("suggest.terms.delete", .delete, "/terms/{dictionary}/{keyword}",
                                    summary: "Remove a term (administrators, or users granted suggest:write)")
                .access(.granted("suggest:write"))
                .cache(.invalidating(["suggest:terms"]))
                .path(TermKey.self)
                .returns(NoContent.self) { input, _ in
                    guard try await store.delete(dictionary: input.path.dictionary, keyword: input.path.keyword) else {
                        throw GatewayError.notFound("No term '\(input.path.keyword)' in \(input.path.dictionary).")
                    }
                    return NoContent()
                },
            Route.define("suggest.dictionaries", .get, "/dictionaries", summary: "The dictionaries and their term counts")
                .returns(DictionaryList.self) { _, _ in
                    DictionaryList(items: try await store.dictionaries().map { Dictionary(name: $0.name, terms: $0.terms) })
                },
        ]
    }

    // MARK: KKBOX dialect

    public var dialects: [Dialect] {
        let store = self.store
        let upstream = self.upstream
        return [
            Dialect(
                name: "kkbox",
                routes: [
                    Route.define(.get, "/ajax/ac_search.php", summary: "keyword<TAB>text lines for ?query=").handle { request, _ in
                        // A missing or blank query is an empty reply, as the old service gave.
                        let query = request.query("query")?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
                        guard !query.isEmpty, query.count <= 200 else { return .text("") }
                        let lines = await Self.suggestions(for: query, limit: 10, store: store, upstream: upstream).map { match in
                            // Tabs and line breaks inside a term would break the old client's parsing.
                            func clean(_ value: String) -> String {
                                value.replacingOccurrences(of: "\t", with: " ").replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "\r", with: " ")
                            }
                            return clean(match.keyword) + "\t" + clean(match.text)
                        }
                        return .text(lines.joined(separator: "\n"))
                    },
                ],
                renderError: { error in .text(error.detail, status: error.status) })
        ]
    }
}
