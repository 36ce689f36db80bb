import GatewayCore
import NIOCore

extension NebulaDialect {
    /// `POST /1/{tenant}/objects/{bucket}/_aggregate`: `{"pipeline": [...], "options": {...}}`,
    /// answered `{"results": [...]}`. The pipeline runs in the database over the objects the
    /// caller may read (``ObjectStore/aggregate(bucket:pipeline:actor:maximumDocuments:)``).
    func aggregate(_ request: RouteRequest, actor: Actor) async throws -> RouteReply {
        let body = try Self.body(request)
        let pipeline = try AggregationPipeline(body: body, keyOrder: JSONKeyOrder.scan(Array(request.body.readableBytesView)))
        let results = try await service.aggregate(bucketName: request.pathParameters["bucket"] ?? "", pipeline: pipeline, actor: actor)
        return try Self.json(.object(["results": .array(results)]))
    }
}

/// A field of the documents an aggregation passes from stage to stage: a dotted path (`a.b`).
/// Segments are made of the characters a query's fields are (``QueryField``), so that SQL can
/// name them as literals; `_id`, `createdAt`, `updatedAt` and `etag` are fields of the document
/// like any other.
struct DocumentPath: Hashable, Sendable {
    var segments: [String]

    init(segments: [String]) { self.segments = segments }

    init(parsing name: String) throws(QueryProblem) {
        switch try QueryField(parsing: name) {
        case .path(let segments): self.segments = segments
        default: self.segments = [name]
        }
    }

    var name: String { segments.joined(separator: ".") }

    /// A field name of one segment, as `$group`, `$count` and `$unwind` give their outputs.
    static func fieldName(_ name: String, at location: String) throws(QueryProblem) -> String {
        let path: DocumentPath
        do { path = try DocumentPath(parsing: name) } catch { throw QueryProblem("\(location): \(error.message)") }
        guard path.segments.count == 1 else { throw QueryProblem("\(location): '\(name)' must be a field name without '.'") }
        return name
    }
}

/// A value computed from a document: a field (`"$a.b"`), a constant (`3`, `"text"`,
/// `{"$literal": ...}`), or an object or an array of expressions. Operators (`$add`, `$concat`,
/// ...) are not supported.
indirect enum AggregationExpression: Sendable, Equatable {
    case field(DocumentPath)
    case literal(JSONValue)
    case object([Member])
    case array([AggregationExpression])

    struct Member: Sendable, Equatable {
        var name: String
        var value: AggregationExpression
    }

    static let maximumDepth = 8
    static let maximumMembers = 64

    static func parse(_ value: JSONValue, at location: String, depth: Int = 0) throws(QueryProblem) -> AggregationExpression {
        guard depth <= maximumDepth else { throw QueryProblem("\(location) nests deeper than \(maximumDepth) levels") }
        switch value {
        case .string(let text) where text.hasPrefix("$$"):
            throw QueryProblem("\(location): variables such as '\(text.prefix(40))' are not supported")
        case .string(let text) where text.hasPrefix("$"):
            do { return .field(try DocumentPath(parsing: String(text.dropFirst()))) } catch { throw QueryProblem("\(location): \(error.message)") }
        case .object(let members) where members.count == 1 && members.keys.first!.hasPrefix("$"):
            let (op, operand) = members.first!
            guard op == "$literal" else { throw QueryProblem("\(location): the expression operator '\(op)' is not supported (fields \"$a\", constants and $literal are)") }
            return .literal(operand)
        case .object(let members):
            guard members.count <= maximumMembers else { throw QueryProblem("\(location) has more than \(maximumMembers) fields") }
            var result: [Member] = []
            for key in members.keys.sorted() {
                let name = try DocumentPath.fieldName(key, at: "\(location).\(key)")
                result.append(Member(name: name, value: try parse(members[key]!, at: "\(location).\(key)", depth: depth + 1)))
            }
            return .object(result)
        case .array(let elements):
            guard elements.count <= maximumMembers else { throw QueryProblem("\(location) has more than \(maximumMembers) elements") }
            var result: [AggregationExpression] = []
            for (index, element) in elements.enumerated() { result.append(try parse(element, at: "\(location)[\(index)]", depth: depth + 1)) }
            return .array(result)
        default:
            return .literal(value)
        }
    }
}

