import Foundation
import GatewayCore

/// The admin console's page of the suggest plugin: the index's size, its dictionaries, and a query
/// to try (answered as the native API and the KKBOX dialect answer it).
extension SuggestPlugin {
    /// The most dictionaries the page lists.
    static let adminDictionaryRows = 100
    /// Suggestions a tried query shows unless `limit` says otherwise.
    static let adminDefaultLimit = 10

    public var adminViews: [AdminView] {
        let store = self.store
        let upstream = self.upstream
        return [
            AdminView(id: "index", title: "Index", load: { request in
                try await Self.indexSections(store: store, upstream: upstream, arguments: request.arguments)
            }, actions: [
                "try": { request in
                    let (query, limit) = try Self.triedQuery(request.arguments)
                    let found = await Self.suggestions(for: query, limit: limit, store: store, upstream: upstream)
                    guard !found.isEmpty else { return "No suggestions for '\(query)'." }
                    return "\(found.count) suggestion\(found.count == 1 ? "" : "s") for '\(query)': " + found.map(\.text).joined(separator: ", ")
                },
            ]),
        ]
    }

    /// The query and limit the arguments give: `q` (required, at most 200 characters) and `limit` (1–50).
    static func triedQuery(_ arguments: [String: String]) throws -> (query: String, limit: Int) {
        let query = (arguments["q"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !query.isEmpty else { throw GatewayError.invalid(field: "q", "is required: what a user would have typed") }
        guard query.unicodeScalars.count <= CompleteQuery.longestQuery else {
            throw GatewayError.invalid(field: "q", "must be at most \(CompleteQuery.longestQuery) characters")
        }
        var limit = adminDefaultLimit
        if let text = arguments["limit"], !text.isEmpty {
            guard let value = Int(text), CompleteQuery.limits.contains(value) else { throw GatewayError.invalid(field: "limit", "must be between 1 and 50") }
            limit = value
        }
        return (query, limit)
    }

    static func indexSections(store: TermStore, upstream: UpstreamSuggestions?, arguments: [String: String]) async throws -> [AdminSection] {
        let sizes = store.index.sizes
        let dictionaries = try await store.dictionaries()
        var figures = [
            AdminFigure("Terms in the index", String(sizes.base)),
            AdminFigure("Changes waiting for a rebuild", String(sizes.pending)),
            AdminFigure("Dictionaries", String(dictionaries.count)),
            AdminFigure("Terms in the table", String(dictionaries.reduce(0) { $0 + $1.terms })),
        ]
        if let upstream {
            figures.append(AdminFigure("Upstream service", AdminView.redacted(url: upstream.settings.url)))
            let circuit: String = switch upstream.circuit {
            case .closed: "closed (asked)"
            case .halfOpen: "half-open (a trial call decides)"
            case .open(let until): "open (left alone until \(UTCTimestamp.format(micros: UTCTimestamp.micros(until), fractionDigits: 0)))"
            }
            figures.append(AdminFigure("Upstream circuit", circuit))
        }
        var sections: [AdminSection] = [.figures(title: "Index", figures)]

        let listed = dictionaries.prefix(adminDictionaryRows).map { AdminRow([$0.name, String($0.terms)]) }
        if listed.isEmpty {
            sections.append(.text(title: "Dictionaries", "No terms are loaded: import a dictionary (gateway import suggest FILE) or add terms."))
        } else {
            sections.append(.table(title: dictionaries.count > listed.count ? "Dictionaries (the first \(listed.count) of \(dictionaries.count))" : "Dictionaries",
                                   columns: ["Dictionary", "Terms"], rows: listed))
        }

        let tried = (arguments["q"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        sections.append(.form(title: "Try a query", action: "try", submitLabel: "Suggest",
                              fields: [AdminField(name: "q", label: "Query", value: tried),
                                       AdminField(name: "limit", label: "Suggestions (1–50)", value: arguments["limit"] ?? String(adminDefaultLimit))]))
        guard !tried.isEmpty else { return sections }
        let (query, limit) = try triedQuery(arguments)
        // The answer the API gives, with where each local suggestion came from and how it matched.
        let found = await suggestions(for: query, limit: limit, store: store, upstream: upstream)
        var local: [String: SuggestionIndex.Match] = [:]
        for match in store.index.suggestions(for: query, limit: limit) where local[match.term.keyword] == nil {
            local[match.term.keyword] = match
        }
        let rows = found.enumerated().map { position, suggestion in
            let match = local[suggestion.keyword]
            let how = match.map { match in
                match.edits > 0 ? "\(match.edits) edit\(match.edits == 1 ? "" : "s")" : match.wholePrefix ? "keyword prefix" : "word prefix"
            } ?? "upstream"
            return AdminRow([String(position + 1), suggestion.text, suggestion.keyword, Self.weightText(suggestion.weight),
                             match?.term.dictionary ?? "", how])
        }
        if rows.isEmpty {
            sections.append(.text(title: "Suggestions for '\(query)'", "None."))
        } else {
            sections.append(.table(title: "Suggestions for '\(query)' (at most \(limit))", columns: ["#", "Text", "Keyword", "Weight", "Dictionary", "Match"], rows: rows))
        }
        return sections
    }

    /// A weight as people read it: integral values without a fraction.
    static func weightText(_ value: Double) -> String {
        value.isFinite && value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
