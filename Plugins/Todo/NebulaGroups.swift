import Foundation
import GatewayCore

/// The NEC BaaS group API (`groups/{name}`), on the plugin's groups (``GroupDirectory``), which the
/// native API serves too (`/v1/todo/groups`): users and nested groups, and an ACL; objects' ACL
/// entries `g:{name}` admit the members.
extension NebulaDialect {
    var groupRoutes: [Route] {
        let groups = service.groups
        return [
            route(.put, "/1/{tenant}/groups/{name}", "Create or change a group: users, groups, ACL (?etag= for a conditional change)") { request, actor, _ in
                let body = try Self.groupBody(try Self.body(request))
                let name = request.pathParameters["name"] ?? ""
                return try await Self.answeringEtagMismatch(groups, name, actor: actor) {
                    let group = try await groups.upsert(name, users: body.users, groups: body.groups, acl: body.acl,
                                                        ifMatch: request.query("etag"), actor: actor)
                    return try Self.json(Self.render(group))
                }
            },
            route(.get, "/1/{tenant}/groups", "The groups the caller may read") { _, actor, _ in
                try Self.json(.object(["results": .array(groups.all().filter { $0.allows(.read, actor) }.map(Self.render))]))
            },
            route(.get, "/1/{tenant}/groups/{name}", "Read a group") { request, actor, _ in
                try Self.json(Self.render(try Self.readable(groups, request.pathParameters["name"] ?? "", actor: actor)))
            },
            route(.delete, "/1/{tenant}/groups/{name}", "Delete a group (?etag= for a conditional delete)") { request, actor, _ in
                let name = request.pathParameters["name"] ?? ""
                return try await Self.answeringEtagMismatch(groups, name, actor: actor) {
                    try await groups.delete(name, ifMatch: request.query("etag"), actor: actor)
                    return try Self.json(.object([:]))
                }
            },
            route(.put, "/1/{tenant}/groups/{name}/addMembers", "Add users and groups to a group") { request, actor, _ in
                let body = try Self.groupBody(try Self.body(request))
                let group = try await groups.changeMembers(request.pathParameters["name"] ?? "", add: true, users: body.users ?? [], groups: body.groups ?? [], actor: actor)
                return try Self.json(Self.render(group))
            },
            route(.put, "/1/{tenant}/groups/{name}/removeMembers", "Remove users and groups from a group") { request, actor, _ in
                let body = try Self.groupBody(try Self.body(request))
                let group = try await groups.changeMembers(request.pathParameters["name"] ?? "", add: false, users: body.users ?? [], groups: body.groups ?? [], actor: actor)
                return try Self.json(Self.render(group))
            },
        ]
    }

    /// Runs a group write; a stale `etag` is answered with the group's current version, when the caller may read it.
    static func answeringEtagMismatch(_ groups: GroupDirectory, _ name: String, actor: Actor,
                                      _ write: () async throws -> RouteReply) async throws -> RouteReply {
        do {
            return try await write()
        } catch let error as GatewayError where error.status == 412 {
            guard let current = try? readable(groups, name, actor: actor) else { throw error }
            return try etagMismatch(current: render(current), error.detail)
        }
    }

    /// The group, when the caller may read it (404 otherwise, as for one that does not exist).
    static func readable(_ groups: GroupDirectory, _ name: String, actor: Actor) throws -> UserGroup {
        guard let group = groups.group(name), group.allows(.read, actor) else { throw GatewayError.notFound("No group '\(name)'.") }
        return group
    }

    /// `{"users": [...], "groups": [...], "ACL": {...}}`, each optional.
    static func groupBody(_ body: JSONValue) throws -> (users: [String]?, groups: [String]?, acl: GroupACL?) {
        guard case .object(let members) = body else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
        for key in members.keys where !["users", "groups", "ACL", "name", "_id", "etag", "createdAt", "updatedAt"].contains(key) {
            throw GatewayError.invalid(field: "/\(key)", "is not a member of a group (users, groups, ACL)")
        }
        func names(_ key: String) throws -> [String]? {
            guard let value = members[key], value != .null else { return nil }
            guard case .array(let elements) = value, elements.count <= GroupDirectory.maximumMembers else {
                throw GatewayError.invalid(field: "/\(key)", "must be an array of at most \(GroupDirectory.maximumMembers) names")
            }
            return try elements.enumerated().map { index, element in
                guard case .string(let name) = element, !name.isEmpty, name.utf8.count <= 100 else { throw GatewayError.invalid(field: "/\(key)/\(index)", "must be a name") }
                return name
            }
        }
        var acl: GroupACL?
        if let value = members["ACL"], value != .null {
            guard case .object(let entries) = value else { throw GatewayError.invalid(field: "/ACL", "must be an object {owner, r, w, u, d, admin}") }
            var parsed = GroupACL()
            for (key, list) in entries {
                if key == "owner" {
                    guard list == .null || list.stringValue != nil else { throw GatewayError.invalid(field: "/ACL/owner", "must be a user id") }
                    parsed.owner = list.stringValue
                    continue
                }
                guard ["r", "w", "c", "u", "d", "admin"].contains(key) else { throw GatewayError.invalid(field: "/ACL/\(key)", "is not an ACL field") }
                guard case .array(let elements) = list, elements.count <= ObjectACL.maximumEntries else {
                    throw GatewayError.invalid(field: "/ACL/\(key)", "must be an array of user ids or g:{group}")
                }
                let stored = try elements.enumerated().map { index, element -> String in
                    guard case .string(let entry) = element, ObjectACL.entryProblem(storedEntry(entry)) == nil else {
                        throw GatewayError.invalid(field: "/ACL/\(key)/\(index)", "must be a user id, g:anonymous, g:authenticated or g:{group}")
                    }
                    return storedEntry(entry)
                }
                switch key {
                case "r": parsed.r = stored
                case "w": parsed.w = stored
                case "u": parsed.u = stored
                case "d": parsed.d = stored
                case "admin": parsed.admin = stored
                default: break
                }
            }
            acl = parsed
        }
        return (try names("users"), try names("groups"), acl)
    }

    /// A group as the old service wrote one.
    static func render(_ group: UserGroup) -> JSONValue {
        var acl: [String: JSONValue] = [
            "r": .array(group.acl.r.map(aclEntry)), "w": .array(group.acl.w.map(aclEntry)), "u": .array(group.acl.u.map(aclEntry)),
            "d": .array(group.acl.d.map(aclEntry)), "admin": .array(group.acl.admin.map(aclEntry)),
        ]
        if let owner = group.acl.owner { acl["owner"] = .string(owner) }
        return .object([
            "_id": .string(group.id), "name": .string(group.name), "users": .array(group.users.map(JSONValue.string)),
            "groups": .array(group.groups.map(JSONValue.string)), "ACL": .object(acl),
            "createdAt": .string(Timestamps.format(micros: group.createdAt)), "updatedAt": .string(Timestamps.format(micros: group.updatedAt)),
            "etag": .string(group.etag),
        ])
    }
}
