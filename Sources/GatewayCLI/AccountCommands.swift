import ArgumentParser
import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import NIOCore
import NIOHTTP1

/// Opens the database of the configuration (migrated) for account commands.
private func withAccounts<R>(_ options: ConfigOptions, _ body: (AccountStore) async throws -> R) async throws -> R {
    let configuration = try options.load()
    let logger = options.logger()
    let database = try await Gateway.openDatabase(configuration.storage, baseDirectory: options.fileURL.deletingLastPathComponent(), logger: logger,
                                                    pool: configuration.database)
    do {
        try await MigrationRunner(database: database.sql, logger: logger).migrate([(owner: "gateway", steps: Gateway.hostMigrations)])
        let result = try await body(AccountStore(database: database.sql, bcryptCost: configuration.auth.bcryptCost,
                                                 sessionTTL: configuration.auth.sessionTTL.seconds))
        await database.shutdown()
        return result
    } catch {
        await database.shutdown()
        throw error
    }
}

/// Reads a password from standard input (one line), so it never appears in the process list.
private func readPassword(_ given: String?) throws -> String {
    if let given { return given }
    FileHandle.standardError.write(Data("password: ".utf8))
    guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw ValidationError("no password given on standard input") }
    return line
}

struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user", abstract: "Manage accounts (the first administrator comes from here).",
        subcommands: [Add.self, List.self, Passwd.self, Disable.self, Grant.self, Realm.self, Link.self, Group.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a user; the password is read from standard input unless --password is given.")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Flag(help: "Make the user an administrator.") var admin = false
        @Option(help: "The display name.") var displayName: String?
        @Option(help: "The password (prefer standard input).") var password: String?
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            let password = try readPassword(password)
            if let client = try remote.client() {
                var body: [String: JSONValue] = ["username": .string(username), "password": .string(password), "admin": .bool(admin)]
                if let displayName { body["displayName"] = .string(displayName) }
                let user = try await client.call(.POST, "/v1/admin/users", .object(body)).objectValue ?? [:]
                print("created \(admin ? "administrator" : "user") \(user["username"]?.stringValue ?? username) (\(user["id"]?.stringValue ?? ""))")
                return
            }
            let user = try await withAccounts(options) { store in
                try await store.register(username: username, secret: .plain(password), displayName: displayName, isAdmin: admin)
            }
            print("created \(user.isAdmin ? "administrator" : "user") \(user.username) (\(user.id))")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List users.")
        @OptionGroup var options: ConfigOptions
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            var rows = [["ID", "USERNAME", "ROLE", "STATE", "CREATED"]]
            if let client = try remote.client() {
                var cursor: String?
                repeat {
                    let page = try await client.call(.GET, "/v1/admin/users?limit=1000" + (cursor.map { "&cursor=" + AdminClient.segment($0) } ?? "")).objectValue ?? [:]
                    for user in (page["items"]?.arrayValue ?? []).compactMap(\.objectValue) {
                        rows.append([user["id"]?.stringValue ?? "", user["username"]?.stringValue ?? "", user["isAdmin"] == .bool(true) ? "admin" : "user",
                                     user["disabled"] == .bool(true) ? "disabled" : "active", user["createdAt"]?.stringValue ?? ""])
                    }
                    cursor = page["nextCursor"]?.stringValue
                } while cursor != nil
                print(Table.render(rows))
                return
            }
            let users = try await withAccounts(options) { try await $0.users() }
            for user in users {
                rows.append([user.id, user.username, user.isAdmin ? "admin" : "user", user.disabled ? "disabled" : "active", UTCTimestamp.format(user.createdAt)])
            }
            print(Table.render(rows))
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a user's password (ends their sessions).")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Option(help: "The new password (prefer standard input).") var password: String?
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            let password = try readPassword(password)
            if let client = try remote.client() {
                try await client.call(.PATCH, "/v1/admin/users/" + AdminClient.segment(username), .object(["password": .string(password)]))
                print("password changed for \(username)")
                return
            }
            try await withAccounts(options) { store in
                guard let user = try await store.user(named: username) else { throw ValidationError("no user named '\(username)'") }
                try await store.setPassword(userID: user.id, secret: .plain(password))
            }
            print("password changed for \(username)")
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Disable a user (ends their sessions; their keys stop working).")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Flag(help: "Enable the user again instead.") var enable = false
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            if let client = try remote.client() {
                try await client.call(.PATCH, "/v1/admin/users/" + AdminClient.segment(username), .object(["disabled": .bool(!enable)]))
                print("\(username) \(enable ? "enabled" : "disabled")")
                return
            }
            try await withAccounts(options) { store in
                guard let user = try await store.user(named: username) else { throw ValidationError("no user named '\(username)'") }
                try await store.setDisabled(userID: user.id, !enable)
            }
            print("\(username) \(enable ? "enabled" : "disabled")")
        }
    }
}

