@_spi(CustomByteBufferAllocator) import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Memory for reply bodies.
///
/// A body is written on the thread that ran the operation and freed on the event loop that sent
/// it. The C allocator serves blocks of that size (1 KiB and up) from its shared bins: under the
/// lock of the writing thread's arena, and often after first merging every small chunk freed since.
/// Blocks of a few sizes are kept here instead and handed out again, a push or a pop under one
/// lock. At most ``kept`` blocks of each size stay; larger bodies use the C allocator directly.
public enum ReplyBuffers {
    /// The allocator of reply bodies (NIO's custom-allocator interface).
    public static let allocator = ByteBufferAllocator(
        allocate: { size in ReplyBlocks.allocate(size) },
        reallocate: { pointer, oldSize, newSize in ReplyBlocks.reallocate(pointer, oldSize: oldSize, newSize: newSize) },
        deallocate: { pointer in ReplyBlocks.deallocate(pointer) },
        copy: { destination, source, count in destination.copyMemory(from: source, byteCount: count) })

    /// A buffer holding a copy of `bytes`, in memory from ``allocator``.
    public static func buffer(copying bytes: UnsafeBufferPointer<UInt8>) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(UnsafeRawBufferPointer(bytes))
        return buffer
    }

    /// Blocks kept per size.
    public static let kept = ReplyBlocks.kept
}

/// The blocks behind ``ReplyBuffers``. Each block starts with a 16-byte header (keeping the
/// C allocator's alignment) that holds its size class, or -1 for a block of the C allocator's.
enum ReplyBlocks {
    static let header = 16
    /// The sizes kept: 1, 2, 4, 8 and 16 KiB.
    static let smallest = 1024
    static let classes = 5
    static let kept = 64

    /// The free blocks of every class, `kept` slots per class.
    struct FreeLists: ~Copyable {
        /// Addresses (as integers: they cross threads through the lock).
        let slots: UnsafeMutablePointer<UInt>
        var counts: (Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0)

        init() {
            slots = .allocate(capacity: ReplyBlocks.classes * ReplyBlocks.kept)
            slots.initialize(repeating: 0, count: ReplyBlocks.classes * ReplyBlocks.kept)
        }

        func count(_ sizeClass: Int) -> Int {
            switch sizeClass {
            case 0: counts.0
            case 1: counts.1
            case 2: counts.2
            case 3: counts.3
            default: counts.4
            }
        }

        mutating func setCount(_ sizeClass: Int, _ value: Int) {
            switch sizeClass {
            case 0: counts.0 = value
            case 1: counts.1 = value
            case 2: counts.2 = value
            case 3: counts.3 = value
            default: counts.4 = value
            }
        }

        mutating func pop(_ sizeClass: Int) -> UInt? {
            let count = count(sizeClass)
            guard count > 0 else { return nil }
            setCount(sizeClass, count - 1)
            return slots[sizeClass * ReplyBlocks.kept + count - 1]
        }

        /// False when the class's slots are full.
        mutating func push(_ block: UInt, _ sizeClass: Int) -> Bool {
            let count = count(sizeClass)
            guard count < ReplyBlocks.kept else { return false }
            slots[sizeClass * ReplyBlocks.kept + count] = block
            setCount(sizeClass, count + 1)
            return true
        }
    }

    static let freeLists = Mutex(FreeLists())

    /// The smallest class holding `size` bytes, or nil when it is larger than every class. Small
    /// bodies are kept too: the C allocator's per-thread caches of small chunks do not help
    /// memory that one thread allocates and another frees (the freeing thread's cache fills, the
    /// allocating thread's runs dry, and both fall back to the shared bins).
    @inline(__always)
    static func sizeClass(for size: Int) -> Int? {
        guard size <= smallest << (classes - 1) else { return nil }
        guard size > smallest else { return 0 }
        return (Int.bitWidth - (size - 1).leadingZeroBitCount) - smallest.trailingZeroBitCount
    }

    static func capacity(of sizeClass: Int) -> Int { smallest << sizeClass }

    static func allocate(_ size: Int) -> UnsafeMutableRawPointer? {
        let block: UnsafeMutableRawPointer
        if let sizeClass = sizeClass(for: size) {
            if let kept = freeLists.withLock({ $0.pop(sizeClass) }), let address = UnsafeMutableRawPointer(bitPattern: kept) {
                block = address
            } else {
                guard let made = malloc(header + capacity(of: sizeClass)) else { return nil }
                block = made
            }
            block.storeBytes(of: sizeClass, as: Int.self)
        } else {
            guard let made = malloc(header + max(size, 1)) else { return nil }
            block = made
            block.storeBytes(of: -1, as: Int.self)
        }
        return block + header
    }

    static func deallocate(_ pointer: UnsafeMutableRawPointer) {
        let block = pointer - header
        let sizeClass = block.load(as: Int.self)
        let address = UInt(bitPattern: block)
        if sizeClass >= 0, freeLists.withLock({ $0.push(address, sizeClass) }) { return }
        free(block)
    }

    static func reallocate(_ pointer: UnsafeMutableRawPointer?, oldSize: Int, newSize: Int) -> UnsafeMutableRawPointer? {
        guard let pointer else { return allocate(newSize) }
        let sizeClass = (pointer - header).load(as: Int.self)
        if sizeClass >= 0, newSize <= capacity(of: sizeClass) { return pointer }
        guard let moved = allocate(newSize) else { return nil }
        moved.copyMemory(from: pointer, byteCount: min(oldSize, newSize))
        deallocate(pointer)
        return moved
    }
}
