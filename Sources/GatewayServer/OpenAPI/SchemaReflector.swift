import Foundation
import GatewayCore
import NIOCore
import OpenAPIKit

/// A type whose values are a fixed set of names, described in the OpenAPI document as a string
/// `enum`.
///
/// String-backed `CaseIterable` enums need not conform: ``SchemaReflector`` finds their cases by
/// itself. Conform types it cannot see through — a struct wrapping a validated name, an enum with a
/// hand-written `init(from:)` — so the document lists the accepted values. A conforming type
/// guarantees that `allCaseNames` is not empty and that decoding its first name from a JSON string
/// succeeds.
public protocol SchemaEnumerable {
    /// Every name a client may send or receive, in the order the document should show them.
    static var allCaseNames: [String] { get }
}

/// Describes `Decodable` types as JSON Schemas by watching what their `init(from:)` asks for.
///
/// The reflector runs the type's decoding against a decoder that answers every request with a
/// placeholder value and writes down each key, the type it was asked as, and whether it was asked
/// optionally (`decodeIfPresent`, `contains`) or not (`decode`). Nothing is ever decoded from real
/// data, so types need no extra conformance to appear in the document.
///
/// It guarantees to return a schema for every type, whatever its decoding does: a type that
/// refers to itself is described down to the first repetition and then as a plain object, and a type
/// whose `init(from:)` rejects the placeholders keeps every key it asked for before it threw.
///
/// Recognised shapes: `String`; `Bool`; every `Int`/`UInt` width (integer); `Double`, `Float` and
/// `Decimal` (number); `Date` (RFC 3339 `date-time`); `URL` (`uri`); `UUID` (`uuid`); `Data` (base64
/// text); arrays and sets; `[String: X]` dictionaries and types that read arbitrary keys (an object
/// with `additionalProperties`); `Optional`; nested types; string- or integer-backed `CaseIterable`
/// enums and ``SchemaEnumerable`` types (`enum`).
public enum SchemaReflector {
    /// How deep nested types are followed before the rest is described as a plain object.
    public static let maximumDepth = 16

    /// The JSON Schema of values of `type` as clients send them.
    public static func schema(for type: any Decodable.Type) -> JSONSchema {
        ReflectionSession(maximumDepth: maximumDepth).schema(of: type, depth: 0).requiredSchemaObject()
    }

    /// The JSON Schema of values of an output type.
    ///
    /// Outputs only promise `Encodable`; those that are also `Decodable` (most are) are reflected,
    /// a ``RawReply`` is a string, and any other type is described as an object without properties.
    public static func schema(forOutput type: any Encodable.Type) -> JSONSchema {
        if type == RawReply.self { return .string }
        if let decodable = type as? any Decodable.Type { return schema(for: decodable) }
        return .object(description: "A JSON object; its fields are not described.")
    }

    /// The flat fields of a path or query parameter type, in declaration order.
    ///
    /// A field is required when the type decodes it with `decode`, optional when it uses
    /// `decodeIfPresent` (an optional property) or checks `contains` first. ``NoInput`` has none.
    public static func parameters(of type: any Decodable.Type) -> [(name: String, schema: JSONSchema, required: Bool)] {
        if type == NoInput.self { return [] }
        // A parameter is text, never JSON null: its optional members are not nullable.
        let session = ReflectionSession(maximumDepth: maximumDepth, optionalsAreNullable: false)
        guard let object = session.schema(of: type, depth: 0).requiredSchemaObject().objectContext else { return [] }
        return object.properties.map { name, schema in
            (name: name, schema: schema.requiredSchemaObject(), required: schema.required)
        }
    }
}

// MARK: - The recording

/// Everything learned about one value while its type decoded itself.
private final class ValueRecord {
    enum Shape {
        /// Nothing asked yet: the type decodes no data at all.
        case unknown
        /// A leaf whose schema is already known.
        case leaf(JSONSchema)
        case keyed
        case unkeyed
    }

    struct Property {
        var record: ValueRecord
        var required: Bool
    }

