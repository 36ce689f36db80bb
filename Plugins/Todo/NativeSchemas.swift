import Foundation
import GatewayCore

/// What the native API's inputs must look like, as the OpenAPI document states it: the names,
/// lists and bodies the checks of ``ObjectQuery``, ``ObjectService`` and ``GroupDirectory`` take,
/// written as JSON Schema. The query language itself (which conditions and cursors make sense)
/// goes beyond what a schema can say; its shape is described as far as it can be.
enum NativeSchemas {
    // MARK: Names

    /// A field path: segments of a letter or `_` then letters, digits, `_` and `-`, joined by `.`.
    /// Each segment is held to 24 characters here, so that a path of the most segments stays within
    /// ``QueryField/maximumPathLength``.
    static let fieldPath = "[A-Za-z_][A-Za-z0-9_-]{0,23}(?:\\.[A-Za-z_][A-Za-z0-9_-]{0,23}){0,\(QueryField.maximumSegments - 1)}"
    /// A field path and nothing else.
    static let fieldPathPattern = "^\(fieldPath)$"
    /// A field path that names no system field (what `$set`, `$unset` and `$inc` change).
    static let objectFieldPattern = "^(?!(?:\(ObjectService.readOnlyFields.sorted().joined(separator: "|")))$)\(fieldPath)$"
    /// The white space `order` and `fields` take around a name: spaces and tabs. (The checks trim
    /// the other space separators too; the document keeps to ASCII.)
    static let space = "[\t ]*"
    /// `order`: comma-separated field paths, each with an optional `-` (descending) or `+`.
    static let orderPattern: String = {
        let key = "\(space)[+-]?\(fieldPath)\(space)"
        return "^(?:\(space),)*(?:\(space)|\(key)(?:,\(space))*(?:,(?:\(space),)*\(key)(?:,\(space))*){0,\(SortKey.maximumKeys - 1)})$"
    }()
    /// `fields` in a query string: comma-separated field paths.
    static let fieldListPattern: String = {
        let name = "\(space)\(fieldPath)\(space)"
        return "^,*(?:\(name)(?:,+\(name)){0,\(maximumFields - 1)})?,*$"
    }()
    /// The most fields a query may return.
    static let maximumFields = 100
    /// The most objects a query may skip.
    static let maximumSkip = 1_000_000
    /// The longest cursor.
    static let longestCursor = 4_096
    /// A cursor: a page's `nextCursor` (URL-safe base64).
    static let cursorRule = FieldRule.pattern("^[A-Za-z0-9_-]*$").and(.text(maxLength: longestCursor))
        .described("The `nextCursor` of the page before, with the same `where` and `order`.")
    /// An object id: 24 lowercase hexadecimal digits.
    static let objectIDRule = FieldRule.pattern("^[0-9a-f]{24}$").described("The object's id: 24 lowercase hexadecimal digits.")
    /// A bucket name (``Bucket/nameProblem(_:)``).
    static let bucketNameRule = FieldRule.pattern("^[A-Za-z][A-Za-z0-9_-]{0,39}$").described("The bucket's name.")
    /// A group name (``GroupDirectory/nameProblem(_:)``).
    static let groupNamePattern = "^(?!(?:anonymous|authenticated)$)[A-Za-z0-9_-]{1,100}$"
    static let groupNameRule = FieldRule.pattern(groupNamePattern).described("The group's name: 1 to 100 letters, digits, '_' and '-' (not anonymous or authenticated).")
    /// An ACL entry (``ObjectACL/entryProblem(_:)``): a user id, `anonymous`, `authenticated` or `g:{group}`.
    static let aclEntryPattern = "^(?:g:(?!(?:anonymous|authenticated)$)[A-Za-z0-9_-]{1,100}|[A-Za-z0-9_-]{1,64})$"

    // MARK: Bodies

    static func object(_ properties: [String: JSONValue], required: [String] = [], closed: Bool = false, description: String? = nil) -> JSONValue {
        var members: [String: JSONValue] = ["type": .string("object"), "properties": .object(properties)]
        if !required.isEmpty { members["required"] = .array(required.map(JSONValue.string)) }
        if closed { members["additionalProperties"] = .bool(false) }
        if let description { members["description"] = .string(description) }
        return .object(members)
    }

