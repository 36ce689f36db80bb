/// The trie nodes of a ``SuggestionIndex`` whose ranges are large, laid out flat: every node's
/// children one after another in one buffer, and likewise its best keys (as ranks, and as what a
/// lookup answers). Walking down the trie then reads adjacent memory rather than three separate
/// objects per node, and reaching a node counts no references (the buffers are raw memory owned
/// here, not arrays read out of a shared object).
final class NodeTable: @unchecked Sendable {
    /// Node `n`'s children are `childList[childStart[n] ..< childStart[n + 1]]`.
    private let childStart: UnsafeMutableBufferPointer<Int32>
    private let childList: UnsafeMutableBufferPointer<SuggestionIndex.Child>
    /// The same children's bytes alone, at the same places: finding a child searches these (a
    /// node's fit a cache line or a few) and then reads just the child found.
    private let childBytes: UnsafeMutableBufferPointer<UInt8>
    /// Node `n`'s best keys are `bestList[bestStart[n] ..< bestStart[n + 1]]` as ranks, and the
    /// same places of `hitList` as a lookup answers them: term number × 2, plus 1 for a
    /// whole-keyword key (read there rather than through the ranking and the key table: two
    /// scattered memory reads fewer per suggestion, which is most of a lookup's cost when other
    /// work has evicted the index from the caches).
    private let bestStart: UnsafeMutableBufferPointer<Int32>
    private let bestList: UnsafeMutableBufferPointer<Int32>
    private let hitList: UnsafeMutableBufferPointer<Int32>
    let count: Int

    init(_ nodes: [SuggestionIndex.Node], table: KeyTable) {
        count = nodes.count
        var childStart: [Int32] = [0]
        var bestStart: [Int32] = [0]
        var children: [SuggestionIndex.Child] = []
        var best: [Int32] = []
        for node in nodes {
            children += node.children
            best += node.best
            childStart.append(Int32(children.count))
            bestStart.append(Int32(best.count))
        }
        let hits = best.map { rank in
            let key = table.keys[Int(table.keyAtRank[Int(rank)])]
            return key.term << 1 | (key.wholePrefix ? 1 : 0)
        }
        func buffer<Element>(_ values: [Element]) -> UnsafeMutableBufferPointer<Element> {
            let buffer = UnsafeMutableBufferPointer<Element>.allocate(capacity: max(1, values.count))
            _ = buffer.initialize(from: values)
            return buffer
        }
        self.childStart = buffer(childStart)
        self.bestStart = buffer(bestStart)
        childList = buffer(children)
        childBytes = buffer(children.map(\.byte))
        bestList = buffer(best)
        hitList = buffer(hits)
    }

    deinit {
        for buffer in [childStart, bestStart, bestList, hitList] { buffer.deallocate() }
        childList.deallocate()
        childBytes.deallocate()
    }

    /// Node `node`'s child for the next byte `byte`, if any.
    @inline(__always)
    func child(of node: Int32, byte: UInt8) -> SuggestionIndex.Child? {
        let start = Int(childStart[Int(node)])
        var low = start
        var high = Int(childStart[Int(node) + 1])
        while low < high {
            let middle = (low + high) / 2
            if childBytes[middle] < byte { low = middle + 1 } else { high = middle }
        }
        return low < Int(childStart[Int(node) + 1]) && childBytes[low] == byte ? childList[low] : nil
    }

    /// Node `node`'s children, by byte.
    @inline(__always)
    func children(of node: Int32) -> UnsafeBufferPointer<SuggestionIndex.Child> {
        slice(childList, childStart, node)
    }

    /// Node `node`'s best keys, as ranks.
    @inline(__always)
    func best(of node: Int32) -> UnsafeBufferPointer<Int32> {
        slice(bestList, bestStart, node)
    }

    /// Node `node`'s best keys as a lookup answers them (term number × 2, plus 1 for a whole keyword).
    @inline(__always)
    func bestHits(of node: Int32) -> UnsafeBufferPointer<Int32> {
        slice(hitList, bestStart, node)
    }

    @inline(__always)
    private func slice<Element>(_ list: UnsafeMutableBufferPointer<Element>, _ starts: UnsafeMutableBufferPointer<Int32>, _ node: Int32) -> UnsafeBufferPointer<Element> {
        let start = Int(starts[Int(node)])
        return UnsafeBufferPointer(start: list.baseAddress! + start, count: Int(starts[Int(node) + 1]) - start)
    }
}
