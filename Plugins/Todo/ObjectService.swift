import Foundation
import GatewayCore

/// The object operations both APIs share: checks (bucket rules, schema, sizes, reserved fields)
/// and the changes themselves (replace, merge patch, field operators). The native API and the
/// NEC BaaS dialect only translate shapes around it.
struct ObjectService: Sendable {
    let buckets: BucketRegistry
    let store: ObjectStore
    let groups: GroupDirectory
    let purgeCache: @Sendable (_ tags: [String]) async -> Void
    let maxQueryLimit: Int

    /// Fields the store sets; a client sending them (as a read-modify-write client does) is ignored.
    static let readOnlyFields: Set<String> = ["id", "_id", "createdAt", "updatedAt", "etag", "owner", "_deleted"]
    /// Fields that carry the ACL in a body.
    static let aclFields: Set<String> = ["acl", "ACL"]
    static let operatorKeys: Set<String> = ["$set", "$unset", "$inc"]

    static func cacheTag(_ bucket: String) -> String { "todo:bucket:\(bucket)" }

    /// The caller as the store sees it: administrators administer everything, a master key of
    /// `tenant` what was made through that tenant; a user's groups come along.
    func actor(_ principal: Principal, tenant: String? = nil, presentsMasterKey: Bool = false) -> Actor {
        let authority: Actor.Authority = if principal.isAdmin { .all } else if presentsMasterKey, let tenant { .tenant(tenant) } else { .none }
        return Actor(userID: principal.userID, authority: authority,
                     groups: principal.userID.map { groups.groups(of: $0) } ?? [], tenant: tenant)
    }

    /// Purges the cached replies of `bucket`. The native operations declare their invalidation
    /// and the host runs it; the dialect's writes call this.
    func invalidate(_ bucket: String) async {
        await purgeCache([Self.cacheTag(bucket)])
    }

    // MARK: Checks

    func mayCreate(in bucket: Bucket, actor: Actor) throws {
        switch bucket.create {
        case .anyone: return
        case .authenticated:
            guard actor.userID != nil || actor.isManager else { throw GatewayError.unauthorized("Sign in to create objects in '\(bucket.name)'.") }
        case .admin:
            guard actor.administers(bucket.tenant) else { throw GatewayError.forbidden("Only administrators create objects in '\(bucket.name)'.") }
        }
    }

    /// Splits a body into the object's fields and the ACL it carries; rejects `$` keys.
    static func fields(of body: JSONValue, parseACL: (JSONValue) throws -> ObjectACL) throws -> (fields: [String: JSONValue], acl: ObjectACL?) {
        guard case .object(var members) = body else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
        var acl: ObjectACL?
        for key in aclFields {
            if let value = members.removeValue(forKey: key) { acl = try parseACL(value) }
        }
        for key in readOnlyFields { members[key] = nil }
        var problems: [GatewayError.FieldError] = []
        for (key, value) in members { checkKeys(value, key: key, pointer: "", into: &problems) }
        if !problems.isEmpty { throw GatewayError.invalid("The object has fields no query could name.", errors: problems) }
        return (members, acl)
    }

    private static func checkKeys(_ value: JSONValue, key: String, pointer: String, into problems: inout [GatewayError.FieldError]) {
        let here = "\(pointer)/\(ObjectSchema.escape(key))"
        if key.hasPrefix("$") || key.isEmpty { problems.append(.init(pointer: here, detail: "field names must not be empty or start with '$'")) }
        if case .object(let members) = value {
            for (child, member) in members { checkKeys(member, key: child, pointer: here, into: &problems) }
        } else if case .array(let elements) = value {
            for (index, element) in elements.enumerated() {
                if case .object(let members) = element {
                    for (child, member) in members { checkKeys(member, key: child, pointer: "\(here)/\(index)", into: &problems) }
                }
            }
        }
    }

    /// The native ACL: `{"readers": [...], "writers": [...]}`.
    static func nativeACL(_ value: JSONValue) throws -> ObjectACL {
        guard case .object(let members) = value else { throw GatewayError.invalid(field: "/acl", "must be an object with readers and writers") }
        var problems: [GatewayError.FieldError] = []
        func list(_ key: String) -> [String] {
            guard let entry = members[key] else { return [] }
            guard case .array(let elements) = entry, elements.count <= ObjectACL.maximumEntries else {
                problems.append(.init(pointer: "/acl/\(key)", detail: "must be an array of at most \(ObjectACL.maximumEntries) entries"))
                return []
            }
            var names: [String] = []
            for (index, element) in elements.enumerated() {
                guard case .string(let name) = element, ObjectACL.entryProblem(name) == nil else {
                    problems.append(.init(pointer: "/acl/\(key)/\(index)", detail: "must be a user id, \"anonymous\" or \"authenticated\""))
                    continue
                }
                names.append(name)
            }
            return names
        }
        for key in members.keys where key != "readers" && key != "writers" {
            problems.append(.init(pointer: "/acl/\(key)", detail: "is not an ACL field (readers, writers)"))
        }
        let acl = ObjectACL(readers: list("readers"), writers: list("writers"))
        if !problems.isEmpty { throw GatewayError.invalid("The ACL is invalid.", errors: problems) }
        return acl
    }

