#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The memory of a suggestion index's tables, freed with the index: raw tables rather than arrays,
/// so that a lookup's reads count no references (see ``IndexTable``).
///
/// Tables were once aligned to 2 MiB and backed by huge pages (`MADV_HUGEPAGE`); an A/B on
/// `Benchmarks/suggest/run` (2-core machine, transparent huge pages on `madvise`) measured lookup
/// p50 0.76 / p99 19.9 µs with them and 0.69 / 21.5 µs without, and `/v1/suggest` over `/healthz`
/// 0.661 with them and 0.633 without (rounds 0.60–0.69 and 0.53–0.85): inside the noise, so the
/// tables are ordinary memory on cache lines.
final class IndexMemory: @unchecked Sendable {
    // Unchecked: `blocks` grows only while one task builds an index; once the index is
    // published it is only read, and freed with it.
    private var blocks: [UnsafeMutableRawPointer] = []

    init() {}

    deinit {
        for block in blocks { block.deallocate() }
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

    /// Room for `count` elements, uninitialized (trivial element types only), on a cache line.
    func allocate<Element>(_ type: Element.Type, count: Int) -> IndexTable<Element> {
        let bytes = max(1, count * MemoryLayout<Element>.stride)
        let raw = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: max(64, MemoryLayout<Element>.alignment))
        blocks.append(raw)
        return IndexTable(base: raw.bindMemory(to: Element.self, capacity: max(1, count)), count: count)
    }
}

/// A read-only table in an ``IndexMemory``: a pointer and a count, so reading it counts no
/// references (the memory lives as long as its ``IndexMemory``, which its index holds).
struct IndexTable<Element>: @unchecked Sendable {
    // Unchecked: a pointer into an IndexMemory, written while the index is built and only
    // read once it is published.
    let base: UnsafeMutablePointer<Element>
    let count: Int

    subscript(index: Int) -> Element { base[index] }

    var buffer: UnsafeBufferPointer<Element> { UnsafeBufferPointer(start: base, count: count) }
}