    static func string(pattern: String? = nil, maxLength: Int? = nil, description: String? = nil) -> JSONValue {
        var members: [String: JSONValue] = ["type": .string("string")]
        if let pattern { members["pattern"] = .string(pattern) }
        if let maxLength { members["maxLength"] = .number(Double(maxLength)) }
        if let description { members["description"] = .string(description) }
        return .object(members)
    }

    static func integer(_ range: ClosedRange<Int>, description: String? = nil) -> JSONValue {
        var members: [String: JSONValue] = ["type": .string("integer"), "minimum": .number(Double(range.lowerBound)), "maximum": .number(Double(range.upperBound))]
        if let description { members["description"] = .string(description) }
        return .object(members)
    }

    static func array(of items: JSONValue, maxItems: Int? = nil) -> JSONValue {
        var members: [String: JSONValue] = ["type": .string("array"), "items": items]
        if let maxItems { members["maxItems"] = .number(Double(maxItems)) }
        return .object(members)
    }

    /// The name of the component that describes a value stored in an object (``fieldValue``).
    static let fieldValueName = "todo._fieldValue"
    static var fieldValueReference: JSONValue { .object(["$ref": .string("#/components/schemas/\(fieldValueName)")]) }

    /// A member name a query can name: not empty, not starting with `$`.
    static let memberName: JSONValue = .object(["pattern": .string("^[^$]")])

    /// A value of an object's field: any JSON whose objects, and the objects directly in its arrays,
    /// have member names a query can name (``ObjectService/fields(of:parseACL:)``).
    static var fieldValue: JSONValue {
        let namedObject = JSONValue.object(["type": .string("object"), "propertyNames": memberName, "additionalProperties": fieldValueReference])
        // One type per branch, and null as `enum: [null]`: OpenAPIKit keeps one type of a list
        // of types, and reads a `null` type as making the whole schema null.
        let scalars: [JSONValue] = ["string", "number", "boolean"].map { .object(["type": .string($0)]) } + [.object(["enum": .array([.null])])]
        return .object(["anyOf": .array(scalars + [
            namedObject,
            .object(["type": .string("array"), "items": .object(["anyOf": .array(scalars + [.object(["type": .string("array")]), namedObject])])]),
        ])])
    }

    /// The ACL an object may carry: `{readers, writers}`.
    static var objectACL: JSONValue {
        let entries = array(of: string(pattern: aclEntryPattern), maxItems: ObjectACL.maximumEntries)
        return object(["readers": entries, "writers": entries], closed: true,
                      description: "Who besides the owner reads and changes the object: user ids, `anonymous`, `authenticated` or `g:{group}`.")
    }

    /// The fields a client sends for an object of a bucket whose schema is `bucketSchema`: what
    /// the schema allows, member names a query can name, and an optional `acl`. (Objects inside
    /// the fields the schema declares are left as the schema describes them.)
    static func objectFields(_ bucketSchema: JSONValue) -> JSONValue {
        var fields = bucketSchema.objectValue ?? ["type": .string("object")]
        var properties = fields["properties"]?.objectValue ?? [:]
        properties["acl"] = objectACL
        fields["properties"] = .object(properties)
        fields["propertyNames"] = memberName
        if fields["additionalProperties"] != .bool(false) { fields["additionalProperties"] = fieldValueReference }
        return .object(fields)
    }

    /// A PATCH body: a merge patch of fields and the operators `$set`, `$unset` and `$inc`.
    static var patch: JSONValue {
        let paths = JSONValue.object(["pattern": .string(objectFieldPattern)])
        let operators: [String: JSONValue] = [
            "$set": .object(["type": .string("object"), "propertyNames": paths, "description": .string("New values by field path.")]),
            "$unset": .object(["type": .string("object"), "propertyNames": paths, "description": .string("Field paths to remove (any values).")]),
            "$inc": .object(["type": .string("object"), "propertyNames": paths, "additionalProperties": .object(["type": .string("number")]),
                             "description": .string("Amounts to add, by field path.")]),
            "acl": objectACL,
        ]
        return .object([
            "type": .string("object"),
            "properties": .object(operators),
            "propertyNames": .object(["pattern": .string("^(?:\\$set|\\$unset|\\$inc|[^$][\\s\\S]*)$")]),
            "additionalProperties": fieldValueReference,
            "description": .string("A JSON merge patch (RFC 7396: null removes a field) and/or the operators; a path may be changed by one operator only."),
        ])
    }

