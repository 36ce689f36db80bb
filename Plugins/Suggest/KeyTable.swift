import Foundation

/// The sorted keys of a ``SuggestionIndex``, their bytes, and their ranking.
struct KeyTable: Sendable {
    /// The keys, sorted by their bytes.
    let keys: [SuggestionIndex.Key]
    /// The normalized keywords, one after another; every key is a slice of it.
    let bytes: [UInt8]
    /// Per key, its place in the ranking of all keys (0 is the best).
    let rankOfKey: [Int32]
    /// Per place in the ranking, the key.
    let keyAtRank: [Int32]
    /// Per place in the ranking, the keyword of its key's term as a number: equal for equal
    /// keywords, and ordered as the keywords' UTF-8 bytes are.
    let keywordAtRank: [Int32]
    /// Per key, its first ``headBytes`` bytes (the first in the highest byte, zeros past its end)
    /// and, in the lowest byte, its length (at most 255). A binary search over a small range
    /// near the top of the trie then reads one array, where neighbouring keys lie together,
    /// rather than each probed key and then its bytes elsewhere in memory.
    let heads: [UInt64]
    /// How many leading bytes ``heads`` holds.
    static let headBytes = 7

    init(terms: [Term]) {
        var bytes: [UInt8] = []
        var keys: [SuggestionIndex.Key] = []
        keys.reserveCapacity(terms.count * 2)
        for (index, term) in terms.enumerated() {
            let normalized = SuggestNormalizer.normalizedBytes(term.keyword)
            guard !normalized.isEmpty else { continue }
            let start = bytes.count
            bytes.append(contentsOf: normalized)
            let end = bytes.count
            keys.append(.init(start: UInt32(start), length: UInt32(end - start), term: Int32(index), wholePrefix: true))
            for offset in start..<(end - 1) where bytes[offset] == 0x20 {
                keys.append(.init(start: UInt32(offset + 1), length: UInt32(end - offset - 1), term: Int32(index), wholePrefix: false))
            }
        }
        bytes.withUnsafeBufferPointer { buffer in
            keys.sort { a, b in
                Self.compare(buffer, Int(a.start), Int(a.length), buffer, Int(b.start), Int(b.length)) < 0
            }
        }

        // Keywords as numbers: sort the terms by their keyword's UTF-8 bytes and count distinct ones.
        var keywordBytes: [UInt8] = []
        var keywordSpans: [(start: Int, length: Int)] = []
        keywordSpans.reserveCapacity(terms.count)
        for term in terms {
            let start = keywordBytes.count
            keywordBytes.append(contentsOf: term.keyword.utf8)
            keywordSpans.append((start, keywordBytes.count - start))
        }
        var byKeyword = Array(0..<Int32(terms.count))
        var keywordOfTerm = [Int32](repeating: 0, count: terms.count)
        keywordBytes.withUnsafeBufferPointer { buffer in
            byKeyword.sort { a, b in
                let x = keywordSpans[Int(a)], y = keywordSpans[Int(b)]
                let order = Self.compare(buffer, x.start, x.length, buffer, y.start, y.length)
                return order != 0 ? order < 0 : a < b
            }
            var number: Int32 = 0
            for (position, term) in byKeyword.enumerated() {
                if position > 0 {
                    let x = keywordSpans[Int(byKeyword[position - 1])], y = keywordSpans[Int(term)]
                    if Self.compare(buffer, x.start, x.length, buffer, y.start, y.length) != 0 { number += 1 }
                }
                keywordOfTerm[Int(term)] = number
            }
        }

        // The ranking: weight, then whole keyword before word, then fewer characters, then the
        // keyword's bytes, then the term's position (so that it is a total order).
        let weights = terms.map { $0.weight.isNaN ? -Double.infinity : $0.weight }
        let lengths = terms.map { Int32(clamping: $0.keyword.unicodeScalars.count) }
        var keyAtRank = Array(0..<Int32(keys.count))
        keyAtRank.sort { a, b in
            let x = keys[Int(a)], y = keys[Int(b)]
            let termX = Int(x.term), termY = Int(y.term)
            if weights[termX] != weights[termY] { return weights[termX] > weights[termY] }
            if x.wholePrefix != y.wholePrefix { return x.wholePrefix }
            if lengths[termX] != lengths[termY] { return lengths[termX] < lengths[termY] }
            if keywordOfTerm[termX] != keywordOfTerm[termY] { return keywordOfTerm[termX] < keywordOfTerm[termY] }
            return termX != termY ? termX < termY : a < b
        }
        var rankOfKey = [Int32](repeating: 0, count: keys.count)
        for (rank, key) in keyAtRank.enumerated() { rankOfKey[Int(key)] = Int32(rank) }
        self.keywordAtRank = keyAtRank.map { keywordOfTerm[Int(keys[Int($0)].term)] }
        for index in keys.indices { keys[index].keyword = keywordOfTerm[Int(keys[index].term)] }
        self.heads = keys.map { key in
            var head = UInt64(min(key.length, 255))
            for depth in 0..<min(Int(key.length), Self.headBytes) {
                head |= UInt64(bytes[Int(key.start) + depth]) << (56 - 8 * depth)
            }
            return head
        }
        self.keys = keys
        self.bytes = bytes
        self.rankOfKey = rankOfKey
        self.keyAtRank = keyAtRank
    }

    /// Three-way comparison of two byte strings (shorter first when one is a prefix of the other).
    static func compare(_ a: UnsafeBufferPointer<UInt8>, _ aStart: Int, _ aLength: Int,
                        _ b: UnsafeBufferPointer<UInt8>, _ bStart: Int, _ bLength: Int) -> Int {
        let common = min(aLength, bLength)
        if common > 0 {
            let order = memcmp(a.baseAddress! + aStart, b.baseAddress! + bStart, common)
            if order != 0 { return Int(order) }
        }
        return aLength - bLength
    }

