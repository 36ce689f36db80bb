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
        if let ascii = normalizeASCII(text) { return ascii }
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

    /// The same for ASCII text, without Foundation: NFKC leaves ASCII alone and case folding is
    /// lowercasing; spaces and controls (0x00–0x20, 0x7F) separate words. Nil for other text.
    static func normalizeASCII(_ text: String) -> String? {
        var copy = text
        return copy.withUTF8 { bytes -> String? in
            var result: [UInt8] = []
            result.reserveCapacity(bytes.count)
            var pendingSpace = false
            for byte in bytes {
                guard byte < 0x80 else { return nil }
                if byte <= 0x20 || byte == 0x7F {
                    pendingSpace = !result.isEmpty
                    continue
                }
                if pendingSpace {
                    result.append(0x20)
                    pendingSpace = false
                }
                result.append(byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte)
            }
            return String(decoding: result, as: UTF8.self)
        }
    }
}

/// An immutable prefix index over terms: every term is found by a prefix of its whole keyword
/// (`北` finds `北京大學`) or of any word of it (`jack` finds `Michael Jackson`).
///
/// Keys are normalized UTF-8 bytes in one sorted array, so the keys matching a prefix are one
/// contiguous range found by binary search. A small range is ranked on the spot; for every prefix
/// whose range is larger than ``smallRange``, the best ``maxLimit`` suggestions are computed when
/// the index is built, so that even a one-letter query costs a lookup, not a scan.
///
/// Results rank by weight, then whole-keyword before word matches, then shorter keywords, then
/// alphabetically; the same keyword from several dictionaries is given once.
public final class SuggestionIndex: Sendable {
    /// A suggestion and how it matched.
    public struct Match: Sendable, Equatable {
        public var term: Term
        /// Whether the query is a prefix of the whole keyword (rather than of a later word).
        public var wholePrefix: Bool
        /// Edits between the query and the matched prefix (0 for an exact prefix).
        public var edits: Int = 0

        public init(term: Term, wholePrefix: Bool, edits: Int = 0) {
            self.term = term
            self.wholePrefix = wholePrefix
            self.edits = edits
        }
    }

    struct Key: Sendable {
        let bytes: [UInt8]
        let term: Int32
        let wholePrefix: Bool
    }

    /// The largest `limit` a lookup serves.
    public static let maxLimit = 50
    /// Ranges up to this many keys are ranked at lookup time.
    public static let smallRange = 64

    public let terms: [Term]
    let keys: [Key]
    /// The best matches of every prefix with a large range, by prefix bytes.
    private let precomputed: [[UInt8]: [Match]]

    public init(terms: [Term]) {
        self.terms = terms
        var keys: [Key] = []
        keys.reserveCapacity(terms.count * 2)
        for (index, term) in terms.enumerated() {
            let normalized = SuggestNormalizer.normalize(term.keyword)
            guard !normalized.isEmpty else { continue }
            let bytes = Array(normalized.utf8)
            keys.append(Key(bytes: bytes, term: Int32(index), wholePrefix: true))
            for (offset, byte) in bytes.enumerated() where byte == UInt8(ascii: " ") && offset + 1 < bytes.count {
                keys.append(Key(bytes: Array(bytes[(offset + 1)...]), term: Int32(index), wholePrefix: false))
            }
        }
        keys.sort { $0.bytes.lexicographicallyPrecedes($1.bytes) }
        self.keys = keys
        var table: [[UInt8]: [Match]] = [:]
        Self.precompute(keys: keys, terms: terms, range: 0..<keys.count, depth: 0, prefix: [], into: &table)
        self.precomputed = table
    }

    /// Walks the sorted keys as a trie: each large range gets its best matches, then is split by
    /// the next byte.
    private static func precompute(keys: [Key], terms: [Term], range: Range<Int>, depth: Int, prefix: [UInt8],
                                   into table: inout [[UInt8]: [Match]]) {
        guard range.count > smallRange else { return }
        if depth > 0 { table[prefix] = best(keys[range], terms: terms, limit: maxLimit) }
        for (byte, child) in children(of: range, depth: depth, in: keys) {
            precompute(keys: keys, terms: terms, range: child, depth: depth + 1, prefix: prefix + [byte], into: &table)
        }
    }

    /// The children of a trie node: the keys of `range` share their first `depth` bytes, and each
    /// child is the contiguous run sharing the next byte. Keys that end at `depth` sort first and
    /// belong to no child. Each run's end is found by binary search, not a scan.
    private static func children(of range: Range<Int>, depth: Int, in keys: [Key]) -> [(byte: UInt8, range: Range<Int>)] {
        var result: [(byte: UInt8, range: Range<Int>)] = []
        var start = firstChild(of: range, depth: depth, in: keys)
        while start < range.upperBound {
            let end = childEnd(from: start, in: range, depth: depth, keys: keys)
            result.append((keys[start].bytes[depth], start..<end))
            start = end
        }
        return result
    }

