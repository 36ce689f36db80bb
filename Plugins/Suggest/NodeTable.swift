/// The trie nodes of a ``SuggestionIndex`` whose ranges are large, laid out flat in one raw buffer.
/// A node is known by where its record starts (``SuggestionIndex/Child/node`` holds that), and a
/// record is its header, its children's bytes, then its children:
///
///     +0   UInt32  number of children
///     +4   UInt32  where its best keys start in `bestList` and `hitList`
///     +8   UInt32  how many best keys it has
///     +12  UInt8 × children: each child's byte, in order (then padding to 16 bytes)
///     ...  Child × children
///
/// Records start on a cache line, so finding a child reads one line for the header and the bytes
/// (up to 52 children) and one for the child found; the child names its own node's record, so
/// walking down the trie reads no table in between. Failing to find a byte, as the typo walk does
/// for most of the bytes it tries, reads the one line. Reaching a node counts no references (the
/// tables are raw memory of the index's ``IndexMemory``, not arrays read out of a shared object).
final class NodeTable: @unchecked Sendable {
    // Unchecked: raw memory written while the index is built, only read once it is published.
    /// Holds the tables' memory.
    private let memory: IndexMemory
    private let records: UnsafeMutableRawPointer
    /// Node best keys are `bestList[start ..< start + count]` as ranks (see the header), and the
    /// same places of `hitList` as a lookup answers them: term number × 2, plus 1 for a
    /// whole-keyword key (read there rather than through the ranking and the key table: two
    /// scattered memory reads fewer per suggestion, which is most of a lookup's cost when other
    /// work has evicted the index from the caches).
    private let bestList: IndexTable<Int32>
    private let hitList: IndexTable<Int32>
    /// The root's record (the last node built), or -1 when there is no node.
    let root: Int32

    private static let line = 64
    private static let headerSize = 12

    /// `nodes` as built, children before their parent; a child's `node` is its index in `nodes`.
    init(_ nodes: [SuggestionIndex.Node], table: KeyTable, memory: IndexMemory) {
        self.memory = memory
        func childrenOffset(_ count: Int) -> Int { (Self.headerSize + count + 15) & ~15 }
        func recordSize(_ count: Int) -> Int {
            (childrenOffset(count) + count * MemoryLayout<SuggestionIndex.Child>.stride + Self.line - 1) & ~(Self.line - 1)
        }
        var offsets: [Int] = []
        offsets.reserveCapacity(nodes.count)
        var size = 0
        for node in nodes {
            offsets.append(size)
            size += recordSize(node.children.count)
        }
        precondition(size <= Int(Int32.max), "the trie's nodes exceed 2 GiB")
        // Allocated as bytes (on a cache line or a huge page); the fields are written and read raw.
        let bytes = memory.allocate(UInt8.self, count: max(Self.line, size))
        bytes.base.initialize(repeating: 0, count: bytes.count)
        records = UnsafeMutableRawPointer(bytes.base)
        var best: [Int32] = []
        for (index, node) in nodes.enumerated() {
            let record = records + offsets[index]
            record.storeBytes(of: UInt32(node.children.count), as: UInt32.self)
            record.storeBytes(of: UInt32(best.count), toByteOffset: 4, as: UInt32.self)
            record.storeBytes(of: UInt32(node.best.count), toByteOffset: 8, as: UInt32.self)
            let children = (record + childrenOffset(node.children.count)).bindMemory(to: SuggestionIndex.Child.self, capacity: node.children.count)
            for (position, child) in node.children.enumerated() {
                record.storeBytes(of: child.byte, toByteOffset: Self.headerSize + position, as: UInt8.self)
                var placed = child
                if child.node >= 0 { placed.node = Int32(offsets[Int(child.node)]) }
                (children + position).initialize(to: placed)
            }
            best += node.best
        }
        root = nodes.isEmpty ? -1 : Int32(offsets[nodes.count - 1])
        let hits = best.map { rank in
            let key = table.keys[Int(table.keyAtRank[Int(rank)])]
            return key.term << 1 | (key.wholePrefix ? 1 : 0)
        }
        bestList = memory.table(best)
        hitList = memory.table(hits)
    }

    private func header(_ node: Int32, _ field: Int) -> Int {
        Int(records.load(fromByteOffset: Int(node) + field, as: UInt32.self))
    }

    /// Reads the first word of node `node`'s record (its header and first children's bytes), for
    /// a walk that is about to visit many nodes to load their lines at once.
    func touch(_ node: Int32) -> UInt64 {
        records.load(fromByteOffset: Int(node), as: UInt64.self)
    }

    /// Node `node`'s children, by byte.
    func children(of node: Int32) -> UnsafeBufferPointer<SuggestionIndex.Child> {
        let count = header(node, 0)
        let start = records + Int(node) + ((Self.headerSize + count + 15) & ~15)
        return UnsafeBufferPointer(start: start.assumingMemoryBound(to: SuggestionIndex.Child.self), count: count)
    }

    /// Node `node`'s child for the next byte `byte`, if any.
    func child(of node: Int32, byte: UInt8) -> SuggestionIndex.Child? {
        let record = records + Int(node)
        let count = header(node, 0)
        let bytes = (record + Self.headerSize).assumingMemoryBound(to: UInt8.self)
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if bytes[middle] < byte { low = middle + 1 } else { high = middle }
        }
        guard low < count, bytes[low] == byte else { return nil }
        return (record + ((Self.headerSize + count + 15) & ~15)).assumingMemoryBound(to: SuggestionIndex.Child.self)[low]
    }

    /// Node `node`'s best keys, as ranks.
    func best(of node: Int32) -> UnsafeBufferPointer<Int32> {
        UnsafeBufferPointer(start: bestList.base + header(node, 4), count: header(node, 8))
    }

    /// Node `node`'s best keys as a lookup answers them (term number × 2, plus 1 for a whole keyword).
    func bestHits(of node: Int32) -> UnsafeBufferPointer<Int32> {
        UnsafeBufferPointer(start: hitList.base + header(node, 4), count: header(node, 8))
    }
}