/// An output field of `$group`: an accumulator over the group's documents, in their current order.
struct Accumulator: Sendable, Equatable {
    enum Kind: String, Sendable, CaseIterable {
        /// The sum of the numbers (other values are ignored; 0 when there are none).
        case sum
        /// The mean of the numbers; null when there are none.
        case avg
        /// The least and the greatest value, in MongoDB's order of types (numbers, strings,
        /// booleans); nulls, missing fields, objects and arrays are ignored.
        case min, max
        /// The value of the first and the last document (null when missing).
        case first, last
        /// Every value, missing ones left out.
        case push
    }

    var name: String
    var kind: Kind
    var operand: AggregationExpression
}

/// A `$project` stage: either the fields to keep and compute, or the fields to remove.
enum ProjectionSpec: Sendable, Equatable {
    case include([ProjectedMember])
    case exclude([DocumentPath])
}

/// A field of a `$project` that includes fields: copied from the document, computed, or an
/// object of such fields (from dotted paths such as `"a.b": 1`).
struct ProjectedMember: Sendable, Equatable {
    indirect enum Value: Sendable, Equatable {
        case copy(DocumentPath)
        case computed(AggregationExpression)
        case nested([ProjectedMember])
    }

    var name: String
    var value: Value

    /// Whether the member is present whatever the document holds (a computed field is; a copied
    /// one only when the document has it).
    var alwaysPresent: Bool {
        switch value {
        case .copy: false
        case .computed: true
        case .nested(let members): members.contains(where: \.alwaysPresent)
        }
    }
}

/// One stage of a pipeline, parsed and checked, independent of the database.
enum AggregationStage: Sendable {
    case match(Condition)
    case group(key: AggregationExpression, accumulators: [Accumulator])
    case sort([(path: DocumentPath, descending: Bool)])
    case skip(Int)
    case limit(Int)
    case project(ProjectionSpec)
    case count(String)
    case unwind(path: DocumentPath, preserveNullAndEmptyArrays: Bool, indexField: String?)
}

/// The body of the NEC BaaS `_aggregate` API, `{"pipeline": [...], "options": {...}}`, parsed and
/// checked: at most ``maximumStages`` stages of the kinds in ``supportedStages``; `options` may
/// hold `allowDiskUse`, `maxTimeMS` and `batchSize`, which change nothing here. Every problem is
/// a 400 naming the stage (`pipeline[2] ($group): ...`).
struct AggregationPipeline: Sendable {
    var stages: [AggregationStage]

    static let maximumStages = 32
    /// How deeply the body may nest.
    static let maximumDepth = 24
    static let supportedStages = ["$match", "$group", "$sort", "$skip", "$limit", "$project", "$count", "$unwind"]
    static let maximumSortKeys = 8
    static let maximumFields = 64
    /// The largest `$skip` and `$limit` (2^53, beyond which numbers are not exact).
    static let maximumCount = 9_007_199_254_740_992

    init(stages: [AggregationStage]) { self.stages = stages }

