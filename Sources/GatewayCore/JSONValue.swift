import Foundation
import NIOCore

/// Any JSON value: what a plugin stores when its data has no fixed shape (objects in buckets,
/// free-form metadata).
///
/// As an operation's body it is parsed by ``parse(_:maximumDepth:)-(ByteBuffer,_)``, which rejects malformed
/// input with the line and column, nesting deeper than ``defaultMaximumDepth``, duplicate keys and
/// numbers that do not fit a `Double`. As an operation's output it is written by
/// ``serialized()``: compact, keys sorted (so equal values give equal bytes and equal ETags),
/// integral numbers without a fraction.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// How deeply arrays and objects may nest in a parsed body.
    public static let defaultMaximumDepth = 32

    /// The members, when this is an object.
    public var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// The text, when this is a string.
    public var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The number, when this is a number.
    public var numberValue: Double? {
        if case .number(let number) = self { return number }
        return nil
    }

    /// The elements, when this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The JSON type name: `null`, `boolean`, `number`, `string`, `array` or `object`.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .number: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    /// The value at a dotted path of object keys (`a.b.c`), or nil when any step is missing.
    public subscript(path path: [String]) -> JSONValue? {
        var current = self
        for key in path {
            guard case .object(let members) = current, let next = members[key] else { return nil }
            current = next
        }
        return current
    }

    /// How deeply arrays and objects nest (a scalar is 0).
    public var depth: Int {
        switch self {
        case .array(let elements): 1 + (elements.map(\.depth).max() ?? 0)
        case .object(let members): 1 + (members.values.map(\.depth).max() ?? 0)
        default: 0
        }
    }
}

// MARK: Writing

extension JSONValue {
    /// The compact JSON text, keys sorted.
    public func serialized() -> ByteBuffer {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        write(into: &bytes)
        return ByteBuffer(bytes: bytes)
    }