    /// The byte of key `index` at `depth`, or -1 when the key is shorter.
    func byte(_ index: Int, at depth: Int) -> Int {
        if depth < Self.headBytes {
            let head = heads[index]
            return depth < Int(head & 0xFF) ? Int(truncatingIfNeeded: (head >> UInt64(56 - 8 * depth)) & 0xFF) : -1
        }
        let key = keys[index]
        return depth < Int(key.length) ? Int(bytes[Int(key.start) + depth]) : -1
    }

    /// The keys of `range` (which share their first `depth` bytes) whose byte at `depth` is `byte`.
    func childRange(in range: Range<Int>, depth: Int, byte target: UInt8) -> Range<Int> {
        let value = Int(target)
        if depth < Self.headBytes {
            let shift = UInt64(56 - 8 * depth)
            let heads = heads
            return Self.run(of: value, in: range) { index in
                let head = heads[index]
                return depth < Int(head & 0xFF) ? Int(truncatingIfNeeded: (head >> shift) & 0xFF) : -1
            }
        }
        let (keys, bytes) = (keys, bytes)
        return Self.run(of: value, in: range) { index in
            let key = keys[index]
            return depth < Int(key.length) ? Int(bytes[Int(key.start) + depth]) : -1
        }
    }

    /// The run of `range` whose `byte` is `value`, by two binary searches (`byte` is sorted over `range`).
    private static func run(of value: Int, in range: Range<Int>, byte: (Int) -> Int) -> Range<Int> {
        var low = range.lowerBound
        var high = range.upperBound
        while low < high {
            let middle = (low + high) / 2
            if byte(middle) < value { low = middle + 1 } else { high = middle }
        }
        var end = low
        high = range.upperBound
        while end < high {
            let middle = (end + high) / 2
            if byte(middle) <= value { end = middle + 1 } else { high = middle }
        }
        return low..<end
    }

    /// The children of the trie node whose keys are `range` (they share their first `depth`
    /// bytes): runs of keys sharing the next byte. Keys ending at `depth` sort first and belong to
    /// no child. Each run's end is found by binary search.
    func children(of range: Range<Int>, depth: Int) -> [SuggestionIndex.Child] {
        var result: [SuggestionIndex.Child] = []
        var start = range.lowerBound
        while start < range.upperBound, byte(start, at: depth) < 0 { start += 1 }
        while start < range.upperBound {
            let value = byte(start, at: depth)
            var low = start + 1
            var high = range.upperBound
            while low < high {
                let middle = (low + high) / 2
                if byte(middle, at: depth) == value { low = middle + 1 } else { high = middle }
            }
            result.append(.init(byte: UInt8(value), lower: Int32(start), upper: Int32(low)))
            start = low
        }
        return result
    }

    /// The best `limit` keys of `range`, as ranks, one per keyword.
    func best(ofRange range: Range<Int>, limit: Int) -> [Int32] {
        // The ranks are sorted in a temporary buffer (on the stack for the small ranges lookups
        // rank): only the result is an array.
        withUnsafeTemporaryAllocation(of: Int32.self, capacity: max(1, range.count)) { buffer in
            var count = 0
            for key in range {
                buffer[count] = rankOfKey[key]
                count += 1
            }
            var ranks = UnsafeMutableBufferPointer(rebasing: buffer[..<count])
            ranks.sort()
            return firstPerKeyword(UnsafeBufferPointer(ranks), limit: limit)
        }
    }

    /// ``best(ofRange:limit:)`` as a lookup's hits, for a small range: everything is read from
    /// the range's keys and ranks, which lie together, rather than from scattered places per
    /// candidate (what a lookup mostly waits for when the index is not in the caches).
    func bestHits(ofRange range: Range<Int>, limit: Int) -> [SuggestionIndex.Hit] {
        // Each candidate as its rank and key, in one integer, sorted by rank.
        withUnsafeTemporaryAllocation(of: Int64.self, capacity: max(1, range.count)) { buffer in
            var count = 0
            for key in range {
                buffer[count] = Int64(rankOfKey[key]) << 32 | Int64(key)
                count += 1
            }
            var candidates = UnsafeMutableBufferPointer(rebasing: buffer[..<count])
            candidates.sort()
            var result: [SuggestionIndex.Hit] = []
            result.reserveCapacity(min(limit, count))
            var keywords: [Int32] = []
            keywords.reserveCapacity(min(limit, count))
            for candidate in candidates {
                let key = keys[Int(candidate & 0xFFFF_FFFF)]
                guard !keywords.contains(key.keyword) else { continue }
                keywords.append(key.keyword)
                result.append(.init(term: key.term, wholePrefix: key.wholePrefix, edits: 0))
                if result.count == limit { break }
            }
            return result
        }
    }

    /// The best `limit` of `ranks`, one per keyword (each keyword's best).
    func ranked(_ ranks: inout [Int32], limit: Int) -> [Int32] {
        ranks.sort()
        return ranks.withUnsafeBufferPointer { firstPerKeyword($0, limit: limit) }
    }

    /// The first `limit` of the sorted `ranks` whose keyword is not among those taken before.
    private func firstPerKeyword(_ ranks: UnsafeBufferPointer<Int32>, limit: Int) -> [Int32] {
        var result: [Int32] = []
        result.reserveCapacity(min(limit, ranks.count))
        for rank in ranks {
            let keyword = keywordAtRank[Int(rank)]
            guard !result.contains(where: { keywordAtRank[Int($0)] == keyword }) else { continue }
            result.append(rank)
            if result.count == limit { break }
        }
        return result
    }
}
