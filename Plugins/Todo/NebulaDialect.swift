import Foundation
import GatewayCore

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
        let routes: [DialectRoute] = [
            route(.get, "/1/{tenant}/objects/{bucket}", "Query objects (where, order, skip, limit, count, projection)") { request, actor, _ in
                try await query(request, actor: actor)
            },
            route(.post, "/1/{tenant}/objects/{bucket}", "Create an object") { request, actor, _ in
                let object = try await service.create(bucketName: request.pathParameters["bucket"] ?? "", body: try Self.body(request), actor: actor,
                                                      parseACL: Self.parseACL)
                return try Self.json(Self.render(object), status: 201)
            },
            route(.delete, "/1/{tenant}/objects/{bucket}", "Delete the objects a where matches") { request, actor, _ in
                let condition = try Self.condition(request.query("where"))
                let count = try await service.deleteAll(bucketName: request.pathParameters["bucket"] ?? "", matching: condition, actor: actor)
                return try Self.json(.object(["deletedObjects": .number(Double(count))]))
            },
            route(.get, "/1/{tenant}/objects/{bucket}/{id}", "Read an object") { request, actor, _ in
                let object = try await service.get(bucketName: request.pathParameters["bucket"] ?? "", id: request.pathParameters["id"] ?? "", actor: actor)
                return try Self.json(Self.render(object))
            },
            route(.put, "/1/{tenant}/objects/{bucket}/{id}", "Update an object: fields, $set/$inc/$unset, or $full_update (?etag= for a conditional update)") { request, actor, _ in
                let object = try await update(request.pathParameters["bucket"] ?? "", id: request.pathParameters["id"] ?? "", body: try Self.body(request),
                                              etag: request.query("etag"), actor: actor)
                return try Self.json(Self.render(object))
            },
            route(.delete, "/1/{tenant}/objects/{bucket}/{id}", "Delete an object (?etag= for a conditional delete)") { request, actor, _ in
                try await service.delete(bucketName: request.pathParameters["bucket"] ?? "", id: request.pathParameters["id"] ?? "", actor: actor,
                                         ifMatch: request.query("etag"))
                return try Self.json(.object([:]))
            },
            route(.post, "/1/{tenant}/objects/{bucket}/_batch", "Run insert, update and delete requests in order") { request, actor, _ in
                try await batch(request, actor: actor)
            },
            route(.post, "/1/{tenant}/users", "Register a user") { request, _, _ in
                let body = try Self.body(request)
                let username = body[path: ["username"]]?.stringValue
                let email = body[path: ["email"]]?.stringValue
                guard let password = body[path: ["password"]]?.stringValue else { throw GatewayError.invalid(field: "/password", "is required") }
                guard let name = username ?? email else { throw GatewayError.invalid(field: "/username", "is required") }
                let account = try await accounts.register(username: name, email: email, password: password)
                return try Self.json(Self.render(account), status: 201)
            },
            route(.post, "/1/{tenant}/login", "Sign in with username or email and password") { request, _, context in
                let body = try Self.body(request)
                guard let password = body[path: ["password"]]?.stringValue,
                      let identifier = body[path: ["username"]]?.stringValue ?? body[path: ["email"]]?.stringValue else {
                    throw GatewayError.invalid(field: "/username", "username (or email) and password are required")
                }
                let session = try await accounts.signIn(identifier: identifier, password: password, address: context.principal.address)
                guard case .object(var user) = Self.render(session.account) else { throw GatewayError.internalError() }
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
                return try Self.json(Self.render(account))
            },
        ]
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
    static func presentsMasterKey(_ tenants: [String: TodoPlugin.TenantSettings], tenant name: String?, headers: HTTPFields) throws -> Bool {
        guard let tenant = tenants[name ?? ""] else {
            throw GatewayError.notFound("No tenant '\(name ?? "")'.")
        }
        guard let appID = headers[applicationIDHeader], let appKey = headers[applicationKeyHeader],
              let app = tenant.apps.first(where: { $0.id == appID }) else {
            throw GatewayError.unauthorized("Send X-Application-Id and X-Application-Key of an application of this tenant.")
        }
        let isMaster = app.masterKey.map { constantTimeEqual($0, appKey) } ?? false
        guard isMaster || constantTimeEqual(app.key, appKey) else {
            throw GatewayError.unauthorized("The application key is wrong.")
        }
        return isMaster
    }

    /// A route of the dialect: the handler gets the actor (the caller, and whether the
    /// application's master key lets it bypass ACLs).
    private func route(_ method: HTTPRequest.Method, _ path: String, _ summary: String,
                       _ handler: @escaping @Sendable (DialectRequest, Actor, OperationContext) async throws -> DialectResponse) -> DialectRoute {
        let tenants = self.tenants
        let service = self.service
        return DialectRoute(method, path, summary: summary) { request, context in
            let isMaster = try Self.presentsMasterKey(tenants, tenant: request.pathParameters["tenant"], headers: request.headers)
            let actor = Actor(userID: context.principal.userID, bypassesACL: isMaster || context.principal.isAdmin)
            let response = try await handler(request, actor, context)
            // Writes purge the native API's cached replies of the bucket.
            if method != .get, let bucket = request.pathParameters["bucket"] { await service.invalidate(bucket) }
            return response
        }
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let left = Array(a.utf8)
        let right = Array(b.utf8)
        guard left.count == right.count else { return false }
        var difference: UInt8 = 0
        for index in left.indices { difference |= left[index] ^ right[index] }
        return difference == 0
    }

    // MARK: Shapes

    static func body(_ request: DialectRequest) throws -> JSONValue {
        if let type = request.headers[.contentType]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased(),
           type != "application/json" {
            throw GatewayError.unsupportedMediaType(type, accepted: ["application/json"])
        }
        return try JSONValue.parse(request.body)
    }

    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) throws -> DialectResponse {
        DialectResponse(status: status, headers: [.contentType: "application/json"], body: value.serialized())
    }

    static func aclEntry(_ name: String) -> JSONValue {
        .string(name == "anonymous" || name == "authenticated" ? "g:\(name)" : name)
    }

    /// An object as the old service wrote it: fields, `_id`, `createdAt`, `updatedAt`, `etag`, `ACL`.
    static func render(_ object: StoredObject, projection: Projection? = nil) -> JSONValue {
        var members = object.data
        if let projection { members = projection.apply(to: members) }
        members["_id"] = .string(object.id)
        members["createdAt"] = .string(Timestamps.format(micros: object.createdAt))
        members["updatedAt"] = .string(Timestamps.format(micros: object.updatedAt))
        members["etag"] = .string(object.etag)
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
                                                              createdAt: object.createdAt, updatedAt: object.updatedAt)) else { return [] }
        return members.sorted { $0.key < $1.key }
    }

    static func render(_ account: AccountRecord) -> JSONValue {
        .object([
            "_id": .string(account.id), "username": .string(account.username), "email": account.email.map(JSONValue.string) ?? .null,
            "groups": .array([]), "options": .object([:]),
            "createdAt": .string(Timestamps.format(micros: Timestamps.micros(account.createdAt))),
            "updatedAt": .string(Timestamps.format(micros: Timestamps.micros(account.updatedAt))),
        ])
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
                guard case .string(var name) = element else { throw GatewayError.invalid(field: "/ACL/\(key)/\(index)", "must be a string") }
                if name.hasPrefix("g:") { name.removeFirst(2) }
                guard ObjectACL.entryProblem(name) == nil else { throw GatewayError.invalid(field: "/ACL/\(key)/\(index)", "must be a user id or g:anonymous / g:authenticated") }
                if key == "r" { readers.append(name) } else if key != "c" { writers.append(name) }
            }
        }
        return ObjectACL(readers: Array(Set(readers)).sorted(), writers: Array(Set(writers)).sorted())
    }

    /// `projection={"a":1,"b":1}` keeps only those fields; `{"a":0}` drops them.
    struct Projection: Sendable {
        var include: Set<String>?
        var exclude: Set<String> = []

        init(_ text: String) throws {
            guard case .object(let members) = try JSONValue.parse(text, maximumDepth: 2) else {
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

    static func condition(_ text: String?) throws -> Condition? {
        guard let text, !text.isEmpty else { return nil }
        let value: JSONValue
        do {
            value = try JSONValue.parse(text, maximumDepth: 16)
        } catch {
            throw GatewayError.badRequest("where is not valid JSON: \((error as? GatewayError)?.detail ?? "")")
        }
        do {
            return try Condition.parse(value)
        } catch {
            throw GatewayError.badRequest("where is not supported: \(error.message).")
        }
    }

    // MARK: Handlers

    private func query(_ request: DialectRequest, actor: Actor) async throws -> DialectResponse {
        var query = ObjectQuery()
        query.condition = try Self.condition(request.query("where"))
        do {
            query.order = try SortKey.parse(request.query("order") ?? "")
        } catch {
            throw GatewayError.badRequest("order is not supported: \(error.message).")
        }
        if let text = request.query("limit") {
            guard let limit = Int(text), limit == -1 || limit >= 0 else { throw GatewayError.badRequest("limit must be a number of objects, or -1 for all.") }
            query.limit = limit == -1 ? maxLimit : min(limit, maxLimit)
            if limit == 0 { query.limit = 0 }
        }
        if let text = request.query("skip") {
            guard let skip = Int(text), (0...1_000_000).contains(skip) else { throw GatewayError.badRequest("skip must be a number from 0.") }
            query.skip = skip
        }
        query.count = request.query("count") == "1" || request.query("count") == "true"
        let projection = try request.query("projection").map(Projection.init)
        var result: (objects: [StoredObject], count: Int?, next: QueryCursor?) = ([], nil, nil)
        if query.limit > 0 {
            result = try await service.query(bucketName: request.pathParameters["bucket"] ?? "", query, actor: actor)
        } else {
            query.limit = 1
            let counted = try await service.query(bucketName: request.pathParameters["bucket"] ?? "", query, actor: actor)
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
        return DialectResponse(status: .ok, headers: [.contentType: "application/json"], body: ByteBuffer(bytes: bytes))
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

    private func batch(_ request: DialectRequest, actor: Actor) async throws -> DialectResponse {
        let bucket = request.pathParameters["bucket"] ?? ""
        guard case .array(let requests)? = try Self.body(request)[path: ["requests"]] else {
            throw GatewayError.invalid(field: "/requests", "must be an array of requests")
        }
        guard requests.count <= TodoPlugin.maximumBatch else { throw GatewayError.invalid(field: "/requests", "at most \(TodoPlugin.maximumBatch) requests") }
        _ = try await service.buckets.bucket(bucket)
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
                    let object = try await service.create(bucketName: bucket, body: data, actor: actor, parseACL: Self.parseACL)
                    results.append(.object(["result": .string("ok"), "_id": .string(object.id), "etag": .string(object.etag), "data": Self.render(object)]))
                case "update":
                    let object = try await update(bucket, id: id, body: data, etag: etag, actor: actor)
                    results.append(.object(["result": .string("ok"), "_id": .string(object.id), "etag": .string(object.etag), "data": Self.render(object)]))
                case "delete":
                    try await service.delete(bucketName: bucket, id: id, actor: actor, ifMatch: etag)
                    results.append(.object(["result": .string("ok"), "_id": .string(id)]))
                default:
                    throw GatewayError.invalid(field: "/requests/\(index)/op", "must be insert, update or delete")
                }
            } catch let error as GatewayError {
                let (status, reason) = Self.reason(for: error)
                results.append(.object(["result": .string("error"), "_id": members(step)["_id"] ?? .null, "reasonCode": .string(reason),
                                        "detail": .string(error.detail), "status": .number(Double(status))]))
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
        case 409: (409, error.detail.contains("is taken") || error.detail.contains("already registered") ? "duplicate_key" : "conflict")
        case 412: (409, "etag_mismatch")
        case 413: (413, "request_entity_too_large")
        case 415: (415, "unsupported_media_type")
        case 429: (429, "too_many_requests")
        case 503: (503, "service_unavailable")
        default: (error.status >= 500 ? 500 : error.status, error.status >= 500 ? "internal_error" : "bad_request")
        }
    }

    static func renderError(_ error: GatewayError) -> DialectResponse {
        let (status, reason) = reason(for: error)
        var detail = error.detail
        if !error.errors.isEmpty { detail += " " + error.errors.map { "\($0.pointer): \($0.detail)" }.joined(separator: "; ") }
        var headers = error.headers
        headers[.contentType] = "application/json"
        return DialectResponse(status: HTTPResponse.Status(code: status), headers: headers,
                               body: JSONValue.object(["reasonCode": .string(reason), "detail": .string(detail)]).serialized())
    }
}