    /// The compact JSON text as a string.
    public var jsonText: String {
        var bytes: [UInt8] = []
        write(into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the compact JSON text to `bytes`.
    public func write(into bytes: inout [UInt8]) {
        switch self {
        case .null: bytes.append(contentsOf: "null".utf8)
        case .bool(let flag): bytes.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number): Self.write(number: number, into: &bytes)
        case .string(let text): Self.write(string: text, into: &bytes)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                element.write(into: &bytes)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            // Members in key order (the same text for the same value), sorted as pairs so that
            // no key is looked up again.
            for (index, member) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                Self.write(string: member.key, into: &bytes)
                bytes.append(UInt8(ascii: ":"))
                member.value.write(into: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// Appends `number` as JSON (integral values without a fraction; non-finite ones as null).
    public static func write(number: Double, into bytes: inout [UInt8]) {
        if number.isFinite, number == number.rounded(), abs(number) < 9.007_199_254_740_992e15 {
            write(int64: Int64(number), into: &bytes)
        } else if number.isFinite {
            bytes.append(contentsOf: "\(number)".utf8)
        } else {
            bytes.append(contentsOf: "null".utf8)
        }
    }

    /// Appends `integer` in decimal, without making a `String` first.
    public static func write(integer: some BinaryInteger, into bytes: inout [UInt8]) {
        if let value = Int64(exactly: integer) {
            if value < 0 { bytes.append(UInt8(ascii: "-")) }
            write(magnitude: value.magnitude, into: &bytes)
        } else if let value = UInt64(exactly: integer) {
            write(magnitude: value, into: &bytes)
        } else {
            bytes.append(contentsOf: String(integer).utf8)
        }
    }

    /// Appends the bytes of a static string (JSON punctuation and keys) as they are: no escaping,
    /// and no reference count touched.
    @inlinable
    public static func write(literal: StaticString, into bytes: inout [UInt8]) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// Writes a signed integer without going through `BinaryInteger`'s generic arithmetic.
    public static func write(int64 value: Int64, into bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        write(magnitude: value.magnitude, into: &bytes)
    }

    /// Writes an unsigned integer without going through `BinaryInteger`'s generic arithmetic.
    public static func write(uint64 value: UInt64, into bytes: inout [UInt8]) {
        write(magnitude: value, into: &bytes)
    }

    private static func write(magnitude: UInt64, into bytes: inout [UInt8]) {
        if magnitude < 10 { return bytes.append(UInt8(truncatingIfNeeded: magnitude) + UInt8(ascii: "0")) }
        // Digits from the right into a small buffer, then appended in order.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buffer in
            var rest = magnitude
            var index = 20
            while rest > 0 {
                index -= 1
                buffer[index] = UInt8(truncatingIfNeeded: rest % 10) + UInt8(ascii: "0")
                rest /= 10
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[index..<20]))
        }
    }

    /// Appends `string` as a JSON string literal.
    public static func write(string: String, into bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        let written: Void? = string.utf8.withContiguousStorageIfAvailable { utf8 in
            // Runs of bytes that need no escape are copied whole; the bytes are checked eight at
            // a time (most strings need no escape at all).
            var runStart = 0
            var index = 0
            while index < utf8.count {
                if index + 8 <= utf8.count,
                   !mayNeedEscape(UInt64(littleEndian: UnsafeRawPointer(utf8.baseAddress! + index).loadUnaligned(as: UInt64.self))) {
                    index += 8
                    continue
                }
                let byte = utf8[index]
                if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                    if runStart < index { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index])) }
                    appendEscaped(byte, into: &bytes)
                    runStart = index + 1
                }
                index += 1
            }
            if runStart < utf8.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...])) }
        }
        if written == nil {
            for byte in string.utf8 {
                if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { appendEscaped(byte, into: &bytes) } else { bytes.append(byte) }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Whether any of the eight bytes of `word` is below 0x20, a quote or a backslash (exact for
    /// "none": a word this says false of needs no escape).
    static func mayNeedEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        func hasZero(_ value: UInt64) -> Bool { (value &- ones) & ~value & highs != 0 }
        // Bytes below 0x20 (bytes from 0x80 up never count: `~word` clears their high bit).
        let control = (word &- 0x2020_2020_2020_2020) & ~word & highs != 0
        return control || hasZero(word ^ 0x2222_2222_2222_2222) || hasZero(word ^ 0x5C5C_5C5C_5C5C_5C5C)
    }

    private static func appendEscaped(_ byte: UInt8, into bytes: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
        case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
        case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
        case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
        case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
        default:
            let hex = Array("0123456789abcdef".utf8)
            bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
        }
    }
}

// MARK: Parsing

extension JSONValue {
    /// Parses a complete JSON text. Throws ``GatewayError`` 400 naming the line and column of the
    /// first problem: a syntax error, nesting deeper than `maximumDepth`, a duplicate key, a number
    /// out of range or invalid UTF-8.
    public static func parse(_ buffer: ByteBuffer, maximumDepth: Int = defaultMaximumDepth) throws -> JSONValue {
        try buffer.withUnsafeReadableBytes { bytes in
            var parser = Parser(bytes: bytes, maximumDepth: maximumDepth)
            return try parser.document()
        }
    }

    /// Parses a JSON text given as a string (query parameters such as `where`).
    public static func parse(_ text: String, maximumDepth: Int = defaultMaximumDepth) throws -> JSONValue {
        try parse(ByteBuffer(string: text), maximumDepth: maximumDepth)
    }

    private struct Parser {
        let bytes: UnsafeRawBufferPointer
        let maximumDepth: Int
        var index = 0

        init(bytes: UnsafeRawBufferPointer, maximumDepth: Int) {
            self.bytes = bytes
            self.maximumDepth = maximumDepth
        }