    var shape: Shape = .unknown
    var propertyNames: [String] = []
    var properties: [String: Property] = [:]
    /// The value schema of keys the type iterated through `allKeys`: it reads arbitrary keys.
    var additionalProperties: ValueRecord?
    var items: [ValueRecord] = []
    var nullable = false
    /// The declared rules of the fields (``ValidatableInput``), by name.
    var rules: [String: FieldRule] = [:]
    /// Member sets of which one must be present (``ValidatableInput/requiredAlternatives``).
    var requiredAlternatives: [[String]] = []

    init() {}

    init(schema: JSONSchema) {
        shape = .leaf(schema)
    }

    func becomeKeyed() {
        if case .unknown = shape { shape = .keyed }
    }

    func becomeUnkeyed() {
        if case .unknown = shape { shape = .unkeyed }
    }

    /// Records that `name` was asked for; a key asked optionally even once stays optional.
    @discardableResult
    func property(_ name: String, required: Bool, record: ValueRecord? = nil) -> ValueRecord {
        if var existing = properties[name] {
            existing.required = existing.required && required
            if let record { existing.record = record }
            properties[name] = existing
            return existing.record
        }
        let property = Property(record: record ?? ValueRecord(), required: required)
        propertyNames.append(name)
        properties[name] = property
        return property.record
    }

    var schema: JSONSchema {
        let result: JSONSchema
        switch shape {
        case .leaf(let schema):
            result = schema
        case .unknown, .keyed:
            var described: OrderedDictionary<String, JSONSchema> = [:]
            for name in propertyNames {
                guard let property = properties[name] else { continue }
                var schema = property.record.schema
                if let rule = rules[name] { schema = schema.adding(rule.keywords) }
                described[name] = property.required ? schema.requiredSchemaObject() : schema.optionalSchemaObject()
            }
            let object = JSONSchema.object(
                properties: described,
                additionalProperties: additionalProperties.map { .b($0.schema.requiredSchemaObject()) }
            )
            // OpenAPIKit reads `anyOf` beside `properties` as the whole schema, so the alternatives
            // go in an `allOf` with the object.
            result = requiredAlternatives.isEmpty ? object : JSONSchema.all(of: [
                object,
                JSONSchema.any(of: requiredAlternatives.map { members in
                    var present: OrderedDictionary<String, JSONSchema> = [:]
                    for member in members { present[member] = .not(.null(), core: .init()) }  // present, and not null
                    return JSONSchema.object(properties: present)
                }),
            ])
        case .unkeyed:
            let itemSchemas = items.map { $0.schema.requiredSchemaObject() }
            if let first = itemSchemas.first, itemSchemas.allSatisfy({ $0 == first }) {
                result = .array(items: first)
            } else if itemSchemas.isEmpty {
                result = .array
            } else {
                // A fixed-length tuple such as `[longitude, latitude]` with mixed types.
                result = .array(prefixItems: itemSchemas)
            }
        }
        return nullable ? result.nullableSchemaObject() : result
    }
}

/// Thrown into a type's `init(from:)` when the reflector cannot make a placeholder of the type it
/// asked for. The type's decoding stops there; what it asked before is kept.
private struct PlaceholderUnavailable: Error {}

/// One reflection: the stack of types being described, to stop at recursion.
private final class ReflectionSession {
    let maximumDepth: Int
    /// Whether a member decoded with `decodeIfPresent` may be null (in JSON, where the decoder
    /// takes null as absent) or only left out (in parameters).
    let optionalsAreNullable: Bool
    private var inProgress: Set<ObjectIdentifier> = []

    init(maximumDepth: Int, optionalsAreNullable: Bool = true) {
        self.maximumDepth = maximumDepth
        self.optionalsAreNullable = optionalsAreNullable
    }

    func schema<T: Decodable>(of type: T.Type, depth: Int) -> JSONSchema {
        probe(type, depth: depth).schema
    }

