import Foundation
import GatewayCore
import NIOCore
import Synchronization
import Testing

@Suite("JSON stream encoder")
struct JSONStreamEncoderTests {
    enum Kind: String, Codable { case plain, fancy }

    enum Shape: Codable, Equatable {
        case circle(radius: Double)
        case label(String, size: Int?)
        case none
    }

    struct Inner: Codable, Equatable {
        var name: String
        var tags: [String]
        var score: Double?
    }

    struct Empty: Codable, Equatable {}

    struct Everything: Codable, Equatable {
        var text = "quote \" backslash \\ slash / newline \n tab \t control \u{1} del \u{7F} é 😀 \u{2028}"
        var int = -42
        var int8: Int8 = -8
        var uint64 = UInt64.max
        var int64 = Int64.min
        var double = 0.1
        var whole = 5.0
        var large = 1.2345678901234567e20
        var tiny = 2.5e-5
        var negativeZero = -0.0
        var float: Float = 0.1
        var flag = true
        var missing: String?
        var present: String? = "here"
        var kind = Kind.fancy
        var date = Date(timeIntervalSince1970: 1_700_000_000.25)
        var data = Data([0, 1, 2, 250, 255])
        var url = URL(string: "https://example.com/a?b=c")!
        var decimal = Decimal(string: "12.50")!
        var nested = Inner(name: "in", tags: ["a", "b"], score: nil)
        var list = [Inner(name: "x", tags: [], score: 1.5), Inner(name: "y", tags: ["z"], score: nil)]
        var matrix: [[Int]] = [[1, 2], [], [3]]
        var map: [String: Int] = ["one": 1, "two": 2]
        var numbered: [Int: String] = [1: "a", 20: "b"]
        var optionals: [Int?] = [1, nil, 3]
        var shapes: [Shape] = [.circle(radius: 2), .label("hi", size: nil), .none]
        var empty = Empty()
        var emptyList: [String] = []
        var emptyMap: [String: String] = [:]
    }

    /// Both encoders' output, parsed, must be the same JSON value.
    func agree<Value: Encodable>(_ value: Value, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let fast = try JSONStreamEncoder.encode(value)
        let reference = try JSONCoding.encoder.encode(value)
        let parsedFast = try JSONValue.parse(String(decoding: fast, as: UTF8.self))
        let parsedReference = try JSONValue.parse(String(decoding: reference, as: UTF8.self))
        #expect(parsedFast == parsedReference, "\(String(decoding: fast, as: UTF8.self))", sourceLocation: sourceLocation)
    }

    @Test("writes the same JSON as JSONEncoder for every kind of value")
    func agreesWithFoundation() throws {
        try agree(Everything())
        try agree([Everything(), Everything()])
        try agree("top-level string")
        try agree(12)
        try agree(Optional<Int>.none)
        try agree(Empty())
        try agree(["a": ["b": ["c": [1, 2]]]])
        try agree(JSONValue.object(["z": .number(1), "a": .array([.null, .bool(false), .string("s")])]))
    }

    @Test("decodes back to the value it encoded")
    func roundTrips() throws {
        let value = Everything()
        let decoded = try JSONCoding.decoder.decode(Everything.self, from: Data(try JSONStreamEncoder.encode(value)))
        // Dates round-trip through RFC 3339 to the millisecond or better.
        #expect(abs(decoded.date.timeIntervalSince(value.date)) < 0.001)
        var expected = value
        expected.date = decoded.date
        #expect(decoded == expected)
    }

    @Test("members come in the order the type encodes them; integral doubles have no fraction")
    func order() throws {
        struct Ordered: Encodable { var zeta = 1; var alpha = 2.0; var mid = "m" }
        #expect(String(decoding: try JSONStreamEncoder.encode(Ordered()), as: UTF8.self) == #"{"zeta":1,"alpha":2,"mid":"m"}"#)
        #expect(String(decoding: try JSONStreamEncoder.encode(Empty()), as: UTF8.self) == "{}")
    }

