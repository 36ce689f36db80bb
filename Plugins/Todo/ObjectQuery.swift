import Foundation
import GatewayCore
import GatewaySupport

/// A field an object query names: one of the columns the store keeps beside the object, or a
/// dotted path into the object's JSON.
enum QueryField: Hashable, Sendable {
    case id, createdAt, updatedAt, owner, etag
    /// Whether the object is marked deleted (`_deleted`, the NEC BaaS soft delete): true or false.
    case deleted
    case path([String])

    /// The longest path and the most segments a query may name.
    static let maximumPathLength = 200
    static let maximumSegments = 8

    /// Parses `updatedAt`, `_id`, `a.b.c`. Segments are letters, digits, `_` and `-`, starting
    /// with a letter or `_`: they are written into SQL as literals (never bound) so that the
    /// expression matches the one an index was built on, and this check is what makes that safe.
    init(parsing name: String) throws(QueryProblem) {
        switch name {
        case "id", "_id": self = .id
        case "createdAt": self = .createdAt
        case "updatedAt": self = .updatedAt
        case "owner": self = .owner
        case "etag": self = .etag
        case "_deleted": self = .deleted
        default:
            guard !name.isEmpty, name.utf8.count <= Self.maximumPathLength else { throw QueryProblem("field '\(name)' must be 1 to 200 characters") }
            let segments = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard segments.count <= Self.maximumSegments else { throw QueryProblem("field '\(name)' is nested deeper than \(Self.maximumSegments) levels") }
            for segment in segments {
                guard let first = segment.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic),
                      segment.unicodeScalars.allSatisfy(\.isNameCharacter) else {
                    throw QueryProblem("field '\(name)' is not a field path (letters, digits, '_' and '-', segments joined by '.')")
                }
            }
            self = .path(segments)
        }
    }

    var isSystem: Bool {
        if case .path = self { return false }
        return true
    }

    /// The name as clients write it.
    var name: String {
        switch self {
        case .id: "id"
        case .createdAt: "createdAt"
        case .updatedAt: "updatedAt"
        case .owner: "owner"
        case .etag: "etag"
        case .deleted: "_deleted"
        case .path(let segments): segments.joined(separator: ".")
        }
    }
}

/// A problem with a query: the message names the offending part; it becomes a 400.
struct QueryProblem: Error, Sendable {
    var message: String
    init(_ message: String) { self.message = message }
}