    /// The schema of `type` and, when one could be made, a placeholder value of it.
    func probe<T: Decodable>(_ type: T.Type, depth: Int) -> (schema: JSONSchema, value: T?) {
        if let (schema, placeholder) = Self.scalar(type) {
            return (schema, placeholder as? T)
        }
        if type == JSONValue.self {
            return (.fragment(description: JSONSchema.anyJSONValue), JSONValue.null as? T)
        }
        if let enumerated = enumeration(type) {
            return enumerated
        }
        if let optional = type as? any OptionalShape.Type {
            let wrapped = schema(of: optional.wrappedType, depth: depth)
            return (wrapped.nullableSchemaObject(), optional.nothing as? T)
        }
        if let array = type as? any ArrayShape.Type {
            let element = schema(of: array.elementType, depth: depth + 1)
            let arraySchema = JSONSchema.array(
                uniqueItems: array.hasUniqueElements ? true : nil,
                items: element.requiredSchemaObject()
            )
            return (arraySchema, array.empty as? T)
        }
        if let dictionary = type as? any StringKeyedDictionaryShape.Type {
            let value = schema(of: dictionary.valueType, depth: depth + 1)
            return (.object(additionalProperties: .b(value.requiredSchemaObject())), dictionary.empty as? T)
        }

        let identity = ObjectIdentifier(type)
        guard !inProgress.contains(identity) else {
            return (.object(description: "A \(type) again; its nesting repeats and is not described further."), nil)
        }
        guard depth < maximumDepth else {
            return (.object(description: "A \(type), nested too deeply to be described here."), nil)
        }
        inProgress.insert(identity)
        defer { inProgress.remove(identity) }

        let record = ValueRecord()
        let decoder = RecordingDecoder(session: self, record: record, depth: depth, codingPath: [])
        // A type may reject the placeholders (a validated value, an enum without known cases);
        // the keys it asked for before throwing are still the best description available.
        let value = try? T(from: decoder)
        if let constrained = type as? any ValidatableInput.Type {
            record.rules = constrained.fieldRules
            record.requiredAlternatives = constrained.requiredAlternatives
        }
        return (record.schema, value)
    }

    /// Types that carry their own JSON shape rather than the one their `Decodable` conformance
    /// would show (a `Date` decodes a number by default, but the gateway sends RFC 3339 strings).
    private static func scalar(_ type: Any.Type) -> (JSONSchema, Any)? {
        switch type {
        case is String.Type: (.string, "")
        case is Bool.Type: (.boolean, false)
        case is Int.Type: (.integer(format: .int64), 0 as Int)
        case is Int8.Type:
            (.integer(format: .int32, maximum: (Int(Int8.max), exclusive: false), minimum: (Int(Int8.min), exclusive: false)), 0 as Int8)
        case is Int16.Type:
            (.integer(format: .int32, maximum: (Int(Int16.max), exclusive: false), minimum: (Int(Int16.min), exclusive: false)), 0 as Int16)
        case is Int32.Type: (.integer(format: .int32), 0 as Int32)
        case is Int64.Type: (.integer(format: .int64), 0 as Int64)
        case is UInt.Type: (.integer(format: .int64, minimum: (0, exclusive: false)), 0 as UInt)
        case is UInt8.Type:
            (.integer(format: .int32, maximum: (Int(UInt8.max), exclusive: false), minimum: (0, exclusive: false)), 0 as UInt8)
        case is UInt16.Type:
            (.integer(format: .int32, maximum: (Int(UInt16.max), exclusive: false), minimum: (0, exclusive: false)), 0 as UInt16)
        case is UInt32.Type:
            (.integer(format: .int64, maximum: (Int(UInt32.max), exclusive: false), minimum: (0, exclusive: false)), 0 as UInt32)
        case is UInt64.Type: (.integer(format: .int64, minimum: (0, exclusive: false)), 0 as UInt64)
        case is Double.Type: (.number(format: .double), 0 as Double)
        case is Float.Type: (.number(format: .float), 0 as Float)
        case is Decimal.Type: (.number, Decimal.zero)
        case is Date.Type: (.string(format: .dateTime), Date(timeIntervalSince1970: 0))
        case is URL.Type: (.string(format: .uri), URL(fileURLWithPath: "/"))
        case is UUID.Type: (.string(format: .uuid), UUID())
        case is Data.Type: (.string(contentEncoding: .base64), Data())
        default: nil
        }
    }

