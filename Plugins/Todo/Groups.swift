import Foundation
import GatewayCore
import NIOCore
import SQLKit
import Synchronization

/// A group of users and of other groups (nested), named in ACLs as `g:{name}`: an ACL entry
/// `g:staff` admits every member of `staff`, and the members of the groups in it, at any depth.
struct UserGroup: Sendable, Equatable {
    var name: String
    var id: String
    var users: [String]
    var groups: [String]
    var acl: GroupACL
    var etag: String
    /// Microseconds since 1970.
    var createdAt: Int64
    var updatedAt: Int64
    /// The tenant whose dialect created it (nil: the native API).
    var tenant: String? = nil

    /// Whether `actor` has `right` on the group: its tenant's master key and administrators
    /// always, others as its ACL says.
    func allows(_ right: GroupACL.Right, _ actor: Actor) -> Bool {
        actor.administers(tenant) || acl.allows(right, actor)
    }
}

/// Who may do what to a group: its owner everything; `r` read, `u` change its members, `d`
/// delete it, `w` all three, `admin` change its ACL. Entries are user ids, `anonymous`,
/// `authenticated` or `g:{group}`.
struct GroupACL: Sendable, Equatable, Codable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = Dictionary(uniqueKeysWithValues: ["r", "w", "u", "d", "admin"].map {
        ($0, FieldRule.each(.pattern(NativeSchemas.aclEntryPattern)))
    })

    var owner: String?
    var r: [String] = []
    var w: [String] = []
    var u: [String] = []
    var d: [String] = []
    var admin: [String] = []

    enum Right { case read, update, delete, admin }

    init(owner: String? = nil, r: [String] = [], w: [String] = [], u: [String] = [], d: [String] = [], admin: [String] = []) {
        (self.owner, self.r, self.w, self.u, self.d, self.admin) = (owner, r, w, u, d, admin)
    }

    /// Lists left out are empty.
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(owner: try container.decodeIfPresent(String.self, forKey: .owner),
                  r: try container.decodeIfPresent([String].self, forKey: .r) ?? [], w: try container.decodeIfPresent([String].self, forKey: .w) ?? [],
                  u: try container.decodeIfPresent([String].self, forKey: .u) ?? [], d: try container.decodeIfPresent([String].self, forKey: .d) ?? [],
                  admin: try container.decodeIfPresent([String].self, forKey: .admin) ?? [])
    }

    func allows(_ right: Right, _ actor: Actor) -> Bool {
        if owner != nil && owner == actor.userID { return true }
        let entries: [String] = switch right {
        case .read: r + w + u + d + admin
        case .update: u + w + admin
        case .delete: d + w + admin
        case .admin: admin
        }
        return ObjectACL.admits(actor, entries)
    }
}

