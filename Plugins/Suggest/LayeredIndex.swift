import Foundation
import Synchronization

/// The suggestion index kept current without rebuilding it for every change: a large immutable
/// base index plus a small overlay of the terms changed since the base was built (added or
/// replaced terms, and deletions). A lookup asks both and merges; when the overlay grows past
/// ``rebuildThreshold`` changes, the base is rebuilt in the background and the changes it now
/// holds leave the overlay. Readers always see every change made so far.
final class LayeredIndex: Sendable {
    /// Changes held in the overlay before the base is rebuilt.
    static let rebuildThreshold = 256

    struct TermKey: Hashable, Sendable {
        var dictionary: String
        var keyword: String
    }

    /// What a lookup reads, published as one object after every change: a lookup (on every
    /// thread, for every keystroke) then takes one shared reference instead of three.
    final class View: Sendable {
        let base: SuggestionIndex
        let changes: [TermKey: (term: Term?, sequence: Int)]
        let overlay: SuggestionIndex

        init(base: SuggestionIndex, changes: [TermKey: (term: Term?, sequence: Int)], overlay: SuggestionIndex) {
            self.base = base
            self.changes = changes
            self.overlay = overlay
        }
    }

    private struct State {
        var base: SuggestionIndex { didSet { publish() } }
        /// The overlay: per changed term, the term now (nil when deleted) and the change's number.
        var changes: [TermKey: (term: Term?, sequence: Int)] = [:] { didSet { publish() } }
        var overlay = SuggestionIndex(terms: []) { didSet { publish() } }
        private(set) var view: View
        var sequence = 0
        var rebuilding = false
        /// Bumped by every full reset, so that a background rebuild begun before it is discarded.
        var generation = 0

        init(base: SuggestionIndex) {
            self.base = base
            view = View(base: base, changes: [:], overlay: SuggestionIndex(terms: []))
        }

        private mutating func publish() {
            view = View(base: base, changes: changes, overlay: overlay)
        }
    }

    private let state: Mutex<State>

    init(terms: [Term]) {
        state = Mutex(State(base: SuggestionIndex(terms: terms)))
    }

    init(base: SuggestionIndex) {
        state = Mutex(State(base: base))
    }

    /// Replaces everything (a full reload).
    func reset(to index: SuggestionIndex) {
        state.withLock { state in
            state.base = index
            state.changes = [:]
            state.overlay = SuggestionIndex(terms: [])
            state.generation += 1
        }
    }

    /// Records a change; returns true when the overlay is due for a rebuild of the base.
    func apply(_ key: TermKey, term: Term?) -> Bool {
        state.withLock { state in
            state.sequence += 1
            state.changes[key] = (term, state.sequence)
            state.overlay = SuggestionIndex(terms: state.changes.values.compactMap(\.term))
            guard state.changes.count > Self.rebuildThreshold, !state.rebuilding else { return false }
            state.rebuilding = true
            return true
        }
    }

    /// The number of the last change and the generation (a rebuild records them before reading the table).
    var position: (sequence: Int, generation: Int) { state.withLock { ($0.sequence, $0.generation) } }

    /// Installs a base built from the table as it was after change `sequence`: the changes up to
    /// it are in the base now and leave the overlay. Ignored when a reset came in between.
    func rebuilt(_ base: SuggestionIndex, through position: (sequence: Int, generation: Int)) {
        let sequence = position.sequence
        state.withLock { state in
            state.rebuilding = false
            guard state.generation == position.generation else { return }
            state.base = base
            state.changes = state.changes.filter { $0.value.sequence > sequence }
            state.overlay = SuggestionIndex(terms: state.changes.values.compactMap(\.term))
        }
    }

    func rebuildFailed() {
        state.withLock { $0.rebuilding = false }
    }

    var isEmpty: Bool {
        state.withLock { state in
            state.base.terms.count - state.changes.values.filter { $0.term == nil }.count <= 0 && state.overlay.terms.isEmpty
        }
    }

    /// Changes waiting in the overlay.
    var pendingChanges: Int { state.withLock { $0.changes.count } }

    /// The terms of the base index (the overlay's changes not counted) and the changes waiting.
    var sizes: (base: Int, pending: Int) { state.withLock { ($0.base.terms.count, $0.changes.count) } }

    /// What a lookup found: the view it read, and its suggestions as term numbers in it.
    struct Lookup: Sendable {
        let view: View
        /// The suggestions, best first. A term number `n` is the base's term `n` when `n >= 0`, and
        /// the overlay's term `-1 - n` otherwise.
        let hits: [SuggestionIndex.Hit]

        /// The index and the term number in it of a hit's `term`.
        func source(of term: Int32) -> (index: SuggestionIndex, term: Int) {
            term >= 0 ? (view.base, Int(term)) : (view.overlay, Int(-1 - term))
        }

        /// The hits as matches, with copies of their terms.
        var matches: [SuggestionIndex.Match] {
            hits.map { hit in
                let (index, term) = source(of: hit.term)
                return SuggestionIndex.Match(term: index.terms[term], wholePrefix: hit.wholePrefix, edits: hit.edits)
            }
        }
    }

    /// The best `limit` matches over the base (without the terms the overlay changed) and the overlay.
    func suggestions(for query: String, limit: Int) -> [SuggestionIndex.Match] {
        lookup(query, limit: limit).matches
    }

    /// ``suggestions(for:limit:)`` as term numbers, without copying any term.
    func lookup(_ query: String, limit: Int) -> Lookup {
        let view = state.withLock { $0.view }
        guard !view.changes.isEmpty else { return Lookup(view: view, hits: view.base.hits(for: query, limit: limit)) }
        let (base, overlay, changes) = (view.base, view.overlay, view.changes)
        let wanted = min(SuggestionIndex.maxLimit, limit + changes.count)
        // Overlay hits take negative numbers (see `Lookup.hits`).
        var merged = base.hits(for: query, limit: wanted).filter { hit in
            let term = base.terms[Int(hit.term)]
            return changes[TermKey(dictionary: term.dictionary, keyword: term.keyword)] == nil
        }
        merged += overlay.hits(for: query, limit: limit).map { SuggestionIndex.Hit(term: -1 - $0.term, wholePrefix: $0.wholePrefix, edits: $0.edits) }
        func term(_ hit: SuggestionIndex.Hit) -> Term { hit.term >= 0 ? base.terms[Int(hit.term)] : overlay.terms[Int(-1 - hit.term)] }
        merged.sort { a, b in
            a.edits != b.edits ? a.edits < b.edits : SuggestionIndex.ranks(term(a), wholePrefix: a.wholePrefix, before: term(b), wholePrefix: b.wholePrefix)
        }
        var seen = Set<SuggestionIndex.ExactText>()
        return Lookup(view: view, hits: Array(merged.filter { seen.insert(SuggestionIndex.ExactText(term($0).keyword)).inserted }.prefix(limit)))
    }
}