    /// A closed set of values: ``SchemaEnumerable`` types, and `CaseIterable` types whose raw
    /// values are all strings or all integers.
    private func enumeration<T: Decodable>(_ type: T.Type) -> (schema: JSONSchema, value: T?)? {
        if let enumerable = type as? any SchemaEnumerable.Type, let first = enumerable.allCaseNames.first {
            var value: T?
            if let iterable = type as? any CaseIterable.Type { value = Self.firstCase(of: iterable) as? T }
            if value == nil { value = try? T(from: NameDecoder(name: first)) }
            return (.string(allowedValues: enumerable.allCaseNames.map { AnyCodable($0) }), value)
        }
        guard let iterable = type as? any CaseIterable.Type, let rawValues = Self.rawValues(of: iterable) else {
            return nil
        }
        let value = Self.firstCase(of: iterable) as? T
        if let names = rawValues as? [String] {
            return (.string(allowedValues: names.map { AnyCodable($0) }), value)
        }
        if let numbers = rawValues as? [any BinaryInteger] {
            let integers = numbers.compactMap { Int(exactly: $0) }
            guard integers.count == numbers.count else { return nil }
            return (.integer(allowedValues: integers.map { AnyCodable($0) }), value)
        }
        return nil
    }

    private static func firstCase<C: CaseIterable>(of type: C.Type) -> Any? {
        C.allCases.first
    }

    /// The raw values of every case, or nil when the cases are not `RawRepresentable`.
    private static func rawValues<C: CaseIterable>(of type: C.Type) -> [Any]? {
        var values: [Any] = []
        for value in C.allCases {
            guard let representable = value as? any RawRepresentable else { return nil }
            values.append(rawValue(of: representable))
        }
        return values.isEmpty ? nil : values
    }

    private static func rawValue<R: RawRepresentable>(of value: R) -> Any {
        value.rawValue
    }
}

extension JSONSchema {
    /// The description of a member whose type is ``JSONValue`` (any JSON value).
    static let anyJSONValue = "Any JSON value."

    /// This schema with JSON Schema keywords added (a ``FieldRule``'s): the schema goes to JSON
    /// and back, so every keyword OpenAPIKit reads can be given. Nested objects such as `items`
    /// merge member by member. Keywords that would make the schema unreadable are a programming
    /// error in the rule; they are dropped and the schema stays as it was.
    func adding(_ keywords: [String: JSONValue]) -> JSONSchema {
        guard let data = try? JSONEncoder().encode(self),
              case .object(var members)? = try? JSONValue.parse(String(decoding: data, as: UTF8.self))
        else { return self }
        // A member of any JSON value that a rule gives types to is no longer "any JSON value".
        if members["description"] == .string(Self.anyJSONValue), !Set(keywords.keys).isDisjoint(with: ["type", "anyOf", "oneOf", "enum", "const"]) {
            members["description"] = nil
        }
        var merged = JSONValue.object(FieldRule.merge(members, Self.keepingNull(keywords, of: members)))
        // An object with required alternatives is allOf [its members, anyOf [...]]: keywords go
        // to the part with the members (beside allOf they would not be read back).
        if members["properties"] == nil, case .array(var parts)? = members["allOf"],
           let index = parts.firstIndex(where: { if case .object(let part) = $0 { part["properties"] != nil } else { false } }),
           case .object(let part) = parts[index] {
            parts[index] = .object(FieldRule.merge(part, Self.keepingNull(keywords, of: part)))
            var whole = members
            whole["allOf"] = .array(parts)
            merged = .object(whole)
        }
        let required = self.required
        guard let schema = try? JSONDecoder().decode(JSONSchema.self, from: Data(merged.serialized().readableBytesView)) else {
            assertionFailure("the keywords \(keywords) do not make a readable schema")
            return self
        }
        let kept = nullable && !schema.nullable ? schema.nullableSchemaObject() : schema
        return required ? kept.requiredSchemaObject() : kept.optionalSchemaObject()
    }
}