/// The groups, in the `todo_groups` table and in memory (there are few, and every request that
/// reads objects needs the caller's): every write goes to the table first, then refreshes the
/// memory of this instance and, over the event bus, of the others.
final class GroupDirectory: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock
    let events: (any EventBus)?
    let accounts: any AccountDirectory
    let purgeCache: (@Sendable (_ tags: [String]) async -> Void)?
    private let state = Mutex<[String: UserGroup]>([:])
    /// This instance, so that it skips its own announcements.
    let instance = UUID().uuidString

    static let topic = "todo/groups"
    /// The tag of every cached reply that depends on who may read what: a group change purges them.
    static let readsTag = "todo:reads"
    static let maximumMembers = 1_000
    /// The most groups an actor's ACL check looks at (the SQL of a query names each).
    static let maximumGroupsPerUser = 100

    init(database: any SQLDatabase, clock: any WallClock, events: (any EventBus)?, accounts: any AccountDirectory, purgeCache: (@Sendable (_ tags: [String]) async -> Void)? = nil) {
        self.purgeCache = purgeCache
        self.database = database
        self.clock = clock
        self.events = events
        self.accounts = accounts
    }

    /// A group name: 1 to 100 letters, digits, `_` and `-`; `anonymous` and `authenticated` are
    /// the reserved ones every ACL knows.
    static func nameProblem(_ name: String) -> String? {
        if name == "anonymous" || name == "authenticated" { return "'\(name)' is reserved" }
        guard !name.isEmpty, name.utf8.count <= 100, name.unicodeScalars.allSatisfy(\.isNameCharacter) else {
            return "a group name is 1 to 100 letters, digits, '_' and '-'"
        }
        return nil
    }

    // MARK: Reading

    private struct Row: Codable {
        var name: String
        var id: String
        var users: String
        var groups: String
        var acl: String
        var etag: String
        var created_at: Int64
        var updated_at: Int64
        var tenant: String?

        var group: UserGroup {
            let decoder = JSONDecoder()
            return UserGroup(name: name, id: id, users: (try? decoder.decode([String].self, from: Data(users.utf8))) ?? [],
                             groups: (try? decoder.decode([String].self, from: Data(groups.utf8))) ?? [],
                             acl: (try? decoder.decode(GroupACL.self, from: Data(acl.utf8))) ?? GroupACL(),
                             etag: etag, createdAt: created_at, updatedAt: updated_at, tenant: tenant)
        }

        init(_ group: UserGroup) throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            name = group.name
            id = group.id
            users = String(decoding: try encoder.encode(group.users), as: UTF8.self)
            groups = String(decoding: try encoder.encode(group.groups), as: UTF8.self)
            acl = String(decoding: try encoder.encode(group.acl), as: UTF8.self)
            etag = group.etag
            created_at = group.createdAt
            updated_at = group.updatedAt
            tenant = group.tenant
        }
    }

    /// Reads every group from the table: on start, and when another instance changed one.
    func reload() async throws {
        let rows = try await database.select().columns("*").from("todo_groups").all(decoding: Row.self)
        let groups = Dictionary(rows.map { ($0.name, $0.group) }, uniquingKeysWith: { first, _ in first })
        state.withLock { $0 = groups }
    }

    func applyRemote(_ event: GatewayEvent) async throws {
        guard String(buffer: event.payload) != instance else { return }
        try await reload()
    }

    /// Every group, by name.
    func all() -> [UserGroup] { state.withLock { Array($0.values) }.sorted { $0.name < $1.name } }

    func group(_ name: String) -> UserGroup? { state.withLock { $0[name] } }

    /// The groups `userID` belongs to: directly, or through a group inside a group it belongs to.
    func groups(of userID: String) -> Set<String> {
        state.withLock { groups in
            var found = Set(groups.values.filter { $0.users.contains(userID) }.map(\.name))
            var frontier = found
            while !frontier.isEmpty {
                let parents = Set(groups.values.filter { group in !found.contains(group.name) && group.groups.contains(where: frontier.contains) }.map(\.name))
                found.formUnion(parents)
                frontier = parents
            }
            return found
        }
    }

    /// The groups `name` contains, at any depth (a cycle would include `name` itself).
    private func descendants(of name: String, in groups: [String: UserGroup]) -> Set<String> {
        var found = Set<String>()
        var frontier = groups[name]?.groups ?? []
        while let next = frontier.popLast() {
            guard found.insert(next).inserted else { continue }
            frontier += groups[next]?.groups ?? []
        }
        return found
    }

    // MARK: Writing

    /// Creates the group or changes it (`users`, `groups`, `acl`; nil keeps a member as it is,
    /// a new group starts with none). `ifMatch` makes it conditional on the etag (412).
    func upsert(_ name: String, users: [String]?, groups: [String]?, acl: GroupACL?, ifMatch: String?, actor: Actor) async throws -> UserGroup {
        if let problem = Self.nameProblem(name) { throw GatewayError.invalid(field: "/name", problem) }
        return try await write(name) { existing in
            var group: UserGroup
            if let existing {
                guard existing.allows(.update, actor) else { throw GatewayError.forbidden("You may not change group '\(name)'.") }
                if let ifMatch, ifMatch != existing.etag { throw GatewayError.preconditionFailed("The group has changed: its etag is no longer \(ifMatch).") }
                if var acl {
                    if acl.owner == nil { acl.owner = existing.acl.owner }
                    guard acl == existing.acl || existing.allows(.admin, actor) else {
                        throw GatewayError.forbidden("Only the group's owner or an admin entry may change its ACL.")
                    }
                }
                group = existing
            } else {
                if ifMatch != nil { throw GatewayError.notFound("No group '\(name)'.") }
                let now = Timestamps.micros(self.clock.now())
                group = UserGroup(name: name, id: ObjectStore.newID(now: self.clock.now()), users: [], groups: [],
                                  acl: actor.userID.map { GroupACL(owner: $0) } ?? GroupACL(r: ["anonymous"], w: ["anonymous"]),
                                  etag: "", createdAt: now, updatedAt: now, tenant: actor.tenant)
            }
            if let users { group.users = users }
            if let groups { group.groups = groups }
            if var acl {
                // An ACL without an owner keeps the group's.
                if acl.owner == nil { acl.owner = group.acl.owner }
                group.acl = acl
            }
            return group
        }
    }

    /// Adds or removes members; 404 when there is no such group.
    func changeMembers(_ name: String, add: Bool, users: [String], groups: [String], actor: Actor) async throws -> UserGroup {
        try await write(name) { existing in
            guard var group = existing else { throw GatewayError.notFound("No group '\(name)'.") }
            guard group.allows(.update, actor) else { throw GatewayError.forbidden("You may not change group '\(name)'.") }
            if add {
                group.users += users.filter { !group.users.contains($0) }
                group.groups += groups.filter { !group.groups.contains($0) }
            } else {
                group.users.removeAll(where: users.contains)
                group.groups.removeAll(where: groups.contains)
            }
            return group
        }
    }

    /// Deletes a group and takes it out of the groups that contained it.
    func delete(_ name: String, ifMatch: String?, actor: Actor) async throws {
        guard let group = group(name) else { throw GatewayError.notFound("No group '\(name)'.") }
        guard group.allows(.delete, actor) else { throw GatewayError.forbidden("You may not delete group '\(name)'.") }
        if let ifMatch, ifMatch != group.etag { throw GatewayError.preconditionFailed("The group has changed: its etag is no longer \(ifMatch).") }
        try await database.transaction { db in
            guard try await db.delete(from: "todo_groups").where("name", .equal, name).where("etag", .equal, group.etag).returning("name").first() != nil else {
                throw GatewayError.preconditionFailed("The group changed while it was being deleted; read it again.")
            }
            for parent in self.all() where parent.groups.contains(name) {
                var changed = parent
                changed.groups.removeAll { $0 == name }
                changed.etag = ObjectStore.newETag()
                changed.updatedAt = max(Timestamps.micros(self.clock.now()), parent.updatedAt + 1)
                try await db.update("todo_groups").set("groups", to: try Row(changed).groups).set("etag", to: changed.etag)
                    .set("updated_at", to: changed.updatedAt).where("name", .equal, parent.name).run()
            }
        }
        try await changed()
    }

    /// Runs `change` on the group as stored (nil: none yet), checks the result (members exist, no
    /// cycle) and writes it if the group did not change meanwhile; retries otherwise.
    private func write(_ name: String, _ change: (UserGroup?) throws -> UserGroup) async throws -> UserGroup {
        for attempt in 0 ..< ObjectStore.maximumAttempts {
            let existing = try await database.select().columns("*").from("todo_groups").where("name", .equal, name).first(decoding: Row.self)?.group
            var group = try change(existing)
            try await check(group)
            group.etag = ObjectStore.newETag()
            group.updatedAt = max(Timestamps.micros(clock.now()), (existing?.updatedAt ?? 0) + 1)
            let row = try Row(group)
            let written: Bool
            if let existing {
                written = try await database.update("todo_groups").set("users", to: row.users).set("groups", to: row.groups).set("acl", to: row.acl)
                    .set("etag", to: row.etag).set("updated_at", to: row.updated_at)
                    .where("name", .equal, name).where("etag", .equal, existing.etag).returning("name").first() != nil
            } else {
                do {
                    try await database.insert(into: "todo_groups").model(row).run()
                    written = true
                } catch {
                    // Another request created it first.
                    guard try await database.select().column("name").from("todo_groups").where("name", .equal, name).first() != nil else { throw error }
                    written = false
                }
            }
            if written {
                try await changed()
                return group
            }
            try await ObjectStore.backOff(attempt)
        }
        throw GatewayError.conflict("The group is being changed by others too often; try again.")
    }

    /// Members must exist, be few enough, and no group may contain itself at any depth.
    private func check(_ group: UserGroup) async throws {
        guard group.users.count + group.groups.count <= Self.maximumMembers else {
            throw GatewayError.invalid(field: "/users", "a group holds at most \(Self.maximumMembers) members")
        }
        for (index, user) in group.users.enumerated() where try await accounts.account(id: user) == nil {
            throw GatewayError.invalid(field: "/users/\(index)", "'\(user.prefix(64))' is not a user")
        }
        var groups = state.withLock { $0 }
        for (index, member) in group.groups.enumerated() where groups[member] == nil {
            throw GatewayError.invalid(field: "/groups/\(index)", "'\(member.prefix(100))' is not a group")
        }
        groups[group.name] = group
        if group.groups.contains(group.name) || descendants(of: group.name, in: groups).contains(group.name) {
            throw GatewayError.invalid(field: "/groups", "would make group '\(group.name)' contain itself")
        }
        for entry in group.acl.r + group.acl.w + group.acl.u + group.acl.d + group.acl.admin {
            if let problem = ObjectACL.entryProblem(entry) { throw GatewayError.invalid(field: "/ACL", "'\(entry.prefix(64))': \(problem)") }
        }
    }

    /// Reads the groups again here and tells the other instances.
    private func changed() async throws {
        try await reload()
        await purgeCache?([Self.readsTag])
        await events?.publish(GatewayEvent(topic: Self.topic, payload: ByteBuffer(string: instance)))
    }
}
