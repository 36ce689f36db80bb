import ArgumentParser
import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
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
        subcommands: [Add.self, List.self, Passwd.self, Disable.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a user; the password is read from standard input unless --password is given.")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Flag(help: "Make the user an administrator.") var admin = false
        @Option(help: "The display name.") var displayName: String?
        @Option(help: "The password (prefer standard input).") var password: String?

        func run() async throws {
            let password = try readPassword(password)
            let user = try await withAccounts(options) { store in
                try await store.register(username: username, secret: .plain(password), displayName: displayName, isAdmin: admin)
            }
            print("created \(user.isAdmin ? "administrator" : "user") \(user.username) (\(user.id))")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List users.")
        @OptionGroup var options: ConfigOptions

        func run() async throws {
            let users = try await withAccounts(options) { try await $0.users() }
            var rows = [["ID", "USERNAME", "ROLE", "STATE", "CREATED"]]
            for user in users {
                rows.append([user.id, user.username, user.isAdmin ? "admin" : "user", user.disabled ? "disabled" : "active", Timestamp.format(user.createdAt)])
            }
            print(Table.render(rows))
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a user's password (ends their sessions).")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The username.") var username: String
        @Option(help: "The new password (prefer standard input).") var password: String?

        func run() async throws {
            let password = try readPassword(password)
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

        func run() async throws {
            try await withAccounts(options) { store in
                guard let user = try await store.user(named: username) else { throw ValidationError("no user named '\(username)'") }
                try await store.setDisabled(userID: user.id, !enable)
            }
            print("\(username) \(enable ? "enabled" : "disabled")")
        }
    }
}

struct KeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key", abstract: "Manage API keys: master keys (administrators) or a user's keys.",
        subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a key and print its secret (shown only now).")
        @OptionGroup var options: ConfigOptions
        @Option(help: "A label for the key.") var label: String = "master"
        @Option(help: "The owner's username; without it, a master key.") var user: String?
        @Option(name: .customLong("scope"), help: "A scope (repeatable): <plugin>:read, <plugin>:write, <plugin>:* or *.") var scopes: [String] = ["*"]
        @Option(help: "Its own rate limit, such as 100/min.") var rate: String?
        @Option(name: .customLong("allow-address"), help: "An address or IPv4 CIDR it is accepted from (repeatable).") var addresses: [String] = []

        func run() async throws {
            let (secret, key) = try await withAccounts(options) { store in
                var owner: String?
                if let user {
                    guard let found = try await store.user(named: user) else { throw ValidationError("no user named '\(user)'") }
                    owner = found.id
                }
                return try await store.createKey(userID: owner, grant: .init(label: label, scopes: scopes,
                                                                             allowedAddresses: addresses.isEmpty ? nil : addresses, rate: rate))
            }
            print(secret)
            FileHandle.standardError.write(Data("key \(key.id) (\(key.label)); the secret above is not stored and will not be shown again\n".utf8))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List master keys, or a user's keys.")
        @OptionGroup var options: ConfigOptions
        @Option(help: "The owner's username.") var user: String?

        func run() async throws {
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

        func run() async throws {
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
        @Option(help: "An administrator's API key (a master key from `gateway key create`).") var key: String
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