extension JSONSchema {
    /// `keywords` with null added to each `enum` that lands on a schema (or a member of one) that
    /// allows null: a rule listing a member's values does not take away that it may be null.
    fileprivate static func keepingNull(_ keywords: [String: JSONValue], of schema: [String: JSONValue]) -> [String: JSONValue] {
        var keywords = keywords
        if allowsNull(schema), case .array(let values)? = keywords["enum"], !values.contains(.null) {
            keywords["enum"] = .array(values + [.null])
        }
        if case .object(let members)? = keywords["properties"], case .object(let existing)? = schema["properties"] {
            var kept: [String: JSONValue] = [:]
            for (name, rule) in members {
                if case .object(let ruleKeywords) = rule, case .object(let member)? = existing[name] {
                    kept[name] = .object(keepingNull(ruleKeywords, of: member))
                } else {
                    kept[name] = rule
                }
            }
            keywords["properties"] = .object(kept)
        }
        return keywords
    }

    private static func allowsNull(_ schema: [String: JSONValue]) -> Bool {
        switch schema["type"] {
        case .string("null")?: return true
        case .array(let types)?: return types.contains(.string("null"))
        default: return false
        }
    }
}

// MARK: - Recognising generic containers

// Conditional conformances let the reflector see the element type inside `[X]`, `X?` and
// `[String: X]` at run time, where only an `any Decodable.Type` is at hand.

private protocol OptionalShape {
    static var wrappedType: any Decodable.Type { get }
    static var nothing: Self { get }
}

extension Optional: OptionalShape where Wrapped: Decodable {
    fileprivate static var wrappedType: any Decodable.Type { Wrapped.self }
    fileprivate static var nothing: Self { nil }
}

private protocol ArrayShape {
    static var elementType: any Decodable.Type { get }
    static var hasUniqueElements: Bool { get }
    static var empty: Self { get }
}

extension Array: ArrayShape where Element: Decodable {
    fileprivate static var elementType: any Decodable.Type { Element.self }
    fileprivate static var hasUniqueElements: Bool { false }
    fileprivate static var empty: Self { [] }
}

extension Set: ArrayShape where Element: Decodable {
    fileprivate static var elementType: any Decodable.Type { Element.self }
    fileprivate static var hasUniqueElements: Bool { true }
    fileprivate static var empty: Self { [] }
}

private protocol StringKeyedDictionaryShape {
    static var valueType: any Decodable.Type { get }
    static var empty: Self { get }
}

extension Dictionary: StringKeyedDictionaryShape where Key == String, Value: Decodable {
    fileprivate static var valueType: any Decodable.Type { Value.self }
    fileprivate static var empty: Self { [:] }
}

// MARK: - The recording decoder

/// The key under which a type that reads arbitrary keys (`allKeys`) is shown one value, so the
/// reflector learns the type of its values.
private let dynamicKeyName = "additionalProperty"

