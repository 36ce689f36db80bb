import Foundation
import GatewayCore

/// The NEC BaaS bucket API with the master key (`buckets/object[/{name}]`), on the plugin's buckets:
/// `description`; `contentACL` — `c` says who may create objects (`g:anonymous` anyone,
/// `g:authenticated` signed-in users, none: the master key only), `r` and `w` the ACL an object
/// created without one gets; `ACL`, the bucket's own, kept as given. Buckets of plugins.yaml are
/// read here and changed there.
///
/// File buckets and push notifications are not served: their paths answer the old service's
/// "not found".
extension NebulaDialect {
    var bucketRoutes: [Route] {
        let registry = service.buckets
        return [
            route(.get, "/1/{tenant}/buckets/object", "The object buckets (the master key)") { _, actor, _ in
                try Self.requireMaster(actor)
                return try Self.json(.object(["results": .array(try await registry.all().map(Self.render))]))
            },
            route(.get, "/1/{tenant}/buckets/object/{name}", "An object bucket (the master key)") { request, actor, _ in
                try Self.requireMaster(actor)
                return try Self.json(Self.render(try await registry.bucket(request.pathParameters["name"] ?? "")))
            },
            route(.put, "/1/{tenant}/buckets/object/{name}", "Create or change an object bucket: description, ACL, contentACL (the master key)") { request, actor, _ in
                try Self.requireMaster(actor)
                let name = request.pathParameters["name"] ?? ""
                guard case .object(let members) = try Self.body(request) else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
                let existing = try? await registry.bucket(name)
                if let existing { try Self.requireAdministered(existing, by: actor) }
                if existing != nil {
                    for key in ["description", "ACL", "contentACL"] where members[key] == nil || members[key] == .null {
                        throw GatewayError.invalid(field: "/\(key)", "is required to change a bucket (description, ACL and contentACL)")
                    }
                }
                var settings = existing?.settings ?? BucketSettings(create: .authenticated)
                try Self.apply(members, to: &settings)
                let bucket = existing == nil ? try await registry.create(name: name, settings: settings, tenant: actor.tenant) : try await registry.update(name: name, settings: settings)
                return try Self.json(Self.render(bucket))
            },
            route(.delete, "/1/{tenant}/buckets/object/{name}", "Delete an object bucket with its objects (the master key)") { request, actor, _ in
                try Self.requireMaster(actor)
                let name = request.pathParameters["name"] ?? ""
                try Self.requireAdministered(try await registry.bucket(name), by: actor)
                _ = try await registry.delete(name: name)
                return try Self.json(.object([:]))
            },
        ]
    }

    /// Routes of the old service that this gateway does not serve, answering as it answered a
    /// path it did not know: 404 `{"error": ...}`, not a 405.
    var unservedRoutes: [Route] {
        let paths = [
            "/1/{tenant}/files/{bucket}", "/1/{tenant}/files/{bucket}/{file}", "/1/{tenant}/files/{bucket}/{file}/meta",
            "/1/{tenant}/files/{bucket}/{file}/publish", "/1/{tenant}/buckets/file", "/1/{tenant}/buckets/file/{name}",
            "/1/{tenant}/push/installations", "/1/{tenant}/push/installations/{id}", "/1/{tenant}/push/notifications",
        ]
        return paths.flatMap { path in
            [HTTPRequest.Method.get, .post, .put, .delete].map { method in
                route(method, path, "Not served: file buckets and push notifications answer 404") { _, _, _ in
                    throw GatewayError.notFound("File buckets and push notifications are not served by this gateway.")
                }
            }
        }
    }

    static func requireMaster(_ actor: Actor) throws {
        guard actor.isManager else { throw GatewayError.forbidden("Buckets are managed with the master key.") }
    }

    /// A master key changes and deletes only the buckets its tenant created; those of plugins.yaml
    /// (409 from the registry) and of administrators or other tenants are not its own (403).
    static func requireAdministered(_ bucket: Bucket, by actor: Actor) throws {
        guard bucket.configured || actor.administers(bucket.tenant) else {
            throw GatewayError.forbidden("The bucket '\(bucket.name)' was not created by this tenant.")
        }
    }

    /// Applies `description`, `contentACL` and `ACL` of a request body to a bucket's settings.
    static func apply(_ members: [String: JSONValue], to settings: inout BucketSettings) throws {
        for key in members.keys where !["description", "ACL", "contentACL", "noAcl", "name"].contains(key) {
            throw GatewayError.invalid(field: "/\(key)", "is not a member of a bucket (description, ACL, contentACL)")
        }
        if let description = members["description"] {
            guard description == .null || description.stringValue != nil else { throw GatewayError.invalid(field: "/description", "must be a string") }
            settings.description = description.stringValue
        }
        if let noACL = members["noAcl"], noACL == .bool(true) {
            throw GatewayError.invalid(field: "/noAcl", "is not supported: every object has an ACL here")
        }
        if let acl = members["ACL"], acl != .null {
            guard case .object = acl else { throw GatewayError.invalid(field: "/ACL", "must be an object {owner, r, w, u, d, admin}") }
            settings.acl = acl
        }
        if let content = members["contentACL"], content != .null {
            guard case .object(let lists) = content else { throw GatewayError.invalid(field: "/contentACL", "must be an object {r, w, c, u, d}") }
            func entries(_ key: String) throws -> [String]? {
                guard let value = lists[key] else { return nil }
                guard case .array(let elements) = value, elements.count <= ObjectACL.maximumEntries else {
                    throw GatewayError.invalid(field: "/contentACL/\(key)", "must be an array of user ids or g:{group}")
                }
                return try elements.enumerated().map { index, element in
                    guard case .string(let entry) = element, ObjectACL.entryProblem(storedEntry(entry)) == nil else {
                        throw GatewayError.invalid(field: "/contentACL/\(key)/\(index)", "must be a user id, g:anonymous, g:authenticated or g:{group}")
                    }
                    return storedEntry(entry)
                }
            }
            for key in lists.keys where !["r", "w", "c", "u", "d"].contains(key) {
                throw GatewayError.invalid(field: "/contentACL/\(key)", "is not a contentACL field (r, w, c, u, d)")
            }
            if let creators = try entries("c") {
                settings.create = creators.contains("anonymous") ? .anyone : creators.contains("authenticated") ? .authenticated : .admin
            }
            let readers = try entries("r"), writers = (try entries("w") ?? []) + (try entries("u") ?? []) + (try entries("d") ?? [])
            if readers != nil || !writers.isEmpty {
                settings.readers = readers ?? []
                settings.writers = Array(Set(writers)).sorted()
            }
        }
    }

    /// A bucket as the old service wrote one.
    static func render(_ bucket: Bucket) -> JSONValue {
        let creators: [JSONValue] = switch bucket.create {
        case .anyone: [.string("g:anonymous")]
        case .authenticated: [.string("g:authenticated")]
        case .admin: []
        }
        let defaults = bucket.defaultACL ?? .ownerOnly
        let content: [String: JSONValue] = [
            "r": .array(defaults.readers.map(aclEntry)), "w": .array(defaults.writers.map(aclEntry)), "c": .array(creators),
            "u": .array([]), "d": .array([]),
        ]
        let empty: JSONValue = .array([])
        return .object([
            "name": .string(bucket.name), "description": .string(bucket.description ?? ""),
            "ACL": bucket.acl ?? .object(["r": empty, "w": empty, "u": empty, "d": empty, "admin": empty]),
            "contentACL": .object(content), "noAcl": .bool(false),
        ])
    }
}