    func validate(_ fields: [String: JSONValue], in bucket: Bucket) throws {
        guard let schema = bucket.schema else { return }
        let problems = schema.problems(with: .object(fields))
        if !problems.isEmpty { throw GatewayError.invalid("The object does not match the schema of bucket '\(bucket.name)'.", errors: problems) }
    }

    // MARK: Operations

    /// `id` is a client's choice of id (24 lowercase hexadecimal digits; 409 when taken).
    func create(bucketName: String, body: JSONValue, actor: Actor, id: String? = nil, parseACL: (JSONValue) throws -> ObjectACL) async throws -> StoredObject {
        let bucket = try await buckets.bucket(bucketName)
        try mayCreate(in: bucket, actor: actor)
        var (fields, acl) = try Self.fields(of: body, parseACL: parseACL)
        bucket.schema?.applyDefaults(to: &fields)
        try validate(fields, in: bucket)
        if let id, !ObjectStore.isValidID(id) {
            throw GatewayError.invalid(field: "/_id", "must be 24 lowercase hexadecimal digits")
        }
        let object = try await store.create(in: bucket, data: fields, acl: acl ?? bucket.defaultACL, actor: actor, id: id)
        return object
    }

    func get(bucketName: String, id: String, actor: Actor, includeDeleted: Bool = false) async throws -> StoredObject {
        let bucket = try await buckets.bucket(bucketName)
        try Self.checkID(id)
        return try await store.get(bucket: bucket.name, id: id, actor: actor, includeDeleted: includeDeleted)
    }

    static func checkID(_ id: String) throws {
        guard ObjectStore.isValidID(id) else { throw GatewayError.badRequest("An object id is 24 lowercase hexadecimal digits, not '\(id.prefix(64))'.") }
    }

    /// Replaces the object's fields with `body`'s.
    func replace(bucketName: String, id: String, body: JSONValue, actor: Actor, ifMatch: String?,
                 parseACL: (JSONValue) throws -> ObjectACL) async throws -> StoredObject {
        let bucket = try await buckets.bucket(bucketName)
        try Self.checkID(id)
        let (fields, acl) = try Self.fields(of: body, parseACL: parseACL)
        try validate(fields, in: bucket)
        let object = try await store.update(in: bucket, id: id, actor: actor, ifMatch: ifMatch) { data in
            data = fields
            return acl
        }
        return object
    }

    /// Applies a merge patch (RFC 7396) and the field operators `$set`, `$unset` and `$inc`.
    func patch(bucketName: String, id: String, body: JSONValue, actor: Actor, ifMatch: String?,
               parseACL: (JSONValue) throws -> ObjectACL) async throws -> StoredObject {
        let bucket = try await buckets.bucket(bucketName)
        try Self.checkID(id)
        guard case .object(var members) = body else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
        var operators: [String: JSONValue] = [:]
        for key in Self.operatorKeys { if let value = members.removeValue(forKey: key) { operators[key] = value } }
        if let unknown = members.keys.first(where: { $0.hasPrefix("$") }) {
            throw GatewayError.invalid(field: "/\(ObjectSchema.escape(unknown))", "is not an update operator ($set, $unset, $inc)")
        }
        let (plain, acl) = try Self.fields(of: .object(members), parseACL: parseACL)
        let steps = try FieldOperators(operators)
        let object = try await store.update(in: bucket, id: id, actor: actor, ifMatch: ifMatch) { data in
            data = Self.mergePatch(data, with: plain)
            try steps.apply(to: &data)
            try validate(data, in: bucket)
            return acl
        }
        return object
    }

    /// RFC 7396: nulls remove, objects merge recursively, anything else replaces.
    static func mergePatch(_ target: [String: JSONValue], with patch: [String: JSONValue]) -> [String: JSONValue] {
        var result = target
        for (key, value) in patch {
            switch value {
            case .null: result[key] = nil
            case .object(let inner):
                let existing = result[key]?.objectValue ?? [:]
                result[key] = .object(mergePatch(existing, with: inner))
            default: result[key] = value
            }
        }
        return result
    }