/// One condition of a `where`, parsed and checked, independent of the database.
indirect enum Condition: Sendable, Equatable {
    case all([Condition])
    case any([Condition])
    case none([Condition])
    case not(Condition)
    case compare(QueryField, Comparison, JSONValue)
    case oneOf(QueryField, [JSONValue])
    case exists(QueryField, Bool)
    case matches(QueryField, PortableRegex)
    case containsAll(QueryField, [JSONValue])

    enum Comparison: String, Sendable { case eq, ne, lt, lte, gt, gte }

    /// How deeply conditions may nest, and how many a `where` may hold.
    static let maximumDepth = 8
    static let maximumConditions = 64

    /// Parses a `where` object: `{"field": value}` for equality, `{"field": {"$op": value}}`,
    /// `$and`/`$or`/`$nor` with arrays of such objects, `$not` inside a field's operators.
    static func parse(_ value: JSONValue) throws(QueryProblem) -> Condition {
        var budget = maximumConditions
        return try parse(value, depth: 0, budget: &budget, at: "where")
    }

    private static func parse(_ value: JSONValue, depth: Int, budget: inout Int, at location: String) throws(QueryProblem) -> Condition {
        guard depth <= maximumDepth else { throw QueryProblem("\(location) nests deeper than \(maximumDepth) levels") }
        guard case .object(let members) = value else { throw QueryProblem("\(location) must be a JSON object") }
        var parts: [Condition] = []
        for key in members.keys.sorted() {
            let member = members[key]!
            budget -= 1
            guard budget >= 0 else { throw QueryProblem("where has more than \(maximumConditions) conditions") }
            switch key {
            case "$and", "$or", "$nor":
                guard case .array(let elements) = member, !elements.isEmpty, elements.count <= maximumConditions else {
                    throw QueryProblem("\(location).\(key) must be a non-empty array of conditions")
                }
                var children: [Condition] = []
                for (index, element) in elements.enumerated() {
                    children.append(try parse(element, depth: depth + 1, budget: &budget, at: "\(location).\(key)[\(index)]"))
                }
                parts.append(key == "$and" ? .all(children) : key == "$or" ? .any(children) : .none(children))
            default:
                if key.hasPrefix("$") { throw QueryProblem("\(location): unknown operator '\(key)'") }
                let field = try QueryField(parsing: key)
                parts.append(try fieldCondition(field, member, depth: depth, budget: &budget, at: "\(location).\(key)"))
            }
        }
        return parts.count == 1 ? parts[0] : .all(parts)
    }

    private static func fieldCondition(_ field: QueryField, _ value: JSONValue, depth: Int, budget: inout Int, at location: String) throws(QueryProblem) -> Condition {
        guard case .object(let operators) = value, operators.keys.contains(where: { $0.hasPrefix("$") }) else {
            return .compare(field, .eq, try scalar(value, at: location, field: field))
        }
        guard operators.keys.allSatisfy({ $0.hasPrefix("$") }) else {
            throw QueryProblem("\(location) mixes operators with plain keys")
        }
        var parts: [Condition] = []
        for op in operators.keys.sorted() where op != "$options" {
            let operand = operators[op]!
            let here = "\(location).\(op)"
            budget -= 1
            guard budget >= 0 else { throw QueryProblem("where has more than \(maximumConditions) conditions") }
            switch op {
            case "$eq", "$ne", "$lt", "$lte", "$gt", "$gte":
                let comparison = Comparison(rawValue: String(op.dropFirst()))!
                let operandValue = try scalar(operand, at: here, field: field)
                if comparison != .eq, comparison != .ne {
                    switch operandValue {
                    case .number, .string: break
                    default: throw QueryProblem("\(here) compares with a number, a string or a date")
                    }
                }
                parts.append(.compare(field, comparison, operandValue))
            case "$in", "$nin":
                guard case .array(let elements) = operand, elements.count <= 1_000 else {
                    throw QueryProblem("\(here) must be an array of at most 1,000 values")
                }
                var values: [JSONValue] = []
                for (index, element) in elements.enumerated() { values.append(try scalar(element, at: "\(here)[\(index)]", field: field)) }
                parts.append(op == "$in" ? .oneOf(field, values) : .not(.oneOf(field, values)))
            case "$all":
                guard case .array(let elements) = operand, !elements.isEmpty, elements.count <= 100 else {
                    throw QueryProblem("\(here) must be a non-empty array of at most 100 values")
                }
                guard !field.isSystem else { throw QueryProblem("\(here) applies to array fields of the object") }
                for (index, element) in elements.enumerated() { _ = try scalar(element, at: "\(here)[\(index)]", field: field) }
                parts.append(.containsAll(field, elements))
            case "$exists":
                guard case .bool(let flag) = operand else { throw QueryProblem("\(here) must be true or false") }
                parts.append(.exists(field, flag))
            case "$regex":
                guard case .string(let pattern) = operand else { throw QueryProblem("\(here) must be a string") }
                guard !field.isSystem || field == .id || field == .owner || field == .etag else {
                    throw QueryProblem("\(here) applies to text fields")
                }
                if let problem = RegexGuard.problem(in: pattern) { throw QueryProblem("\(here): \(problem)") }
                var caseInsensitive = false
                if let options = operators["$options"] {
                    guard case .string(let text) = options, text.allSatisfy({ $0 == "i" }) else {
                        throw QueryProblem("\(location).$options supports only \"i\" (case-insensitive)")
                    }
                    caseInsensitive = !text.isEmpty
                }
                do {
                    parts.append(.matches(field, try PortableRegex(pattern, caseInsensitive: caseInsensitive)))
                } catch {
                    throw QueryProblem("\(here): \(error.message)")
                }
            case "$not":
                parts.append(.not(try fieldCondition(field, operand, depth: depth + 1, budget: &budget, at: here)))
            default:
                throw QueryProblem("\(here): unknown operator '\(op)'")
            }
        }
        if operators["$options"] != nil, operators["$regex"] == nil { throw QueryProblem("\(location).$options needs $regex") }
        return parts.count == 1 ? parts[0] : .all(parts)
    }

    /// Operands are scalars; dates compare with `createdAt`/`updatedAt` as RFC 3339 strings.
    private static func scalar(_ value: JSONValue, at location: String, field: QueryField) throws(QueryProblem) -> JSONValue {
        switch value {
        case .array, .object: throw QueryProblem("\(location) must be a string, number, boolean or null (compare nested fields with a.b paths)")
        case .string(let text) where field == .createdAt || field == .updatedAt:
            guard let date = Timestamps.parse(text) else { throw QueryProblem("\(location) must be an RFC 3339 date such as 2013-08-27T05:19:16.000Z") }
            return .number(Double(Timestamps.micros(date)))
        case .string(let text) where text.utf8.count > 1_000:
            throw QueryProblem("\(location) is longer than 1,000 bytes")
        default:
            if field == .createdAt || field == .updatedAt, value.numberValue == nil, value != .null {
                throw QueryProblem("\(location) must be an RFC 3339 date")
            }
            return value
        }
    }
}

