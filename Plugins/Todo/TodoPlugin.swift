import Foundation
import GatewayCore
import NIOCore
import ServiceLifecycle

/// Per-user object buckets with queries (seed 001): a todo app keeps its todos as JSON objects in
/// a bucket, lists them sorted by `updatedAt`, adds and deletes them. Buckets hold any JSON
/// objects with owners, ACLs, optimistic concurrency and queries translated to SQL. Serves the
/// native API under `/v1/todo` and the NEC BaaS dialect under `/1/{tenant}`.
public struct TodoPlugin: AuthorizingPlugin {
    public static let id = "todo"
    public static let summary = "Object buckets with queries and ACLs, with the NEC BaaS dialect"
    public static let migrations = TodoMigrations.all

    public struct Configuration: PluginConfiguration {
        /// The largest object, in bytes of compact JSON.
        var maxObjectBytes = 65_536
        /// The largest page a query returns (and what the dialect's `limit=-1` is capped at).
        var maxQueryLimit = 1_000
        /// The buckets, by name. Without this key the plugin declares `todos` as the default config does.
        var buckets: [String: BucketSettings] = Self.defaultBuckets
        /// The NEC BaaS tenants and their applications.
        var tenants: [String: TenantSettings] = [:]

        public static let defaults = Configuration()

        public func validate() throws {
            guard (1_024...16_777_216).contains(maxObjectBytes) else {
                throw ConfigurationError(key: "maxObjectBytes", "must be between 1024 and 16777216")
            }
            guard (1...100_000).contains(maxQueryLimit) else {
                throw ConfigurationError(key: "maxQueryLimit", "must be between 1 and 100000")
            }
        }

        /// `todos`: a required description of at most 1,000 characters, `done` (default false),
        /// an optional `due` date and `tags`; indexed on updatedAt and done.
        static var defaultBuckets: [String: BucketSettings] {
            let schema = try! JSONDecoder().decode(ObjectSchema.self, from: Data("""
                {"type": "object", "required": ["description"], "properties": {
                  "description": {"type": "string", "minLength": 1, "maxLength": 1000},
                  "done": {"type": "boolean", "default": false},
                  "due": {"type": "string", "format": "date"},
                  "tags": {"type": "array", "items": {"type": "string", "maxLength": 100}, "maxItems": 50}}}
                """.utf8))
            return ["todos": BucketSettings(create: .anyone, schema: schema, index: ["updatedAt", "done", "done,updatedAt"])]
        }
    }

    /// A NEC BaaS tenant: the applications whose id and key its clients send.
    struct TenantSettings: Codable, Sendable {
        var apps: [AppSettings]
    }

    /// One application: `X-Application-Id`, `X-Application-Key`, and optionally a master key that
    /// bypasses ACLs.
    struct AppSettings: Codable, Sendable {
        var id: String
        var key: String
        var masterKey: String?
    }

    let configuration: Configuration
    let context: PluginContext
    let service: ObjectService

    public init(configuration: Configuration, context: PluginContext) async throws {
        var buckets: [String: Bucket] = [:]
        for (name, settings) in configuration.buckets {
            do {
                buckets[name] = try Bucket(name: name, settings: settings, configured: true)
            } catch {
                throw ConfigurationError(key: "buckets.\(name)", error.message)
            }
        }
        for (tenant, settings) in configuration.tenants {
            if tenant.isEmpty || tenant.contains("/") { throw ConfigurationError(key: "tenants.\(tenant)", "a tenant id must be a non-empty path segment") }
            for (index, app) in settings.apps.enumerated() where app.id.isEmpty || app.key.count < 8 || (app.masterKey.map { $0.count < 16 } ?? false) {
                throw ConfigurationError(key: "tenants.\(tenant).apps[\(index)]", "needs an id, a key of at least 8 characters and a master key (if any) of at least 16")
            }
        }
        self.configuration = configuration
        self.context = context
        let store = ObjectStore(database: context.database, clock: context.clock, maxObjectBytes: configuration.maxObjectBytes)
        let registry = BucketRegistry(configured: buckets, store: store, clock: context.clock)
        try await registry.load()
        let groups = GroupDirectory(database: context.database, clock: context.clock, events: context.events, accounts: context.accounts,
                                    purgeCache: context.purgeCache(tags:))
        try await groups.reload()
        service = ObjectService(buckets: registry, store: store, groups: groups, purgeCache: context.purgeCache(tags:), maxQueryLimit: configuration.maxQueryLimit)
    }

