import Foundation
import GatewayCore
import NIOCore

/// The NEC BaaS ("Nebula") object API under `/1/{tenant}`, so that a client built on its SDK
/// works unchanged: object buckets with `_id`, `ACL` and `etag`, queries with `where`, `order`,
/// `skip`, `limit` (`-1` for all, capped), `count=1` and `projection`, `_batch`, users and login.
///
/// Every request names a tenant and carries `X-Application-Id` and `X-Application-Key` of one of
/// its applications (plugins.yaml); the application's master key bypasses ACLs. A signed-in
/// client sends `X-Session-Token`. Errors are `{"reasonCode": ..., "detail": ...}`.
struct NebulaDialect: Sendable {
    let service: ObjectService
    let tenants: [String: TodoPlugin.TenantSettings]
    let accounts: any AccountDirectory
    let maxLimit: Int

    var dialect: Dialect {
        let routes: [Route] = [
            route(.get, "/1/{tenant}/objects/{bucket}", "Query objects (where, order, skip, limit, count, projection, deleteMark)") { request, actor, _ in
                try await query(QueryParameters(query: request), bucket: request.pathParameters["bucket"] ?? "", actor: actor)
            },
            route(.post, "/1/{tenant}/objects/{bucket}/_query", "Query objects with the parameters in a JSON body (a long query)") { request, actor, _ in
                try await query(QueryParameters(body: try Self.body(request)), bucket: request.pathParameters["bucket"] ?? "", actor: actor)
            },
            route(.post, "/1/{tenant}/objects/{bucket}", "Create an object (with `_id`: that id, 409 duplicate_id when taken)") { request, actor, _ in
                let body = try Self.body(request)
                let object = try await service.create(bucketName: request.pathParameters["bucket"] ?? "", body: body, actor: actor,
                                                      id: try Self.chosenID(body), parseACL: Self.parseACL)
                return try Self.json(Self.render(object), status: 201)
            },
            route(.delete, "/1/{tenant}/objects/{bucket}", "Delete the objects a where matches (deleteMark=1: mark them deleted)") { request, actor, _ in
                let condition = try Self.condition(request.query("where").map(JSONValue.string))
                let count = try await service.deleteAll(bucketName: request.pathParameters["bucket"] ?? "", matching: condition, actor: actor,
                                                        markOnly: try Self.flag(request.query("deleteMark"), "deleteMark"))
                return try Self.json(.object(["result": .string("ok"), "deletedObjects": .number(Double(count))]))
            },
            route(.get, "/1/{tenant}/objects/{bucket}/{id}", "Read an object (deleteMark=1: also one marked deleted)") { request, actor, _ in
                let object = try await service.get(bucketName: request.pathParameters["bucket"] ?? "", id: request.pathParameters["id"] ?? "", actor: actor,
                                                   includeDeleted: try Self.flag(request.query("deleteMark"), "deleteMark"))
                return try Self.json(Self.render(object))
            },
            route(.put, "/1/{tenant}/objects/{bucket}/{id}", "Update an object: fields, $set/$inc/$unset, or $full_update (?etag= for a conditional update)") { request, actor, _ in
                let bucket = request.pathParameters["bucket"] ?? "", id = request.pathParameters["id"] ?? ""
                return try await answeringEtagMismatch(bucket: bucket, id: id, actor: actor) {
                    let object = try await update(bucket, id: id, body: try Self.body(request), etag: request.query("etag"), actor: actor)
                    return try Self.json(Self.render(object))
                }
            },
            route(.delete, "/1/{tenant}/objects/{bucket}/{id}", "Delete an object (?etag= for a conditional delete; deleteMark=1: mark it deleted)") { request, actor, _ in
                let bucket = request.pathParameters["bucket"] ?? "", id = request.pathParameters["id"] ?? ""
                return try await answeringEtagMismatch(bucket: bucket, id: id, actor: actor) {
                    if try Self.flag(request.query("deleteMark"), "deleteMark") {
                        return try Self.json(Self.render(try await service.markDeleted(bucketName: bucket, id: id, actor: actor, ifMatch: request.query("etag"))))
                    }
                    try await service.delete(bucketName: bucket, id: id, actor: actor, ifMatch: request.query("etag"))
                    return try Self.json(.object([:]))
                }
            },
            route(.post, "/1/{tenant}/objects/{bucket}/_batch", "Run insert, update and delete requests in order") { request, actor, context in
                try await batch(request, actor: actor, context: context)
            },
            route(.post, "/1/{tenant}/objects/{bucket}/_aggregate", "Aggregate the objects: a pipeline of $match, $group, $sort, $skip, $limit, $project, $count and $unwind") { request, actor, _ in
                try await aggregate(request, actor: actor)
            },
            route(.post, "/1/{tenant}/users", "Register a user") { request, _, _ in
                let body = try Self.body(request)
                let username = body[path: ["username"]]?.stringValue
                let email = body[path: ["email"]]?.stringValue
                guard let password = body[path: ["password"]]?.stringValue else { throw GatewayError.invalid(field: "/password", "is required") }
                guard let name = username ?? email else { throw GatewayError.invalid(field: "/username", "is required") }
                var account = try await accounts.register(username: name, email: email, password: password)
                try await accounts.addMember(account.id, to: Self.realm(request))
                if let options = body[path: ["options"]], options != .null {
                    account = try await accounts.updateAccount(id: account.id, username: nil, email: nil, password: nil, options: options)
                }
                return try Self.json(Self.render(account, groups: nil), status: 201)
            },
            route(.post, "/1/{tenant}/login", "Sign in with username or email and password") { request, _, context in
                let body = try Self.body(request)
                guard let password = body[path: ["password"]]?.stringValue,
                      let identifier = body[path: ["username"]]?.stringValue ?? body[path: ["email"]]?.stringValue else {
                    throw GatewayError.invalid(field: "/username", "username (or email) and password are required")
                }
                let session = try await accounts.signIn(identifier: identifier, password: password, address: context.principal.address)
                guard case .object(var user) = Self.render(session.account, groups: groups(of: session.account.id)) else { throw GatewayError.internalError() }
                user["sessionToken"] = .string(session.token)
                user["expire"] = .number(session.expiresAt.timeIntervalSince1970.rounded(.down))
                return try Self.json(.object(user))
            },
            route(.delete, "/1/{tenant}/login", "Sign out (the session of X-Session-Token)") { request, _, context in
                guard let token = request.headers[Self.sessionHeader], context.principal.userID != nil else {
                    throw GatewayError.unauthorized("Send X-Session-Token of a live session.")
                }
                try await accounts.signOut(token: token)
                return try Self.json(.object([:]))
            },
            route(.get, "/1/{tenant}/users/current", "The signed-in user") { _, _, context in
                guard let userID = context.principal.userID, let account = try await accounts.account(id: userID) else {
                    throw GatewayError.unauthorized("Send X-Session-Token of a live session.")
                }
                return try Self.json(Self.render(account, groups: groups(of: account.id)))
            },
        ] + userRoutes + groupRoutes + bucketRoutes + unservedRoutes
        return Dialect(
            name: "nebula", routes: routes,
            credentials: .sessionHeader("X-Session-Token"),
            renderError: Self.renderError)
    }