extension UserCommand {
    /// Puts an account in a consumer group of `limits.groups` (its rate and quota apply to the
    /// account's sessions, keys and tokens), or in none.
    struct Group: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Put a user in a consumer group of limits.groups (its rate and quota then apply), or in none with --none.")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Argument(help: "The group's name in limits.groups.") var group: String?
        @Flag(help: "Take the user out of their group.") var none = false
        @OptionGroup var remote: RemoteOptions

        func validate() throws {
            guard (group == nil) != !none else { throw ValidationError("name a group, or give --none") }
        }

        func run() async throws {
            if let client = try remote.client() {
                try await client.call(.PATCH, "/v1/admin/users/" + AdminClient.segment(username), .object(["group": .string(group ?? "")]))
                print(group.map { "\(username) is in group \($0)" } ?? "\(username) is in no group")
                return
            }
            if let group { try Self.check(group, options) }
            try await withAccounts(options) { store in
                guard let user = try await store.user(named: username) else { throw ValidationError("no user named '\(username)'") }
                try await store.setConsumerGroup(userID: user.id, group)
            }
            print(group.map { "\(username) is in group \($0)" } ?? "\(username) is in no group")
        }

        /// Refuses a group plugins.yaml does not configure.
        static func check(_ group: String, _ options: ConfigOptions) throws {
            let configured = try options.load().limits.groups
            guard configured[group] != nil else {
                throw ValidationError("limits.groups has no group '\(group)'" + (configured.isEmpty ? "" : " (it has \(configured.keys.sorted().joined(separator: ", ")))"))
            }
        }
    }

    /// Links an account to a caller of an identity provider, so that the caller's tokens act for
    /// it: what a provider with `provision: existing` needs before its callers are accepted.
    struct Link: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Link a user to an identity of a provider of auth.providers (replacing an earlier link of that identity).")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Option(help: "The provider's name in auth.providers.") var provider: String
        @Option(help: "The caller's subject there (the claim claims.subject names; sub by default).") var subject: String

        func run() async throws {
            let configuration = try options.load()
            guard let settings = configuration.auth.providers[provider] else {
                throw ValidationError("auth.providers has no provider '\(provider)'")
            }
            try await withAccounts(options) { store in
                guard let user = try await store.user(named: username) else { throw ValidationError("no user named '\(username)'") }
                try await store.link(userID: user.id, issuer: settings.linkIssuer, subject: subject, provider: provider)
            }
            print("\(username) linked to \(provider) subject \(subject)")
        }
    }

    /// Grants a user the right to write data every user shares (a suggestion dictionary, transit
    /// feeds, bucket definitions): the routes guarded by such a grant accept administrators and the
    /// users granted it. Scopes of keys never do: they only narrow what a key may do.
    struct Grant: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Grant a user scopes on shared data (such as suggest:write), or --revoke them; prints the user's grants.",
            discussion: "A running gateway applies a change within a few seconds (the user's next request after its credential cache expires).")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Argument(help: "Scopes: <plugin>:write, <plugin>:read, <plugin>:* or an upstream route's <plugin>:<scope>. None: only print.") var scopes: [String] = []
        @Flag(help: "Withdraw the scopes instead.") var revoke = false
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            if let client = try remote.client() {
                let path = "/v1/admin/users/" + AdminClient.segment(username) + "/grants"
                var grants = (try await client.call(.GET, path).objectValue?["scopes"]?.arrayValue ?? []).compactMap(\.stringValue)
                if !scopes.isEmpty {
                    grants = revoke ? grants.filter { !scopes.contains($0) } : grants + scopes.filter { !grants.contains($0) }
                    grants = (try await client.call(.PUT, path, .object(["scopes": .array(grants.map(JSONValue.string))])).objectValue?["scopes"]?.arrayValue ?? [])
                        .compactMap(\.stringValue)
                }
                print("\(username): \(grants.isEmpty ? "no grants" : grants.joined(separator: " "))")
                return
            }
            let grants = try await withAccounts(options) { store in
                guard let user = try await store.user(named: username) else { throw ValidationError("no user named '\(username)'") }
                do {
                    if scopes.isEmpty { return try await store.grants(of: user.id) }
                    return revoke ? try await store.revokeGrants(scopes, from: user.id) : try await store.grant(scopes, to: user.id)
                } catch let error as GatewayError {
                    throw ValidationError(error.detail)
                }
            }
            print("\(username): \(grants.isEmpty ? "no grants" : grants.joined(separator: " "))")
        }
    }
}