    /// Parses a body; `keyOrder` is the order of its objects' keys as written (`$sort` applies its
    /// keys in that order).
    init(body: JSONValue, keyOrder: JSONKeyOrder?) throws(GatewayError) {
        guard case .object(let members) = body else { throw GatewayError.badRequest("The body must be a JSON object {\"pipeline\": [...]}.") }
        guard body.depth <= Self.maximumDepth else { throw GatewayError.badRequest("The body nests deeper than \(Self.maximumDepth) levels.") }
        if let unknown = members.keys.sorted().first(where: { $0 != "pipeline" && $0 != "options" }) {
            throw GatewayError.badRequest("'\(unknown.prefix(64))' is not a field of an aggregation (pipeline, options).")
        }
        guard case .array(let elements)? = members["pipeline"] else { throw GatewayError.badRequest("pipeline must be an array of stages.") }
        guard elements.count <= Self.maximumStages else { throw GatewayError.badRequest("pipeline has more than \(Self.maximumStages) stages.") }
        try Self.checkOptions(members["options"])
        var stages: [AggregationStage] = []
        for (index, element) in elements.enumerated() {
            guard case .object(let stage) = element, stage.count == 1, case (let name, let spec)? = stage.first else {
                throw GatewayError.badRequest("pipeline[\(index)] must be an object with one stage, such as {\"$match\": {...}}.")
            }
            guard Self.supportedStages.contains(name) else {
                throw GatewayError.badRequest("pipeline[\(index)]: the stage '\(name.prefix(64))' is not supported (\(Self.supportedStages.joined(separator: ", "))).")
            }
            do {
                stages.append(try Self.stage(name, spec, keyOrder: keyOrder?["pipeline"]?[index]?[name]))
            } catch {
                throw GatewayError.badRequest("pipeline[\(index)] (\(name)): \(error.message).")
            }
        }
        self.stages = stages
    }

    private static func checkOptions(_ options: JSONValue?) throws(GatewayError) {
        guard let options else { return }
        guard case .object(let members) = options else { throw GatewayError.badRequest("options must be an object.") }
        for key in members.keys.sorted() {
            switch (key, members[key]!) {
            case ("allowDiskUse", .bool), ("maxTimeMS", .number), ("batchSize", .number): continue
            case ("allowDiskUse", _): throw GatewayError.badRequest("options.allowDiskUse must be true or false.")
            case ("maxTimeMS", _), ("batchSize", _): throw GatewayError.badRequest("options.\(key) must be a number.")
            default: throw GatewayError.badRequest("options.\(key.prefix(64)) is not supported (allowDiskUse, maxTimeMS, batchSize).")
            }
        }
    }

    private static func stage(_ name: String, _ spec: JSONValue, keyOrder: JSONKeyOrder?) throws(QueryProblem) -> AggregationStage {
        switch name {
        case "$match":
            do {
                return .match(try Condition.parse(spec))
            } catch {
                // The condition's parser names its location `where`, as the query parameter is called.
                throw QueryProblem(error.message.hasPrefix("where") ? "$match" + error.message.dropFirst(5) : error.message)
            }
        case "$group": return try group(spec)
        case "$sort": return try sort(spec, keyOrder: keyOrder)
        case "$skip": return .skip(try count(spec, minimum: 0))
        case "$limit": return .limit(try count(spec, minimum: 1))
        case "$project": return .project(try projection(spec))
        case "$count":
            guard case .string(let field) = spec else { throw QueryProblem("must be the name of the output field, such as \"total\"") }
            return .count(try DocumentPath.fieldName(field, at: "the field"))
        default: return try unwind(spec)
        }
    }

    private static func count(_ value: JSONValue, minimum: Int) throws(QueryProblem) -> Int {
        guard case .number(let number) = value, number == number.rounded(), number >= Double(minimum), number <= Double(maximumCount) else {
            throw QueryProblem("must be a whole number from \(minimum)")
        }
        return Int(number)
    }

    private static func group(_ spec: JSONValue) throws(QueryProblem) -> AggregationStage {
        guard case .object(let members) = spec else { throw QueryProblem("must be an object {\"_id\": ..., \"field\": {\"$sum\": ...}}") }
        guard let id = members["_id"] else { throw QueryProblem("needs _id: the field to group by (\"$field\"), or null for one group") }
        guard members.count <= maximumFields else { throw QueryProblem("has more than \(maximumFields) fields") }
        let key = try AggregationExpression.parse(id, at: "_id")
        var accumulators: [Accumulator] = []
        for name in members.keys.sorted() where name != "_id" {
            let field = try DocumentPath.fieldName(name, at: name)
            guard case .object(let operators) = members[name]!, operators.count == 1, case (let op, let operand)? = operators.first else {
                throw QueryProblem("\(name) must be an accumulator such as {\"$sum\": \"$field\"}")
            }
            if op == "$count" {
                guard operand == .object([:]) else { throw QueryProblem("\(name).$count takes {}") }
                accumulators.append(Accumulator(name: field, kind: .sum, operand: .literal(.number(1))))
                continue
            }
            guard op.hasPrefix("$"), let kind = Accumulator.Kind(rawValue: String(op.dropFirst())) else {
                let names = Accumulator.Kind.allCases.map { "$" + $0.rawValue } + ["$count"]
                throw QueryProblem("\(name): the accumulator '\(op.prefix(64))' is not supported (\(names.joined(separator: ", ")))")
            }
            accumulators.append(Accumulator(name: field, kind: kind, operand: try AggregationExpression.parse(operand, at: "\(name).\(op)")))
        }
        return .group(key: key, accumulators: accumulators)
    }