    static let sessionHeader = HTTPField.Name("X-Session-Token")!
    static let applicationIDHeader = HTTPField.Name("X-Application-Id")!
    static let applicationKeyHeader = HTTPField.Name("X-Application-Key")!

    /// Whether a request presents the master key of an application of the tenant it names (else
    /// the application's own key). The plugin's authorize hook calls it first, so a request with
    /// an unknown tenant (404) or a missing or wrong application key (401) never reaches a handler.
    static func presentsMasterKey(_ tenants: [String: TodoPlugin.TenantSettings], tenant name: String?, headers: HTTPFields,
                                  matches: (_ presented: String, _ configured: String) -> Bool) throws -> Bool {
        guard let tenant = tenants[name ?? ""] else {
            throw GatewayError.notFound("No tenant '\(name ?? "")'.")
        }
        guard let appID = headers[applicationIDHeader], let appKey = headers[applicationKeyHeader],
              let app = tenant.apps.first(where: { $0.id == appID }) else {
            throw GatewayError.unauthorized("Send X-Application-Id and X-Application-Key of an application of this tenant.")
        }
        let isMaster = app.masterKey.map { matches(appKey, $0) } ?? false
        guard isMaster || matches(appKey, app.key) else {
            throw GatewayError.unauthorized("The application key is wrong.")
        }
        return isMaster
    }