/// A sort key: a field and a direction.
struct SortKey: Sendable, Equatable {
    var field: QueryField
    var descending: Bool

    /// The most keys an order may have.
    static let maximumKeys = 8

    /// Parses `-updatedAt,description` (at most 8 keys).
    static func parse(_ text: String) throws(QueryProblem) -> [SortKey] {
        let parts = text.split(separator: ",").map { String($0.trimmingSpaces) }.filter { !$0.isEmpty }
        guard parts.count <= maximumKeys else { throw QueryProblem("order names more than 8 fields") }
        var keys: [SortKey] = []
        for part in parts {
            let descending = part.hasPrefix("-")
            let name = descending || part.hasPrefix("+") ? String(part.dropFirst()) : part
            let field: QueryField
            do { field = try QueryField(parsing: name) } catch { throw QueryProblem("order: \(error.message)") }
            guard !keys.contains(where: { $0.field == field }) else { throw QueryProblem("order names '\(name)' twice") }
            keys.append(SortKey(field: field, descending: descending))
        }
        return keys
    }
}

/// A whole query over one bucket.
struct ObjectQuery: Sendable {
    var condition: Condition?
    var order: [SortKey] = []
    var limit = 100
    var skip = 0
    var cursor: QueryCursor?
    var count = false
    /// Whether objects marked deleted are found too (the NEC BaaS `deleteMark=1`).
    var includeDeleted = false
    /// Top-level or dotted fields to return besides the system fields; nil returns all.
    var fields: [QueryField]?
}

/// Where the previous page ended: the sort values of its last object and its id. Opaque to
/// clients (base64url JSON); a page after a cursor starts strictly after that object, so
/// inserts elsewhere never repeat or skip an object.
struct QueryCursor: Sendable, Equatable {
    var values: [JSONValue]
    var id: String

    var token: String {
        Base64URL.encode(JSONValue.array(values + [.string(id)]).jsonText.utf8)
    }

    init(values: [JSONValue], id: String) {
        self.values = values
        self.id = id
    }

    init(token: String, keys: [SortKey]) throws(QueryProblem) {
        guard token.utf8.count <= 4_096, let data = Base64URL.decode(token),
              let value = try? JSONValue.parse(String(decoding: data, as: UTF8.self)),
              case .array(var elements) = value, elements.count == keys.count + 1,
              case .string(let id) = elements.removeLast() else {
            throw QueryProblem("cursor is not one this query produced (use nextCursor with the same order)")
        }
        self.values = elements
        self.id = id
    }
}

/// Checks a `$regex` before it reaches a database. SQLite's `REGEXP` runs the gateway's linear
/// engine (`LinearRegex`: time linear in the value whatever the pattern), which writes counted
/// repetitions out, so what is bounded is the pattern's size: its length, its repetition counts
/// (PostgreSQL takes at most 255) and the size of its compiled program (``PortableRegex`` compiles
/// it, and a program too large is refused). PostgreSQL's engine does not backtrack on this syntax
/// either, and `database.statementTimeout` bounds every statement. The store matches at most the
/// first ``matchedPrefix`` characters of a value.
enum RegexGuard {
    static let maximumLength = 256
    static let maximumCount = 100
    static let matchedPrefix = 1_024

