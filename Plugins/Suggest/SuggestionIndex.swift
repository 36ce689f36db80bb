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
        normalizeFastBytes(text).map { String(decoding: $0, as: UTF8.self) } ?? normalizeGeneral(text)
    }

    /// ``normalize(_:)`` as UTF-8 bytes (what the index compares), without a string in between
    /// in the usual case.
    static func normalizedBytes(_ text: String) -> [UInt8] {
        normalizeFastBytes(text) ?? Array(normalizeGeneral(text).utf8)
    }

    /// The general path, through Foundation.
    static func normalizeGeneral(_ text: String) -> String {
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

    /// The same for text of ASCII and CJK unified ideographs only (most keywords and queries),
    /// without Foundation: NFKC leaves both alone (an ideograph has no decomposition, and without
    /// combining marks nothing composes), case folding is ASCII lowercasing, and spaces and
    /// controls (0x00–0x20, 0x7F) separate words. Nil for any other text.
    static func normalizeFast(_ text: String) -> String? {
        normalizeFastBytes(text).map { String(decoding: $0, as: UTF8.self) }
    }

    /// ``normalizeFast(_:)`` as UTF-8 bytes.
    static func normalizeFastBytes(_ text: String) -> [UInt8]? {
        var copy = text
        return copy.withUTF8 { bytes -> [UInt8]? in
            var result: [UInt8] = []
            result.reserveCapacity(bytes.count)
            var pendingSpace = false
            var index = 0
            while index < bytes.count {
                let byte = bytes[index]
                if byte >= 0x80 {
                    // Three-byte UTF-8 (the string is valid): U+3400–U+4DBF and U+4E00–U+9FFF.
                    guard byte >= 0xE3, byte <= 0xE9, index + 2 < bytes.count else { return nil }
                    let scalar = (UInt32(byte & 0x0F) << 12) | (UInt32(bytes[index + 1] & 0x3F) << 6) | UInt32(bytes[index + 2] & 0x3F)
                    guard (0x3400...0x4DBF).contains(scalar) || (0x4E00...0x9FFF).contains(scalar) else { return nil }
                    if pendingSpace {
                        result.append(0x20)
                        pendingSpace = false
                    }
                    result.append(byte)
                    result.append(bytes[index + 1])
                    result.append(bytes[index + 2])
                    index += 3
                    continue
                }
                index += 1
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
            return result
        }
    }
}

/// An immutable prefix index over terms: every term is found by a prefix of its whole keyword
/// (`北` finds `北京大學`) or of any word of it (`jack` finds `Michael Jackson`).
///
/// Keys are normalized UTF-8 bytes, sorted, so the keys matching a prefix are one contiguous range.
/// A lookup finds it by walking the trie nodes down from the root (see below), then by binary
/// search within a small range. The bytes of every key live in one array (a word's key is a slice of its
/// keyword's bytes), so the index holds no object per key. Every key also has a place in one global
/// ranking, computed when the index is built, so ranking candidates is sorting integers.
///
/// A small range is ranked on the spot; every trie node whose range is larger than ``smallRange``
/// keeps its best ``maxLimit`` suggestions and its children, computed bottom-up when the index is
/// built (a node's best are the best of its children's best), so that even a one-letter query
/// costs a lookup, not a scan.
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

    /// A suggestion found by a lookup: the number of its term and how it matched.
    struct Hit: Sendable, Equatable {
        var term: Int32
        var wholePrefix: Bool
        var edits: Int
    }

    /// A key: `length` bytes of ``KeyTable/bytes`` from `start`, the normalized whole keyword of
    /// `term` or the part of it from one of its later words on.
    struct Key: Sendable {
        let start: UInt32
        let length: UInt32
        let term: Int32
        let wholePrefix: Bool
        /// Its term's keyword as a number (see ``KeyTable/keywordAtRank``): ranking a small range
        /// then reads the range's keys alone.
        var keyword: Int32 = 0
    }

    /// A child of a trie node: the next byte, the keys below it, and its node (-1 when its range
    /// is small): the node's number in its ``NodeTable``.
    struct Child: Sendable {
        let byte: UInt8
        let lower: Int32
        let upper: Int32
        var node: Int32 = -1
        var range: Range<Int> { Int(lower)..<Int(upper) }
    }

    /// A trie node with more than ``smallRange`` keys, as built (see ``NodeTable`` for how it is kept).
    struct Node: Sendable {
        /// Its best keys, as ranks (see ``KeyTable/keyAtRank``), one per keyword, at most ``maxLimit``.
        let best: [Int32]
        let children: [Child]
    }

    /// The largest `limit` a lookup serves.
    public static let maxLimit = 50
    /// Ranges up to this many keys are ranked at lookup time.
    public static let smallRange = 64

    public let terms: [Term]
    /// Every term's part of a native reply, ready to copy.
    let termBytes: TermBytes
    let table: KeyTable
    /// The nodes with large ranges.
    private let nodes: NodeTable

    public convenience init(terms: [Term]) {
        self.init(terms: terms, termByteLimit: Int(UInt32.max))
    }

    /// `termByteLimit` bounds the bytes of ``termBytes`` (tests lower it).
    init(terms: [Term], termByteLimit: Int) {
        self.terms = terms
        termBytes = TermBytes(terms: terms, byteLimit: termByteLimit)
        let table = KeyTable(terms: terms)
        var nodes: [Node] = []
        _ = Self.buildNodes(table, range: 0..<table.keys.count, depth: 0, into: &nodes)
        self.table = table
        self.nodes = NodeTable(nodes, table: table)
        // The build's temporary arrays, freed, would otherwise stay resident.
        if terms.count >= 10_000 { IndexMemory.returnFreedMemory() }
    }

    /// Computes the best keys of the node whose keys are `range` (they share their first `depth`
    /// bytes) and, when its range is large, records the node. Children first: a node's best are the best among its own keys (those ending here) and
    /// its children's best. That is exact: a keyword missing from a child's best list is outranked
    /// there by `maxLimit` other keywords, which outrank it here as well.
    private static func buildNodes(_ table: KeyTable, range: Range<Int>, depth: Int, into nodes: inout [Node]) -> (best: [Int32], node: Int32) {
        guard range.count > smallRange else { return (table.best(ofRange: range, limit: maxLimit), -1) }
        var children = table.children(of: range, depth: depth)
        var candidates = (range.lowerBound..<(children.first.map { Int($0.lower) } ?? range.upperBound)).map { table.rankOfKey[$0] }
        for index in children.indices {
            let (best, node) = buildNodes(table, range: children[index].range, depth: depth + 1, into: &nodes)
            candidates += best
            children[index].node = node
        }
        let best = table.ranked(&candidates, limit: maxLimit)
        nodes.append(Node(best: best, children: children))
        return (best, Int32(nodes.count - 1))
    }

    /// The best `limit` matches for `query` (it is normalized here). Exact prefix matches come
    /// first; when they are fewer than `limit`, a Latin query of 4 characters or more also finds
    /// prefixes within one edit (two from 8 characters), ranked after every exact match.
    public func suggestions(for query: String, limit: Int) -> [Match] {
        hits(for: query, limit: limit).map { Match(term: terms[Int($0.term)], wholePrefix: $0.wholePrefix, edits: $0.edits) }
    }

    /// ``suggestions(for:limit:)`` as term numbers, without copying any term.
    func hits(for query: String, limit: Int) -> [Hit] {
        let needle = SuggestNormalizer.normalizedBytes(query)
        guard !needle.isEmpty, limit > 0 else { return [] }
        let limit = min(limit, Self.maxLimit)
        let (range, node) = locate(needle)
        var result: [Hit]
        if node >= 0 {
            result = nodes.bestHits(of: node).prefix(limit).map { Hit(term: $0 >> 1, wholePrefix: $0 & 1 == 1, edits: 0) }
        } else {
            result = table.bestHits(ofRange: range, limit: limit)
        }
        let allowed = needle.count >= 8 ? 2 : (needle.count >= 4 ? 1 : 0)
        guard result.count < limit, allowed > 0, needle.allSatisfy({ $0 < 0x80 }) else { return result }
        var seen = best(range: range, node: node, limit: limit).map { table.keywordAtRank[Int($0)] }
        for (rank, edits) in fuzzyMatches(needle, allowed: allowed, limit: limit) {
            let keyword = table.keywordAtRank[Int(rank)]
            guard !seen.contains(keyword) else { continue }
            seen.append(keyword)
            result.append(hit(rank: rank, edits: edits))
            if result.count == limit { break }
        }
        return result
    }

    private func hit(rank: Int32, edits: Int) -> Hit {
        let key = table.keys[Int(table.keyAtRank[Int(rank)])]
        return Hit(term: key.term, wholePrefix: key.wholePrefix, edits: edits)
    }

    /// The root node, or -1 when every key fits a small range.
    private var root: Int32 { nodes.root }

    /// The keys starting with `prefix`, and their node (-1 when the range is small), found by
    /// walking down from the root: through the nodes' short child lists while the range is
    /// large, then by binary search within the small range. That reads a few cache lines per
    /// byte, where a binary search over all the keys would read two for every probe.
    private func locate(_ prefix: [UInt8]) -> (range: Range<Int>, node: Int32) {
        var range = 0..<table.keys.count
        var node = root
        for (depth, byte) in prefix.enumerated() {
            if node >= 0 {
                guard let child = child(of: node, byte: byte) else { return (range.lowerBound..<range.lowerBound, -1) }
                range = child.range
                node = child.node
            } else {
                range = table.childRange(in: range, depth: depth, byte: byte)
                if range.isEmpty { return (range, -1) }
            }
        }
        return (range, node)
    }

    /// The child of large node `node` for the next byte `byte`, if any.
    private func child(of node: Int32, byte: UInt8) -> Child? {
        nodes.child(of: node, byte: byte)
    }

    /// The best keys (as ranks) of the keys in `range`, whose node is `node` (-1 when small).
    private func best(range: Range<Int>, node: Int32, limit: Int) -> [Int32] {
        if node >= 0 { return Array(nodes.best(of: node).prefix(limit)) }
        return table.best(ofRange: range, limit: limit)
    }

    /// Keys with a prefix within `allowed` edits of `needle` (Damerau–Levenshtein: insertions,
    /// deletions, substitutions and swaps of neighbours), as ranks with their edits, best first.
    ///
    /// The sorted keys are walked as a trie, with one row of the edit-distance table per level,
    /// abandoning every branch whose best distance already exceeds `allowed`. While edits remain,
    /// every child is tried (from the node's list for a large range); once a branch has spent
    /// them all, only the bytes that continue the needle (or complete a swap) can keep it within
    /// `allowed`, and just those children are looked up.
    private func fuzzyMatches(_ query: [UInt8], allowed: Int, limit: Int) -> [(rank: Int32, edits: Int)] {
        let enough = 4 * limit
        var found: [(range: Range<Int>, node: Int32, edits: Int)] = []
        found.reserveCapacity(enough)
        let count = query.count
        let width = count + 1
        // A key deeper than the needle plus the allowed edits can only add edits: that bounds the walk.
        let maxDepth = count + allowed
        // Row d of the edit-distance table lives at rows[d * width ..< (d + 1) * width]; the prefix
        // walked so far in `prefix[0..<depth]`.
        // Raw buffers rather than captured arrays: the nested functions below would otherwise pay
        // an exclusivity check on every access.
        let rows = UnsafeMutableBufferPointer<Int>.allocate(capacity: (maxDepth + 2) * width)
        let prefix = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: maxDepth + 1)
        let needle = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: count)
        _ = needle.initialize(from: query)
        defer {
            rows.deallocate()
            prefix.deallocate()
            needle.deallocate()
        }
        for column in 0..<width { rows[column] = column }
        let table = self.table

        func walk(range: Range<Int>, node: Int32, depth: Int) {
            let row = depth * width
            if rows[row + count] <= allowed {
                found.append((range, node, rows[row + count]))
                return
            }
            guard depth < maxDepth, found.count < enough else { return }
            var smallest = Int.max
            for column in 0..<width { smallest = min(smallest, rows[row + column]) }
            guard smallest <= allowed else { return }
            if smallest < allowed {
                if node >= 0 {
                    for child in nodes.children(of: node) where found.count < enough {
                        descend(byte: child.byte, range: child.range, node: child.node, depth: depth)
                    }
                } else {
                    for child in table.children(of: range, depth: depth) where found.count < enough {
                        descend(byte: child.byte, range: child.range, node: child.node, depth: depth)
                    }
                }
            } else {
                // Every edit is spent: a child stays within `allowed` only by continuing the needle
                // from a column where this row is at `allowed` (and then the rest of the needle
                // must follow byte for byte), or by completing a swap begun at the last byte.
                var wanted = ByteSet()
                // Bytes that need the table's rows: those that start a continuation from two
                // columns, or complete a swap (which may leave edits to spare).
                var tabled = ByteSet()
                for column in 0..<count where rows[row + column] == allowed {
                    if !wanted.insert(needle[column]) { tabled.insert(needle[column]) }
                }
                if depth > 0, count >= 2 {
                    for column in 2...count where needle[column - 1] == prefix[depth - 1] && rows[row - width + column - 2] < allowed {
                        wanted.insert(needle[column - 2])
                        tabled.insert(needle[column - 2])
                    }
                }
                while found.count < enough, let byte = wanted.removeFirst() {
                    if !tabled.contains(byte) {
                        // One continuation: follow the rest of the needle without computing rows.
                        var column = 0
                        while rows[row + column] != allowed || needle[column] != byte { column += 1 }
                        follow(from: column, range: range, node: node, depth: depth)
                    } else if node >= 0 {
                        if let child = child(of: node, byte: byte) { descend(byte: byte, range: child.range, node: child.node, depth: depth) }
                    } else {
                        let child = table.childRange(in: range, depth: depth, byte: byte)
                        if !child.isEmpty { descend(byte: byte, range: child, node: -1, depth: depth) }
                    }
                }
            }
        }

        /// Walks `needle[column...]` exactly down from a branch with every edit spent; the key
        /// prefix reached (if any) is within `allowed` edits, and none on the way was.
        func follow(from column: Int, range: Range<Int>, node: Int32, depth: Int) {
            var range = range
            var node = node
            var depth = depth
            for index in column..<count {
                let byte = needle[index]
                if node >= 0 {
                    guard let child = child(of: node, byte: byte) else { return }
                    range = child.range
                    node = child.node
                } else {
                    range = table.childRange(in: range, depth: depth, byte: byte)
                    if range.isEmpty { return }
                }
                depth += 1
            }
            found.append((range, node, allowed))
        }

        func descend(byte: UInt8, range: Range<Int>, node: Int32, depth: Int) {
            let row = depth * width
            let next = row + width
            let previousRow = row - width
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
            walk(range: range, node: node, depth: depth + 1)
        }

        walk(range: 0..<table.keys.count, node: root, depth: 0)
        // Sorted by edits, then rank, as one integer each.
        var ordered: [Int64] = []
        ordered.reserveCapacity(found.count * limit)
        for entry in found {
            for rank in best(range: entry.range, node: entry.node, limit: limit) { ordered.append(Int64(entry.edits) << 32 | Int64(rank)) }
        }
        ordered.sort()
        return ordered.map { (Int32(truncatingIfNeeded: $0), Int($0 >> 32)) }
    }

    /// ``highlight(_:in:)`` without Foundation, for the common case: query and text of ASCII, CJK
    /// unified ideographs, dashes and curly quotes. No folding Foundation
    /// applies (case, width, diacritics) relates any of these to another, so ASCII lowercasing is
    /// the whole comparison, and every scalar is one character (CR, which joins LF, is excluded).
    /// Nil when it does not apply.
    static func highlightFast(_ query: String, in text: String) -> [[Int]]? {
        switch highlightSpanFast(query, in: text) {
        case .unsupported: nil
        case .none: []
        case .span(let start, let end): [[start, end]]
        }
    }

    /// What ``highlightSpanFast(_:in:)`` found.
    enum FastHighlight: Equatable {
        /// The text or query is outside what the fast path knows.
        case unsupported
        case none
        case span(Int, Int)
    }

    /// Where `query` matches in `text`, as [start, end) character offsets: without an array per
    /// suggestion (this runs for every suggestion served).
    static func highlightSpan(_ query: String, in text: String) -> HighlightSpans {
        switch highlightSpanFast(query, in: text) {
        case .span(let start, let end): .single(start, end)
        case .none: .list([])
        case .unsupported: .list(highlight(query, in: text))
        }
    }

    /// ``highlightFast(_:in:)`` without building arrays.
    static func highlightSpanFast(_ query: String, in text: String) -> FastHighlight {
        withHighlightPattern(query) { pattern in
            guard let pattern else { return .unsupported }
            var text = text
            return text.withUTF8 { highlightSpanFast(pattern: pattern, in: $0) }
        }
    }

    /// Calls `body` with `query` as the fast highlight compares it: its scalars, ASCII lowercased,
    /// without leading and trailing white space (on the stack). Nil when a scalar is outside what
    /// the fast path knows. A reply prepares the pattern once for all its suggestions.
    static func withHighlightPattern<Result>(_ query: String, _ body: (UnsafeBufferPointer<UInt32>?) -> Result) -> Result {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: max(1, query.utf8.count)) { pattern -> Result in
            var query = query
            guard let count = query.withUTF8({ fold($0, into: pattern) }) else { return body(nil) }
            var from = 0
            var to = count
            while from < to, isSpace(pattern[from]) { from += 1 }
            while to > from, isSpace(pattern[to - 1]) { to -= 1 }
            return body(UnsafeBufferPointer(rebasing: pattern[from..<to]))
        }
    }

    /// Where the prepared `pattern` (see ``withHighlightPattern(_:_:)``) first matches in the text
    /// whose UTF-8 is `text`, as [start, end) character offsets.
    static func highlightSpanFast(pattern: UnsafeBufferPointer<UInt32>, in text: UnsafeBufferPointer<UInt8>) -> FastHighlight {
        let length = pattern.count
        // The usual case: the text begins with the query (a suggestion's text mostly begins
        // with its keyword). Only that much of the text is read: wherever the text goes on,
        // the first match is this one, and its offsets count one character per scalar.
        if length > 0, begins(text, with: pattern) { return .span(0, length) }
        return withUnsafeTemporaryAllocation(of: UInt32.self, capacity: max(1, text.count)) { haystack -> FastHighlight in
            guard let count = fold(text, into: haystack) else { return .unsupported }
            guard length > 0, length <= count else { return .none }
            for start in 0...(count - length) {
                var index = 0
                while index < length, haystack[start + index] == pattern[index] { index += 1 }
                if index == length { return .span(start, start + length) }
            }
            return .none
        }
    }

    private static func isIdeograph(_ value: UInt32) -> Bool { (0x4E00...0x9FFF).contains(value) || (0x3400...0x4DBF).contains(value) }
    private static func isInert(_ value: UInt32) -> Bool {
        value == 0x2013 || value == 0x2014 || value == 0x2018 || value == 0x2019 || value == 0x201C || value == 0x201D
    }
    private static func lower(_ value: UInt32) -> UInt32 { value >= 0x41 && value <= 0x5A ? value | 0x20 : value }
    private static func isSpace(_ value: UInt32) -> Bool { value == 0x20 || (0x09...0x0D).contains(value) }

    /// Writes the scalars of the (valid) UTF-8 `utf8`, ASCII lowercased, into `buffer` (at least as
    /// long as the UTF-8) and returns how many; nil when one is outside what the fast path knows.
    private static func fold(_ utf8: UnsafeBufferPointer<UInt8>, into buffer: UnsafeMutableBufferPointer<UInt32>) -> Int? {
        var count = 0
        var index = 0
        while index < utf8.count {
            let lead = UInt32(utf8[index])
            let value: UInt32
            if lead < 0x80 {
                value = lead
                index += 1
            } else if lead < 0xE0 {
                value = (lead & 0x1F) << 6 | UInt32(utf8[index + 1] & 0x3F)
                index += 2
            } else if lead < 0xF0 {
                value = (lead & 0x0F) << 12 | UInt32(utf8[index + 1] & 0x3F) << 6 | UInt32(utf8[index + 2] & 0x3F)
                index += 3
            } else {
                return nil  // beyond the Basic Multilingual Plane: not for the fast path
            }
            guard (value < 0x80 && value != 0x0D) || isIdeograph(value) || isInert(value) else { return nil }
            buffer[count] = lower(value)
            count += 1
        }
        return count
    }

    /// Whether the text's first scalars, each one the fast path knows, are `pattern` (folded).
    private static func begins(_ utf8: UnsafeBufferPointer<UInt8>, with pattern: UnsafeBufferPointer<UInt32>) -> Bool {
        var index = 0
        for expected in pattern {
            guard index < utf8.count else { return false }
            let lead = UInt32(utf8[index])
            let value: UInt32
            if lead < 0x80 {
                value = lead
                index += 1
            } else if lead >= 0xE0 && lead < 0xF0 {
                guard index + 2 < utf8.count else { return false }
                value = (lead & 0x0F) << 12 | UInt32(utf8[index + 1] & 0x3F) << 6 | UInt32(utf8[index + 2] & 0x3F)
                index += 3
            } else {
                return false  // two-byte scalars are none the fast path knows; four-byte ones are beyond it
            }
            guard lower(value) == expected, (value < 0x80 && value != 0x0D) || isIdeograph(value) || isInert(value) else { return false }
        }
        return true
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
        ranks(a.term, wholePrefix: a.wholePrefix, before: b.term, wholePrefix: b.wholePrefix)
    }

    /// The ranking of suggestions: weight, then whole-keyword before word matches, then shorter, then alphabetically.
    static func ranks(_ a: Term, wholePrefix aWhole: Bool, before b: Term, wholePrefix bWhole: Bool) -> Bool {
        if a.weight != b.weight { return a.weight > b.weight }
        if aWhole != bWhole { return aWhole }
        // Lengths in Unicode scalars and order by code points: as good a tie-break as characters and
        // Unicode collation, and far cheaper for CJK text (this runs for every comparison of a sort).
        let lengthA = a.keyword.unicodeScalars.count
        let lengthB = b.keyword.unicodeScalars.count
        if lengthA != lengthB { return lengthA < lengthB }
        return a.keyword.utf8.lexicographicallyPrecedes(b.keyword.utf8)
    }

    /// Where `query` matches in `text`, as [start, end) character offsets, for highlighting.
    public static func highlight(_ query: String, in text: String) -> [[Int]] {
        if let span = highlightFast(query, in: text) { return span }
        let trimmed = query.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, let range = text.range(of: trimmed, options: [.caseInsensitive, .widthInsensitive, .diacriticInsensitive]) else {
            return []
        }
        let start = text.distance(from: text.startIndex, to: range.lowerBound)
        return [[start, start + text.distance(from: range.lowerBound, to: range.upperBound)]]
    }
}

