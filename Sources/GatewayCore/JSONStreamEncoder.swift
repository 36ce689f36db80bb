import Foundation
import NIOCore

/// Writes an `Encodable` value as compact JSON straight into bytes, several times faster than
/// `JSONEncoder` (which builds a tree of every value first). The host encodes replies with it.
///
/// It follows the conventions of ``JSONCoding/encoder``: dates as RFC 3339 timestamps, `Data` as
/// base64, URLs as their absolute string, slashes unescaped, non-finite numbers refused. Members
/// are written in the order the type encodes them (where `JSONEncoder` on this platform follows
/// a dictionary's order). A ``JSONDocument`` is spliced in as it is and a ``JSONWritable`` writes
/// itself. A value using `superEncoder`, which it does not stream, is handed to `JSONEncoder`
/// whole. One encoder asked for two kinds of container is an error (where `JSONEncoder` traps).
package enum JSONStreamEncoder {
    package static func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        try encoding(value) { Array($0) }
    }

    /// The same JSON, in a `ByteBuffer` (a reply's body), copied once from the encoder's bytes.
    package static func encodeBuffer<Value: Encodable>(_ value: Value) throws -> ByteBuffer {
        try encoding(value) { ByteBuffer(bytes: $0) }
    }

    private static func encoding<Value: Encodable, Result>(_ value: Value, _ result: (UnsafeBufferPointer<UInt8>) -> Result) throws -> Result {
        let writer = JSONStreamWriter()
        do {
            try writer.encodeValue(value)
            return writer.bytes.withUnsafeBufferPointer(result)
        } catch is JSONStreamWriter.NotStreamable {
            return Array(try JSONCoding.encoder.encode(value)).withUnsafeBufferPointer(result)
        } catch is JSONStreamWriter.MixedContainers {
            throw EncodingError.invalidValue(value, .init(codingPath: [], debugDescription: "One encoder was asked for two kinds of container."))
        }
    }
}

/// The state of one encoding: the bytes so far and the containers still open.
final class JSONStreamWriter {
    struct NotStreamable: Error {}
    struct MixedContainers: Error {}

    struct Open {
        /// `}` or `]`.
        var close: UInt8
        var hasMembers = false
    }

    // Only the encoding that owns this writer touches it, on one thread: the run-time exclusivity
    // checks of a class's stored properties (a thread-local access set per write) are skipped.
    @exclusivity(unchecked) var bytes: [UInt8] = []
    @exclusivity(unchecked) var open: [Open] = []

    init() {
        bytes.reserveCapacity(256)
    }

    /// Closes the containers above `depth` (the index in `open` of the container about to be
    /// written to): a nested container is finished once its parent writes again.
    func closeAbove(_ depth: Int) {
        while open.count > depth + 1 { bytes.append(open.removeLast().close) }
    }

    /// Starts a member of the container at `depth`: closes deeper ones and writes the comma.
    func beginMember(at depth: Int) {
        closeAbove(depth)
        if open[depth].hasMembers { bytes.append(UInt8(ascii: ",")) } else { open[depth].hasMembers = true }
    }