    /// A route of the dialect: the handler gets the actor (the caller, and whether the
    /// application's master key lets it bypass ACLs).
    func route(_ method: HTTPRequest.Method, _ path: String, _ summary: String,
                       _ handler: @escaping @Sendable (RouteRequest, Actor, OperationContext) async throws -> RouteReply) -> Route {
        let tenants = self.tenants
        let service = self.service
        return Route.define(method, path, summary: summary).handle { request, context in
            let isMaster = try Self.presentsMasterKey(tenants, tenant: request.pathParameters["tenant"], headers: request.headers,
                                                      matches: context.plugin.secretMatches)
            let actor = service.actor(context.principal, tenant: request.pathParameters["tenant"], presentsMasterKey: isMaster)
            let response = try await handler(request, actor, context)
            // Writes purge the native API's cached replies of the bucket.
            let reads = method == .get || path.hasSuffix("/_query") || path.hasSuffix("/_aggregate")
            if !reads, let bucket = request.pathParameters["bucket"] { await service.invalidate(bucket) }
            return response
        }
    }


    // MARK: Shapes

    static func body(_ request: RouteRequest) throws -> JSONValue {
        if let type = request.headers[.contentType]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased(),
           type != "application/json" {
            throw GatewayError.unsupportedMediaType(type, accepted: ["application/json"])
        }
        return try JSONValue.parse(request.body)
    }

    /// The `_id` a client chose for a new object, as the SDKs send it when they create offline.
    static func chosenID(_ body: JSONValue) throws -> String? {
        guard let value = body.objectValue?["_id"], value != .null else { return nil }
        guard case .string(let id) = value else { throw GatewayError.invalid(field: "/_id", "must be a string of 24 lowercase hexadecimal digits") }
        return id
    }

    /// The old service's answer to a write whose `etag` is stale: 409 `etag_mismatch` with the
    /// current version as `detail`, which the SDKs read to resolve the conflict.
    static func etagMismatch(current: JSONValue, _ message: String) throws -> RouteReply {
        try json(.object(["reasonCode": .string("etag_mismatch"), "detail": current, "error": .string(message)]), status: .conflict)
    }