    /// The body of a query sent as JSON.
    static func search(maxLimit: Int) -> JSONValue {
        object([
            "where": .object(["type": .array([.string("object"), .string("null")]),
                              "description": .string("Conditions: field paths with values or $eq $ne $lt $lte $gt $gte $in $nin $all $exists $regex $not, and $and $or $nor.")]),
            "order": string(pattern: orderPattern, description: "Field paths to sort by, `-` for descending: `-updatedAt,description`."),
            "limit": integer(1...maxLimit, description: "Objects per page, 1 to \(maxLimit) (default 100)."),
            "cursor": string(pattern: "^[A-Za-z0-9_-]*$", maxLength: longestCursor, description: "The `nextCursor` of the page before, with the same `where` and `order`."),
            "skip": integer(0...maximumSkip, description: "Objects to skip (not with a cursor)."),
            "count": .object(["type": .string("boolean"), "description": .string("Whether to count every matching object.")]),
            "fields": array(of: string(pattern: fieldPathPattern), maxItems: maximumFields),
        ], closed: true)
    }

    /// The body of a batch.
    static var batch: JSONValue {
        let operation = object([
            "op": .object(["type": .string("string"), "enum": .array(["create", "replace", "patch", "delete"].map(JSONValue.string))]),
            "id": string(description: "The object's id (replace, patch, delete)."),
            "object": .object(["type": .string("object"), "propertyNames": memberName, "additionalProperties": fieldValueReference,
                               "description": .string("The object's fields (create, replace) or the patch (patch).")]),
            "ifMatch": string(description: "The etag the object must have."),
        ], required: ["op"])
        // An operation that is not of this shape is not refused with the batch: it gets its own 422
        // result, as a failing one gets its own status. So the items are any value, shown this shape.
        let item = JSONValue.object(["description": .string("An operation: `op` (create, replace, patch, delete), `id`, `object`, `ifMatch`."),
                                     "examples": .array([operation])])
        return object(["operations": array(of: item, maxItems: TodoPlugin.maximumBatch)], required: ["operations"],
                      description: "Each operation gets its own result, with a status, in order.")
    }

    /// The reply of a batch: a result per operation, in order — its status, and the object
    /// (created, replaced, patched) or the problem (a failed operation).
    static var batchReply: JSONValue {
        let problem = object([
            "title": string(), "detail": string(), "status": .object(["type": .string("integer")]),
            "errors": array(of: object(["pointer": string(), "detail": string()], required: ["pointer", "detail"])),
        ], required: ["title", "detail", "status"], description: "Why the operation failed (RFC 9457 problem details).")
        let result = object([
            "status": .object(["type": .string("integer"), "description": .string("201 created, 200 replaced or patched, 204 deleted, or the failure's status.")]),
            "object": .object(["type": .string("object"), "description": .string("The object as the native API answers it (with id, etag, createdAt, updatedAt, owner).")]),
            "problem": problem,
        ], required: ["status"])
        return object(["results": array(of: result, maxItems: TodoPlugin.maximumBatch)], required: ["results"])
    }

    /// A bucket as the native API shows it.
    static var bucket: JSONValue {
        object([
            "name": string(),
            "create": .object(["type": .string("string"), "enum": .array(CreatePolicy.allCases.map { .string($0.rawValue) })]),
            "schema": .object(["type": .string("object"), "description": .string("The JSON Schema the bucket's objects must satisfy.")]),
            "index": array(of: string()),
            "configured": .object(["type": .string("boolean")]),
        ], required: ["name", "create", "index", "configured"])
    }

    /// A new bucket.
    static var newBucket: JSONValue {
        object([
            "name": string(pattern: "^[A-Za-z][A-Za-z0-9_-]{0,39}$"),
            "create": .object(["type": .string("string"), "enum": .array(CreatePolicy.allCases.map { .string($0.rawValue) })]),
            "schema": .object(["type": .string("object"), "description": .string("A JSON Schema (type, properties, required, additionalProperties, enum, lengths, ranges, items, format, default).")]),
            "index": array(of: string(), maxItems: Bucket.maximumIndexes),
        ], required: ["name"])
    }

    /// A page of buckets.
    static var bucketPage: JSONValue {
        object(["items": array(of: bucket), "nextCursor": .object(["type": .array([.string("string"), .string("null")])])], required: ["items", "nextCursor"])
    }
}
