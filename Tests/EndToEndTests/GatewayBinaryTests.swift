import Foundation
import GatewayServer
import GatewayTesting
import Synchronization
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs the real `gateway` executable, as a newcomer would.
@Suite("the gateway binary", .serialized)
struct GatewayBinaryTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    struct BinaryNotBuilt: Error, CustomStringConvertible {
        var description: String { "the gateway executable was not found next to the tests or in .build/debug" }
    }

    /// The executable `swift build` / `swift test` built next to the test bundle.
    static func binary() throws -> URL {
        let candidates = [Bundle.main.bundleURL, Bundle.main.bundleURL.deletingLastPathComponent()]
            .map { $0.appendingPathComponent("gateway") }
            + ["debug", "release"].map { packageRoot.appendingPathComponent(".build/\($0)/gateway") }
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else { throw BinaryNotBuilt() }
        return found
    }

    /// A fresh folder holding a copy of the shipped plugins.yaml and the demo data it names, as a
    /// newcomer's clone would.
    func temporaryDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-e2e-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("data"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent("data/demo"), to: directory.appendingPathComponent("data/demo"))
        return directory
    }

    /// Runs the binary to its end: `output` is what it wrote to standard output followed by what it
    /// wrote to standard error, `errors` the latter alone.
    ///
    /// The process is waited for on a thread of its own, never on one of the tasks' threads (two on
    /// this machine): blocking those would stall every other test running meanwhile.
    func run(_ arguments: [String], in directory: URL) async throws -> (status: Int32, output: String, errors: String) {
        await SpawnGate.waitForFewDescriptors()
        return try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try self.runBlocking(arguments, in: directory) }) }
        }
    }

    private func runBlocking(_ arguments: [String], in directory: URL) throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = try Self.binary()
        process.arguments = arguments
        process.currentDirectoryURL = directory
        let standardOutput = Pipe()
        let standardError = Pipe()
        process.standardOutput = standardOutput
        process.standardError = standardError
        try process.run()
        // Standard error is drained beside standard output, so that neither pipe fills and stalls the process.
        let errors = Mutex(Data())
        let drained = DispatchGroup()
        DispatchQueue.global().async(group: drained) {
            let data = standardError.fileHandleForReading.readDataToEndOfFile()
            errors.withLock { $0 = data }
        }
        let output = standardOutput.fileHandleForReading.readDataToEndOfFile()
        drained.wait()
        process.waitUntilExit()
        let errorText = errors.withLock { String(decoding: $0, as: UTF8.self) }
        return (process.terminationStatus, String(decoding: output, as: UTF8.self) + errorText, errorText)
    }

    @Test("`gateway plugin new` scaffolds a plugin and registers it; it never overwrites, and refuses a bad id")
    func pluginNew() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        for path in ["Package.swift", "plugins.yaml", "Sources/gateway/BundledPlugins.swift"] {
            let target = directory.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent(path), to: target)
        }
        let made = try await run(["plugin", "new", "bus-stops"], in: directory)
        #expect(made.status == 0, "\(made.output)")
        func read(_ path: String) throws -> String { try String(contentsOf: directory.appendingPathComponent(path), encoding: .utf8) }
        #expect(try read("Plugins/BusStops/BusStopsPlugin.swift").contains("public static let id = \"bus-stops\""))
        #expect(try read("Plugins/BusStops/BusStopsMigrations.swift").contains("Migration(1, \"create bus_stops_visits\")"))
        #expect(try read("Tests/BusStopsPluginTests/BusStopsPluginTests.swift").contains("MatrixCallers.prepare"))
        let manifest = try read("Package.swift")
        #expect(manifest.contains(#"let bundledPluginFolders: [String] = ["Events", "Feeds", "Suggest", "Todo", "Transit", "Upstream", "BusStops"]"#))
        #expect(manifest.contains(#"let scaffoldedPluginTests: [String] = ["BusStops"]"#))
        let bundled = try read("Sources/gateway/BundledPlugins.swift")
        #expect(bundled.hasPrefix("import BusStopsPlugin\n") && bundled.contains("    PluginRegistration(BusStopsPlugin.self),\n]"))
        // The new block is valid configuration.
        let check = try await run(["check"], in: directory)
        #expect(check.status != 0 && check.output.contains("unknown plugin"), "only a rebuilt gateway knows the new id: \(check.output)")
        #expect(try read("plugins.yaml").hasSuffix("\n  bus-stops:\n    enabled: true\n    config:\n      greeting: Hello\n"))

        let again = try await run(["plugin", "new", "bus-stops"], in: directory)
        #expect(again.status != 0 && again.output.contains("exists already"), "\(again.output)")
        let bad = try await run(["plugin", "new", "Bus_Stops"], in: directory)
        #expect(bad.status != 0 && bad.output.contains("is not a plugin id"), "\(bad.output)")
        // Where the files have another shape, the lines to add are printed instead.
        let elsewhere = directory.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        let printed = try await run(["plugin", "new", "tides"], in: elsewhere)
        #expect(printed.status == 0)
        #expect(printed.output.contains("add to Sources/gateway/BundledPlugins.swift:\n    import TidesPlugin\n    PluginRegistration(TidesPlugin.self),"), "\(printed.output)")
    }

    @Test("`gateway check` accepts the shipped plugins.yaml and rejects a bad one with its line")
    func check() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent("plugins.yaml"), to: directory.appendingPathComponent("plugins.yaml"))
        let good = try await run(["check"], in: directory)
        #expect(good.status == 0, "\(good.output)")
        #expect(good.output.contains("is valid"))

        try "server:\n  port: 8080\ncache:\n  maxBytes: lots\n".write(to: directory.appendingPathComponent("bad.yaml"), atomically: true, encoding: .utf8)
        let bad = try await run(["check", "--config", "bad.yaml"], in: directory)
        #expect(bad.status != 0)
        #expect(bad.output.contains("bad.yaml:4:13: cache.maxBytes: \"lots\" is not a size"), "\(bad.output)")
    }

    @Test("`gateway serve` of the shipped plugins.yaml on PostgreSQL: every plugin's demo data loads and answers",
          .enabled(if: ProcessInfo.processInfo.environment["POSTGRES_URL"] != nil))
    func servePostgres() async throws {
        try await TestStorage.postgres.withFreshLocation { location, _ in
            guard case .postgres(let databaseURL) = location else { return }
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let shipped = try String(contentsOf: Self.packageRoot.appendingPathComponent("plugins.yaml"), encoding: .utf8)
            let configured = shipped.split(separator: "\n", omittingEmptySubsequences: false).map { line in
                line.hasPrefix("storage:") ? "storage: \(databaseURL)" : String(line)
            }.joined(separator: "\n")
            #expect(configured != shipped)
            try configured.write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)
            let server = try await GatewayProcess(directory: directory, logLevel: "warning")
            defer { server.stop() }
            for (target, what) in [("/v1/suggest?q=star", "the suggest dictionaries"), ("/v1/events?city=15", "the events week"),
                                   ("/v1/transit/stops/near?lat=36.915682&lon=-116.751677", "the transit feed"),
                                   ("/v1/feeds", "the demo feed")] {
                let (body, reply) = try await URLSession.shared.data(from: URL(string: server.url + target)!)
                #expect((reply as? HTTPURLResponse)?.statusCode == 200, "\(what): \(String(decoding: body, as: UTF8.self).prefix(300))")
                let items = (try JSONSerialization.jsonObject(with: body) as? [String: Any])?["items"] as? [Any]
                #expect((items ?? []).isEmpty == false, "\(what) is loaded: \(String(decoding: body, as: UTF8.self).prefix(300))")
            }
            #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("data/gateway.sqlite").path) == false)
        }
    }

    @Test("`gateway serve` creates its database, answers, and stops cleanly on SIGTERM")
    func serve() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent("plugins.yaml"), to: directory.appendingPathComponent("plugins.yaml"))
        let created = try await run(["key", "create", "--label", "e2e", "--log-level", "error"], in: directory)
        let masterKey = try #require(created.output.split(separator: "\n").first { $0.hasPrefix("gk_") }.map(String.init))
        let server = try await GatewayProcess(directory: directory, logLevel: "warning")
        let url = server.url
        let (data, response) = try await URLSession.shared.data(from: URL(string: url + "/healthz")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: data, as: UTF8.self) == #"{"status":"ok"}"#)
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("data/gateway.sqlite").path))

        // Each request the banner offers to try answers something: a list with items in it.
        let tries = server.banner.split(separator: "\n").compactMap { line -> String? in
            guard let start = line.firstIndex(of: "'"), let end = line.lastIndex(of: "'"), start < end, line.contains("curl '") else { return nil }
            return String(line[line.index(after: start)..<end])
        }
        #expect(tries.count == 4, "\(server.banner)")
        for target in tries {
            let (body, reply) = try await URLSession.shared.data(from: URL(string: target)!)
            #expect((reply as? HTTPURLResponse)?.statusCode == 200, "\(target)")
            let items = (try JSONSerialization.jsonObject(with: body) as? [String: Any])?["items"] as? [Any]
            #expect((items ?? []).isEmpty == false, "\(target) answers an empty list: \(String(decoding: body, as: UTF8.self).prefix(300))")
        }

        // The events demo (a week in Kaohsiung from today, the US holidays calendar) and the transit demo feed.
        for (target, what) in [("/v1/events?city=15", "the Kaohsiung week"), ("/v1/events/search?q=Thanksgiving", "the holidays calendar"),
                               ("/v1/transit/stops/near?lat=36.915682&lon=-116.751677", "the GTFS example feed")] {
            let (body, reply) = try await URLSession.shared.data(from: URL(string: url + target)!)
            #expect((reply as? HTTPURLResponse)?.statusCode == 200)
            let items = (try JSONSerialization.jsonObject(with: body) as? [String: Any])?["items"] as? [Any]
            #expect((items ?? []).isEmpty == false, "\(what) is loaded: \(String(decoding: body, as: UTF8.self).prefix(300))")
        }

        // The shipped composite: an event of the demo week with its venue, and the transit steps
        // (no demo stop is near Kaohsiung: an empty list, and the arrivals' problem under errors).
        let (week, _) = try await URLSession.shared.data(from: URL(string: url + "/v1/events?city=15")!)
        let first = ((try JSONSerialization.jsonObject(with: week) as? [String: Any])?["items"] as? [[String: Any]])?.first
        let eventID = try #require(first?["id"] as? Int)
        let (journeyBody, journeyReply) = try await URLSession.shared.data(from: URL(string: url + "/v1/journeys/events/\(eventID)")!)
        #expect((journeyReply as? HTTPURLResponse)?.statusCode == 200, "\(String(decoding: journeyBody, as: UTF8.self).prefix(300))")
        let journey = try JSONSerialization.jsonObject(with: journeyBody) as? [String: Any]
        #expect((journey?["event"] as? [String: Any])?["id"] as? Int == eventID)
        #expect((journey?["venue"] as? [String: Any])?["lat"] is Double)
        #expect(journey?["stops"] is [Any])
        #expect((journey?["errors"] as? [String: Any])?["arrivals"] != nil)

        // `gateway cache purge` reaches the running gateway through its admin endpoint.
        let purge = try await run(["cache", "purge", "--url", url, "--key", masterKey, "--all"], in: directory)
        #expect(purge.status == 0, "\(purge.output)")
        #expect(purge.output.contains("purged"))
        let refused = try await run(["cache", "purge", "--url", url, "--key", "gk_wrong", "--tag", "x"], in: directory)
        #expect(refused.status != 0)

        // `gateway user` and `gateway key` with --url work through the running gateway's admin API.
        let remote = ["--url", url, "--key", masterKey]
        let added = try await run(["user", "add", "ada", "--password", "a long user password"] + remote, in: directory)
        #expect(added.status == 0 && added.output.contains("created user ada"), "\(added.output)\(added.errors)")
        #expect(try await run(["user", "list"] + remote, in: directory).output.contains("ada"))
        #expect(try await run(["user", "disable", "ada"] + remote, in: directory).output.contains("ada disabled"))
        #expect(try await run(["user", "list"] + remote, in: directory).output.contains("disabled"))
        #expect(try await run(["user", "disable", "ada", "--enable"] + remote, in: directory).output.contains("ada enabled"))
        #expect(try await run(["user", "grant", "ada", "suggest:write"] + remote, in: directory).output.contains("ada: suggest:write"))
        let userKey = try await run(["key", "create", "--user", "ada", "--label", "remote", "--scope", "todo:read"] + remote, in: directory)
        let userSecret = try #require(userKey.output.split(separator: "\n").first { $0.hasPrefix("gk_") }.map(String.init), "\(userKey.output)\(userKey.errors)")
        let listed = try await run(["key", "list", "--user", "ada"] + remote, in: directory)
        let keyID = try #require(listed.output.split(separator: "\n").dropFirst().first?.split(separator: " ").first.map(String.init), "\(listed.output)")
        #expect(listed.output.contains("remote") && listed.output.contains("todo:read"))
        #expect(try await run(["key", "revoke", keyID] + remote, in: directory).output.contains("revoked \(keyID)"))
        var check = URLRequest(url: URL(string: url + "/v1/me")!)
        check.setValue(userSecret, forHTTPHeaderField: "X-Api-Key")
        #expect((try await URLSession.shared.data(for: check).1 as? HTTPURLResponse)?.statusCode == 401, "the revoked key is refused at once")
        let unknown = try await run(["user", "disable", "nobody"] + remote, in: directory)
        #expect(unknown.status != 0 && unknown.errors.contains("404"), "\(unknown.errors)")
        let noKey = try await run(["user", "list", "--url", url], in: directory)
        #expect(noKey.status != 0)

        server.stop()
        #expect(server.process.terminationStatus == 0)
    }
}