extension UserCommand {
    /// Adds a user to a dialect's realm (a NEC tenant: `nebula/<tenant>`), whose master key then
    /// administers the account as one of its own; an administrator never becomes a realm's.
    struct Realm: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a user to a dialect's realm (nebula/<tenant>), or --remove them; prints the user's realms.",
            discussion: "A tenant's master key reads, changes and deletes only the members of its realm: the users registered through the tenant and the ones added here. Never an administrator.")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Argument(help: "The realm, such as nebula/tutorial. None: only print.") var realm: String?
        @Flag(help: "Remove the user from the realm instead.") var remove = false

        func run() async throws {
            let realms = try await withAccounts(options) { store in
                guard let user = try await store.user(named: username) else { throw ValidationError("no user named '\(username)'") }
                do {
                    if let realm {
                        if remove { _ = try await store.removeRealmMember(user.id, from: realm) } else { try await store.addRealmMember(user.id, to: realm) }
                    }
                    return try await store.realms(of: user.id)
                } catch let error as GatewayError {
                    throw ValidationError(error.detail)
                }
            }
            print("\(username): \(realms.isEmpty ? "no realms" : realms.joined(separator: " "))")
        }
    }
}

struct KeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key", abstract: "Manage API keys: master keys (the operator's, held to their scopes) or a user's keys.",
        subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a key and print its secret (shown only now).")
        @OptionGroup var options: ConfigOptions
        @Option(help: "A label for the key.") var label: String = "master"
        @Option(help: "The owner's username; without it, a master key.") var user: String?
        @Option(name: .customLong("scope"), help: ArgumentHelp(
            "A scope (repeatable): <plugin>:read, <plugin>:write, <plugin>:*, * or (master keys) admin. Default: *.",
            discussion: """
                A key is held to its scopes, master or not. A master key acts as an administrator only with \
                `admin` (the administrators' routes: cache purge, reload, /metrics, grants) or `*` (everything, \
                the default); with `suggest:read` alone it only reads suggestions. A master key may write \
                shared data that its scopes name (`--scope suggest:write`).
                """)) var scopes: [String] = ["*"]
        @Option(help: "Its own rate limit, such as 100/min (any rate: a user's own keys may only lower what keys get).") var rate: String?
        @Flag(help: "Count its requests in a rate-limit bucket of its own, not in its owner's (which all the owner's keys share).") var ownLimit = false
        @Option(name: .customLong("allow-address"), help: "An address or IPv4 CIDR it is accepted from (repeatable).") var addresses: [String] = []
        @Option(help: "The consumer group (limits.groups) its requests count in, before its owner's.") var group: String?
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            if let client = try remote.client() {
                var body: [String: JSONValue] = ["label": .string(label), "scopes": .array(scopes.map(JSONValue.string)), "ownLimit": .bool(ownLimit)]
                if let user { body["user"] = .string(user) }
                if let rate { body["rate"] = .string(rate) }
                if let group { body["group"] = .string(group) }
                if !addresses.isEmpty { body["allowedAddresses"] = .array(addresses.map(JSONValue.string)) }
                let created = try await client.call(.POST, "/v1/admin/keys", .object(body)).objectValue ?? [:]
                let key = created["key"]?.objectValue ?? [:]
                print(created["secret"]?.stringValue ?? "")
                FileHandle.standardError.write(Data("key \(key["id"]?.stringValue ?? "") (\(label)); the secret above is not stored and will not be shown again\n".utf8))
                return
            }
            if let group { try UserCommand.Group.check(group, options) }
            let (secret, key) = try await withAccounts(options) { store in
                var owner: String?
                if let user {
                    guard let found = try await store.user(named: user) else { throw ValidationError("no user named '\(user)'") }
                    owner = found.id
                }
                return try await store.createKey(userID: owner, grant: .init(label: label, scopes: scopes,
                                                                             allowedAddresses: addresses.isEmpty ? nil : addresses, rate: rate),
                                                 ownLimit: ownLimit, consumerGroup: group)
            }
            print(secret)
            FileHandle.standardError.write(Data("key \(key.id) (\(key.label)); the secret above is not stored and will not be shown again\n".utf8))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List master keys, or a user's keys.")
        @OptionGroup var options: ConfigOptions
        @Option(help: "The owner's username.") var user: String?
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            if let client = try remote.client() {
                let page = try await client.call(.GET, "/v1/admin/keys" + (user.map { "?user=" + AdminClient.segment($0) } ?? "")).objectValue ?? [:]
                var rows = [["ID", "PREFIX", "LABEL", "SCOPES", "STATE"]]
                for key in (page["items"]?.arrayValue ?? []).compactMap(\.objectValue) {
                    rows.append([key["id"]?.stringValue ?? "", (key["prefix"]?.stringValue ?? "") + "…", key["label"]?.stringValue ?? "",
                                 (key["scopes"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ","), key["revoked"] == .bool(true) ? "revoked" : "active"])
                }
                print(Table.render(rows))
                return
            }
            let keys = try await withAccounts(options) { store in
                var owner: String?
                if let user {
                    guard let found = try await store.user(named: user) else { throw ValidationError("no user named '\(user)'") }
                    owner = found.id
                }
                return try await store.keys(userID: owner)
            }
            var rows = [["ID", "PREFIX", "LABEL", "SCOPES", "STATE"]]
            for key in keys { rows.append([key.id, key.prefix + "…", key.label, key.scopes.joined(separator: ","), key.revoked ? "revoked" : "active"]) }
            print(Table.render(rows))
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key by id.")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The key's id (see `gateway key list`).") var id: String
        @OptionGroup var remote: RemoteOptions

        func run() async throws {
            if let client = try remote.client() {
                try await client.call(.DELETE, "/v1/admin/keys/" + AdminClient.segment(id))
                print("revoked \(id)")
                return
            }
            let found = try await withAccounts(options) { try await $0.revokeKey(id: id, userID: nil) }
            guard found else { throw ValidationError("no key with id '\(id)'") }
            print("revoked \(id)")
        }
    }
}

struct CacheCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cache", abstract: "Work with a running gateway's response cache.",
                                                    subcommands: [Purge.self])

    struct Purge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Purge cached replies by tag (or all) on a running gateway, through its admin endpoint.")
        @Option(help: "The gateway's base URL.") var url: String = "http://127.0.0.1:8080"
        @Option(help: "An administrator's API key (a master key from `gateway key create` holding admin or *).") var key: String
        @Option(name: .customLong("tag"), help: "A tag to purge (repeatable).") var tags: [String] = []
        @Flag(help: "Purge everything.") var all = false

        func validate() throws {
            guard all || !tags.isEmpty else { throw ValidationError("name at least one --tag, or --all") }
        }

        func run() async throws {
            var request = HTTPClientRequest(url: url.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + "/v1/admin/cache/purge")
            request.method = .POST
            request.headers.add(name: "X-Api-Key", value: key)
            request.headers.add(name: "Content-Type", value: "application/json")
            let body: [String: Any] = all ? ["all": true] : ["tags": tags]
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
            print(CallRequest.pretty(text))
            if response.status.code >= 400 { throw ExitCode(1) }
        }
    }
}
