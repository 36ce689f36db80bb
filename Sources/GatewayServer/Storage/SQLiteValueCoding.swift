import Foundation
import GatewaySupport

/// Swift values to SQLite's and back, as SQLiteKit stored them (files the gateway wrote before
/// read the same):
///
/// - text, integers, `Double`/`Float` as `REAL`, `Bool` as 0 or 1, `Data` as a `BLOB`, a `Date`
///   as `REAL` seconds since 1970 (read back from `REAL`, `INTEGER` or ISO 8601 text, to the
///   microsecond);
/// - any other value that encodes as one value (`UUID`, a `RawRepresentable` enum) as that value;
/// - any other (a struct, an array) as JSON text, written and read by Foundation's default
///   `JSONEncoder`/`JSONDecoder`.
///
/// Reading, a `String` takes integers and reals as their text; integers take only `INTEGER`s
/// that fit; `Double` takes integers too; `Bool` takes a value whose integer is 0 or 1.
enum SQLiteValueCoding {
    static func encode(_ value: any Encodable) throws -> StatementValue {
        switch value {
        case let text as String: return .text(text)
        case let boolean as Bool: return .integer(boolean ? 1 : 0)
        case let real as Double: return .real(real)
        case let real as Float: return .real(Double(real))
        case let date as Date: return .real(date.timeIntervalSince1970)
        case let data as Data: return .blob(data)
        case let integer as any FixedWidthInteger:
            guard let exact = Int64(exactly: integer) else {
                throw EncodingError.invalidValue(integer, .init(codingPath: [], debugDescription: "\(integer) does not fit SQLite's 64-bit integer"))
            }
            return .integer(exact)
        default:
            let encoder = ValueEncoder()
            try value.encode(to: encoder)
            if !encoder.isComposite, let single = encoder.value { return single }
            return .text(String(decoding: try JSONEncoder().encode(value), as: UTF8.self))
        }
    }

    static func decode<T: Decodable>(_ type: T.Type, from value: StatementValue) throws -> T {
        func mismatch() -> DecodingError {
            .typeMismatch(T.self, .init(codingPath: [], debugDescription: "Could not convert SQLite data to \(T.self): \(value)."))
        }
        switch type {
        case is String.Type:
            switch value {
            case .text(let text): return text as! T
            case .integer(let integer): return String(integer) as! T
            case .real(let real): return String(real) as! T
            case .blob, .null: throw mismatch()
            }
        case let integerType as any FixedWidthInteger.Type:
            guard case .integer(let integer) = value, let exact = integerType.init(exactly: integer) else { throw mismatch() }
            return exact as! T
        case is Double.Type, is Float.Type:
            let real: Double
            switch value {
            case .integer(let integer): real = Double(integer)
            case .real(let value): real = value
            default: throw mismatch()
            }
            return (type == Float.self ? Float(real) as Any : real as Any) as! T
        case is Bool.Type:
            switch integer(of: value) {
            case 0: return false as! T
            case 1: return true as! T
            default: throw mismatch()
            }
        case is Date.Type:
            guard let date = date(from: value) else { throw mismatch() }
            return date as! T
        case is Data.Type:
            guard case .blob(let data) = value else { throw mismatch() }
            return data as! T
        default:
            do {
                return try T(from: ValueDecoder(value: value))
            } catch is Composite {
                let bytes: Data
                switch value {
                case .text(let text): bytes = Data(text.utf8)
                case .blob(let data): bytes = data
                case .integer(let integer): bytes = Data(String(integer).utf8)
                case .real(let real): bytes = Data(String(real).utf8)
                case .null: bytes = Data()
                }
                return try JSONDecoder().decode(T.self, from: bytes)
            }
        }
    }

    /// The value as an integer, converting reals and text (as SQLiteNIO's `integer` did).
    private static func integer(of value: StatementValue) -> Int64? {
        switch value {
        case .integer(let integer): integer
        case .real(let real): Int64(exactly: real.rounded(.towardZero))
        case .text(let text): Int64(text)
        case .blob, .null: nil
        }
    }

    private static func date(from value: StatementValue) -> Date? {
        let seconds: Double
        switch value {
        case .real(let real): seconds = real
        case .integer(let integer): seconds = Double(integer)
        case .text(let text):
            return (try? Date(text, strategy: .iso8601))
                ?? (try? Date(text, strategy: .iso8601.dateTimeSeparator(.space)))
                ?? (try? Date(text, strategy: .iso8601.dateTimeSeparator(.space).year().month().day().time(includingFractionalSeconds: false)))
                ?? (try? Date(text, strategy: .iso8601.year().month().day()))
        case .blob, .null: return nil
        }
        // To the microsecond, so that a date read back equals the one written.
        let sinceReference = seconds - Date.timeIntervalBetween1970AndReferenceDate
        return Date(timeIntervalSinceReferenceDate: (sinceReference * 1e6).rounded() / 1e6)
    }

    /// Thrown where a value asks for a keyed or unkeyed container: it is JSON.
    private struct Composite: Error {}

    /// Encodes one value; a value that asks for a container is marked composite (and written as JSON).
    private final class ValueEncoder: Encoder, SingleValueEncodingContainer {
        var codingPath: [any CodingKey] { [] }
        var userInfo: [CodingUserInfoKey: Any] { [:] }
        var value: StatementValue?
        var isComposite = false

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            isComposite = true
            return KeyedEncodingContainer(IgnoredKeyedContainer<Key>())
        }

        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            isComposite = true
            return IgnoredUnkeyedContainer()
        }

        func singleValueContainer() -> any SingleValueEncodingContainer { self }
        func encodeNil() throws { value = .null }
        func encode<T: Encodable>(_ value: T) throws { self.value = try SQLiteValueCoding.encode(value) }
    }

    /// Takes what a composite value encodes, and drops it (it is written as JSON instead).
    private struct IgnoredKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        var codingPath: [any CodingKey] { [] }
        mutating func encodeNil(forKey key: Key) throws {}
        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {}
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
            KeyedEncodingContainer(IgnoredKeyedContainer<NestedKey>())
        }
        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer { IgnoredUnkeyedContainer() }
        mutating func superEncoder() -> any Encoder { ValueEncoder() }
        mutating func superEncoder(forKey key: Key) -> any Encoder { ValueEncoder() }
    }

    private struct IgnoredUnkeyedContainer: UnkeyedEncodingContainer {
        var codingPath: [any CodingKey] { [] }
        var count = 0
        mutating func encodeNil() throws { count += 1 }
        mutating func encode<T: Encodable>(_ value: T) throws { count += 1 }
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
            KeyedEncodingContainer(IgnoredKeyedContainer<NestedKey>())
        }
        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { IgnoredUnkeyedContainer() }
        mutating func superEncoder() -> any Encoder { ValueEncoder() }
    }

    /// Decodes one value; a value that asks for a container throws ``Composite`` (it is read as JSON).
    private struct ValueDecoder: Decoder, SingleValueDecodingContainer {
        let value: StatementValue
        var codingPath: [any CodingKey] { [] }
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> { throw Composite() }
        func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw Composite() }
        func singleValueContainer() throws -> any SingleValueDecodingContainer { self }
        func decodeNil() -> Bool { value == .null }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try SQLiteValueCoding.decode(T.self, from: value) }
    }
}
