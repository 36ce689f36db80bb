/// The trie nodes of a ``SuggestionIndex`` whose ranges are large, in flat arrays. A node is known
/// by its number (``SuggestionIndex/Child/node`` holds it; children are numbered before their
/// parent, so the root is the last); its children are a run of `childBytes` (sorted, searched by
/// byte) and the same run of `children`, and its best keys a run of `bestList` and `hitList`.
struct NodeTable: Sendable {
    /// Where a node's runs are.
    struct Header: Sendable {
        var childStart: UInt32
        var childCount: UInt32
        var bestStart: UInt32
        var bestCount: UInt32
    }

    private let headers: [Header]
    private let childBytes: [UInt8]
    private let childList: [SuggestionIndex.Child]
    /// Node best keys as ranks, and the same places as a lookup answers them: term number × 2,
    /// plus 1 for a whole-keyword key.
    private let bestList: [Int32]
    private let hitList: [Int32]
    /// The root (the last node built), or -1 when there is no node.
    let root: Int32

    /// `nodes` as built, children before their parent; a child's `node` is its index in `nodes`.
    init(_ nodes: [SuggestionIndex.Node], table: KeyTable) {
        var headers: [Header] = []
        headers.reserveCapacity(nodes.count)
        var childBytes: [UInt8] = []
        var childList: [SuggestionIndex.Child] = []
        var best: [Int32] = []
        for node in nodes {
            headers.append(Header(childStart: UInt32(childList.count), childCount: UInt32(node.children.count),
                                  bestStart: UInt32(best.count), bestCount: UInt32(node.best.count)))
            childBytes += node.children.map(\.byte)
            childList += node.children
            best += node.best
        }
        self.headers = headers
        self.childBytes = childBytes
        self.childList = childList
        bestList = best
        hitList = best.map { rank in
            let key = table.keys[Int(table.keyAtRank[Int(rank)])]
            return key.term << 1 | (key.wholePrefix ? 1 : 0)
        }
        root = Int32(nodes.count) - 1
    }

    /// Node `node`'s children, by byte.
    func children(of node: Int32) -> ArraySlice<SuggestionIndex.Child> {
        let header = headers[Int(node)]
        return childList[Int(header.childStart)..<Int(header.childStart + header.childCount)]
    }

    /// Node `node`'s child for the next byte `byte`, if any.
    func child(of node: Int32, byte: UInt8) -> SuggestionIndex.Child? {
        let header = headers[Int(node)]
        var low = Int(header.childStart)
        let end = low + Int(header.childCount)
        var high = end
        while low < high {
            let middle = (low + high) / 2
            if childBytes[middle] < byte { low = middle + 1 } else { high = middle }
        }
        guard low < end, childBytes[low] == byte else { return nil }
        return childList[low]
    }

    /// Node `node`'s best keys, as ranks.
    func best(of node: Int32) -> ArraySlice<Int32> {
        let header = headers[Int(node)]
        return bestList[Int(header.bestStart)..<Int(header.bestStart + header.bestCount)]
    }

    /// Node `node`'s best keys as a lookup answers them (term number × 2, plus 1 for a whole keyword).
    func bestHits(of node: Int32) -> ArraySlice<Int32> {
        let header = headers[Int(node)]
        return hitList[Int(header.bestStart)..<Int(header.bestStart + header.bestCount)]
    }
}