    static func problem(in pattern: String) -> String? {
        guard !pattern.isEmpty, pattern.utf8.count <= maximumLength else { return "a pattern must be 1 to \(maximumLength) bytes" }
        let characters = Array(pattern)
        var index = 0
        var depth = 0
        var inClass = false
        while index < characters.count {
            let character = characters[index]
            defer { index += 1 }
            if inClass {
                if character == "\\" { index += 1 } else if character == "]" { inClass = false }
                continue
            }
            switch character {
            case "\\":
                guard index + 1 < characters.count else { return "a pattern must not end with '\\'" }
                let next = characters[index + 1]
                if next.isNumber || next == "k" { return "back-references are not supported" }
                index += 1
            case "[": inClass = true
            case "(":
                if index + 2 < characters.count, characters[index + 1] == "?" {
                    let kind = characters[index + 2]
                    if kind == "=" || kind == "!" || kind == "<" { return "look-around is not supported" }
                    if kind != ":" { return "only (?:...) groups are supported" }
                }
                depth += 1
            case ")":
                guard depth > 0 else { return "unbalanced ')'" }
                depth -= 1
            case "{":
                guard let close = characters[index...].firstIndex(of: "}") else { break }
                let bounds = String(characters[(index + 1)..<close]).split(separator: ",", omittingEmptySubsequences: false)
                guard (1...2).contains(bounds.count), bounds.allSatisfy({ $0.allSatisfy(\.isNumber) }), !bounds[0].isEmpty else { break }
                if bounds.contains(where: { $0.count > 4 || (Int($0) ?? 0) > maximumCount }) { return "repetition counts above \(maximumCount) are not supported" }
                index = close
            default: break
            }
        }
        if inClass { return "unbalanced '['" }
        if depth > 0 { return "unbalanced '('" }
        do {
            _ = try PortableRegex(pattern)
        } catch {
            return error.message
        }
        return nil
    }
}

/// Timestamps as the store keeps them (microseconds since 1970) and as the APIs show them.
enum Timestamps {
    static func micros(_ date: Date) -> Int64 { UTCTimestamp.micros(date) }

    static func date(micros: Int64) -> Date { UTCTimestamp.date(micros: micros) }

    /// `2013-08-27T05:19:16.000Z`: UTC with milliseconds, as the legacy API wrote them.
    static func format(micros: Int64) -> String { UTCTimestamp.format(micros: micros, fractionDigits: 3) }

    /// Parses RFC 3339 (`2013-08-27T05:19:16Z`, with or without a fraction, `Z` or an offset) and
    /// plain dates (`2013-08-27`, midnight UTC).
    static func parse(_ text: String) -> Date? { UTCTimestamp.parse(text).map { UTCTimestamp.date(micros: $0) } }
}

extension Unicode.Scalar {
    /// ASCII letters, digits, `_` and `-`: what bucket names, field path segments and ACL entries are made of.
    var isNameCharacter: Bool {
        isASCII && (properties.isAlphabetic || ("0"..."9").contains(self) || self == "_" || self == "-")
    }
}

/// base64url without padding (RFC 4648 §5), the alphabet swapped byte by byte: Foundation's
/// `replacingOccurrences` goes through `NSString` on Linux, several µs on every page of a list.
enum Base64URL {
    static func encode(_ bytes: some Collection<UInt8>) -> String {
        let base64 = Data(bytes).base64EncodedString()
        var text: [UInt8] = []
        text.reserveCapacity(base64.utf8.count)
        for byte in base64.utf8 {
            switch byte {
            case UInt8(ascii: "+"): text.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): text.append(UInt8(ascii: "_"))
            case UInt8(ascii: "="): continue
            default: text.append(byte)
            }
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of a token, padded or not; nil when it is not base64url.
    static func decode(_ token: String) -> Data? {
        var base64: [UInt8] = []
        base64.reserveCapacity(token.utf8.count + 3)
        for byte in token.utf8 {
            switch byte {
            case UInt8(ascii: "-"): base64.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): base64.append(UInt8(ascii: "/"))
            default: base64.append(byte)
            }
        }
        while base64.count % 4 != 0 { base64.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(base64))
    }
}

extension Substring {
    /// Without the spaces and tabs at either end (what `CharacterSet.whitespaces` holds: tab and
    /// Unicode's space separators), without Foundation's round trip through `NSString`.
    var trimmingSpaces: Substring {
        func isSpace(_ scalar: Unicode.Scalar) -> Bool { scalar == "\t" || scalar.properties.generalCategory == .spaceSeparator }
        var scalars = unicodeScalars[...]
        while let first = scalars.first, isSpace(first) { scalars.removeFirst() }
        while let last = scalars.last, isSpace(last) { scalars.removeLast() }
        return Substring(scalars)
    }
}
