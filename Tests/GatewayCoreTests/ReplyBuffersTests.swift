@testable import GatewayCore
import NIOCore
import Testing

@Suite("reply buffers")
struct ReplyBuffersTests {
    static func pattern(_ count: Int, seed: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) }
    }

    @Test("a buffer holds exactly the bytes copied in, on each side of every size class", arguments: [
        0, 1, 15, 1023, 1024, 1025, 2048, 2049, 5000, 16383, 16384, 16385, 100_000,
    ])
    func copies(count: Int) {
        let bytes = Self.pattern(count, seed: count)
        let buffer = bytes.withUnsafeBufferPointer(ReplyBuffers.buffer(copying:))
        #expect(buffer.readableBytes == count)
        #expect(Array(buffer.readableBytesView) == bytes)
    }

    @Test("sizes map to the smallest class that holds them; larger ones to none")
    func sizeClasses() {
        #expect(ReplyBlocks.sizeClass(for: 0) == 0)
        #expect(ReplyBlocks.sizeClass(for: 1024) == 0)
        #expect(ReplyBlocks.sizeClass(for: 1025) == 1)
        #expect(ReplyBlocks.sizeClass(for: 2048) == 1)
        #expect(ReplyBlocks.sizeClass(for: 2049) == 2)
        #expect(ReplyBlocks.sizeClass(for: 8193) == 4)
        #expect(ReplyBlocks.sizeClass(for: 16384) == 4)
        #expect(ReplyBlocks.sizeClass(for: 16385) == nil)
        for size in [1, 700, 1024, 1500, 3000, 9000, 16384] {
            let sizeClass = ReplyBlocks.sizeClass(for: size)!
            #expect(ReplyBlocks.capacity(of: sizeClass) >= size)
            #expect(sizeClass == 0 || ReplyBlocks.capacity(of: sizeClass - 1) < size)
        }
    }

    @Test("free lists hand blocks back last in, first out, and refuse more than they keep")
    func freeLists() {
        var lists = ReplyBlocks.FreeLists()
        let none = lists.pop(2)
        #expect(none == nil)
        var accepted = 0
        for address in 1...UInt(ReplyBlocks.kept) where lists.push(address * 16, 2) { accepted += 1 }
        #expect(accepted == ReplyBlocks.kept)
        let overflow = lists.push(9_999 * 16, 2)
        #expect(!overflow, "a full class lets the block go back to the C allocator")
        let other = lists.push(7 * 16, 3)
        #expect(other, "each class has its own slots")
        let last = lists.pop(2)
        #expect(last == UInt(ReplyBlocks.kept * 16))
        let only = lists.pop(3)
        #expect(only == UInt(7 * 16))
        let empty = lists.pop(3)
        #expect(empty == nil)
        lists.slots.deallocate()
    }

    @Test("reallocating keeps the bytes: in place within the block's class, moved beyond it")
    func reallocation() throws {
        let first = try #require(ReplyBlocks.allocate(1500))
        first.copyMemory(from: Self.pattern(1500, seed: 1), byteCount: 1500)
        let grown = try #require(ReplyBlocks.reallocate(first, oldSize: 1500, newSize: 2048))
        #expect(grown == first, "2048 bytes still fit the 2 KiB block")
        let moved = try #require(ReplyBlocks.reallocate(grown, oldSize: 2048, newSize: 40_000))
        #expect(Array(UnsafeRawBufferPointer(start: moved, count: 1500)) == Self.pattern(1500, seed: 1))
        let shrunk = try #require(ReplyBlocks.reallocate(moved, oldSize: 40_000, newSize: 10))
        #expect(Array(UnsafeRawBufferPointer(start: shrunk, count: 10)) == Array(Self.pattern(1500, seed: 1)[..<10]))
        ReplyBlocks.deallocate(shrunk)

        // A buffer written past its capacity grows through the allocator.
        var buffer = ReplyBuffers.allocator.buffer(capacity: 100)
        let bytes = Self.pattern(30_000, seed: 9)
        buffer.writeBytes(bytes)
        #expect(Array(buffer.readableBytesView) == bytes)
    }

    @Test("blocks written on one thread and freed on another are never handed out twice")
    func acrossThreads() async {
        // Producers fill buffers with a pattern of their own; consumers check the pattern and drop
        // them. A block handed out while still in use would be overwritten under its reader.
        let (stream, continuation) = AsyncStream.makeStream(of: (ByteBuffer, Int).self, bufferingPolicy: .bufferingNewest(256))
        let failures = await withTaskGroup(of: Int.self) { group in
            for producer in 0..<4 {
                group.addTask {
                    for round in 0..<2_000 {
                        let seed = producer * 100_000 + round
                        let count = [10, 900, 1_800, 3_500, 7_000, 14_000][round % 6]
                        let bytes = Self.pattern(count, seed: seed)
                        continuation.yield((bytes.withUnsafeBufferPointer(ReplyBuffers.buffer(copying:)), seed))
                    }
                    return 0
                }
            }
            group.addTask {
                var failures = 0
                var seen = 0
                for await (buffer, seed) in stream {
                    if Array(buffer.readableBytesView) != Self.pattern(buffer.readableBytes, seed: seed) { failures += 1 }
                    seen += 1
                    if seen == 8_000 { break }
                }
                return failures
            }
            var total = 0
            var finished = 0
            for await result in group {
                total += result
                finished += 1
                if finished == 4 { continuation.finish() }
            }
            return total
        }
        #expect(failures == 0)
    }
}