extension GatewayBinaryTests {
    @Test("`routes`, `plugins` and `openapi` work on the shipped configuration, and every bundled plugin is in the OpenAPI document")
    func inspectionCommands() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent("plugins.yaml"), to: directory.appendingPathComponent("plugins.yaml"))
        let routes = try await run(["routes", "--log-level", "error"], in: directory)
        #expect(routes.status == 0, "\(routes.output)")
        #expect(routes.output.contains("/healthz"))
        #expect(routes.output.contains("gateway.openapi"))

        let plugins = try await run(["plugins", "--log-level", "error"], in: directory)
        #expect(plugins.status == 0, "\(plugins.output)")
        #expect(plugins.output.hasPrefix("ID"))
        // The enabled ones (a type that serves ids of the file's choice, `upstream`, is off until an entry names it).
        let ids = plugins.output.split(separator: "\n").dropFirst().compactMap { row -> String? in
            let columns = row.split(separator: " ", omittingEmptySubsequences: true)
            return columns.count > 1 && columns[1] == "yes" ? String(columns[0]) : nil
        }
        #expect(ids.count >= 5, "\(plugins.output)")

        let openapi = try await run(["openapi", "--log-level", "error"], in: directory)
        #expect(openapi.status == 0)
        let document = try JSONSerialization.jsonObject(with: Data(openapi.output.utf8)) as? [String: Any]
        let tags = Set(((document?["tags"] as? [[String: Any]]) ?? []).compactMap { $0["name"] as? String })
        #expect(tags.contains("gateway"))
        for id in ids {
            #expect(tags.contains(id), "bundled plugin \(id) is missing from the OpenAPI document")
        }

        let call = try await run(["call", "nothing.here", "--log-level", "error"], in: directory)
        #expect(call.status != 0)
        #expect(call.output.contains("no operation named 'nothing.here'"))
    }

    @Test("`routes`, `plugins`, `openapi` and `check` never create, open or migrate the configured database")
    func readOnlyCommands() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let shipped = try String(contentsOf: Self.packageRoot.appendingPathComponent("plugins.yaml"), encoding: .utf8)
        try shipped.write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)
        // A PostgreSQL server nobody listens for: a command that opened it would fail.
        let unreachable = shipped.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.hasPrefix("storage:") ? "storage: postgres://nobody@127.0.0.1:1/x" : String(line)
        }.joined(separator: "\n")
        try unreachable.write(to: directory.appendingPathComponent("unreachable.yaml"), atomically: true, encoding: .utf8)
        let database = directory.appendingPathComponent("data/gateway.sqlite")
        let expected = ["routes": "gateway.openapi", "plugins": "ENABLED", "openapi": "\"openapi\" : \"3.1", "check": "is valid"]
        for config in ["plugins.yaml", "unreachable.yaml"] {
            for (command, output) in expected.sorted(by: { $0.key < $1.key }) {
                let result = try await run([command, "--config", config], in: directory)
                #expect(result.status == 0, "`gateway \(command) --config \(config)`: \(result.output.prefix(2000))")
                #expect(result.output.contains(output), "`gateway \(command) --config \(config)`: \(result.output.prefix(2000))")
                #expect(result.output.contains("migrating") == false, "`gateway \(command)` migrated: \(result.output.prefix(2000))")
                #expect(FileManager.default.fileExists(atPath: database.path) == false, "`gateway \(command) --config \(config)` created the database")
            }
        }
    }

    @Test("a bad configuration exits 78 with its located message, a failed start 1 with its reason, a usage mistake 64")
    func exitCodes() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try "server:\n  port: 8080\ncache:\n  maxBytes: lots\n".write(to: directory.appendingPathComponent("bad.yaml"), atomically: true, encoding: .utf8)
        for command in ["check", "serve"] {
            let bad = try await run([command, "--config", "bad.yaml"], in: directory)
            #expect(bad.status == 78, "`gateway \(command)` of a bad file: \(bad.output)")
            #expect(bad.errors.contains("bad.yaml:4:13: cache.maxBytes: \"lots\" is not a size"), "\(bad.output)")
            #expect(bad.output.contains("Usage:") == false, "a configuration error is not a usage mistake: \(bad.output)")
        }

        try "storage: postgres://nobody@127.0.0.1:1/x\nplugins: {}\n".write(to: directory.appendingPathComponent("unreachable.yaml"), atomically: true, encoding: .utf8)
        let failed = try await run(["serve", "--config", "unreachable.yaml", "--port", "0", "--log-level", "critical"], in: directory)
        #expect(failed.status == 1, "\(failed.output)")
        #expect(failed.errors.contains("opening the database postgres://nobody@127.0.0.1:1/x failed: PostgreSQL: connectionError"), "\(failed.output)")
        #expect(failed.output.contains("Usage:") == false, "\(failed.output)")

        let usage = try await run(["serve", "--no-such-flag"], in: directory)
        #expect(usage.status == 64, "\(usage.output)")
        #expect(usage.errors.contains("Unknown option '--no-such-flag'") && usage.errors.contains("Usage: gateway serve"), "\(usage.output)")
    }

    @Test("`migrate` applies the gateway's migrations once")
    func migrate() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent("plugins.yaml"), to: directory.appendingPathComponent("plugins.yaml"))
        let first = try await run(["migrate", "--log-level", "error"], in: directory)
        #expect(first.status == 0, "\(first.output)")
        #expect(first.output.contains("applied gateway 1"))
        let second = try await run(["migrate", "--log-level", "error"], in: directory)
        #expect(second.output.contains("up to date"))
    }
}

