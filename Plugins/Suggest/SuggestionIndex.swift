import Foundation

/// One suggestion: what to search for, what to show, and how popular it is.
public struct Term: Sendable, Equatable, Codable {
    public var dictionary: String
    public var keyword: String
    public var text: String
    public var weight: Double

    public init(dictionary: String, keyword: String, text: String, weight: Double) {
        self.dictionary = dictionary
        self.keyword = keyword
        self.text = text
        self.weight = weight
    }
}

/// The normal form queries and terms are compared in: Unicode NFKC (so full-width letters and
/// digits become ASCII), case-folded, trimmed, inner runs of white space collapsed to one space.
public enum SuggestNormalizer {
    public static func normalize(_ text: String) -> String {
        let folded = text.precomposedStringWithCompatibilityMapping.folding(options: [.caseInsensitive], locale: nil)
        var result = ""
        result.reserveCapacity(folded.utf8.count)
        var pendingSpace = false
        for scalar in folded.unicodeScalars {
            if CharacterSet.whitespacesAndNewlines.contains(scalar) || CharacterSet.controlCharacters.contains(scalar) {
                pendingSpace = !result.isEmpty
                continue
            }
            if pendingSpace {
                result.unicodeScalars.append(" ")
                pendingSpace = false
            }
            result.unicodeScalars.append(scalar)
        }
        return result
    }
}

/// An immutable prefix index over terms: every term is found by a prefix of its whole keyword
/// (`北` finds `北京大學`) or of any word of it (`jack` finds `Michael Jackson`).
///
/// Keys are normalized UTF-8 bytes in one sorted array, so a lookup is a binary search and a scan
/// of the matching range. Results rank by weight, then whole-keyword before word matches, then
/// shorter keywords; the same keyword from several dictionaries is given once.
public final class SuggestionIndex: Sendable {
    /// A suggestion with the part of its text that matched.
    public struct Match: Sendable, Equatable {
        public var term: Term
        /// Whether the query is a prefix of the whole keyword (rather than of a later word).
        public var wholePrefix: Bool
    }

    private struct Key: Sendable {
        let bytes: [UInt8]
        let term: Int32
        let wholePrefix: Bool
    }

    public let terms: [Term]
    private let keys: [Key]
    /// The most candidates one lookup examines: bounds the cost of one-letter queries.
    public static let scanLimit = 20_000

    public init(terms: [Term]) {
        self.terms = terms
        var keys: [Key] = []
        keys.reserveCapacity(terms.count * 2)
        for (index, term) in terms.enumerated() {
            let normalized = SuggestNormalizer.normalize(term.keyword)
            guard !normalized.isEmpty else { continue }
            keys.append(Key(bytes: Array(normalized.utf8), term: Int32(index), wholePrefix: true))
            var offset = 0
            for word in normalized.split(separator: " ").dropFirst() {
                offset = normalized.utf8.distance(from: normalized.utf8.startIndex, to: word.utf8.startIndex)
                keys.append(Key(bytes: Array(normalized.utf8.dropFirst(offset)), term: Int32(index), wholePrefix: false))
            }
            _ = offset
        }
        keys.sort { $0.bytes.lexicographicallyPrecedes($1.bytes) }
        self.keys = keys
    }

    /// The best `limit` matches for `query` (already trimmed or not; it is normalized here).
    public func suggestions(for query: String, limit: Int) -> [Match] {
        let needle = Array(SuggestNormalizer.normalize(query).utf8)
        guard !needle.isEmpty, limit > 0 else { return [] }
        var low = 0
        var high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if keys[middle].bytes.lexicographicallyPrecedes(needle) { low = middle + 1 } else { high = middle }
        }
        var best: [String: Match] = [:]
        var index = low
        var scanned = 0
        while index < keys.count, scanned < Self.scanLimit, keys[index].bytes.starts(with: needle) {
            let key = keys[index]
            let term = terms[Int(key.term)]
            let candidate = Match(term: term, wholePrefix: key.wholePrefix)
            if let existing = best[term.keyword] {
                if Self.ranks(candidate, before: existing) { best[term.keyword] = candidate }
            } else {
                best[term.keyword] = candidate
            }
            index += 1
            scanned += 1
        }
        return Array(best.values.sorted(by: Self.ranks).prefix(limit))
    }

    static func ranks(_ a: Match, before b: Match) -> Bool {
        if a.term.weight != b.term.weight { return a.term.weight > b.term.weight }
        if a.wholePrefix != b.wholePrefix { return a.wholePrefix }
        if a.term.keyword.count != b.term.keyword.count { return a.term.keyword.count < b.term.keyword.count }
        return a.term.keyword < b.term.keyword
    }

    /// Where `query` matches in `text`, as [start, end) character offsets, for highlighting.
    public static func highlight(_ query: String, in text: String) -> [[Int]] {
        let trimmed = query.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, let range = text.range(of: trimmed, options: [.caseInsensitive, .widthInsensitive, .diacriticInsensitive]) else {
            return []
        }
        let start = text.distance(from: text.startIndex, to: range.lowerBound)
        return [[start, start + text.distance(from: range.lowerBound, to: range.upperBound)]]
    }
}