    func delete(bucketName: String, id: String, actor: Actor, ifMatch: String?) async throws {
        let bucket = try await buckets.bucket(bucketName)
        try Self.checkID(id)
        try await store.delete(bucket: bucket.name, id: id, actor: actor, ifMatch: ifMatch)
    }

    /// Marks an object deleted (the NEC BaaS soft delete): kept with a new etag, found only by
    /// queries that ask for deleted objects.
    func markDeleted(bucketName: String, id: String, actor: Actor, ifMatch: String?) async throws -> StoredObject {
        let bucket = try await buckets.bucket(bucketName)
        try Self.checkID(id)
        return try await store.update(in: bucket, id: id, actor: actor, ifMatch: ifMatch, markDeleted: true) { _ in nil }
    }

    func query(bucketName: String, _ query: ObjectQuery, actor: Actor) async throws -> (objects: [StoredObject], count: Int?, next: QueryCursor?) {
        let bucket = try await buckets.bucket(bucketName)
        return try await store.query(bucket: bucket.name, query, actor: actor)
    }

    func deleteAll(bucketName: String, matching condition: Condition?, actor: Actor, markOnly: Bool = false) async throws -> Int {
        let bucket = try await buckets.bucket(bucketName)
        return try await store.deleteAll(bucket: bucket.name, matching: condition, actor: actor, markOnly: markOnly)
    }
}

/// `$set`, `$unset` and `$inc` with dotted field paths, checked before they run.
struct FieldOperators: Sendable {
    enum Step: Sendable {
        case set([String], JSONValue)
        case unset([String])
        case increment([String], Double)
    }

    var steps: [Step] = []

    init(_ operators: [String: JSONValue]) throws {
        var problems: [GatewayError.FieldError] = []
        var touched = Set<String>()
        for op in operators.keys.sorted() {
            guard case .object(let members) = operators[op]! else {
                problems.append(.init(pointer: "/\(op)", detail: "must be an object of field paths"))
                continue
            }
            for (path, value) in members.sorted(by: { $0.key < $1.key }) {
                let pointer = "/\(op)/\(ObjectSchema.escape(path))"
                guard case .path(let segments)? = try? QueryField(parsing: path) else {
                    problems.append(.init(pointer: pointer, detail: "must be a field path of the object (not a system field)"))
                    continue
                }
                guard touched.insert(path).inserted else {
                    problems.append(.init(pointer: pointer, detail: "is changed by two operators"))
                    continue
                }
                switch op {
                case "$set": steps.append(.set(segments, value))
                case "$unset": steps.append(.unset(segments))
                default:
                    guard case .number(let amount) = value else {
                        problems.append(.init(pointer: pointer, detail: "must be a number"))
                        continue
                    }
                    steps.append(.increment(segments, amount))
                }
            }
        }
        if !problems.isEmpty { throw GatewayError.invalid("The update operators are invalid.", errors: problems) }
    }

    func apply(to data: inout [String: JSONValue]) throws {
        for step in steps {
            switch step {
            case .set(let path, let value): try Self.set(path[...], to: value, in: &data)
            case .unset(let path): Self.remove(path[...], from: &data)
            case .increment(let path, let amount):
                let current = JSONValue.object(data)[path: path]
                switch current {
                case nil, .null?: try Self.set(path[...], to: .number(amount), in: &data)
                case .number(let number)?:
                    let sum = number + amount
                    guard sum.isFinite else { throw GatewayError.invalid(field: "/$inc/\(path.joined(separator: "."))", "the result is out of range") }
                    try Self.set(path[...], to: .number(sum), in: &data)
                default:
                    throw GatewayError.invalid(field: "/$inc/\(path.joined(separator: "."))", "the field is not a number")
                }
            }
        }
    }

    private static func set(_ path: ArraySlice<String>, to value: JSONValue, in object: inout [String: JSONValue]) throws {
        let key = path.first!
        if path.count == 1 { object[key] = value; return }
        var child: [String: JSONValue]
        switch object[key] {
        case nil, .null?: child = [:]
        case .object(let members)?: child = members
        default: throw GatewayError.invalid(field: "/\(path.joined(separator: "."))", "'\(key)' is not an object")
        }
        try set(path.dropFirst(), to: value, in: &child)
        object[key] = .object(child)
    }

    private static func remove(_ path: ArraySlice<String>, from object: inout [String: JSONValue]) {
        let key = path.first!
        if path.count == 1 { object[key] = nil; return }
        guard case .object(var child)? = object[key] else { return }
        remove(path.dropFirst(), from: &child)
        object[key] = .object(child)
    }
}