    /// Runs an object write; a stale `etag` (412 in the store) is answered with the object's current version.
    private func answeringEtagMismatch(bucket: String, id: String, actor: Actor,
                                       _ write: () async throws -> RouteReply) async throws -> RouteReply {
        do {
            return try await write()
        } catch let error as GatewayError where error.status == 412 {
            guard let current = try? await service.get(bucketName: bucket, id: id, actor: actor, includeDeleted: true) else { throw error }
            return try Self.etagMismatch(current: Self.render(current), error.detail)
        }
    }

    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) throws -> RouteReply {
        RouteReply(status: status, headers: [.contentType: "application/json"], body: value.serialized())
    }

    /// An ACL entry as the old service wrote it: `g:anonymous`, `g:authenticated`, `g:{group}` or a user id.
    static func aclEntry(_ name: String) -> JSONValue {
        .string(name == "anonymous" || name == "authenticated" ? "g:\(name)" : name)
    }

    /// An ACL entry as stored: `anonymous` and `authenticated` without their `g:`.
    static func storedEntry(_ name: String) -> String {
        name == "g:anonymous" || name == "g:authenticated" ? String(name.dropFirst(2)) : name
    }

    /// An object as the old service wrote it: fields, `_id`, `createdAt`, `updatedAt`, `etag`, `ACL`.
    static func render(_ object: StoredObject, projection: Projection? = nil) -> JSONValue {
        var members = object.data
        if let projection { members = projection.apply(to: members) }
        members["_id"] = .string(object.id)
        members["createdAt"] = .string(Timestamps.format(micros: object.createdAt))
        members["updatedAt"] = .string(Timestamps.format(micros: object.updatedAt))
        members["etag"] = .string(object.etag)
        if object.deleted { members["_deleted"] = .bool(true) }
        let writers = JSONValue.array(object.acl.writers.map(aclEntry))
        var acl: [String: JSONValue] = ["r": .array(object.acl.readers.map(aclEntry)), "w": writers, "c": .array([]), "u": .array([]),
                                        "d": .array([]), "admin": .array([])]
        if let owner = object.owner { acl["owner"] = .string(owner) }
        members["ACL"] = .object(acl)
        return .object(members)
    }

    /// The system fields of the old shape, in key order.
    static func systemFields(_ object: StoredObject) -> [(String, JSONValue)] {
        guard case .object(let members) = render(StoredObject(id: object.id, dataText: "{}", owner: object.owner, acl: object.acl, etag: object.etag,
                                                              createdAt: object.createdAt, updatedAt: object.updatedAt, deleted: object.deleted)) else { return [] }
        return members.sorted { $0.key < $1.key }
    }

    /// The old ACL `{owner, r, w, c, u, d, admin}`: `r` are readers; `w`, `u`, `d` and `admin` writers.
    static func parseACL(_ value: JSONValue) throws -> ObjectACL {
        guard case .object(let members) = value else { throw GatewayError.invalid(field: "/ACL", "must be an object {r, w, c, u, d, admin}") }
        var readers: [String] = []
        var writers: [String] = []
        for (key, entries) in members {
            guard ["owner", "r", "w", "c", "u", "d", "admin"].contains(key) else { throw GatewayError.invalid(field: "/ACL/\(key)", "is not an ACL field") }
            if key == "owner" { continue }
            guard case .array(let elements) = entries, elements.count <= ObjectACL.maximumEntries else {
                throw GatewayError.invalid(field: "/ACL/\(key)", "must be an array of user ids or g:anonymous / g:authenticated")
            }
            for (index, element) in elements.enumerated() {
                guard case .string(let entry) = element else { throw GatewayError.invalid(field: "/ACL/\(key)/\(index)", "must be a string") }
                let name = storedEntry(entry)
                guard ObjectACL.entryProblem(name) == nil else {
                    throw GatewayError.invalid(field: "/ACL/\(key)/\(index)", "must be a user id, g:anonymous, g:authenticated or g:{group}")
                }
                if key == "r" { readers.append(name) } else if key != "c" { writers.append(name) }
            }
        }
        return ObjectACL(readers: Array(Set(readers)).sorted(), writers: Array(Set(writers)).sorted())
    }

    /// `projection={"a":1,"b":1}` keeps only those fields; `{"a":0}` drops them.
    struct Projection: Sendable {
        var include: Set<String>?
        var exclude: Set<String> = []

        init(_ value: JSONValue) throws {
            guard case .object(let members) = value else {
                throw GatewayError.badRequest("projection must be a JSON object such as {\"description\":1}.")
            }
            var include = Set<String>()
            for (key, value) in members {
                switch value {
                case .number(1), .bool(true): include.insert(key)
                case .number(0), .bool(false): exclude.insert(key)
                default: throw GatewayError.badRequest("projection values are 1 (include) or 0 (exclude), not \(value.jsonText) for '\(key)'.")
                }
            }
            if !include.isEmpty, !exclude.isEmpty { throw GatewayError.badRequest("projection either includes or excludes fields, not both.") }
            self.include = include.isEmpty ? nil : include
        }

        func apply(to members: [String: JSONValue]) -> [String: JSONValue] {
            if let include { return members.filter { include.contains($0.key) } }
            return members.filter { !exclude.contains($0.key) }
        }
    }

    /// A `where`: JSON text (a query string, or a body that sends it as a string) or a JSON object.
    static func condition(_ value: JSONValue?) throws -> Condition? {
        guard let value = try json(value, "where"), value != .null else { return nil }
        do {
            return try Condition.parse(value)
        } catch {
            throw GatewayError.badRequest("where is not supported: \(error.message).")
        }
    }

    /// A JSON parameter given as text (parsed) or as JSON; nil when absent or empty.
    static func json(_ value: JSONValue?, _ name: String) throws -> JSONValue? {
        guard let value else { return nil }
        guard case .string(let text) = value else { return value }
        guard !text.isEmpty else { return nil }
        do {
            return try JSONValue.parse(text, maximumDepth: 16)
        } catch {
            throw GatewayError.badRequest("\(name) is not valid JSON: \((error as? GatewayError)?.detail ?? "")")
        }
    }

    /// `1`/`true` or `0`/`false`, as text or JSON (`count`, `deleteMark`).
    static func flag(_ value: JSONValue?, _ name: String) throws -> Bool {
        switch value {
        case nil, .null: return false
        case .bool(let flag): return flag
        case .number(1), .string("1"), .string("true"): return true
        case .number(0), .string("0"), .string("false"), .string(""): return false
        default: throw GatewayError.badRequest("\(name) must be 1 or 0.")
        }
    }

    static func flag(_ text: String?, _ name: String) throws -> Bool { try flag(text.map(JSONValue.string), name) }

    /// An integer parameter, as text or a JSON number; nil when absent.
    static func integer(_ value: JSONValue?, _ name: String) throws -> Int? {
        switch value {
        case nil, .null: return nil
        case .number(let number) where number.rounded() == number && abs(number) < 1e12: return Int(number)
        case .string(let text) where Int(text) != nil: return Int(text)
        default: throw GatewayError.badRequest("\(name) must be a whole number.")
        }
    }

    /// The parameters of a query: a GET's query string, or the JSON body of `_query` (where
    /// `where` and `projection` come as objects or as JSON text, numbers as numbers or text).
    struct QueryParameters {
        var values: [String: JSONValue]

        init(query request: RouteRequest) {
            values = [:]
            for name in ["where", "order", "skip", "limit", "count", "projection", "deleteMark"] {
                if let text = request.query(name) { values[name] = .string(text) }
            }
        }

        init(body: JSONValue) throws {
            guard case .object(let members) = body else { throw GatewayError.badRequest("The body of a long query is a JSON object.") }
            values = members
        }

        subscript(_ name: String) -> JSONValue? { values[name] }
    }

    // MARK: Handlers

    private func query(_ parameters: QueryParameters, bucket: String, actor: Actor) async throws -> RouteReply {
        var query = ObjectQuery()
        query.condition = try Self.condition(parameters["where"])
        if let order = parameters["order"] {
            guard case .string(let text) = order else { throw GatewayError.badRequest("order is a text of field names such as \"updatedAt,-name\".") }
            do {
                query.order = try SortKey.parse(text)
            } catch {
                throw GatewayError.badRequest("order is not supported: \(error.message).")
            }
        }
        if let limit = try? Self.integer(parameters["limit"], "limit") {
            guard limit == -1 || limit >= 0 else { throw GatewayError.badRequest("limit must be a number of objects, or -1 for all.") }
            query.limit = limit == -1 ? maxLimit : min(limit, maxLimit)
        } else if parameters["limit"] != nil {
            throw GatewayError.badRequest("limit must be a number of objects, or -1 for all.")
        }
        if let skip = try Self.integer(parameters["skip"], "skip") {
            guard (0...1_000_000).contains(skip) else { throw GatewayError.badRequest("skip must be a number from 0.") }
            query.skip = skip
        }
        query.count = try Self.flag(parameters["count"], "count")
        query.includeDeleted = try Self.flag(parameters["deleteMark"], "deleteMark")
        let projection = try Self.json(parameters["projection"], "projection").map(Projection.init)
        var result: (objects: [StoredObject], count: Int?, next: QueryCursor?) = ([], nil, nil)
        if query.limit > 0 {
            result = try await service.query(bucketName: bucket, query, actor: actor)
        } else {
            query.limit = 1
            let counted = try await service.query(bucketName: bucket, query, actor: actor)
            result.count = counted.count
        }
        // {"count"?, "currentTime", "results": [...]}, the stored fields spliced in unparsed.
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        if let count = result.count {
            bytes.append(contentsOf: #""count":"#.utf8)
            JSONValue.number(Double(count)).write(into: &bytes)
            bytes.append(UInt8(ascii: ","))
        }
        bytes.append(contentsOf: #""currentTime":"#.utf8)
        JSONValue.string(Timestamps.format(micros: Timestamps.micros(Date()))).write(into: &bytes)
        bytes.append(contentsOf: #","results":["#.utf8)
        for (index, object) in result.objects.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            if let projection {
                Self.render(object, projection: projection).write(into: &bytes)
            } else {
                object.write(system: Self.systemFields(object), into: &bytes)
            }
        }
        bytes.append(contentsOf: "]}".utf8)
        return RouteReply(status: .ok, headers: [.contentType: "application/json"], body: ByteBuffer(bytes: bytes))
    }

    /// PUT: `{"$full_update": {...}}` replaces the fields; otherwise plain fields are set and
    /// `$set`, `$inc` and `$unset` applied.
    private func update(_ bucket: String, id: String, body: JSONValue, etag: String?, actor: Actor) async throws -> StoredObject {
        guard case .object(var members) = body else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
        if let full = members["$full_update"] {
            guard members.count == 1 else { throw GatewayError.invalid(field: "/$full_update", "cannot be combined with other fields") }
            return try await service.replace(bucketName: bucket, id: id, body: full, actor: actor, ifMatch: etag, parseACL: Self.parseACL)
        }
        var set = members.removeValue(forKey: "$set")?.objectValue ?? [:]
        var patch: [String: JSONValue] = [:]
        for key in ObjectService.operatorKeys where key != "$set" { patch[key] = members.removeValue(forKey: key) }
        for key in ObjectService.aclFields { patch[key] = members.removeValue(forKey: key) }
        for key in ObjectService.readOnlyFields { members[key] = nil }
        for (key, value) in members {
            guard set[key] == nil else { throw GatewayError.invalid(field: "/\(key)", "is set twice (plain field and $set)") }
            set[key] = value
        }
        if !set.isEmpty { patch["$set"] = .object(set) }
        return try await service.patch(bucketName: bucket, id: id, body: .object(patch), actor: actor, ifMatch: etag, parseACL: Self.parseACL)
    }

    private func batch(_ request: RouteRequest, actor: Actor, context: OperationContext) async throws -> RouteReply {
        let bucket = request.pathParameters["bucket"] ?? ""
        guard case .array(let requests)? = try Self.body(request)[path: ["requests"]] else {
            throw GatewayError.invalid(field: "/requests", "must be an array of requests")
        }
        guard requests.count <= TodoPlugin.maximumBatch else { throw GatewayError.invalid(field: "/requests", "at most \(TodoPlugin.maximumBatch) requests") }
        // Each request counts against the caller's limit, as one sent alone would.
        if requests.count > 1 { try await context.charge(requests.count - 1) }
        _ = try await service.buckets.bucket(bucket)
        let markOnly = try Self.flag(request.query("deleteMark"), "deleteMark")
        var results: [JSONValue] = []
        for (index, step) in requests.enumerated() {
            do {
                guard case .object(let members) = step, let op = members["op"]?.stringValue else {
                    throw GatewayError.invalid(field: "/requests/\(index)/op", "must be insert, update or delete")
                }
                let id = members["_id"]?.stringValue ?? ""
                let etag = members["etag"]?.stringValue
                let data = members["data"] ?? .object([:])
                switch op {
                case "insert":
                    let object = try await service.create(bucketName: bucket, body: data, actor: actor, id: try Self.chosenID(data), parseACL: Self.parseACL)
                    results.append(.object(["result": .string("ok"), "_id": .string(object.id), "etag": .string(object.etag), "data": Self.render(object)]))
                case "update":
                    let object = try await update(bucket, id: id, body: data, etag: etag, actor: actor)
                    results.append(.object(["result": .string("ok"), "_id": .string(object.id), "etag": .string(object.etag), "data": Self.render(object)]))
                case "delete" where markOnly:
                    let object = try await service.markDeleted(bucketName: bucket, id: id, actor: actor, ifMatch: etag)
                    results.append(.object(["result": .string("ok"), "_id": .string(id), "etag": .string(object.etag), "data": Self.render(object)]))
                case "delete":
                    try await service.delete(bucketName: bucket, id: id, actor: actor, ifMatch: etag)
                    results.append(.object(["result": .string("ok"), "_id": .string(id)]))
                default:
                    throw GatewayError.invalid(field: "/requests/\(index)/op", "must be insert, update or delete")
                }
            } catch let error as GatewayError {
                let (status, reason) = Self.reason(for: error)
                var result: [String: JSONValue] = ["result": .string(Self.batchResult(forStatus: status)), "_id": members(step)["_id"] ?? .null,
                                                   "error": .string(error.detail), "status": .number(Double(status))]
                if status == 409 { result["reasonCode"] = .string(reason) }
                results.append(.object(result))
            }
        }
        return try Self.json(.object(["results": .array(results)]))
    }

    private func members(_ value: JSONValue) -> [String: JSONValue] { value.objectValue ?? [:] }

    // MARK: Errors

    /// The old service's status and reason code for an error.
    static func reason(for error: GatewayError) -> (status: Int, reason: String) {
        switch error.status {
        case 400, 422: (400, "invalid_argument")
        case 401: (401, "unauthorized")
        case 403: (403, "forbidden")
        case 404: (404, "not_found")
        case 405: (405, "method_not_allowed")
        case 409: (409, error.duplicate.map { "duplicate_\($0)" } ?? "request_conflicted")
        case 412: (409, "etag_mismatch")
        case 413: (413, "request_entity_too_large")
        case 415: (415, "unsupported_media_type")
        case 429: (429, "too_many_requests")
        case 503: (503, "service_unavailable")
        default: (error.status.code >= 500 ? 500 : Int(error.status.code), error.status.code >= 500 ? "internal_error" : "bad_request")
        }
    }

    /// The `result` of a failed `_batch` request, as the old service named them.
    static func batchResult(forStatus status: Int) -> String {
        switch status {
        case 400: "badRequest"
        case 403, 401: "forbidden"
        case 404: "notFound"
        case 409: "conflict"
        case 413: "requestEntityTooLarge"
        default: "serverError"
        }
    }

    static func renderError(_ error: GatewayError) -> RouteReply {
        let (status, reason) = reason(for: error)
        var detail = error.detail
        if !error.errors.isEmpty { detail += " " + error.errors.map { "\($0.pointer): \($0.detail)" }.joined(separator: "; ") }
        var headers = error.headers
        headers[.contentType] = "application/json"
        return RouteReply(status: HTTPResponse.Status(code: status), headers: headers,
                               body: JSONValue.object(["error": .string(detail), "reasonCode": .string(reason), "detail": .string(detail)]).serialized())
    }
}