private struct RecordingDecoder: Decoder {
    let session: ReflectionSession
    let record: ValueRecord
    let depth: Int
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        record.becomeKeyed()
        return KeyedDecodingContainer(RecordingKeyedContainer<Key>(session: session, record: record, depth: depth, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        record.becomeUnkeyed()
        return RecordingUnkeyedContainer(session: session, record: record, depth: depth, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        RecordingSingleValueContainer(session: session, record: record, depth: depth, codingPath: codingPath)
    }
}

private struct RecordingKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let session: ReflectionSession
    let record: ValueRecord
    let depth: Int
    let codingPath: [any CodingKey]

    var allKeys: [Key] {
        // Only key types that accept any string (as a dictionary's do) can name the sample key.
        guard let key = Key(stringValue: dynamicKeyName) else { return [] }
        if record.additionalProperties == nil { record.additionalProperties = ValueRecord() }
        return [key]
    }

    func contains(_ key: Key) -> Bool {
        if !isDynamic(key) { record.property(key.stringValue, required: false) }
        return true
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        if !isDynamic(key) { record.property(key.stringValue, required: false) }
        return false
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        try decodeIfPresent(type, generic: key)
    }

    private func decodeIfPresent<T: Decodable>(_ type: T.Type, generic key: Key) throws -> T? {
        let probed = session.probe(type, depth: depth + 1)
        // `decodeIfPresent` takes null as absent: the member may be left out or null. (A schema
        // without a type already allows null.)
        let schema = probed.schema.jsonType == nil || !session.optionalsAreNullable ? probed.schema : probed.schema.nullableSchemaObject()
        store(schema, for: key, required: false)
        return nil
    }

    private func value<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        let probed = session.probe(type, depth: depth + 1)
        store(probed.schema, for: key, required: true)
        guard let value = probed.value else { throw PlaceholderUnavailable() }
        return value
    }

    private func isDynamic(_ key: Key) -> Bool {
        record.additionalProperties != nil && key.stringValue == dynamicKeyName && key.intValue == nil
    }

    private func store(_ schema: JSONSchema, for key: Key, required: Bool) {
        if isDynamic(key) {
            record.additionalProperties = ValueRecord(schema: schema)
        } else {
            record.property(key.stringValue, required: required, record: ValueRecord(schema: schema))
        }
    }