    private static func sort(_ spec: JSONValue, keyOrder: JSONKeyOrder?) throws(QueryProblem) -> AggregationStage {
        guard case .object(let members) = spec, !members.isEmpty else { throw QueryProblem("must be an object of fields and directions, such as {\"a\": 1, \"b\": -1}") }
        guard members.count <= maximumSortKeys else { throw QueryProblem("names more than \(maximumSortKeys) fields") }
        let written = keyOrder?.keys ?? []
        let names = Set(written) == Set(members.keys) ? written : members.keys.sorted()
        var keys: [(path: DocumentPath, descending: Bool)] = []
        for name in names {
            let path: DocumentPath
            do { path = try DocumentPath(parsing: name) } catch { throw QueryProblem(error.message) }
            switch members[name]! {
            case .number(1): keys.append((path, false))
            case .number(-1): keys.append((path, true))
            default: throw QueryProblem("\(name) must be 1 (ascending) or -1 (descending)")
            }
        }
        return .sort(keys)
    }

    private static func projection(_ spec: JSONValue) throws(QueryProblem) -> ProjectionSpec {
        guard case .object(let members) = spec, !members.isEmpty else { throw QueryProblem("must be an object of fields, such as {\"a\": 1, \"_id\": 0}") }
        guard members.count <= maximumFields else { throw QueryProblem("has more than \(maximumFields) fields") }
        var included: [ProjectedMember] = []
        var excluded: [DocumentPath] = []
        var keepID = true
        for name in members.keys.sorted() {
            let path: DocumentPath
            do { path = try DocumentPath(parsing: name) } catch { throw QueryProblem(error.message) }
            let value: ProjectedMember.Value
            switch members[name]! {
            case .bool(false), .number(0):
                if name == "_id" { keepID = false } else { excluded.append(path) }
                continue
            case .bool(true), .number:
                value = .copy(path)
            case let other:
                value = .computed(try AggregationExpression.parse(other, at: name))
            }
            try insert(value, at: path.segments[...], into: &included, name: name)
        }
        if !excluded.isEmpty {
            guard included.isEmpty || included.map(\.name) == ["_id"] else {
                throw QueryProblem("either includes fields or excludes them (besides _id: 0), not both")
            }
            return .exclude(excluded + (keepID ? [] : [DocumentPath(segments: ["_id"])]))
        }
        if included.isEmpty { return .exclude([DocumentPath(segments: ["_id"])]) }
        if keepID, !included.contains(where: { $0.name == "_id" }) {
            included.insert(ProjectedMember(name: "_id", value: .copy(DocumentPath(segments: ["_id"]))), at: 0)
        }
        return .include(included)
    }

    private static func insert(_ value: ProjectedMember.Value, at segments: ArraySlice<String>, into members: inout [ProjectedMember],
                               name: String) throws(QueryProblem) {
        let first = segments.first!
        let existing = members.firstIndex { $0.name == first }
        if segments.count == 1 {
            guard existing == nil else { throw QueryProblem("\(name) collides with another field of the projection") }
            members.append(ProjectedMember(name: first, value: value))
            return
        }
        var children: [ProjectedMember] = []
        if let existing {
            guard case .nested(let nested) = members[existing].value else { throw QueryProblem("\(name) collides with another field of the projection") }
            children = nested
        }
        try insert(value, at: segments.dropFirst(), into: &children, name: name)
        if let existing { members[existing].value = .nested(children) } else { members.append(ProjectedMember(name: first, value: .nested(children))) }
    }

