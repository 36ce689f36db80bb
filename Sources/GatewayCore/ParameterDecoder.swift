import Foundation

/// Named string parameters as the pipeline has them: path parameters by name, or query
/// parameters in request order (a name may repeat). Read in place: a request's few parameters are
/// searched rather than regrouped into a dictionary of arrays first.
enum ParameterValues {
    case named([String: String])
    case pairs([(name: String, value: String)])

    /// The last value of `name` (a repeated scalar parameter takes its last value), or nil.
    func last(_ name: String) -> String? {
        switch self {
        case .named(let values):
            return values[name]
        case .pairs(let pairs):
            for index in pairs.indices.reversed() where pairs[index].name == name { return pairs[index].value }
            return nil
        }
    }

    /// Every value of `name` in order, or nil when it is absent.
    func all(_ name: String) -> [String]? {
        switch self {
        case .named(let values):
            return values[name].map { [$0] }
        case .pairs(let pairs):
            let found = pairs.lazy.filter { $0.name == name }.map(\.value)
            return found.isEmpty ? nil : Array(found)
        }
    }

    var names: [String] {
        switch self {
        case .named(let values): Array(values.keys)
        case .pairs(let pairs): pairs.map(\.name)
        }
    }
}

/// Decodes a `Decodable` value from string parameters (path or query): each property is one
/// parameter, converted from text to its declared type. Arrays take repeated parameters
/// (`tag=a&tag=b`) or one comma-separated value (`tag=a,b`). Failures are `DecodingError`s with the
/// parameter's name in the coding path, so the caller can point at it.
struct ParameterDecoder: Decoder {
    let values: ParameterValues
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(KeyedParameters<Key>(values: values, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: codingPath, debugDescription: "parameters are named, not a list"))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw DecodingError.typeMismatch(Any.self, .init(codingPath: codingPath, debugDescription: "parameters are named"))
    }
}

private struct KeyedParameters<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let values: ParameterValues
    let codingPath: [any CodingKey]
    var allKeys: [Key] {
        var seen = Set<String>()
        return values.names.filter { seen.insert($0).inserted }.compactMap { Key(stringValue: $0) }
    }

    func contains(_ key: Key) -> Bool { values.last(key.stringValue) != nil }

    func decodeNil(forKey key: Key) throws -> Bool { values.last(key.stringValue) == nil }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard let texts = values.all(key.stringValue) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "missing parameter"))
        }
        return try ParameterValueDecoder(texts: texts, codingPath: codingPath + [key]).decode(type)
    }

    // The common types directly: no decoder and no coding path per parameter unless it fails
    // (the general path then throws the error, with the same message).
    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        guard let text = values.last(key.stringValue) else { return try decode(type as (any Decodable.Type), key) as! String }
        return text
    }

    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
        values.last(key.stringValue)
    }

    func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
        if let text = values.last(key.stringValue), let value = Int(text) { return value }
        return try decode(type as (any Decodable.Type), key) as! Int
    }

    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? {
        guard let text = values.last(key.stringValue) else { return nil }
        if let value = Int(text) { return value }
        return try decode(type as (any Decodable.Type), key) as? Int
    }

    /// The general path for `type`, which throws the precise error.
    private func decode(_ type: any Decodable.Type, _ key: Key) throws -> any Decodable {
        func open<T: Decodable>(_ type: T.Type) throws -> T { try decode(type, forKey: key) }
        return try open(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        throw DecodingError.typeMismatch([String: Any].self, .init(codingPath: codingPath + [key], debugDescription: "parameters cannot nest"))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ParameterValueDecoder(texts: values.all(key.stringValue) ?? [], codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { ParameterDecoder(values: values, codingPath: codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        ParameterValueDecoder(texts: values.all(key.stringValue) ?? [], codingPath: codingPath + [key])
    }
}

/// One parameter's value (or values, for arrays).
private struct ParameterValueDecoder: Decoder, SingleValueDecodingContainer {
    let texts: [String]
    var codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        throw DecodingError.typeMismatch([String: Any].self, .init(codingPath: codingPath, debugDescription: "expected a single value"))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let items = texts.count == 1 ? texts[0].split(separator: ",", omittingEmptySubsequences: false).map(String.init) : texts
        return ParameterList(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    private var text: String { texts.last ?? "" }

    private func mismatch<T>(_ type: T.Type) -> DecodingError {
        .typeMismatch(type, .init(codingPath: codingPath, debugDescription: "'\(text.prefix(64))' is not valid here"))
    }

    func decodeNil() -> Bool { texts.isEmpty }
    func decode(_ type: Bool.Type) throws -> Bool {
        switch text.lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default: throw mismatch(type)
        }
    }
    func decode(_ type: String.Type) throws -> String { text }
    func decode(_ type: Double.Type) throws -> Double {
        guard let value = Double(text), value.isFinite else { throw mismatch(type) }
        return value
    }
    func decode(_ type: Float.Type) throws -> Float {
        guard let value = Float(text), value.isFinite else { throw mismatch(type) }
        return value
    }
    func decode<T: FixedWidthInteger & Decodable>(integer type: T.Type) throws -> T {
        guard let value = T(text) else { throw mismatch(type) }
        return value
    }
    func decode(_ type: Int.Type) throws -> Int { try decode(integer: type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try decode(integer: type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try decode(integer: type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decode(integer: type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decode(integer: type) }
    func decode(_ type: UInt.Type) throws -> UInt { try decode(integer: type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decode(integer: type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decode(integer: type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decode(integer: type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decode(integer: type) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == Date.self {
            guard let date = UTCTimestamp.date(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "'\(text.prefix(64))' is not an RFC 3339 timestamp"))
            }
            return date as! T
        }
        return try T(from: self)
    }
}

private struct ParameterList: UnkeyedDecodingContainer {
    let items: [String]
    let codingPath: [any CodingKey]
    var currentIndex = 0
    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    private struct Index: CodingKey {
        var intValue: Int?
        var stringValue: String { String(intValue ?? 0) }
        init(_ value: Int) { intValue = value }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.intValue = intValue }
    }

    mutating func decodeNil() throws -> Bool { false }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "no more values"))
        }
        defer { currentIndex += 1 }
        return try ParameterValueDecoder(texts: [items[currentIndex]], codingPath: codingPath + [Index(currentIndex)]).decode(type)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        throw DecodingError.typeMismatch([String: Any].self, .init(codingPath: codingPath, debugDescription: "parameters cannot nest"))
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: codingPath, debugDescription: "parameters cannot nest"))
    }
    mutating func superDecoder() throws -> any Decoder {
        ParameterValueDecoder(texts: [items[currentIndex]], codingPath: codingPath)
    }
}