    func writeKey(_ key: some CodingKey, at depth: Int) {
        beginMember(at: depth)
        JSONValue.write(string: key.stringValue, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    func write(double: Double) throws {
        guard double.isFinite else {
            throw EncodingError.invalidValue(double, .init(codingPath: [], debugDescription: "\(double) is not a valid JSON number."))
        }
        JSONValue.write(number: double, into: &bytes)
    }

    func write(float: Float) throws {
        guard float.isFinite else {
            throw EncodingError.invalidValue(float, .init(codingPath: [], debugDescription: "\(float) is not a valid JSON number."))
        }
        if float == float.rounded(), abs(float) < 16_777_216 { JSONValue.write(int64: Int64(float), into: &bytes) } else { bytes.append(contentsOf: "\(float)".utf8) }
    }

    // Static strings rather than arrays: appending a shared array retains its buffer, a count
    // that threads encoding at once contend for.
    static let null: StaticString = "null"
    static let `true`: StaticString = "true"
    static let `false`: StaticString = "false"

    func write(bool: Bool) {
        JSONValue.write(literal: bool ? Self.true : Self.false, into: &bytes)
    }

    /// Writes one value, with the containers it opens closed behind it.
    func encodeValue<Value: Encodable>(_ value: Value) throws {
        if Value.self == String.self { return JSONValue.write(string: value as! String, into: &bytes) }
        if Value.self == Int.self { return JSONValue.write(int64: Int64(value as! Int), into: &bytes) }
        if Value.self == Double.self { return try write(double: value as! Double) }
        if Value.self == Bool.self { return write(bool: value as! Bool) }
        if Value.self == Date.self { return JSONValue.write(string: UTCTimestamp.format(value as! Date), into: &bytes) }
        if Value.self == Data.self { return JSONValue.write(string: (value as! Data).base64EncodedString(), into: &bytes) }
        if Value.self == URL.self { return JSONValue.write(string: (value as! URL).absoluteString, into: &bytes) }
        if Value.self == Decimal.self { return bytes.append(contentsOf: (value as! Decimal).description.utf8) }
        if Value.self == JSONDocument.self {
            let document = value as! JSONDocument
            return bytes.append(contentsOf: document.bytes.readableBytesView)
        }
        if let writable = value as? any JSONWritable { return writable.writeJSON(into: &bytes) }
        let mark = open.count
        let start = bytes.count
        try value.encode(to: JSONStreamEncoding(writer: self, mark: mark))
        closeAbove(mark - 1)
        // A value that encodes nothing is an empty object, as with JSONEncoder.
        if bytes.count == start { bytes.append(contentsOf: [UInt8(ascii: "{"), UInt8(ascii: "}")]) }
    }
}

/// The `Encoder` of one value: its containers go at index `mark` of the writer's open list.
struct JSONStreamEncoding: Encoder {
    let writer: JSONStreamWriter
    let mark: Int
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// The container this encoder opened (or opens now), by its closing byte.
    private func container(closing close: UInt8) throws -> Int {
        writer.closeAbove(mark)
        if writer.open.count > mark {
            // A second container from the same encoder: the same kind continues it.
            guard writer.open[mark].close == close else { throw JSONStreamWriter.MixedContainers() }
            return mark
        }
        writer.bytes.append(close == UInt8(ascii: "}") ? UInt8(ascii: "{") : UInt8(ascii: "["))
        writer.open.append(.init(close: close))
        return mark
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        do {
            return KeyedEncodingContainer(JSONStreamKeyedContainer<Key>(writer: writer, depth: try container(closing: UInt8(ascii: "}"))))
        } catch {
            return KeyedEncodingContainer(JSONStreamKeyedContainer<Key>(writer: writer, depth: -2))
        }
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        do {
            return JSONStreamUnkeyedContainer(writer: writer, depth: try container(closing: UInt8(ascii: "]")))
        } catch {
            return JSONStreamUnkeyedContainer(writer: writer, depth: -2)
        }
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        JSONStreamSingleValue(writer: writer, mark: mark)
    }
}

/// A container at depth -1 stands in for `superEncoder`'s, which are not streamed; depth -2 for a
/// second container of another kind from one encoder. Every write to them reports that.
private func refuse(_ depth: Int) throws {
    if depth == -1 { throw JSONStreamWriter.NotStreamable() }
    if depth < 0 { throw JSONStreamWriter.MixedContainers() }
}

struct JSONStreamKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let writer: JSONStreamWriter
    let depth: Int
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        JSONValue.write(literal: JSONStreamWriter.null, into: &writer.bytes)
    }

    mutating func encode(_ value: Bool, forKey key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        writer.write(bool: value)
    }

    mutating func encode(_ value: String, forKey key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        JSONValue.write(string: value, into: &writer.bytes)
    }

    mutating func encode(_ value: Double, forKey key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        try writer.write(double: value)
    }

    mutating func encode(_ value: Float, forKey key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        try writer.write(float: value)
    }

