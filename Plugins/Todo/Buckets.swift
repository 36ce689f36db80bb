import Foundation
import GatewayCore

/// Who may create objects in a bucket.
enum CreatePolicy: String, Codable, Sendable, CaseIterable {
    /// Guests too; their objects are readable and writable by anyone (as the legacy service did).
    case anyone
    /// Signed-in users and keys owned by a user.
    case authenticated
    /// Administrators (and a dialect's master key) only.
    case admin
}

/// A bucket's settings, as plugins.yaml or an administrator declares them.
struct BucketSettings: Codable, Sendable {
    /// Who may create objects (default `authenticated`).
    var create: CreatePolicy?
    /// A JSON Schema the objects must satisfy (the subset ``ObjectSchema`` understands).
    var schema: ObjectSchema?
    /// Fields to index: `done`, `updatedAt`, or a compound `done,updatedAt`.
    var index: [String]?
    /// What the bucket is for.
    var description: String?
    /// The ACL of an object created without one: who besides its owner reads it, and writes it
    /// (default: nobody for a user's object, everyone for a guest's).
    var readers: [String]?
    var writers: [String]?
    /// The bucket's own ACL as the NEC BaaS dialect shows it (`{owner, r, w, u, d, admin}`); kept for
    /// its clients, managed with the master key.
    var acl: JSONValue?
}

/// A bucket: a named set of objects with its rules.
struct Bucket: Sendable {
    var name: String
    var create: CreatePolicy
    var schema: ObjectSchema?
    /// The indexes, each a list of fields after the bucket.
    var indexes: [[QueryField]]
    /// The index specs as declared.
    var indexSpecs: [String]
    /// Declared in plugins.yaml (and so not changeable through the API).
    var configured: Bool
    var description: String?
    /// The ACL of objects created without one (nil: the store's default).
    var defaultACL: ObjectACL?
    var acl: JSONValue?
    /// The tenant whose master key created it through the dialect (nil: plugins.yaml or an administrator).
    var tenant: String?

    static let maximumIndexes = 8

    /// Bucket names: a letter, then letters, digits, `_` or `-`, 40 at most.
    static func nameProblem(_ name: String) -> String? {
        guard let first = name.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic, name.utf8.count <= 40,
              name.unicodeScalars.allSatisfy(\.isNameCharacter) else {
            return "must start with a letter and hold 1 to 40 letters, digits, '_' or '-'"
        }
        return nil
    }

    init(name: String, settings: BucketSettings, configured: Bool) throws(QueryProblem) {
        if let problem = Self.nameProblem(name) { throw QueryProblem("bucket name '\(name)' \(problem)") }
        self.name = name
        create = settings.create ?? .authenticated
        schema = settings.schema
        self.configured = configured
        indexSpecs = settings.index ?? []
        description = settings.description
        acl = settings.acl
        if settings.readers != nil || settings.writers != nil {
            for entry in (settings.readers ?? []) + (settings.writers ?? []) {
                if let problem = ObjectACL.entryProblem(entry) { throw QueryProblem("'\(entry)' \(problem)") }
            }
            defaultACL = ObjectACL(readers: settings.readers ?? [], writers: settings.writers ?? [])
        }
        guard indexSpecs.count <= Self.maximumIndexes else { throw QueryProblem("index: at most \(Self.maximumIndexes) indexes per bucket") }
        var indexes: [[QueryField]] = []
        for spec in indexSpecs {
            let names = spec.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            guard !names.isEmpty, names.count <= 4 else { throw QueryProblem("index '\(spec)' must name 1 to 4 fields") }
            var fields: [QueryField] = []
            for name in names { fields.append(try QueryField(parsing: name)) }
            indexes.append(fields)
        }
        // An index that is a prefix of another adds writes and serves no query the longer one cannot.
        self.indexes = indexes.enumerated().filter { index, fields in
            !indexes.enumerated().contains { other, longer in
                other != index && (longer.count > fields.count || (longer.count == fields.count && other < index)) && Array(longer.prefix(fields.count)) == fields
            }
        }.map(\.element)
    }

    var settings: BucketSettings {
        BucketSettings(create: create, schema: schema, index: indexSpecs, description: description, readers: defaultACL?.readers,
                       writers: defaultACL?.writers, acl: acl)
    }

    /// The database index name for `fields`: stable, at most 63 characters.
    func indexName(_ fields: [QueryField]) -> String {
        var hash: UInt32 = 2_166_136_261
        for byte in (name + "|" + fields.map(\.name).joined(separator: ",")).utf8 {
            hash = (hash ^ UInt32(byte)) &* 16_777_619
        }
        let safe = String(name.lowercased().map { $0 == "-" ? "_" : $0 }.prefix(40))
        return "todo_ix_\(safe)_\(String(hash, radix: 16))"
    }
}

