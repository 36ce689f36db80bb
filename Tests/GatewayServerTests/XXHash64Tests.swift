@testable import GatewayServer
import Testing

@Suite("XXH64")
struct XXHash64Tests {
    /// Values from the reference implementation (the `xxhash` Python package, which wraps it).
    @Test("matches the reference implementation at every length class", arguments: [
        ("", UInt64(0), UInt64(0xef46_db37_51d8_e999)),
        ("a", 0, 0xd24e_c4f1_a98c_6e5b),
        ("abc", 0, 0x44bc_2cf5_ad77_0999),
        (String(repeating: "0123456789abcdefghijklmnopqrstuvwxyz", count: 3), 0, 0x0546_b527_f5bd_1589),
    ])
    func referenceValues(text: String, seed: UInt64, expected: UInt64) {
        #expect(XXHash64.hash(Array(text.utf8), seed: seed) == expected)
    }

    @Test("lengths on each side of the 4-, 8- and 32-byte steps")
    func stepBoundaries() {
        let bytes = (0..<256).map { UInt8($0) }
        #expect(XXHash64.hash(bytes[..<31]) == 0xc346_d2b5_9b4d_8ee1)
        #expect(XXHash64.hash(bytes[..<32]) == 0xcbf5_9c51_16ff_32b4)
        #expect(XXHash64.hash(bytes[..<33]) == 0x0c53_5d1a_cafb_8ead)
        // Every length from 0 to 256 hashes differently, and the same bytes at another address
        // (an unaligned slice) hash the same.
        var seen = Set<UInt64>()
        for length in 0...256 {
            let prefix = Array(bytes[..<length])
            let hash = XXHash64.hash(prefix)
            #expect(seen.insert(hash).inserted)
            let shifted = [0xFF] + prefix
            #expect(shifted.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[1...])) } == hash)
        }
    }

    @Test("the seed changes the hash; a non-contiguous sequence hashes like its bytes")
    func seedAndSequences() {
        let text = Array("the seed".utf8)
        #expect(XXHash64.hash(text, seed: 1) != XXHash64.hash(text))
        #expect(XXHash64.hash(text.lazy.map { $0 }) == XXHash64.hash(text))
    }
}