extension GatewayBinaryTests {
    @Test("`user link` links an account to a provider's caller; `user group` and `key create --group` set consumer groups; `providers` lists the providers and their keys")
    func identityCommands() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try """
            storage: sqlite:data/gateway.sqlite
            auth:
              providers:
                corp:
                  type: jwt
                  issuer: https://idp.example
                  audiences: [gateway]
                  keys: [{ secret: "a-shared-secret-of-forty-bytes-or-so-000" }]
                  provision: existing
            limits:
              groups:
                partners: { rate: 600/min, quota: 100000/month }
            """.write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)
        #expect(try await run(["user", "add", "ada", "--password", "correct horse battery", "--log-level", "error"], in: directory).status == 0)
        let linked = try await run(["user", "link", "ada", "--provider", "corp", "--subject", "248289761001", "--log-level", "error"], in: directory)
        #expect(linked.status == 0 && linked.output.contains("ada linked to corp"), "\(linked.output)")
        let unknown = try await run(["user", "link", "ada", "--provider", "nope", "--subject", "x", "--log-level", "error"], in: directory)
        #expect(unknown.status != 0 && unknown.output.contains("no provider 'nope'"), "\(unknown.output)")
        let grouped = try await run(["user", "group", "ada", "partners", "--log-level", "error"], in: directory)
        #expect(grouped.status == 0 && grouped.output.contains("ada is in group partners"), "\(grouped.output)")
        let noGroup = try await run(["user", "group", "ada", "gold", "--log-level", "error"], in: directory)
        #expect(noGroup.status != 0 && noGroup.output.contains("no group 'gold' (it has partners)"), "\(noGroup.output)")
        let key = try await run(["key", "create", "--label", "partner", "--group", "partners", "--log-level", "error"], in: directory)
        #expect(key.status == 0 && key.output.hasPrefix("gk_"), "\(key.output)")
        let ungrouped = try await run(["user", "group", "ada", "--none", "--log-level", "error"], in: directory)
        #expect(ungrouped.status == 0 && ungrouped.output.contains("ada is in no group"), "\(ungrouped.output)")
        let providers = try await run(["providers", "--log-level", "error"], in: directory)
        #expect(providers.status == 0 && providers.output.contains("corp") && providers.output.contains("ok"), "\(providers.output)")
    }

    @Test("`user` and `key` manage accounts and master keys from the command line")
    func accountCommands() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent("plugins.yaml"), to: directory.appendingPathComponent("plugins.yaml"))
        let added = try await run(["user", "add", "root", "--admin", "--password", "a long admin password", "--log-level", "error"], in: directory)
        #expect(added.status == 0, "\(added.output)")
        #expect(added.output.contains("created administrator root"))
        let duplicate = try await run(["user", "add", "ROOT", "--password", "another long password", "--log-level", "error"], in: directory)
        #expect(duplicate.status != 0)
        #expect(duplicate.output.contains("taken"))
        let list = try await run(["user", "list", "--log-level", "error"], in: directory)
        #expect(list.output.contains("root") && list.output.contains("admin"))
        let disabled = try await run(["user", "disable", "root", "--log-level", "error"], in: directory)
        #expect(disabled.output.contains("root disabled"))
        #expect(try await run(["user", "list", "--log-level", "error"], in: directory).output.contains("disabled"))

        let created = try await run(["key", "create", "--label", "ops", "--log-level", "error"], in: directory)
        #expect(created.status == 0, "\(created.output)")
        let secretLines = created.output.split(separator: "\n").filter { $0.hasPrefix("gk_") }
        #expect(secretLines.count == 1 && secretLines[0].count > 30, "\(created.output)")
        let keys = try await run(["key", "list", "--log-level", "error"], in: directory)
        let id = try #require(keys.output.split(separator: "\n").dropFirst().first?.split(separator: " ").first.map(String.init))
        #expect(keys.output.contains("ops") && keys.output.contains("active"))
        #expect(try await run(["key", "revoke", id, "--log-level", "error"], in: directory).output.contains("revoked \(id)"))
        #expect(try await run(["key", "list", "--log-level", "error"], in: directory).output.contains("revoked"))
        let missing = try await run(["key", "revoke", "nope", "--log-level", "error"], in: directory)
        #expect(missing.status != 0)
    }
}