    @Test("a JSON document is spliced in and a JSON-writable type writes itself")
    func splicing() throws {
        struct Writable: JSONWritable {
            func writeJSON(into bytes: inout [UInt8]) { bytes.append(contentsOf: Array(#"{"own":true}"#.utf8)) }
        }
        struct Holder: Encodable { var document: JSONDocument; var writable: Writable }
        let holder = Holder(document: JSONDocument(bytes: ByteBuffer(string: #"{"kept" : [1, 2]}"#)), writable: Writable())
        #expect(String(decoding: try JSONStreamEncoder.encode(holder), as: UTF8.self) == #"{"document":{"kept" : [1, 2]},"writable":{"own":true}}"#)
    }

    @Test("each thread's writer is reused: nested encodings, a failed one, a large one and a buffer all come out whole")
    func writerReuse() throws {
        // A value whose encoding encodes another value with the same encoder, on the same thread,
        // while the thread's writer is in use.
        struct Nesting: Encodable {
            var inner: [String]
            func encode(to encoder: any Encoder) throws {
                let nested = try JSONStreamEncoder.encode(inner)
                var container = encoder.container(keyedBy: JSONCodingKey.self)
                try container.encode(String(decoding: nested, as: UTF8.self), forKey: JSONCodingKey("nested"))
                try container.encode(inner.count, forKey: JSONCodingKey("count"))
            }
        }
        struct JSONCodingKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(_ name: String) { stringValue = name }
            init?(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
        let nesting = String(decoding: try JSONStreamEncoder.encode(Nesting(inner: ["a", "b"])), as: UTF8.self)
        #expect(nesting == #"{"nested":"[\"a\",\"b\"]","count":2}"#)
        // A failure part-way leaves nothing behind for the next encoding.
        struct Bad: Encodable { var first = "written"; var value = Double.nan }
        #expect(throws: EncodingError.self) { try JSONStreamEncoder.encode(Bad()) }
        #expect(String(decoding: try JSONStreamEncoder.encode(["after": 1]), as: UTF8.self) == #"{"after":1}"#)
        // A reply past the writer's kept capacity, then a small one.
        let large = [String](repeating: String(repeating: "x", count: 1000), count: 100)
        #expect(try JSONStreamEncoder.encode(large).count == 100 * 1002 + 101)
        #expect(String(decoding: try JSONStreamEncoder.encode([1, 2]), as: UTF8.self) == "[1,2]")
        // The buffer form holds the same bytes.
        let buffer = try JSONStreamEncoder.encodeBuffer(Inner(name: "n", tags: ["t"], score: 2))
        #expect(Array(buffer.readableBytesView) == (try JSONStreamEncoder.encode(Inner(name: "n", tags: ["t"], score: 2))))
        // Writers on many threads at once.
        let mixed = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 256) { index in
            let text = String(decoding: (try? JSONStreamEncoder.encode(["index": index])) ?? [], as: UTF8.self)
            if text != "{\"index\":\(index)}" { mixed.add(1, ordering: .relaxed) }
        }
        #expect(mixed.load(ordering: .relaxed) == 0)
    }

    @Test("non-finite numbers are refused, as JSONEncoder refuses them")
    func nonFinite() {
        struct Bad: Encodable { var value = Double.nan }
        #expect(throws: EncodingError.self) { try JSONStreamEncoder.encode(Bad()) }
        #expect(throws: EncodingError.self) { try JSONStreamEncoder.encode([Float.infinity]) }
    }

    class Base: Encodable {
        var base = "b"
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: AnyCodingKey.self)
            try container.encode(base, forKey: AnyCodingKey("base"))
        }
    }

    final class Derived: Base, @unchecked Sendable {
        var derived = 2
        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: AnyCodingKey.self)
            try container.encode(derived, forKey: AnyCodingKey("derived"))
            try super.encode(to: container.superEncoder())
        }
    }

    final class Merged: Base, @unchecked Sendable {
        override func encode(to encoder: any Encoder) throws {
            try super.encode(to: encoder)
            var container = encoder.container(keyedBy: AnyCodingKey.self)
            try container.encode(3, forKey: AnyCodingKey("merged"))
        }
    }

    struct Mixed: Encodable {
        func encode(to encoder: any Encoder) throws {
            var keyed = encoder.container(keyedBy: AnyCodingKey.self)
            try keyed.encode(1, forKey: AnyCodingKey("a"))
            var unkeyed = encoder.unkeyedContainer()
            try unkeyed.encode(2)
        }
    }

    @Test("superEncoder is handed to JSONEncoder, one container asked for twice continues, two kinds are an error")
    func fallbacks() throws {
        try agree(Derived())
        try agree(Merged())
        #expect(String(decoding: try JSONStreamEncoder.encode(Merged()), as: UTF8.self) == #"{"base":"b","merged":3}"#)
        // A keyed then an unkeyed container from one encoder (JSONEncoder traps on it) is an error.
        #expect(throws: EncodingError.self) { try JSONStreamEncoder.encode(Mixed()) }
    }
}