/// A set of bytes as 256 bits: no allocation, and taken out in ascending order.
struct ByteSet {
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    /// Adds `byte`; false when it was already there.
    @discardableResult
    mutating func insert(_ byte: UInt8) -> Bool {
        let bit = UInt64(1) << (byte & 63)
        let present = contains(byte)
        switch byte >> 6 {
        case 0: words.0 |= bit
        case 1: words.1 |= bit
        case 2: words.2 |= bit
        default: words.3 |= bit
        }
        return !present
    }

    func contains(_ byte: UInt8) -> Bool {
        let bit = UInt64(1) << (byte & 63)
        switch byte >> 6 {
        case 0: return words.0 & bit != 0
        case 1: return words.1 & bit != 0
        case 2: return words.2 & bit != 0
        default: return words.3 & bit != 0
        }
    }

    /// Removes and returns the smallest byte, or nil when the set is empty.
    mutating func removeFirst() -> UInt8? {
        if words.0 != 0 { let bit = words.0.trailingZeroBitCount; words.0 &= words.0 - 1; return UInt8(bit) }
        if words.1 != 0 { let bit = words.1.trailingZeroBitCount; words.1 &= words.1 - 1; return UInt8(64 + bit) }
        if words.2 != 0 { let bit = words.2.trailingZeroBitCount; words.2 &= words.2 - 1; return UInt8(128 + bit) }
        if words.3 != 0 { let bit = words.3.trailingZeroBitCount; words.3 &= words.3 - 1; return UInt8(192 + bit) }
        return nil
    }
}

/// The highlight of one suggestion: `[[start, end]]` pairs of character offsets. One pair (or
/// none) is the usual case and needs no array.
enum HighlightSpans: Sendable, Equatable {
    case single(Int, Int)
    case list([[Int]])

    init(_ spans: [[Int]]) {
        if spans.count == 1, spans[0].count == 2 { self = .single(spans[0][0], spans[0][1]) } else { self = .list(spans) }
    }

    var pairs: [[Int]] {
        switch self {
        case .single(let start, let end): [[start, end]]
        case .list(let list): list
        }
    }
}