        func failure(_ message: String, at offset: Int? = nil) -> GatewayError {
            let end = min(offset ?? index, bytes.count)
            var line = 1
            var column = 1
            for position in 0..<end {
                if bytes[position] == 0x0A { line += 1; column = 1 } else if bytes[position] & 0xC0 != 0x80 { column += 1 }
            }
            return GatewayError.badRequest("The body is not valid JSON: \(message) at line \(line), column \(column).")
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func document() throws -> JSONValue {
            skipSpace()
            guard index < bytes.count else { throw GatewayError.badRequest("The body is empty; a JSON value is required.") }
            let value = try self.value(depth: 0)
            skipSpace()
            guard index == bytes.count else { throw failure("unexpected text after the value") }
            return value
        }

        mutating func value(depth: Int) throws -> JSONValue {
            skipSpace()
            guard index < bytes.count else { throw failure("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                guard depth < maximumDepth else { throw failure("nesting deeper than \(maximumDepth) levels") }
                index += 1
                var members: [String: JSONValue] = [:]
                skipSpace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
                while true {
                    skipSpace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a quoted key") }
                    let keyStart = index
                    let key = try string()
                    skipSpace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("expected ':' after a key") }
                    index += 1
                    let member = try value(depth: depth + 1)
                    guard members.updateValue(member, forKey: key) == nil else { throw failure("duplicate key \"\(key)\"", at: keyStart) }
                    skipSpace()
                    guard index < bytes.count else { throw failure("unexpected end of input in an object") }
                    if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                    if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
                    throw failure("expected ',' or '}'")
                }
            case UInt8(ascii: "["):
                guard depth < maximumDepth else { throw failure("nesting deeper than \(maximumDepth) levels") }
                index += 1
                var elements: [JSONValue] = []
                skipSpace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
                while true {
                    elements.append(try value(depth: depth + 1))
                    skipSpace()
                    guard index < bytes.count else { throw failure("unexpected end of input in an array") }
                    if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                    if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
                    throw failure("expected ',' or ']'")
                }
            case UInt8(ascii: "\""):
                return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return .number(try number())
            default:
                throw failure("unexpected character")
            }
        }

        mutating func literal(_ word: StaticString) throws {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw failure("unexpected end of input") }
            for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] {
                throw failure("unexpected character")
            }
            index += count
        }

        mutating func number() throws -> Double {
            let start = index
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            func digits() -> Int {
                let from = index
                while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
                return index - from
            }
            let integerStart = index
            let integerDigits = digits()
            guard integerDigits > 0 else { throw failure("expected a digit") }
            if integerDigits > 1, bytes[integerStart] == UInt8(ascii: "0") { throw failure("leading zeros are not allowed", at: integerStart) }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits() > 0 else { throw failure("expected a digit after '.'") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digits() > 0 else { throw failure("expected a digit in the exponent") }
            }
            let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            guard let number = Double(text), number.isFinite else { throw failure("number out of range", at: start) }
            return number
        }

        mutating func hex4() throws -> UInt32 {
            guard index + 4 <= bytes.count else { throw failure("unexpected end of input in a \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw failure("invalid \\u escape")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        mutating func string() throws -> String {
            index += 1  // the opening quote
            let start = index
            // Fast path: no escapes.
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
                    index += 1
                    guard let text = String(validating: slice, as: UTF8.self) else { throw failure("invalid UTF-8 in a string", at: start) }
                    return text
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { throw failure("control character in a string") }
                index += 1
            }
            var scalars = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    guard let text = String(validating: scalars, as: UTF8.self) else { throw failure("invalid UTF-8 in a string", at: start) }
                    return text
                }
                if byte < 0x20 { throw failure("control character in a string") }
                if byte != UInt8(ascii: "\\") {
                    scalars.append(byte)
                    index += 1
                    continue
                }
                index += 1
                guard index < bytes.count else { break }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): scalars.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): scalars.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800...0xDBFF).contains(code) {
                        guard index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw failure("unpaired surrogate in a \\u escape")
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw failure("unpaired surrogate in a \\u escape") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(code) {
                        throw failure("unpaired surrogate in a \\u escape")
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw failure("invalid \\u escape") }
                    scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                default:
                    throw failure("invalid escape")
                }
            }
            throw failure("unterminated string", at: start - 1)
        }
    }
}

// MARK: Codable and operation bodies

extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        if var array = try? decoder.unkeyedContainer() {
            var elements: [JSONValue] = []
            while !array.isAtEnd { elements.append(try array.decode(JSONValue.self)) }
            self = .array(elements)
            return
        }
        if let object = try? decoder.container(keyedBy: AnyCodingKey.self) {
            var members: [String: JSONValue] = [:]
            for key in object.allKeys { members[key.stringValue] = try object.decode(JSONValue.self, forKey: key) }
            self = .object(members)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let flag = try? single.decode(Bool.self) {
            self = .bool(flag)
        } else if let number = try? single.decode(Double.self) {
            self = .number(number)
        } else {
            self = .string(try single.decode(String.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var single = encoder.singleValueContainer()
            try single.encodeNil()
        case .bool(let flag):
            var single = encoder.singleValueContainer()
            try single.encode(flag)
        case .number(let number):
            var single = encoder.singleValueContainer()
            if number == number.rounded(), abs(number) < 9.007_199_254_740_992e15 { try single.encode(Int64(number)) } else { try single.encode(number) }
        case .string(let text):
            var single = encoder.singleValueContainer()
            try single.encode(text)
        case .array(let elements):
            var array = encoder.unkeyedContainer()
            for element in elements { try array.encode(element) }
        case .object(let members):
            var object = encoder.container(keyedBy: AnyCodingKey.self)
            for key in members.keys.sorted() { try object.encode(members[key]!, forKey: AnyCodingKey(key)) }
        }
    }
}

/// A body of any JSON value, parsed by ``JSONValue/parse(_:maximumDepth:)`` (the host sends it here
/// instead of through `JSONDecoder`); an operation returning a ``JSONValue`` has it written by
/// ``JSONValue/serialized()``.
extension JSONValue: RawBodyInput {
    public static var acceptedMediaTypes: [String] { ["application/json"] }

    public init(bytes: ByteBuffer, contentType: String) throws {
        self = try JSONValue.parse(bytes)
    }
}

/// An output type that writes its own JSON, faster than `JSONEncoder`: the host calls
/// ``writeJSON(into:)`` instead of encoding it, while the OpenAPI document still describes the type
/// from its `Codable` shape. The two must agree: a conforming type guarantees that what it writes
/// decodes as the type.
package protocol JSONWritable: Encodable {
    func writeJSON(into bytes: inout [UInt8])
}

/// How an operation's output of type `T` writes itself, prepared once per operation.
enum JSONWriter {
    typealias Writer<T> = @Sendable (borrowing T, inout [UInt8]) -> Void

    /// When `T` is ``JSONWritable``, a function that writes a value of it; nil otherwise.
    static func writer<T>(for type: T.Type) -> Writer<T>? {
        guard type is any JSONWritable.Type else { return nil }
        return { value, bytes in (copy value as? any JSONWritable)?.writeJSON(into: &bytes) }
    }
}

/// A reply that is JSON already: the host sends `bytes` as `application/json` without encoding
/// them again, and the OpenAPI document describes it as any JSON value. For operations that splice
/// stored JSON into their replies instead of parsing and re-encoding it; the operation guarantees
/// the bytes are one valid JSON value.
package struct JSONDocument: Encodable, Sendable {
    package var bytes: ByteBuffer

    package init(bytes: ByteBuffer) {
        self.bytes = bytes
    }

    package init(_ value: JSONValue) {
        bytes = value.serialized()
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(try JSONValue.parse(bytes, maximumDepth: 512))
    }
}

/// A coding key made from any string.
package struct AnyCodingKey: CodingKey, Hashable, Sendable {
    package var stringValue: String
    package var intValue: Int?
    package init(_ string: String) { stringValue = string }
    package init?(stringValue: String) { self.stringValue = stringValue }
    package init?(intValue: Int) {
        stringValue = String(intValue)
        self.intValue = intValue
    }
}

extension JSONValue {
    /// The JSON of an `Encodable` value (members in the order the value encodes them, RFC 3339
    /// dates), for the places that hold JSON as a value: a live push that embeds a reply, a schema
    /// given to the OpenAPI document.
    public init(encoding value: some Encodable) throws {
        self = try JSONValue.parse(JSONStreamEncoder.encodeBuffer(value), maximumDepth: 512)
    }
}
