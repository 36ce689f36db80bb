import ArgumentParser
import Foundation
import GatewayServer

/// `gateway plugin new NAME`: a new plugin's folder, registered where the project's files allow.
struct PluginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugin", abstract: "Work on plugins.", subcommands: [New.self])

    struct New: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Scaffold a plugin: Plugins/<Name>/ (plugin type, migrations), a test file, a plugins.yaml block.",
            discussion: """
                NAME is the plugin's id: lowercase letters, digits and -, starting with a letter (bus-stops). \
                The plugin is registered in Package.swift (bundledPluginFolders, scaffoldedPluginTests), \
                Sources/gateway/BundledPlugins.swift and plugins.yaml where those files have the usual shape; \
                otherwise the exact lines to add are printed.
                """)

        @Argument(help: "The plugin's id, such as bus-stops.") var name: String
        @Option(help: "The package's folder.") var directory: String = "."

        func run() async throws {
            let scaffold = try PluginScaffold(id: name)
            let root = URL(fileURLWithPath: directory)
            let report = try scaffold.write(into: root)
            print(report.joined(separator: "\n"))
        }
    }
}

/// The files of a new plugin and the lines that register it.
struct PluginScaffold {
    /// The id (`bus-stops`) and the type-name stem (`BusStops`).
    let id: String
    let name: String

    init(id: String) throws {
        guard PluginRegistration.isValidID(id), !Gateway.reservedIDs.contains(id) else {
            throw ValidationError("'\(id)' is not a plugin id: lowercase letters, digits and -, starting with a letter, at most 40, not one of \(Gateway.reservedIDs.sorted().joined(separator: ", ")).")
        }
        self.id = id
        name = id.split(separator: "-").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }

    /// Writes the files (refusing to overwrite any) and registers the plugin; returns what it did
    /// and, for each registration it could not make, the lines to add by hand.
    func write(into root: URL) throws -> [String] {
        let fileManager = FileManager.default
        let files: [(String, String)] = [
            ("Plugins/\(name)/\(name)Plugin.swift", pluginSource),
            ("Plugins/\(name)/\(name)Migrations.swift", migrationsSource),
            ("Tests/\(name)PluginTests/\(name)PluginTests.swift", testSource),
        ]
        for (path, _) in files where fileManager.fileExists(atPath: root.appendingPathComponent(path).path) {
            throw ValidationError("\(path) exists already: nothing was written.")
        }
        var report: [String] = []
        for (path, text) in files {
            let url = root.appendingPathComponent(path)
            try fileManager.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: url)
            report.append("created \(path)")
        }
        report += register(in: root)
        report.append("")
        report.append("Next: swift build, then `swift run gateway call \(id).hello name=Ada` and `swift test --filter \(name)PluginTests`.")
        return report
    }

    /// Adds the plugin to Package.swift, BundledPlugins.swift and plugins.yaml.
    func register(in root: URL) -> [String] {
        var report: [String] = []
        func edit(_ path: String, _ change: (String) -> String?, otherwise lines: String) {
            let url = root.appendingPathComponent(path)
            if let text = try? String(contentsOf: url, encoding: .utf8), let changed = change(text), (try? Data(changed.utf8).write(to: url)) != nil {
                report.append("registered in \(path)")
            } else {
                report.append("add to \(path):\n\(lines)")
            }
        }
        edit("Package.swift", { text in
            guard let folders = Self.append("\"\(name)\"", toArrayNamed: "bundledPluginFolders", in: text) else { return nil }
            return Self.append("\"\(name)\"", toArrayNamed: "scaffoldedPluginTests", in: folders)
        }, otherwise: "    \"\(name)\" in bundledPluginFolders and in scaffoldedPluginTests (a test target Tests/\(name)PluginTests)")
        edit("Sources/gateway/BundledPlugins.swift", { text in
            guard let close = text.range(of: "\n]", options: .backwards) else { return nil }
            var changed = text
            changed.insert(contentsOf: "\n    PluginRegistration(\(name)Plugin.self),", at: close.lowerBound)
            return "import \(name)Plugin\n" + changed
        }, otherwise: "    import \(name)Plugin\n    PluginRegistration(\(name)Plugin.self),")
        let block = "\n  \(id):\n    enabled: true\n    config:\n      greeting: Hello\n"
        edit("plugins.yaml", { text in
            // Appended only where `plugins:` is the file's last top-level key.
            let topLevel = text.split(separator: "\n").filter { line in
                guard let first = line.first else { return false }
                return first != " " && first != "#"
            }
            guard topLevel.last?.hasPrefix("plugins:") == true else { return nil }
            return (text.hasSuffix("\n") ? text : text + "\n") + block
        }, otherwise: "  under plugins:" + block)
        return report
    }

    /// `text` with `element` added at the end of the one-line array `let <name>: [String] = [...]`.
    static func append(_ element: String, toArrayNamed name: String, in text: String) -> String? {
        var lines = text.components(separatedBy: "\n")
        guard let index = lines.firstIndex(where: { $0.hasPrefix("let \(name): [String] = [") && $0.hasSuffix("]") }) else { return nil }
        let line = lines[index]
        let inner = line[line.index(after: line.firstIndex(of: "[")!)...].dropFirst("String] = [".count).dropLast()
        let items = inner.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } + [element]
        lines[index] = "let \(name): [String] = [" + items.joined(separator: ", ") + "]"
        return lines.joined(separator: "\n")
    }

    var pluginSource: String {
        """
        import GatewayCore
        import SQLKit

        /// \(name): say here what the plugin is for. Its native API is under /v1/\(id) (plugins.yaml may
        /// mount it elsewhere); the plugin author's guide is Plugins/README.md.
        public struct \(name)Plugin: ServicePlugin {
            public static let id = "\(id)"
            public static let summary = "\(name)"
            public static let migrations = \(name)Migrations.all

            /// The `config:` block of plugins.yaml: every key has its default here.
            public struct Configuration: PluginConfiguration {
                /// The word `\(id).hello` greets with.
                var greeting = "Hello"

                public static let defaults = Configuration()

                public func validate() throws {
                    guard !greeting.isEmpty else { throw ConfigurationError(key: "greeting", "must not be empty") }
                }
            }

            struct NameQuery: Codable, Sendable {
                var name: String
            }

            struct Greeting: Codable, Sendable {
                var text: String
                var visits: Int
            }

            let configuration: Configuration
            let database: any SQLDatabase

            public init(configuration: Configuration, context: PluginContext) async throws {
                self.configuration = configuration
                database = context.database
            }

            public var routes: [Route] {
                let configuration = self.configuration
                let database = self.database
                return [
                    Route.define("\(id).hello", .get, "/hello", summary: "Greet someone and count their visits")
                        .query(NameQuery.self)
                        .returns(Greeting.self) { input, _ in
                            let count = try await database.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
                                .from("\(table)").where("name", .equal, input.query.name).first()?.decode(column: "n", as: Int.self) ?? 0
                            return Greeting(text: "\\(configuration.greeting), \\(input.query.name)!", visits: count)
                        },
                    Route.define("\(id).visit", .post, "/visits", summary: "Record a visit (keys need \(id):write)")
                        .access(.user)
                        .body(NameQuery.self)
                        .returns(NoContent.self) { input, _ in
                            try await database.insert(into: "\(table)").columns("name").values(SQLBind(input.body.name)).run()
                            return NoContent()
                        },
                ]
            }
        }

        """
    }

    /// The plugin's table: its id with `_` for `-`, then `_visits`.
    var table: String { id.replacingOccurrences(of: "-", with: "_") + "_visits" }

    var migrationsSource: String {
        """
        import GatewayCore
        import SQLKit

        /// The \(id) plugin's schema, every step in order. Never edit a shipped step: add the next.
        enum \(name)Migrations {
            static let all: [Migration] = [
                Migration(1, "create \(table)") { db in
                    try await db.create(table: "\(table)").column("name", type: .text, .notNull).run()
                },
            ]
        }

        """
    }

    var testSource: String {
        """
        import Foundation
        import GatewayCore
        import GatewayServer
        import GatewayTesting
        import HTTPTypes
        import NIOCore
        import Testing
        @testable import \(name)Plugin

        @Suite("\(id)")
        struct \(name)PluginTests {
            static let plugins = [PluginRegistration(\(name)Plugin.self)]
            static let yaml = "auth: { sessionTTL: 1h }\\nplugins:\\n  \(id):\\n    config: { greeting: Hi }\\n"

            @Test("hello greets with the configured word and counts visits")
            func hello() async throws {
                try await TestGateway.with(Self.plugins, yaml: Self.yaml) { gateway in
                    let (token, _) = try await gateway.register("ada")
                    let visit = try await gateway.gateway.handle(.post, "/v1/\(id)/visits", headers: [.authorization: "Bearer \\(token)", .contentType: "application/json"],
                                                                 body: ByteBuffer(string: #"{"name": "Ada"}"#))
                    #expect(visit.status == 204)
                    let hello = try await gateway.gateway.handle(.get, "/v1/\(id)/hello?name=Ada")
                    #expect(String(buffer: hello.body) == #"{"text":"Hi, Ada!","visits":1}"#)
                    // Bad input is a 422 naming the field.
                    #expect(try await gateway.gateway.handle(.get, "/v1/\(id)/hello").status == 422)
                }
            }

            @Test("every operation, as every kind of caller: zero unexpected allows")
            func authorizationMatrix() async throws {
                let expected: [String: [MatrixCaller: Int]] = [
                    "\(id).hello": MatrixCaller.row(200, 200, 200, 200, 403, 200, 200),
                    "\(id).visit": MatrixCaller.row(401, 204, 204, 403, 204, 204, 204),
                ]
                let clock = TestClock()
                try await TestGateway.with(Self.plugins, yaml: Self.yaml, configure: { $0.clock = clock }) { gateway in
                    let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "\(id)", otherResources: #"["elsewhere"]"#)
                    for (name, row) in expected {
                        let (method, path): (HTTPRequest.Method, String) = name == "\(id).hello" ? (.get, "/v1/\(id)/hello?name=x") : (.post, "/v1/\(id)/visits")
                        for (caller, status) in row {
                            let response = try await gateway.gateway.handle(method, path, headers: callers.headers(caller),
                                                                            body: method == .post ? ByteBuffer(string: #"{"name": "x"}"#) : nil)
                            #expect(response.status == status, "\\(name) as \\(caller)")
                        }
                    }
                }
            }
        }

        """
    }
}