    // The typed `decodeIfPresent`s would otherwise go through `contains` and `decode` (required,
    // not nullable): they go where the generic one does.
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try decodeIfPresent(type as Bool.Type, generic: key) }
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try decodeIfPresent(type as String.Type, generic: key) }
    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? { try decodeIfPresent(type as Double.Type, generic: key) }
    func decodeIfPresent(_ type: Float.Type, forKey key: Key) throws -> Float? { try decodeIfPresent(type as Float.Type, generic: key) }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try decodeIfPresent(type as Int.Type, generic: key) }
    func decodeIfPresent(_ type: Int8.Type, forKey key: Key) throws -> Int8? { try decodeIfPresent(type as Int8.Type, generic: key) }
    func decodeIfPresent(_ type: Int16.Type, forKey key: Key) throws -> Int16? { try decodeIfPresent(type as Int16.Type, generic: key) }
    func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { try decodeIfPresent(type as Int32.Type, generic: key) }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try decodeIfPresent(type as Int64.Type, generic: key) }
    func decodeIfPresent(_ type: UInt.Type, forKey key: Key) throws -> UInt? { try decodeIfPresent(type as UInt.Type, generic: key) }
    func decodeIfPresent(_ type: UInt8.Type, forKey key: Key) throws -> UInt8? { try decodeIfPresent(type as UInt8.Type, generic: key) }
    func decodeIfPresent(_ type: UInt16.Type, forKey key: Key) throws -> UInt16? { try decodeIfPresent(type as UInt16.Type, generic: key) }
    func decodeIfPresent(_ type: UInt32.Type, forKey key: Key) throws -> UInt32? { try decodeIfPresent(type as UInt32.Type, generic: key) }
    func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? { try decodeIfPresent(type as UInt64.Type, generic: key) }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(type, forKey: key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(type, forKey: key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(type, forKey: key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try value(type, forKey: key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(type, forKey: key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try value(type, forKey: key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try value(type, forKey: key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(type, forKey: key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(type, forKey: key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try value(type, forKey: key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try value(type, forKey: key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try value(type, forKey: key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try value(type, forKey: key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(type, forKey: key) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(type, forKey: key) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try child(for: key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try child(for: key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        // A subclass and its superclass share one JSON object.
        RecordingDecoder(session: session, record: record, depth: depth, codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        child(for: key)
    }

    private func child(for key: Key) -> RecordingDecoder {
        let nested: ValueRecord
        if isDynamic(key) {
            nested = ValueRecord()
            record.additionalProperties = nested
        } else {
            nested = record.property(key.stringValue, required: true)
        }
        return RecordingDecoder(session: session, record: nested, depth: depth + 1, codingPath: codingPath + [key])
    }
}

private struct RecordingUnkeyedContainer: UnkeyedDecodingContainer {
    let session: ReflectionSession
    let record: ValueRecord
    let depth: Int
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(session: ReflectionSession, record: ValueRecord, depth: Int, codingPath: [any CodingKey]) {
        self.session = session
        self.record = record
        self.depth = depth
        self.codingPath = codingPath
    }

    var count: Int? { nil }
    // One element tells the item type; a loop over the container stops after it, while a type
    // that reads a fixed number of elements still gets an answer for each.
    var isAtEnd: Bool { currentIndex > 0 }

    mutating func decodeNil() throws -> Bool { false }

    private mutating func element<T: Decodable>(_ type: T.Type) throws -> T {
        let probed = session.probe(type, depth: depth + 1)
        record.items.append(ValueRecord(schema: probed.schema))
        currentIndex += 1
        guard let value = probed.value else { throw PlaceholderUnavailable() }
        return value
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try element(type) }
    mutating func decode(_ type: String.Type) throws -> String { try element(type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try element(type) }
    mutating func decode(_ type: Float.Type) throws -> Float { try element(type) }
    mutating func decode(_ type: Int.Type) throws -> Int { try element(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try element(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try element(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try element(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try element(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try element(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try element(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try element(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try element(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try element(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try element(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try nextChild().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try nextChild().unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        nextChild()
    }

    private mutating func nextChild() -> RecordingDecoder {
        let nested = ValueRecord()
        record.items.append(nested)
        currentIndex += 1
        return RecordingDecoder(session: session, record: nested, depth: depth + 1, codingPath: codingPath)
    }
}

private struct RecordingSingleValueContainer: SingleValueDecodingContainer {
    let session: ReflectionSession
    let record: ValueRecord
    let depth: Int
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool {
        record.nullable = true
        return false
    }

    private func single<T: Decodable>(_ type: T.Type) throws -> T {
        // A wrapper decoding its one value is described as that value.
        let probed = session.probe(type, depth: depth + 1)
        record.shape = .leaf(probed.schema)
        guard let value = probed.value else { throw PlaceholderUnavailable() }
        return value
    }

    func decode(_ type: Bool.Type) throws -> Bool { try single(type) }
    func decode(_ type: String.Type) throws -> String { try single(type) }
    func decode(_ type: Double.Type) throws -> Double { try single(type) }
    func decode(_ type: Float.Type) throws -> Float { try single(type) }
    func decode(_ type: Int.Type) throws -> Int { try single(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try single(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try single(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try single(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try single(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try single(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try single(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try single(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try single(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try single(type) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try single(type) }
}

/// Decodes one name, to make a placeholder of a ``SchemaEnumerable`` type that is not `CaseIterable`.
private struct NameDecoder: Decoder, SingleValueDecodingContainer {
    let name: String
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        throw DecodingError.typeMismatch([String: Any].self, .init(codingPath: [], debugDescription: "a name is a string"))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: [], debugDescription: "a name is a string"))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func decodeNil() -> Bool { false }

    private func named<T>(_ type: T.Type) throws -> T {
        if let name = name as? T { return name }
        throw DecodingError.typeMismatch(type, .init(codingPath: [], debugDescription: "a name is a string"))
    }

    func decode(_ type: Bool.Type) throws -> Bool { try named(type) }
    func decode(_ type: String.Type) throws -> String { name }
    func decode(_ type: Double.Type) throws -> Double { try named(type) }
    func decode(_ type: Float.Type) throws -> Float { try named(type) }
    func decode(_ type: Int.Type) throws -> Int { try named(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try named(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try named(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try named(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try named(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try named(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try named(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try named(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try named(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try named(type) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try named(type) }
}
