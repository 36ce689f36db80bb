import Foundation
import GatewayCore

/// The native API of groups (`/v1/todo/groups`): the groups the NEC BaaS dialect serves at
/// `groups/{name}`, whose members object ACL entries `g:{name}` admit.
extension TodoPlugin {
    struct GroupPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["name": NativeSchemas.groupNameRule]
        var name: String
    }

    /// A group's members and ACL as sent: members left out stay as they are.
    struct GroupInput: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "users": FieldRule.list(maxCount: GroupDirectory.maximumMembers).described("User ids (each must be a user)."),
            "groups": FieldRule.list(maxCount: GroupDirectory.maximumMembers, of: .pattern(NativeSchemas.groupNamePattern)).described("Group names (each must be a group)."),
        ]

        var users: [String]?
        var groups: [String]?
        /// `{owner, r, w, u, d, admin}`: user ids, `anonymous`, `authenticated` or `g:{group}`.
        var acl: GroupACL?
    }

    struct MembersInput: Codable, Sendable, ValidatableInput {
        static let fieldRules = GroupInput.fieldRules

        var users: [String]?
        var groups: [String]?
    }

    struct GroupInfo: Codable, Sendable {
        var name: String
        var id: String
        var users: [String]
        var groups: [String]
        var acl: GroupACL
        var etag: String
        var createdAt: Date
        var updatedAt: Date

        init(_ group: UserGroup) {
            name = group.name
            id = group.id
            users = group.users
            groups = group.groups
            acl = group.acl
            etag = group.etag
            createdAt = Timestamps.date(micros: group.createdAt)
            updatedAt = Timestamps.date(micros: group.updatedAt)
        }
    }

    var groupOperations: [Route] {
        let service = self.service
        let groups = service.groups
        return [
            Route.define("todo.groups.list", .get, "/groups", summary: "The groups the caller may read")
                .returns(Page<GroupInfo>.self) { _, context in
                    let actor = service.actor(context.principal)
                    return Page(items: groups.all().filter { $0.allows(.read, actor) }.map(GroupInfo.init), nextCursor: nil)
                },
            Route.define("todo.groups.get", .get, "/groups/{name}", summary: "A group")
                .path(GroupPath.self)
                .returns(GroupInfo.self) { input, context in
                    GroupInfo(try NebulaDialect.readable(groups, input.path.name, actor: service.actor(context.principal)))
                },
            Route.define("todo.groups.put", .put, "/groups/{name}", summary: "Create or change a group: users, nested groups, ACL")
                .details("Members left out stay as they are (a new group starts with none). `If-Match` makes the change conditional on the group's etag. A group may not contain itself at any depth.")
                .access(.user)
                .path(GroupPath.self)
                .body(GroupInput.self)
                .returns(GroupInfo.self) { input, context in
                    GroupInfo(try await groups.upsert(input.path.name, users: input.body.users, groups: input.body.groups, acl: input.body.acl,
                                                      ifMatch: Self.ifMatch(context.headers), actor: service.actor(context.principal)))
                },
            Route.define("todo.groups.addMembers", .post, "/groups/{name}/members", summary: "Add users and groups to a group")
                .access(.user)
                .path(GroupPath.self)
                .body(MembersInput.self)
                .status(200)
                .returns(GroupInfo.self) { input, context in
                    GroupInfo(try await groups.changeMembers(input.path.name, add: true, users: input.body.users ?? [], groups: input.body.groups ?? [],
                                                             actor: service.actor(context.principal)))
                },
            Route.define("todo.groups.removeMembers", .post, "/groups/{name}/members/remove", summary: "Remove users and groups from a group")
                .access(.user)
                .path(GroupPath.self)
                .body(MembersInput.self)
                .status(200)
                .returns(GroupInfo.self) { input, context in
                    GroupInfo(try await groups.changeMembers(input.path.name, add: false, users: input.body.users ?? [], groups: input.body.groups ?? [],
                                                             actor: service.actor(context.principal)))
                },
            Route.define("todo.groups.delete", .delete, "/groups/{name}", summary: "Delete a group (it leaves the groups that contained it)")
                .access(.user)
                .path(GroupPath.self)
                .returns(NoContent.self) { input, context in
                    try await groups.delete(input.path.name, ifMatch: Self.ifMatch(context.headers), actor: service.actor(context.principal))
                    return NoContent()
                },
        ]
    }
}
