#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The memory of a suggestion index's tables, freed with the index.
///
/// A lookup reads a few bytes each from many places across tens of megabytes (the trie's nodes, the
/// keys, every suggestion's reply bytes). With ordinary 4 KiB pages, nearly every such read also
/// misses the processor's address translation cache, and under load, when other work has evicted
/// the page tables from the caches, that miss costs as much as the read itself. So a table of
/// 2 MiB or more gets memory of its own, aligned to 2 MiB, and on Linux the kernel is asked to back
/// it with huge pages (`MADV_HUGEPAGE`, honoured when transparent huge pages are set to `madvise`
/// or `always`): a few translations then cover the whole index. Elsewhere, or when the kernel
/// declines, the tables are ordinary memory.
final class IndexMemory: @unchecked Sendable {
    private var blocks: [UnsafeMutableRawPointer] = []

    static let hugePage = 2 << 20

    init() {}

    deinit {
        for block in blocks { free(block) }
    }

    /// Hands the heap's free pages back to the system (glibc's `malloc_trim`): building an index of
    /// hundreds of thousands of terms frees most of what it allocates (the arrays its tables are
    /// copied from), and glibc would otherwise keep it all as resident memory.
    static func returnFreedMemory() {
        #if canImport(Glibc)
        _ = mallocTrim?(0)
        #endif
    }

    #if canImport(Glibc)
    /// glibc's `malloc_trim`, looked up at run time (its header is not part of the Glibc module).
    private static let mallocTrim: (@convention(c) (Int) -> Int32)? = dlsym(nil, "malloc_trim").map {
        unsafeBitCast($0, to: (@convention(c) (Int) -> Int32).self)
    }
    #endif

    /// A table holding `values`.
    func table<Element>(_ values: [Element]) -> IndexTable<Element> {
        let table = allocate(Element.self, count: values.count)
        _ = UnsafeMutableBufferPointer(start: table.base, count: values.count).initialize(from: values)
        return table
    }

    /// Room for `count` elements, uninitialized (trivial element types only).
    func allocate<Element>(_ type: Element.Type, count: Int) -> IndexTable<Element> {
        let bytes = max(1, count * MemoryLayout<Element>.stride)
        let huge = bytes >= Self.hugePage
        let alignment = huge ? Self.hugePage : max(64, MemoryLayout<Element>.alignment)
        let size = huge ? (bytes + Self.hugePage - 1) / Self.hugePage * Self.hugePage : bytes
        var raw: UnsafeMutableRawPointer?
        guard posix_memalign(&raw, alignment, size) == 0, let raw else { fatalError("out of memory for a suggestion index table of \(size) bytes") }
        #if os(Linux)
        // Before the first touch: the pages are then faulted in as huge pages where possible.
        if huge { _ = madvise(raw, size, MADV_HUGEPAGE) }
        #endif
        blocks.append(raw)
        return IndexTable(base: raw.bindMemory(to: Element.self, capacity: max(1, count)), count: count)
    }
}

/// A read-only table in an ``IndexMemory``: a pointer and a count, so reading it counts no
/// references (the memory lives as long as its ``IndexMemory``, which its index holds).
struct IndexTable<Element>: @unchecked Sendable {
    let base: UnsafeMutablePointer<Element>
    let count: Int

    subscript(index: Int) -> Element { base[index] }

    var buffer: UnsafeBufferPointer<Element> { UnsafeBufferPointer(start: base, count: count) }
}