    /// Applies the other instances' group changes to this instance's groups.
    public var services: [any Service] {
        [context.events.listener(topic: GroupDirectory.topic, logger: context.logger) { [groups = service.groups] in try await groups.applyRemote($0) }]
    }

    public func loadDemoData() async throws {
        guard configuration.buckets["todos"] != nil else { return }
        for text in ["Read the gateway's README", "Try the todo API: curl localhost:8080/v1/todo/buckets/todos/objects"] {
            _ = try await service.create(bucketName: "todos", body: .object(["description": .string(text)]), actor: .anonymous,
                                         parseACL: ObjectService.nativeACL)
        }
    }

    // MARK: Native shapes

    struct BucketPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["bucket": NativeSchemas.bucketNameRule]
        var bucket: String
    }
    struct ObjectPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["bucket": NativeSchemas.bucketNameRule, "id": NativeSchemas.objectIDRule]
        var bucket: String
        var id: String
    }

    /// A query in the query string. `limit` is documented by the operation: its largest value is
    /// the configured `maxQueryLimit`.
    struct QueryParameters: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "where": FieldRule(keywords: ["contentMediaType": .string("application/json")])
                .described("A JSON object of conditions: field paths with values or $eq $ne $lt $lte $gt $gte $in $nin $all $exists $regex $not, and $and $or $nor. Empty: every object."),
            "order": FieldRule.pattern(NativeSchemas.orderPattern).described("Field paths to sort by, `-` for descending: `-updatedAt,description`."),
            "cursor": NativeSchemas.cursorRule,
            "skip": FieldRule.integer(0...NativeSchemas.maximumSkip).described("Objects to skip (not with a cursor)."),
            "fields": FieldRule.pattern(NativeSchemas.fieldListPattern).described("Comma-separated field paths to return besides the system fields."),
        ]

        var whereClause: String?
        var order: String?
        var limit: Int?
        var cursor: String?
        var skip: Int?
        var count: Bool?
        var fields: String?

        enum CodingKeys: String, CodingKey {
            case whereClause = "where"
            case order, limit, cursor, skip, count, fields
        }
    }

    struct BucketInfo: Codable, Sendable {
        var name: String
        var create: CreatePolicy
        var schema: ObjectSchema?
        var index: [String]
        var configured: Bool
    }


    struct NewBucket: Codable, Sendable {
        var name: String
        var create: CreatePolicy?
        var schema: ObjectSchema?
        var index: [String]?
    }

    struct Deleted: Codable, Sendable { var deletedObjects: Int }

    static func info(_ bucket: Bucket) -> BucketInfo {
        BucketInfo(name: bucket.name, create: bucket.create, schema: bucket.schema, index: bucket.indexSpecs, configured: bucket.configured)
    }

    /// An object as the native API shows it: its fields plus `id`, `createdAt`, `updatedAt`,
    /// `etag`, `owner` and `acl`.
    static func render(_ object: StoredObject, fields: [QueryField]? = nil) -> JSONValue {
        var members: [String: JSONValue]
        if let fields {
            members = [:]
            for field in fields {
                guard case .path(let segments) = field, let value = JSONValue.object(object.data)[path: segments] else { continue }
                project(value, at: segments[...], into: &members)
            }
        } else {
            members = object.data
        }
        members["id"] = .string(object.id)
        members["createdAt"] = .string(Timestamps.format(micros: object.createdAt))
        members["updatedAt"] = .string(Timestamps.format(micros: object.updatedAt))
        members["etag"] = .string(object.etag)
        members["owner"] = object.owner.map(JSONValue.string) ?? .null
        members["acl"] = object.acl.json
        return .object(members)
    }

    /// The system fields of the native shape, in key order.
    static func systemFields(_ object: StoredObject) -> [(String, JSONValue)] {
        [("acl", object.acl.json), ("createdAt", .string(Timestamps.format(micros: object.createdAt))), ("etag", .string(object.etag)),
         ("id", .string(object.id)), ("owner", object.owner.map(JSONValue.string) ?? .null),
         ("updatedAt", .string(Timestamps.format(micros: object.updatedAt)))]
    }

    /// Appends the native JSON of `object`: stored fields spliced in unparsed, unless `fields` projects.
    static func write(_ object: StoredObject, fields: [QueryField]?, into bytes: inout [UInt8]) {
        if fields != nil {
            render(object, fields: fields).write(into: &bytes)
        } else {
            object.write(system: systemFields(object), into: &bytes)
        }
    }

    static func document(_ object: StoredObject) -> JSONDocument {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(object.dataText.utf8.count + 256)
        write(object, fields: nil, into: &bytes)
        return JSONDocument(bytes: ByteBuffer(bytes: bytes))
    }

    /// Copies `value` into `members` at `path`, creating the objects on the way.
    static func project(_ value: JSONValue, at path: ArraySlice<String>, into members: inout [String: JSONValue]) {
        let key = path.first!
        if path.count == 1 { members[key] = value; return }
        var child = members[key]?.objectValue ?? [:]
        project(value, at: path.dropFirst(), into: &child)
        members[key] = .object(child)
    }

    /// The etag a request's `If-Match` names (quotes and `W/` removed), or nil.
    static func ifMatch(_ headers: HTTPFields) -> String? {
        guard var value = headers[.ifMatch]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if value.hasPrefix("W/") { value.removeFirst(2) }
        if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = String(value.dropFirst().dropLast()) }
        return value
    }

    static func headers(for object: StoredObject) -> HTTPFields {
        [.eTag: "\"\(object.etag)\""]
    }

    /// Builds a query from its parts, naming the offending part on a problem.
    static func makeQuery(where whereValue: JSONValue?, order: String?, limit: Int?, cursor: String?, skip: Int?, count: Bool?,
                          fields: [String]?, maxLimit: Int, location: String) throws -> ObjectQuery {
        func fail(_ part: String, _ message: String) -> GatewayError {
            GatewayError.badRequest("The query is not supported: \(message).", errors: [.init(pointer: "\(location)\(part)", detail: message)])
        }
        var query = ObjectQuery()
        do {
            if let whereValue, whereValue != .null { query.condition = try Condition.parse(whereValue) }
        } catch { throw fail("where", error.message) }
        do {
            query.order = try SortKey.parse(firstMentions(order ?? ""))
        } catch { throw fail("order", error.message) }
        if let limit {
            guard (1...maxLimit).contains(limit) else { throw fail("limit", "limit must be between 1 and \(maxLimit)") }
            query.limit = limit
        }
        if let skip {
            guard (0...NativeSchemas.maximumSkip).contains(skip) else { throw fail("skip", "skip must be between 0 and 1000000") }
            query.skip = skip
        }
        if let cursor, !cursor.isEmpty {
            guard query.skip == 0 else { throw fail("cursor", "cursor and skip cannot be combined") }
            do {
                query.cursor = try QueryCursor(token: cursor, keys: query.order)
            } catch { throw fail("cursor", error.message) }
        }
        query.count = count ?? false
        if let fields {
            guard fields.count <= NativeSchemas.maximumFields else { throw fail("fields", "at most 100 fields") }
            do {
                query.fields = try fields.map { name throws(QueryProblem) in try QueryField(parsing: name) }
            } catch { throw fail("fields", error.message) }
        }
        return query
    }

    /// `order` with the later mentions of a field left out: sorting by a field again changes nothing.
    static func firstMentions(_ order: String) -> String {
        var seen = Set<String>()
        return order.split(separator: ",").filter { part in
            let key = String(part.trimmingSpaces)
            guard !key.isEmpty else { return false }
            let name = key.hasPrefix("-") || key.hasPrefix("+") ? String(key.dropFirst()) : key
            return seen.insert((try? QueryField(parsing: name))?.name ?? name).inserted
        }.joined(separator: ",")
    }

    /// A page of objects, written once as JSON: the native list shape, with the optional `count`.
    struct ObjectPage: Encodable, Sendable, JSONWritable, PagedOutput {
        let document: JSONDocument
        let nextCursor: String?

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(document)
        }

        func writeJSON(into bytes: inout [UInt8]) {
            bytes.append(contentsOf: document.bytes.readableBytesView)
        }
    }

    /// `{"count"?, "items": [...], "nextCursor"}`.
    static func page(_ result: (objects: [StoredObject], count: Int?, next: QueryCursor?), fields: [QueryField]?) -> ObjectPage {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(result.objects.reduce(64) { $0 + $1.dataText.utf8.count + 256 })
        bytes.append(UInt8(ascii: "{"))
        if let count = result.count {
            bytes.append(contentsOf: #""count":"#.utf8)
            JSONValue.number(Double(count)).write(into: &bytes)
            bytes.append(UInt8(ascii: ","))
        }
        bytes.append(contentsOf: #""items":["#.utf8)
        for (index, object) in result.objects.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            write(object, fields: fields, into: &bytes)
        }
        bytes.append(contentsOf: #"],"nextCursor":"#.utf8)
        (result.next.map { JSONValue.string($0.token) } ?? .null).write(into: &bytes)
        bytes.append(UInt8(ascii: "}"))
        return ObjectPage(document: JSONDocument(bytes: ByteBuffer(bytes: bytes)), nextCursor: result.next?.token)
    }

    // MARK: Operations

    public var routes: [Route] {
        let service = self.service
        let maxLimit = configuration.maxQueryLimit
        let bucketTag = ObjectService.cacheTag("{bucket}")
        return [
            Route.define("todo.buckets.list", .get, "/buckets", summary: "The buckets and their rules")
                .documentOutput(schema: NativeSchemas.bucketPage)
                .cache(.shared(ttl: .seconds(60), tags: ["todo:buckets"]))
                .returns(Page<BucketInfo>.self) { _, _ in
                    Page(items: try await service.buckets.all().map(Self.info), nextCursor: nil)
                },
            Route.define("todo.buckets.get", .get, "/buckets/{bucket}", summary: "One bucket's rules")
                .documentOutput(schema: NativeSchemas.bucket)
                .path(BucketPath.self)
                .resource("bucket")
                .cache(.shared(ttl: .seconds(60), tags: ["todo:buckets"]))
                .returns(BucketInfo.self) { input, _ in
                    Self.info(try await service.buckets.bucket(input.path.bucket))
                },
            Route.define("todo.buckets.create", .post, "/buckets", summary: "Create a bucket (administrators, or users granted todo:write)")
                .documentBody(schema: NativeSchemas.newBucket)
                .documentOutput(schema: NativeSchemas.bucket)
                // A bucket's definition governs every user's objects in it: shared data.
                .access(.granted("todo:write"))
                .cache(.invalidating(["todo:buckets"]))
                .body(NewBucket.self)
                .status(201)
                .replies(BucketInfo.self) { input, _ in
                    let bucket = try await service.buckets.create(
                        name: input.body.name, settings: BucketSettings(create: input.body.create, schema: input.body.schema, index: input.body.index))
                    return Reply(Self.info(bucket), status: 201, headers: [.location: "buckets/\(bucket.name)"])
                },
            Route.define("todo.buckets.delete", .delete, "/buckets/{bucket}", summary: "Delete a bucket and all its objects (administrators, or users granted todo:write)")
                .access(.granted("todo:write"))
                .path(BucketPath.self)
                .cache(.invalidating(["todo:buckets", bucketTag]))
                .returns(Deleted.self) { input, _ in
                    Deleted(deletedObjects: try await service.buckets.delete(name: input.path.bucket))
                },
            Route.define("todo.objects.create", .post, "/buckets/{bucket}/objects", summary: "Create an object")
                .documentBody(schema: fieldsSchema)
                .documentOutput(schema: objectSchema)
                .details("The body is the object. An `acl` field ({readers, writers}) shares it; without one, a signed-in caller's object is theirs alone and a guest's is everyone's.")
                .path(BucketPath.self)
                .resource("bucket")
                .body(JSONValue.self)
                .cache(.invalidating([bucketTag]))
                .status(201)
                .replies(JSONDocument.self) { input, context in
                    let object = try await service.create(bucketName: input.path.bucket, body: input.body, actor: service.actor(context.principal),
                                                          parseACL: ObjectService.nativeACL)
                    var headers = Self.headers(for: object)
                    headers[.location] = "objects/\(object.id)"
                    return Reply(Self.document(object), status: 201, headers: headers)
                },
            Route.define("todo.objects.query", .get, "/buckets/{bucket}/objects", summary: "Query objects")
                .documentOutput(schema: objectPageSchema)
                .details("`where` is JSON with $eq $ne $lt $lte $gt $gte $in $nin $all $exists $regex $not $and $or $nor on field paths (a.b.c); `order` is `-updatedAt,description`; `cursor` continues from a page's `nextCursor`.")
                .path(BucketPath.self)
                .query(QueryParameters.self)
                .rules(["query.limit": FieldRule.integer(1...maxLimit).described("Objects per page, 1 to \(maxLimit) (default 100).")])
                .resource("bucket")
                .cache(.perPrincipal(ttl: .seconds(60), tags: [bucketTag, GroupDirectory.readsTag]))
                .returns(ObjectPage.self) { input, context in
                    let parameters = input.query
                    var whereValue: JSONValue?
                    if let text = parameters.whereClause, !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                        do {
                            whereValue = try JSONValue.parse(text, maximumDepth: 16)
                        } catch {
                            throw GatewayError.badRequest("The query is not supported: where is not valid JSON.",
                                                          errors: [.init(pointer: "query.where", detail: (error as? GatewayError)?.detail ?? "not JSON")])
                        }
                    }
                    let fields = parameters.fields.map { $0.split(separator: ",").map { String($0.trimmingSpaces) } }
                    let query = try Self.makeQuery(where: whereValue, order: parameters.order, limit: parameters.limit, cursor: parameters.cursor,
                                                   skip: parameters.skip, count: parameters.count, fields: fields, maxLimit: maxLimit, location: "query.")
                    let result = try await service.query(bucketName: input.path.bucket, query, actor: service.actor(context.principal))
                    return Self.page(result, fields: query.fields)
                },
            Route.define("todo.objects.search", .post, "/buckets/{bucket}/query", summary: "Query objects with the query in a JSON body")
                .documentBody(schema: NativeSchemas.search(maxLimit: maxLimit))
                .documentOutput(schema: objectPageSchema)
                .details("The body is {where, order, limit, cursor, skip, count, fields (an array)}: for queries too long for a URL.")
                .path(BucketPath.self)
                .resource("bucket")
                .body(JSONValue.self)
                .status(200)
                .returns(ObjectPage.self) { input, context in
                    guard case .object(let body) = input.body else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
                    let known: Set<String> = ["where", "order", "limit", "cursor", "skip", "count", "fields"]
                    if let unknown = body.keys.first(where: { !known.contains($0) }) {
                        throw GatewayError.invalid(field: "/\(unknown)", "is not a query field (\(known.sorted().joined(separator: ", ")))")
                    }
                    func integer(_ key: String) throws -> Int? {
                        guard let value = body[key] else { return nil }
                        guard let number = value.numberValue, number == number.rounded(), abs(number) < 1e9 else { throw GatewayError.invalid(field: "/\(key)", "must be an integer") }
                        return Int(number)
                    }
                    func text(_ key: String) throws -> String? {
                        guard let value = body[key] else { return nil }
                        guard let string = value.stringValue else { throw GatewayError.invalid(field: "/\(key)", "must be a string") }
                        return string
                    }
                    var fields: [String]?
                    if let value = body["fields"] {
                        guard let names = value.arrayValue?.compactMap(\.stringValue), names.count == value.arrayValue?.count else {
                            throw GatewayError.invalid(field: "/fields", "must be an array of field names")
                        }
                        fields = names
                    }
                    var count: Bool?
                    if let value = body["count"] {
                        guard case .bool(let flag) = value else { throw GatewayError.invalid(field: "/count", "must be true or false") }
                        count = flag
                    }
                    let query = try Self.makeQuery(where: body["where"], order: try text("order"), limit: try integer("limit"), cursor: try text("cursor"),
                                                   skip: try integer("skip"), count: count, fields: fields, maxLimit: maxLimit, location: "/")
                    let result = try await service.query(bucketName: input.path.bucket, query, actor: service.actor(context.principal))
                    return Self.page(result, fields: query.fields)
                },
            Route.define("todo.objects.get", .get, "/buckets/{bucket}/objects/{id}", summary: "Read an object")
                .documentOutput(schema: objectSchema)
                .path(ObjectPath.self)
                .resource("bucket")
                .cache(.perPrincipal(ttl: .seconds(60), tags: [bucketTag, GroupDirectory.readsTag]))
                .replies(JSONDocument.self) { input, context in
                    let object = try await service.get(bucketName: input.path.bucket, id: input.path.id, actor: service.actor(context.principal))
                    return Reply(Self.document(object), headers: Self.headers(for: object))
                },
            Route.define("todo.objects.replace", .put, "/buckets/{bucket}/objects/{id}", summary: "Replace an object's fields")
                .documentBody(schema: fieldsSchema)
                .documentOutput(schema: objectSchema)
                .details("Send `If-Match` with the object's etag to replace only that version (412 otherwise).")
                .path(ObjectPath.self)
                .resource("bucket")
                .body(JSONValue.self)
                .cache(.invalidating([bucketTag]))
                .replies(JSONDocument.self) { input, context in
                    let object = try await service.replace(bucketName: input.path.bucket, id: input.path.id, body: input.body, actor: service.actor(context.principal),
                                                           ifMatch: Self.ifMatch(context.headers), parseACL: ObjectService.nativeACL)
                    return Reply(Self.document(object), headers: Self.headers(for: object))
                },
            Route.define("todo.objects.patch", .patch, "/buckets/{bucket}/objects/{id}", summary: "Change some fields of an object")
                .documentBody(schema: NativeSchemas.patch)
                .documentOutput(schema: objectSchema)
                .details("A JSON merge patch (RFC 7396) and/or the operators $set, $unset and $inc with field paths. `If-Match` makes it conditional.")
                .path(ObjectPath.self)
                .resource("bucket")
                .body(PatchBody.self)
                .cache(.invalidating([bucketTag]))
                .replies(JSONDocument.self) { input, context in
                    let object = try await service.patch(bucketName: input.path.bucket, id: input.path.id, body: input.body.value, actor: service.actor(context.principal),
                                                         ifMatch: Self.ifMatch(context.headers), parseACL: ObjectService.nativeACL)
                    return Reply(Self.document(object), headers: Self.headers(for: object))
                },
            Route.define("todo.objects.delete", .delete, "/buckets/{bucket}/objects/{id}", summary: "Delete an object")
                .path(ObjectPath.self)
                .resource("bucket")
                .cache(.invalidating([bucketTag]))
                .returns(NoContent.self) { input, context in
                    try await service.delete(bucketName: input.path.bucket, id: input.path.id, actor: service.actor(context.principal), ifMatch: Self.ifMatch(context.headers))
                    return NoContent()
                },
            Route.define("todo.objects.batch", .post, "/buckets/{bucket}/batch", summary: "Run many object operations in one request")
                .documentBody(schema: NativeSchemas.batch)
                .documentOutput(schema: NativeSchemas.batchReply)
                .details("The body is {\"operations\": [{\"op\": \"create\"|\"replace\"|\"patch\"|\"delete\", \"id\", \"object\", \"ifMatch\"}]} (at most 100); each gets its own result with a status, in order.")
                .path(BucketPath.self)
                .resource("bucket")
                .body(JSONValue.self)
                .cache(.invalidating([bucketTag]))
                .status(200)
                .returns(JSONValue.self) { input, context in
                    // Each operation counts against the caller's limit, as a request of its own would.
                    if case .array(let operations)? = input.body.objectValue?["operations"], operations.count > 1, operations.count <= Self.maximumBatch {
                        try await context.charge(operations.count - 1)
                    }
                    return try await Self.batch(input.body, bucket: input.path.bucket, service: service, actor: service.actor(context.principal))
                },
        ] + groupOperations
    }

    static let maximumBatch = 100

    static func batch(_ body: JSONValue, bucket: String, service: ObjectService, actor: Actor) async throws -> JSONValue {
        guard case .object(let members) = body, case .array(let operations)? = members["operations"] else {
            throw GatewayError.invalid(field: "/operations", "must be an array of operations")
        }
        guard operations.count <= maximumBatch else { throw GatewayError.invalid(field: "/operations", "at most \(maximumBatch) operations per batch") }
        _ = try await service.buckets.bucket(bucket)
        var results: [JSONValue] = []
        for (index, operation) in operations.enumerated() {
            do {
                guard case .object(let step) = operation, let op = step["op"]?.stringValue else {
                    throw GatewayError.invalid(field: "/operations/\(index)/op", "must be create, replace, patch or delete")
                }
                let id = step["id"]?.stringValue
                let ifMatch = step["ifMatch"]?.stringValue
                func requireID() throws -> String {
                    guard let id else { throw GatewayError.invalid(field: "/operations/\(index)/id", "is required for \(op)") }
                    return id
                }
                func object() throws -> JSONValue {
                    guard let object = step["object"] else { throw GatewayError.invalid(field: "/operations/\(index)/object", "is required for \(op)") }
                    return object
                }
                switch op {
                case "create":
                    let created = try await service.create(bucketName: bucket, body: try object(), actor: actor, parseACL: ObjectService.nativeACL)
                    results.append(.object(["status": .number(201), "object": render(created)]))
                case "replace":
                    let replaced = try await service.replace(bucketName: bucket, id: try requireID(), body: try object(), actor: actor, ifMatch: ifMatch,
                                                             parseACL: ObjectService.nativeACL)
                    results.append(.object(["status": .number(200), "object": render(replaced)]))
                case "patch":
                    let patched = try await service.patch(bucketName: bucket, id: try requireID(), body: try object(), actor: actor, ifMatch: ifMatch,
                                                          parseACL: ObjectService.nativeACL)
                    results.append(.object(["status": .number(200), "object": render(patched)]))
                case "delete":
                    try await service.delete(bucketName: bucket, id: try requireID(), actor: actor, ifMatch: ifMatch)
                    results.append(.object(["status": .number(204)]))
                default:
                    throw GatewayError.invalid(field: "/operations/\(index)/op", "must be create, replace, patch or delete")
                }
            } catch let error as GatewayError {
                var problem: [String: JSONValue] = ["title": .string(error.title), "detail": .string(error.detail), "status": .number(Double(error.status.code))]
                if !error.errors.isEmpty {
                    problem["errors"] = .array(error.errors.map { .object(["pointer": .string($0.pointer), "detail": .string($0.detail)]) })
                }
                results.append(.object(["status": .number(Double(error.status.code)), "problem": .object(problem)]))
            }
        }
        return .object(["results": .array(results)])
    }

    // MARK: Dialect

    // MARK: Documentation

    /// For each configured bucket, `todo.<bucket>`: an object as the native API answers it — the
    /// fields the bucket's JSON Schema allows, and the system members.
    public var schemas: [String: JSONValue] {
        var result: [String: JSONValue] = [:]
        for (name, settings) in configuration.buckets {
            let fields = settings.schema.flatMap { try? JSONValue(encoding: $0) } ?? .object(["type": .string("object")])
            result["todo.\(name)"] = .object(["allOf": .array([fields, Self.systemMembersSchema])])
        }
        result[NativeSchemas.fieldValueName] = NativeSchemas.fieldValue
        return result
    }

    /// The members the gateway adds to every stored object.
    static let systemMembersSchema: JSONValue = .object([
        "type": .string("object"),
        "required": .array(["id", "createdAt", "updatedAt", "etag", "acl"].map(JSONValue.string)),
        "properties": .object([
            "id": .object(["type": .string("string")]),
            "createdAt": .object(["type": .string("string"), "format": .string("date-time")]),
            "updatedAt": .object(["type": .string("string"), "format": .string("date-time")]),
            "etag": .object(["type": .string("string")]),
            "owner": .object(["type": .array([.string("string"), .string("null")])]),
            "acl": .object(["type": .string("object"), "description": .string("Who may read and change the object: {readers, writers}, lists of user ids or groups.")]),
        ]),
    ])

    /// An object of the bucket the path names: one of the configured buckets' schemas, or, in a
    /// bucket made at run time (`POST /buckets`), any object with the stored members.
    var objectSchema: JSONValue {
        let references = configuration.buckets.keys.sorted().map { JSONValue.object(["$ref": .string("#/components/schemas/todo.\($0)")]) }
        return .object(["anyOf": .array(references + [Self.systemMembersSchema]),
                        "description": .string("An object of the bucket named in the path (its schema is that bucket's: GET /v1/todo/buckets/{bucket}).")])
    }

    /// The fields a client sends for an object: the schema of the bucket the path names (any fields
    /// in a bucket made at run time without one).
    var fieldsSchema: JSONValue {
        let schemas = configuration.buckets.keys.sorted().map { name in
            NativeSchemas.objectFields(configuration.buckets[name]?.schema.flatMap { try? JSONValue(encoding: $0) } ?? .object(["type": .string("object")]))
        }
        return .object(["anyOf": .array(schemas + [NativeSchemas.objectFields(.object(["type": .string("object")]))]),
                        "description": .string("The fields of an object of the bucket named in the path (its schema: GET /v1/todo/buckets/{bucket}).")])
    }

    /// A page of objects of the bucket the path names.
    var objectPageSchema: JSONValue {
        .object([
            "type": .string("object"),
            "required": .array([.string("items"), .string("nextCursor")]),
            "properties": .object([
                "count": .object(["type": .string("integer"), "description": .string("How many objects match, when the query asked (count=1).")]),
                "items": .object(["type": .string("array"), "items": objectSchema]),
                "nextCursor": .object(["type": .array([.string("string"), .string("null")])]),
            ]),
        ])
    }

    public var dialects: [Dialect] {
        [NebulaDialect(service: service, tenants: configuration.tenants, accounts: context.accounts, maxLimit: configuration.maxQueryLimit).dialect]
    }

    /// The NEC BaaS routes name a tenant and carry one of its applications' keys: checked here,
    /// for every route of the dialect, before a handler runs.
    public func authorize(_ request: AuthorizationRequest) async throws {
        guard request.dialect == "nebula" else { return }
        _ = try NebulaDialect.presentsMasterKey(configuration.tenants, tenant: request.pathParameters["tenant"], headers: request.headers,
                                                matches: context.secretMatches)
    }
}

/// A PATCH body: a JSON merge patch (`application/merge-patch+json`) or JSON with field operators.
struct PatchBody: RawBodyInput {
    static var acceptedMediaTypes: [String] { ["application/merge-patch+json", "application/json"] }
    var value: JSONValue

    init(bytes: ByteBuffer, contentType: String) throws {
        value = try JSONValue.parse(bytes)
    }

    init(from decoder: any Decoder) throws {
        value = try JSONValue(from: decoder)
    }
}