    private static func unwind(_ spec: JSONValue) throws(QueryProblem) -> AggregationStage {
        var path: JSONValue = spec
        var preserve = false
        var indexField: String?
        if case .object(let members) = spec {
            if let unknown = members.keys.sorted().first(where: { !["path", "preserveNullAndEmptyArrays", "includeArrayIndex"].contains($0) }) {
                throw QueryProblem("'\(unknown.prefix(64))' is not an option (path, preserveNullAndEmptyArrays, includeArrayIndex)")
            }
            path = members["path"] ?? .null
            switch members["preserveNullAndEmptyArrays"] {
            case nil: break
            case .bool(let flag)?: preserve = flag
            default: throw QueryProblem("preserveNullAndEmptyArrays must be true or false")
            }
            switch members["includeArrayIndex"] {
            case nil: break
            case .string(let name)?: indexField = try DocumentPath.fieldName(name, at: "includeArrayIndex")
            default: throw QueryProblem("includeArrayIndex must be a field name")
            }
        }
        guard case .string(let text) = path, text.hasPrefix("$"), !text.hasPrefix("$$") else {
            throw QueryProblem("must name an array field, as \"$tags\" or {\"path\": \"$tags\"}")
        }
        do {
            return .unwind(path: try DocumentPath(parsing: String(text.dropFirst())), preserveNullAndEmptyArrays: preserve, indexField: indexField)
        } catch {
            throw QueryProblem(error.message)
        }
    }
}

/// The order of the members of the objects in a JSON text, which ``JSONValue`` (a dictionary)
/// does not keep: `$sort` applies its keys in the order they are written.
indirect enum JSONKeyOrder: Sendable {
    case object([(key: String, value: JSONKeyOrder)])
    case array([JSONKeyOrder])
    case scalar

    var keys: [String] {
        if case .object(let members) = self { return members.map(\.key) }
        return []
    }

    subscript(key: String) -> JSONKeyOrder? {
        if case .object(let members) = self { return members.last { $0.key == key }?.value }
        return nil
    }

    subscript(index: Int) -> JSONKeyOrder? {
        if case .array(let elements) = self, elements.indices.contains(index) { return elements[index] }
        return nil
    }

    /// Scans a text that ``JSONValue/parse(_:maximumDepth:)`` accepted (so well-formed, and no
    /// deeper than it allows); nil when it is not well-formed after all.
    static func scan(_ bytes: [UInt8]) -> JSONKeyOrder? {
        var scanner = Scanner(bytes: bytes)
        return scanner.value()
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func consume(_ byte: Character) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte.asciiValue! else { return false }
            index += 1
            return true
        }

        mutating func value() -> JSONKeyOrder? {
            skipSpace()
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                index += 1
                var members: [(key: String, value: JSONKeyOrder)] = []
                if consume("}") { return .object(members) }
                repeat {
                    skipSpace()
                    guard let key = string(), consume(":"), let member = value() else { return nil }
                    members.append((key, member))
                } while consume(",")
                return consume("}") ? .object(members) : nil
            case UInt8(ascii: "["):
                index += 1
                var elements: [JSONKeyOrder] = []
                if consume("]") { return .array(elements) }
                repeat {
                    guard let element = value() else { return nil }
                    elements.append(element)
                } while consume(",")
                return consume("]") ? .array(elements) : nil
            case UInt8(ascii: "\""):
                return string() == nil ? nil : .scalar
            default:
                while index < bytes.count, !Array(",]} \t\r\n".utf8).contains(bytes[index]) { index += 1 }
                return .scalar
            }
        }

        /// A string token, decoded by ``JSONValue`` (escapes included).
        mutating func string() -> String? {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            let start = index
            index += 1
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\\"): index += 2
                case UInt8(ascii: "\""):
                    index += 1
                    return (try? JSONValue.parse(String(decoding: bytes[start..<index], as: UTF8.self)))?.stringValue
                default: index += 1
                }
            }
            return nil
        }
    }
}