    // Integers widen to 64 bits first: the container is generic over its keys and so runs
    // unspecialized, where arithmetic on `some BinaryInteger` goes through witness tables.
    mutating func encode(_ value: Int, forKey key: Key) throws { try signed(Int64(value), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try signed(Int64(value), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try signed(Int64(value), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try signed(Int64(value), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try signed(value, key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try unsigned(UInt64(value), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try unsigned(UInt64(value), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try unsigned(UInt64(value), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try unsigned(UInt64(value), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try unsigned(value, key) }

    private func signed(_ value: Int64, _ key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        JSONValue.write(int64: value, into: &writer.bytes)
    }

    private func unsigned(_ value: UInt64, _ key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        JSONValue.write(uint64: value, into: &writer.bytes)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try refuse(depth)
        writer.writeKey(key, at: depth)
        try writer.encodeValue(value)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        guard depth >= 0 else { return KeyedEncodingContainer(JSONStreamKeyedContainer<NestedKey>(writer: writer, depth: depth)) }
        writer.writeKey(key, at: depth)
        writer.bytes.append(UInt8(ascii: "{"))
        writer.open.append(.init(close: UInt8(ascii: "}")))
        return KeyedEncodingContainer(JSONStreamKeyedContainer<NestedKey>(writer: writer, depth: writer.open.count - 1))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        guard depth >= 0 else { return JSONStreamUnkeyedContainer(writer: writer, depth: depth) }
        writer.writeKey(key, at: depth)
        writer.bytes.append(UInt8(ascii: "["))
        writer.open.append(.init(close: UInt8(ascii: "]")))
        return JSONStreamUnkeyedContainer(writer: writer, depth: writer.open.count - 1)
    }

    mutating func superEncoder() -> any Encoder { JSONStreamRefusingEncoder() }
    mutating func superEncoder(forKey key: Key) -> any Encoder { JSONStreamRefusingEncoder() }
}

struct JSONStreamUnkeyedContainer: UnkeyedEncodingContainer, JSONStreamValueWriting {
    let writer: JSONStreamWriter
    let depth: Int
    private(set) var count = 0
    var codingPath: [any CodingKey] { [] }

    init(writer: JSONStreamWriter, depth: Int) {
        self.writer = writer
        self.depth = depth
    }

    mutating func begin() throws {
        try refuse(depth)
        writer.beginMember(at: depth)
        count += 1
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        guard (try? begin()) != nil else { return KeyedEncodingContainer(JSONStreamKeyedContainer<NestedKey>(writer: writer, depth: depth)) }
        writer.bytes.append(UInt8(ascii: "{"))
        writer.open.append(.init(close: UInt8(ascii: "}")))
        return KeyedEncodingContainer(JSONStreamKeyedContainer<NestedKey>(writer: writer, depth: writer.open.count - 1))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        guard (try? begin()) != nil else { return JSONStreamUnkeyedContainer(writer: writer, depth: depth) }
        writer.bytes.append(UInt8(ascii: "["))
        writer.open.append(.init(close: UInt8(ascii: "]")))
        return JSONStreamUnkeyedContainer(writer: writer, depth: writer.open.count - 1)
    }

    mutating func superEncoder() -> any Encoder { JSONStreamRefusingEncoder() }
}

struct JSONStreamSingleValue: SingleValueEncodingContainer, JSONStreamValueWriting {
    let writer: JSONStreamWriter
    let mark: Int
    var codingPath: [any CodingKey] { [] }

    func begin() throws {
        // Not after a container from the same encoder (nor from `superEncoder`, whose mark is -1).
        if mark < 0 { throw JSONStreamWriter.NotStreamable() }
        if writer.open.count > mark { throw JSONStreamWriter.MixedContainers() }
    }
}

/// The value writes shared by the unkeyed and the single-value container: each begins its value
/// (`begin`), then writes it.
protocol JSONStreamValueWriting {
    var writer: JSONStreamWriter { get }
    mutating func begin() throws
}

extension JSONStreamValueWriting {
    mutating func encodeNil() throws {
        try begin()
        JSONValue.write(literal: JSONStreamWriter.null, into: &writer.bytes)
    }

    mutating func encode(_ value: Bool) throws {
        try begin()
        writer.write(bool: value)
    }

    mutating func encode(_ value: String) throws {
        try begin()
        JSONValue.write(string: value, into: &writer.bytes)
    }

    mutating func encode(_ value: Double) throws {
        try begin()
        try writer.write(double: value)
    }

    mutating func encode(_ value: Float) throws {
        try begin()
        try writer.write(float: value)
    }

    mutating func encode(_ value: Int) throws { try signed(Int64(value)) }
    mutating func encode(_ value: Int8) throws { try signed(Int64(value)) }
    mutating func encode(_ value: Int16) throws { try signed(Int64(value)) }
    mutating func encode(_ value: Int32) throws { try signed(Int64(value)) }
    mutating func encode(_ value: Int64) throws { try signed(value) }
    mutating func encode(_ value: UInt) throws { try unsigned(UInt64(value)) }
    mutating func encode(_ value: UInt8) throws { try unsigned(UInt64(value)) }
    mutating func encode(_ value: UInt16) throws { try unsigned(UInt64(value)) }
    mutating func encode(_ value: UInt32) throws { try unsigned(UInt64(value)) }
    mutating func encode(_ value: UInt64) throws { try unsigned(value) }

    private mutating func signed(_ value: Int64) throws {
        try begin()
        JSONValue.write(int64: value, into: &writer.bytes)
    }

    private mutating func unsigned(_ value: UInt64) throws {
        try begin()
        JSONValue.write(uint64: value, into: &writer.bytes)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try begin()
        try writer.encodeValue(value)
    }
}

/// The encoder handed out for `superEncoder`: using it marks the value as not streamable.
struct JSONStreamRefusingEncoder: Encoder {
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(JSONStreamKeyedContainer<Key>(writer: JSONStreamWriter(), depth: -1))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer { JSONStreamUnkeyedContainer(writer: JSONStreamWriter(), depth: -1) }
    // A mark below every container: each write refuses.
    func singleValueContainer() -> any SingleValueEncodingContainer { JSONStreamSingleValue(writer: JSONStreamWriter(), mark: -1) }
}