/// The JSON Schema subset buckets use to check objects: `type` (one or several), `properties`,
/// `required`, `additionalProperties` (true/false), `enum`, `minLength`/`maxLength`,
/// `minimum`/`maximum`, `items`, `minItems`/`maxItems`, `format` (`date`, `date-time`,
/// `email`) and `default` (applied to missing top-level fields when an object is created).
final class ObjectSchema: Codable, Sendable {
    let type: [String]?
    let properties: [String: ObjectSchema]?
    let required: [String]?
    let additionalProperties: Bool?
    let enumeration: [JSONValue]?
    let minLength: Int?
    let maxLength: Int?
    let minimum: Double?
    let maximum: Double?
    let items: ObjectSchema?
    let minItems: Int?
    let maxItems: Int?
    let format: String?
    let defaultValue: JSONValue?
    let description: String?

    static let types: Set<String> = ["object", "array", "string", "number", "integer", "boolean", "null"]
    static let formats: Set<String> = ["date", "date-time", "email"]

    enum CodingKeys: String, CodingKey {
        case type, properties, required, additionalProperties, minLength, maxLength, minimum, maximum, items, minItems, maxItems, format, description
        case enumeration = "enum"
        case defaultValue = "default"
    }

    required init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let single = try? container.decodeIfPresent(String.self, forKey: .type) {
            type = [single]
        } else {
            type = try container.decodeIfPresent([String].self, forKey: .type)
        }
        for name in type ?? [] where !Self.types.contains(name) {
            throw DecodingError.dataCorruptedError(forKey: .type, in: container, debugDescription: "'\(name)' is not a JSON Schema type (\(Self.types.sorted().joined(separator: ", ")))")
        }
        properties = try container.decodeIfPresent([String: ObjectSchema].self, forKey: .properties)
        required = try container.decodeIfPresent([String].self, forKey: .required)
        additionalProperties = try container.decodeIfPresent(Bool.self, forKey: .additionalProperties)
        enumeration = try container.decodeIfPresent([JSONValue].self, forKey: .enumeration)
        minLength = try container.decodeIfPresent(Int.self, forKey: .minLength)
        maxLength = try container.decodeIfPresent(Int.self, forKey: .maxLength)
        minimum = try container.decodeIfPresent(Double.self, forKey: .minimum)
        maximum = try container.decodeIfPresent(Double.self, forKey: .maximum)
        items = try container.decodeIfPresent(ObjectSchema.self, forKey: .items)
        minItems = try container.decodeIfPresent(Int.self, forKey: .minItems)
        maxItems = try container.decodeIfPresent(Int.self, forKey: .maxItems)
        format = try container.decodeIfPresent(String.self, forKey: .format)
        if let format, !Self.formats.contains(format) {
            throw DecodingError.dataCorruptedError(forKey: .format, in: container, debugDescription: "format '\(format)' is not supported (date, date-time, email)")
        }
        defaultValue = try container.decodeIfPresent(JSONValue.self, forKey: .defaultValue)
        description = try container.decodeIfPresent(String.self, forKey: .description)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        if let type { if type.count == 1 { try container.encode(type[0], forKey: .type) } else { try container.encode(type, forKey: .type) } }
        try container.encodeIfPresent(properties, forKey: .properties)
        try container.encodeIfPresent(required, forKey: .required)
        try container.encodeIfPresent(additionalProperties, forKey: .additionalProperties)
        try container.encodeIfPresent(enumeration, forKey: .enumeration)
        try container.encodeIfPresent(minLength, forKey: .minLength)
        try container.encodeIfPresent(maxLength, forKey: .maxLength)
        try container.encodeIfPresent(minimum, forKey: .minimum)
        try container.encodeIfPresent(maximum, forKey: .maximum)
        try container.encodeIfPresent(items, forKey: .items)
        try container.encodeIfPresent(minItems, forKey: .minItems)
        try container.encodeIfPresent(maxItems, forKey: .maxItems)
        try container.encodeIfPresent(format, forKey: .format)
        try container.encodeIfPresent(defaultValue, forKey: .defaultValue)
        try container.encodeIfPresent(description, forKey: .description)
    }

    /// Fills missing top-level fields that have a default.
    func applyDefaults(to object: inout [String: JSONValue]) {
        for (name, property) in properties ?? [:] where object[name] == nil {
            if let value = property.defaultValue { object[name] = value }
        }
    }

    /// Every problem with `value`, each with the JSON pointer of the offending part.
    func problems(with value: JSONValue, at pointer: String = "") -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        var path = Path(base: pointer)
        check(value, path: &path, into: &problems)
        return problems
    }

    /// Where the value being checked is: the reference tokens below `base`, unescaped. The JSON
    /// pointer is written only for a problem, so a valid object costs no pointer strings.
    private struct Path {
        let base: String
        var tokens: [String] = []

        var pointer: String {
            if tokens.isEmpty { return base.isEmpty ? "/" : base }
            return base + tokens.map { "/" + ObjectSchema.escape($0) }.joined()
        }
    }

    private func check(_ value: JSONValue, path: inout Path, into problems: inout [GatewayError.FieldError]) {
        if let type, !type.contains(where: { Self.matches(value, type: $0) }) {
            problems.append(.init(pointer: path.pointer, detail: "must be \(type.map { Self.article($0) }.joined(separator: " or ")), not \(Self.article(value.typeName))"))
            return
        }
        if let enumeration, !enumeration.contains(value) {
            problems.append(.init(pointer: path.pointer, detail: "must be one of \(enumeration.map(\.jsonText).joined(separator: ", "))"))
        }
        switch value {
        case .string(let text):
            // Characters are counted only when the bytes could break a limit: a string has at
            // most as many characters as UTF-8 bytes.
            if let minLength, text.count < minLength { problems.append(.init(pointer: path.pointer, detail: "must be at least \(minLength) characters")) }
            if let maxLength, text.utf8.count > maxLength, text.count > maxLength {
                problems.append(.init(pointer: path.pointer, detail: "must be at most \(maxLength) characters"))
            }
            switch format {
            case "date":
                if text.utf8.count != 10 || Timestamps.parse(text) == nil { problems.append(.init(pointer: path.pointer, detail: "must be a date such as 2026-11-21")) }
            case "date-time":
                if text.utf8.count <= 10 || Timestamps.parse(text) == nil {
                    problems.append(.init(pointer: path.pointer, detail: "must be an RFC 3339 date-time such as 2026-11-21T09:30:00Z"))
                }
            case "email":
                let parts = text.split(separator: "@", omittingEmptySubsequences: false)
                if parts.count != 2 || parts[0].isEmpty || !parts[1].contains(".") { problems.append(.init(pointer: path.pointer, detail: "must be an email address")) }
            default: break
            }
        case .number(let number):
            if let minimum, number < minimum { problems.append(.init(pointer: path.pointer, detail: "must be at least \(JSONValue.number(minimum).jsonText)")) }
            if let maximum, number > maximum { problems.append(.init(pointer: path.pointer, detail: "must be at most \(JSONValue.number(maximum).jsonText)")) }
        case .array(let elements):
            if let minItems, elements.count < minItems { problems.append(.init(pointer: path.pointer, detail: "must hold at least \(minItems) items")) }
            if let maxItems, elements.count > maxItems { problems.append(.init(pointer: path.pointer, detail: "must hold at most \(maxItems) items")) }
            if let items {
                for (index, element) in elements.enumerated() {
                    path.tokens.append(String(index))
                    items.check(element, path: &path, into: &problems)
                    path.tokens.removeLast()
                }
            }
        case .object(let members):
            for name in required ?? [] where members[name] == nil {
                path.tokens.append(name)
                problems.append(.init(pointer: path.pointer, detail: "is required"))
                path.tokens.removeLast()
            }
            // Problems are reported in member-name order; a valid object is checked without
            // sorting its members (checked again in order only when a problem turns up).
            let before = problems.count
            checkMembers(members, path: &path, into: &problems)
            if problems.count > before {
                problems.removeSubrange(before...)
                checkMembers(members.sorted { $0.key < $1.key }, path: &path, into: &problems)
            }
        default: break
        }
    }

    private func checkMembers(_ members: some Sequence<(key: String, value: JSONValue)>, path: inout Path, into problems: inout [GatewayError.FieldError]) {
        for (name, member) in members {
            if let property = properties?[name] {
                path.tokens.append(name)
                property.check(member, path: &path, into: &problems)
                path.tokens.removeLast()
            } else if additionalProperties == false {
                path.tokens.append(name)
                problems.append(.init(pointer: path.pointer, detail: "is not a field of this bucket's objects"))
                path.tokens.removeLast()
            }
        }
    }

    private static func matches(_ value: JSONValue, type: String) -> Bool {
        switch (type, value) {
        case ("object", .object), ("array", .array), ("string", .string), ("number", .number), ("boolean", .bool), ("null", .null): true
        case ("integer", .number(let number)): number == number.rounded()
        default: false
        }
    }

    private static func article(_ type: String) -> String {
        type == "array" || type == "object" || type == "integer" ? "an \(type)" : type == "null" ? "null" : "a \(type)"
    }

    /// RFC 6901 escaping of one reference token.
    static func escape(_ token: String) -> String {
        guard token.utf8.contains(where: { $0 == UInt8(ascii: "~") || $0 == UInt8(ascii: "/") }) else { return token }
        return token.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }
}