extension GatewayBinaryTests {
    @Test("`gateway reload` and SIGHUP apply an edited plugins.yaml to the running gateway; a bad file exits 78 and changes nothing")
    func reload() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("plugins.yaml")
        let base = "storage: sqlite:data/gateway.sqlite\nauth: { bcryptCost: 10 }\nplugins:\n  todo: {}\n"
        try base.write(to: file, atomically: true, encoding: .utf8)
        let created = try await run(["key", "create", "--label", "e2e", "--log-level", "error"], in: directory)
        let masterKey = try #require(created.output.split(separator: "\n").first { $0.hasPrefix("gk_") }.map(String.init))
        let server = try await GatewayProcess(directory: directory, logLevel: "warning")
        let url = server.url
        func status(_ path: String) async throws -> Int {
            let (_, response) = try await URLSession.shared.data(from: URL(string: url + path)!)
            return (response as? HTTPURLResponse)?.statusCode ?? 0
        }
        #expect(try await status("/v1/mirror/healthz") == 404)

        // An upstream service added by configuration: the gateway in front of itself.
        let mirrored = base + "  mirror:\n    type: upstream\n    config:\n      upstreams: [\"\(url)\"]\n"
        try mirrored.write(to: file, atomically: true, encoding: .utf8)
        let anonymous = try await run(["reload", "--url", url], in: directory)
        #expect(anonymous.status == 1 && anonymous.errors.contains("401"), "\(anonymous.output)\(anonymous.errors)")
        let applied = try await run(["reload", "--url", url, "--key", masterKey], in: directory)
        #expect(applied.status == 0, "\(applied.output)\(applied.errors)")
        #expect(applied.output.contains("applied: plugins.mirror (added)"), "\(applied.output)")
        #expect(try await status("/v1/mirror/healthz") == 200)

        // A bad file: its place, exit 78, and the running gateway keeps what it has.
        try (mirrored + "limits:\n  anonymous: lots\n").write(to: file, atomically: true, encoding: .utf8)
        let bad = try await run(["reload", "--url", url, "--key", masterKey], in: directory)
        #expect(bad.status == 78, "\(bad.output)\(bad.errors)")
        #expect(bad.errors.contains("plugins.yaml:10:14: limits.anonymous"), "\(bad.errors)")
        #expect(try await status("/v1/mirror/healthz") == 200)

        // SIGHUP: a composite appears, and a change of port waits for a restart.
        let composite = "composites:\n  ping:\n    path: /v1/ping\n    steps:\n      health: { method: GET, path: /healthz }\n"
        try ("server: { port: 1 }\n" + mirrored + composite).write(to: file, atomically: true, encoding: .utf8)
        kill(server.process.processIdentifier, SIGHUP)
        let deadline = Date().addingTimeInterval(15)
        var pinged = 0
        while Date() < deadline, pinged != 200 {
            pinged = try await status("/v1/ping")
            if pinged != 200 { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(pinged == 200)
        #expect(try await status("/v1/mirror/healthz") == 200)

        server.stop()
        #expect(server.process.terminationStatus == 0)
    }
}