    /// Where the first child of a trie node begins: keys ending at `depth` sort first and belong to none.
    static func firstChild(of range: Range<Int>, depth: Int, in keys: [Key]) -> Int {
        var start = range.lowerBound
        while start < range.upperBound, keys[start].bytes.count <= depth { start += 1 }
        return start
    }

    /// Where the child starting at `start` ends: the run of keys sharing its byte at `depth`, found
    /// by binary search.
    static func childEnd(from start: Int, in range: Range<Int>, depth: Int, keys: [Key]) -> Int {
        let byte = keys[start].bytes[depth]
        var low = start + 1
        var high = range.upperBound
        while low < high {
            let middle = (low + high) / 2
            if keys[middle].bytes[depth] == byte { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The best `limit` distinct keywords among `candidates`.
    private static func best(_ candidates: ArraySlice<Key>, terms: [Term], limit: Int) -> [Match] {
        var bestByKeyword: [ExactText: Match] = [:]
        for key in candidates {
            let candidate = Match(term: terms[Int(key.term)], wholePrefix: key.wholePrefix)
            let keyword = ExactText(candidate.term.keyword)
            if let existing = bestByKeyword[keyword], !ranks(candidate, before: existing) { continue }
            bestByKeyword[keyword] = candidate
        }
        return Array(bestByKeyword.values.sorted(by: ranks).prefix(limit))
    }

    /// The best `limit` matches for `query` (it is normalized here). Exact prefix matches come
    /// first; when they are fewer than `limit`, a Latin query of 4 characters or more also finds
    /// prefixes within one edit (two from 8 characters), ranked after every exact match.
    public func suggestions(for query: String, limit: Int) -> [Match] {
        let needle = Array(SuggestNormalizer.normalize(query).utf8)
        guard !needle.isEmpty, limit > 0 else { return [] }
        let limit = min(limit, Self.maxLimit)
        let exact = matches(prefix: needle, limit: limit)
        let allowed = needle.count >= 8 ? 2 : (needle.count >= 4 ? 1 : 0)
        guard exact.count < limit, allowed > 0, needle.allSatisfy({ $0 < 0x80 }) else { return exact }
        var result = exact
        var seen = Set(exact.map { ExactText($0.term.keyword) })
        for fuzzy in fuzzyMatches(needle, allowed: allowed, limit: limit) where !seen.contains(ExactText(fuzzy.term.keyword)) {
            seen.insert(ExactText(fuzzy.term.keyword))
            result.append(fuzzy)
            if result.count == limit { break }
        }
        return result
    }

    /// The best matches of the keys starting with `prefix`.
    private func matches(prefix: [UInt8], limit: Int) -> [Match] {
        let lower = lowerBound(prefix)
        var upper = lower
        // Count the range only as far as "small" reaches; beyond, the precomputed answer holds.
        while upper < keys.count, upper - lower <= Self.smallRange, keys[upper].bytes.starts(with: prefix) { upper += 1 }
        if upper - lower > Self.smallRange, let answer = precomputed[prefix] {
            return Array(answer.prefix(limit))
        }
        return Self.best(keys[lower..<upper], terms: terms, limit: limit)
    }

    /// Keys with a prefix within `allowed` edits of `needle` (Damerau–Levenshtein: insertions,
    /// deletions, substitutions and swaps of neighbours), found by walking the sorted keys as a
    /// trie and abandoning every branch whose best distance already exceeds `allowed`.
    private func fuzzyMatches(_ needle: [UInt8], allowed: Int, limit: Int) -> [Match] {
        var found: [(prefix: [UInt8], edits: Int)] = []
        let width = needle.count + 1
        // A key deeper than the needle plus the allowed edits can only add edits: that bounds the walk.
        let maxDepth = needle.count + allowed
        // Row d of the edit-distance table lives at rows[d * width ..< (d + 1) * width]; the prefix
        // walked so far in `prefix[0..<depth]`. Nothing is allocated per trie node.
        var rows = [Int](repeating: 0, count: (maxDepth + 2) * width)
        var prefix = [UInt8](repeating: 0, count: maxDepth + 1)
        for column in 0..<width { rows[column] = column }
        let keys = self.keys
        func walk(range: Range<Int>, depth: Int) {
            let row = depth * width
            if rows[row + needle.count] <= allowed {
                found.append((Array(prefix[0..<depth]), rows[row + needle.count]))
                return
            }
            guard depth < maxDepth, found.count < 4 * limit else { return }
            var smallest = Int.max
            for column in 0..<width { smallest = min(smallest, rows[row + column]) }
            guard smallest <= allowed else { return }
            let next = row + width
            let previousRow = row - width
            // The children: runs of keys sharing the next byte (keys ending here sort first).
            var start = Self.firstChild(of: range, depth: depth, in: keys)
            while start < range.upperBound, found.count < 4 * limit {
                let byte = keys[start].bytes[depth]
                let low = Self.childEnd(from: start, in: range, depth: depth, keys: keys)
                rows[next] = depth + 1
                for column in 1..<width {
                    let cost = needle[column - 1] == byte ? 0 : 1
                    var value = min(rows[row + column] + 1, rows[next + column - 1] + 1, rows[row + column - 1] + cost)
                    if depth > 0, column > 1, needle[column - 1] == prefix[depth - 1], needle[column - 2] == byte {
                        value = min(value, rows[previousRow + column - 2] + 1)
                    }
                    rows[next + column] = value
                }
                prefix[depth] = byte
                walk(range: start..<low, depth: depth + 1)
                start = low
            }
        }
        walk(range: 0..<keys.count, depth: 0)
        var results: [Match] = []
        for (prefix, edits) in found.sorted(by: { $0.edits < $1.edits }) {
            for var match in matches(prefix: prefix, limit: limit) {
                match.edits = edits
                results.append(match)
            }
        }
        return results.sorted { a, b in a.edits != b.edits ? a.edits < b.edits : Self.ranks(a, before: b) }
    }

    private func lowerBound(_ needle: [UInt8]) -> Int {
        var low = 0
        var high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if keys[middle].bytes.lexicographicallyPrecedes(needle) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// ``highlight(_:in:)`` for ASCII query and text (no `\r`, so that characters are bytes), without
    /// Foundation; nil when it does not apply.
    static func highlightASCII(_ query: String, in text: String) -> [[Int]]? {
        let needle = Array(query.utf8)
        let haystack = Array(text.utf8)
        guard needle.allSatisfy({ $0 < 0x80 }), haystack.allSatisfy({ $0 < 0x80 && $0 != 0x0D }) else { return nil }
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
        func lower(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
        var from = 0
        var to = needle.count
        while from < to, isSpace(needle[from]) { from += 1 }
        while to > from, isSpace(needle[to - 1]) { to -= 1 }
        let pattern = needle[from..<to].map(lower)
        guard !pattern.isEmpty, pattern.count <= haystack.count else { return [] }
        for start in 0...(haystack.count - pattern.count) {
            var index = 0
            while index < pattern.count, lower(haystack[start + index]) == pattern[index] { index += 1 }
            if index == pattern.count { return [[start, start + pattern.count]] }
        }
        return []
    }

    /// A string compared and hashed by its UTF-8 bytes: `String`'s own hashing and equality
    /// normalize non-ASCII text first, which costs more than the whole lookup of a CJK prefix.
    struct ExactText: Hashable {
        let text: String
        init(_ text: String) { self.text = text }
        static func == (lhs: ExactText, rhs: ExactText) -> Bool { lhs.text.utf8.elementsEqual(rhs.text.utf8) }
        func hash(into hasher: inout Hasher) {
            var copy = text
            copy.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        }
    }

    static func ranks(_ a: Match, before b: Match) -> Bool {
        if a.term.weight != b.term.weight { return a.term.weight > b.term.weight }
        if a.wholePrefix != b.wholePrefix { return a.wholePrefix }
        // Lengths in Unicode scalars and order by code points: as good a tie-break as characters and
        // Unicode collation, and far cheaper for CJK text (this runs for every comparison of a sort).
        let lengthA = a.term.keyword.unicodeScalars.count
        let lengthB = b.term.keyword.unicodeScalars.count
        if lengthA != lengthB { return lengthA < lengthB }
        return a.term.keyword.utf8.lexicographicallyPrecedes(b.term.keyword.utf8)
    }

    /// Where `query` matches in `text`, as [start, end) character offsets, for highlighting.
    public static func highlight(_ query: String, in text: String) -> [[Int]] {
        if let span = highlightASCII(query, in: text) { return span }
        let trimmed = query.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, let range = text.range(of: trimmed, options: [.caseInsensitive, .widthInsensitive, .diacriticInsensitive]) else {
            return []
        }
        let start = text.distance(from: text.startIndex, to: range.lowerBound)
        return [[start, start + text.distance(from: range.lowerBound, to: range.upperBound)]]
    }
}
