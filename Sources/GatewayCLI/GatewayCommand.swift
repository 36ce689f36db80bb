import ArgumentParser
import Foundation
import GatewayCore
import GatewayServer
import HTTPTypes
import Logging
import NIOCore

/// The `gateway` command line, for a gateway built with any set of plugins.
///
/// The `gateway` executable of this repository passes its bundled plugins; a package of your own
/// passes yours and gets the same `serve`, `check`, `call`, `import` and the rest:
///
/// ```swift
/// import GatewayCLI
/// import GatewayServer
///
/// @main enum Main {
///     static func main() async { await Gateway.main(plugins: [PluginRegistration(GreeterPlugin.self)]) }
/// }
/// ```
extension Gateway {
    /// Parses the process's arguments and runs the command they name (`serve` by default), with
    /// `plugins` compiled in; exits the process with the command's status.
    ///
    /// The exit status says whose fault a failure is: 64 (`EX_USAGE`) for a mistake on the command
    /// line, with the usage; 78 (`EX_CONFIG`) for a configuration file that cannot be used, with
    /// its located message (`plugins.yaml:4:13: cache.maxBytes: ...`); 1 for anything that fails
    /// while running (the database cannot be opened, a plugin does not start), with its reason.
    public static func main(plugins: [PluginRegistration], arguments: [String]? = nil) async {
        await PluginCatalog.$registrations.withValue(plugins) {
            do {
                var command = try await GatewayCommand.asyncParseAsRoot(arguments)
                if var command = command as? any AsyncParsableCommand {
                    try await command.run()
                } else {
                    try command.run()
                }
            } catch let error as ConfigurationFileError {
                FileHandle.standardError.write(Data("Error: \(error)\n".utf8))
                GatewayCommand.exit(withError: ExitCode(78))
            } catch let error as GatewayError {
                // What a store or an importer refused (a name taken, a file it cannot read), without the HTTP status.
                GatewayCommand.exit(withError: CommandFailure(description: error.detail))
            } catch {
                GatewayCommand.exit(withError: error)
            }
        }
    }
}

/// A failure of a command that is not a usage mistake: printed as it is, exit status 1.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
}

/// The plugins the running command line was built with.
enum PluginCatalog {
    @TaskLocal static var registrations: [PluginRegistration] = []
}

struct GatewayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway",
        abstract: "An API gateway that hosts service plugins behind one endpoint.",
        version: GatewayVersion.current,
        subcommands: [Serve.self, Check.self, Reload.self, Plugins.self, Routes.self, Call.self, Migrate.self, OpenAPICommand.self,
                      UserCommand.self, KeyCommand.self, CacheCommand.self, ImportCommand.self, PluginCommand.self, Providers.self],
        defaultSubcommand: Serve.self)
}

/// Options every command shares.
struct ConfigOptions: ParsableArguments {
    @Option(name: [.short, .customLong("config")], help: "The configuration file.")
    var config: String = "plugins.yaml"

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    var fileURL: URL { URL(fileURLWithPath: config) }

    /// The configuration, validated; a bad file throws its located ``ConfigurationFileError``.
    func load() throws -> GatewayConfiguration {
        try Self.load(fileURL, registrations: PluginCatalog.registrations)
    }

    /// The configuration in `file`, validated with every enabled plugin's own checks.
    static func load(_ file: URL, registrations: [PluginRegistration]) throws -> GatewayConfiguration {
        let configuration = try GatewayConfiguration.load(contentsOf: file, knownPlugins: registrations.map(\.id),
                                                          instanceTypes: registrations.filter(\.multipleInstances).map(\.id))
        return try validated(configuration, registrations: registrations)
    }

    /// A text of `file` (an edit the admin API checks), validated as ``load(_:registrations:)`` does.
    static func parse(_ data: Data, file: URL, registrations: [PluginRegistration]) throws -> GatewayConfiguration {
        let configuration = try GatewayConfiguration.parse(data, file: file.lastPathComponent, knownPlugins: registrations.map(\.id),
                                                           instanceTypes: registrations.filter(\.multipleInstances).map(\.id),
                                                           baseDirectory: file.deletingLastPathComponent())
        return try validated(configuration, registrations: registrations)
    }

    private static func validated(_ configuration: GatewayConfiguration, registrations: [PluginRegistration]) throws -> GatewayConfiguration {
        for instance in PluginInstance.enabled(registrations, in: configuration) {
            try instance.registration.validate(instance.settings.config)
        }
        return configuration
    }

    func logger() -> Logger {
        var logger = Logger(label: "gateway")
        logger.logLevel = logLevel
        return logger
    }

    /// Starts the gateway from the configuration (database open, migrations applied, plugins created).
    /// `unboundedStatements`: for operator work that serves no requests (`import`): its statements
    /// are not cut by `database.statementTimeout`.
    func start(demo: Bool? = nil, host: String? = nil, unboundedStatements: Bool = false) async throws -> (GatewayConfiguration, Gateway) {
        var configuration = try load()
        // The address served decides which secrets work (a shipped demo secret only on loopback).
        if let host { configuration.server.host = host }
        if unboundedStatements { configuration.database.statementTimeout = nil }
        var options = gatewayOptions(logLevel: logLevel)
        options.loadDemoData = demo
        return (configuration, try await Gateway.start(configuration: configuration, registrations: PluginCatalog.registrations, options: options))
    }

    /// Runs `body` with the plugins started only to read what they declare (routes, the OpenAPI
    /// document): on a throwaway SQLite database in a temporary folder, removed afterwards, so that
    /// the configured database is never created, opened or migrated.
    func describe<R>(_ body: (Gateway) async throws -> R) async throws -> R {
        let configuration = try load()
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-describe-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        // Setting up the throwaway database is not news: its migrations are not logged.
        var options = gatewayOptions(logLevel: max(logLevel, .warning))
        options.loadDemoData = false
        options.storage = .sqlite(path: scratch.appendingPathComponent("describe.sqlite").path)
        let gateway = try await Gateway.start(configuration: configuration, registrations: PluginCatalog.registrations, options: options)
        do {
            let result = try await body(gateway)
            await gateway.shutdown()
            return result
        } catch {
            await gateway.shutdown()
            throw error
        }
    }

    private func gatewayOptions(logLevel: Logger.Level) -> Gateway.Options {
        var options = Gateway.Options(baseDirectory: fileURL.deletingLastPathComponent())
        options.logger = logger()
        options.logger.logLevel = logLevel
        // A reload reads the same file with the same plugins.
        let file = fileURL
        let registrations = PluginCatalog.registrations
        options.configurationSource = { try ConfigOptions.load(file, registrations: registrations) }
        // The admin API and the console show, check and change the same file.
        options.configurationFile = EditableConfiguration(url: file) { data in try ConfigOptions.parse(data, file: file, registrations: registrations) }
        return options
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve the gateway until SIGTERM or SIGINT (the default command).")

    @OptionGroup var options: ConfigOptions
    @Option(help: "Listen on this host (overrides server.host).") var host: String?
    @Option(help: "Listen on this port (overrides server.port; 0 picks a free one).") var port: Int?

    func run() async throws {
        let format = try options.load().server.logFormat
        LoggingSystem.bootstrap { label in GatewayLogHandler(label: label, format: format) }
        let (configuration, gateway) = try await options.start(host: host)
        let host = configuration.server.host
        try await gateway.run(host: host, port: port) { port in
            let base = "\(configuration.server.tls == nil ? "http" : "https")://\(host):\(port)"
            var lines = ["gateway \(GatewayVersion.current) listening on \(base)  (storage \(configuration.storage))"]
            lines.append("plugins: \(gateway.servicePlugins.isEmpty ? "none enabled" : gateway.servicePlugins.map { "\($0.id) at \($0.mount)" }.joined(separator: ", "))")
            lines.append("try:")
            lines.append("  curl \(base)/healthz")
            lines.append("  curl \(base)/v1/plugins")
            lines.append("  curl \(base)/openapi.json")
            for example in gateway.exampleRequests(base: base).prefix(4) { lines.append("  \(example)") }
            // Written in one call so that a process reading the first line sees the URL at once.
            FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
        }
    }
}

struct Check: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Validate the configuration file without starting anything.")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let configuration = try options.load()
        let enabled = configuration.plugins.filter(\.value.enabled).keys.sorted()
        print("\(options.config) is valid: storage \(configuration.storage); plugins enabled: \(enabled.isEmpty ? "none" : enabled.joined(separator: ", "))")
        let server = configuration.server
        print("connections: at most \(server.maxConnections) per listener, \(server.maxConnectionsPerAddress) per address; "
            + "timeouts: head \(server.timeouts.head), idle \(server.timeouts.idle), body \(server.timeouts.body)")
        for warning in configuration.shippedSecretWarnings { print("warning: \(warning)") }
    }
}

struct Plugins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the bundled plugins: enabled, mount and summary.",
        discussion: "Reads only the configuration. A running gateway reports each plugin's health at /readyz.")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let configuration = try options.load()
        var rows = [["ID", "ENABLED", "MOUNT", "SUMMARY"]]
        let instances = PluginInstance.enabled(PluginCatalog.registrations, in: configuration)
        for registration in PluginCatalog.registrations {
            let enabled = instances.contains { $0.id == registration.id }
            rows.append([registration.id, enabled ? "yes" : "no", enabled ? (configuration.plugins[registration.id]?.mount ?? "/v1/\(registration.id)") : "-",
                         registration.summary])
            for instance in instances where instance.registration.id == registration.id && instance.id != registration.id {
                rows.append([instance.id, "yes", instance.settings.mount ?? "/v1/\(instance.id)", "\(registration.id): \(registration.summary)"])
            }
        }
        print(Table.render(rows))
    }
}

struct Providers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the identity providers of auth.providers, fetching each one's keys now.",
        discussion: "A running gateway reports its providers' key status at /readyz.")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let configuration = try options.load()
        let reports = try await Gateway.providerReport(configuration, baseDirectory: options.fileURL.deletingLastPathComponent())
        guard !reports.isEmpty else {
            print("\(options.config) configures no identity provider (auth.providers).")
            return
        }
        var rows = [["NAME", "TYPE", "ISSUER OR ENDPOINT", "KEYS", "STATUS"]]
        for report in reports {
            rows.append([report.name, report.type, report.source, report.keys.map(String.init) ?? "-", report.error.map { "failing: \($0)" } ?? "ok"])
        }
        print(Table.render(rows))
        if reports.contains(where: { $0.error != nil }) { throw CommandFailure(description: "some providers' keys cannot be loaded") }
    }
}

struct Routes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List every route: operations, dialect routes, WebSockets and gateway endpoints.")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let routes = try await options.describe { $0.routes }
        var rows = [["METHOD", "PATH", "NAME", "SUMMARY"]]
        for route in routes { rows.append([route.method, route.path, route.name, route.summary]) }
        print(Table.render(rows))
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply pending migrations of the enabled plugins and exit.")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let configuration = try options.load()
        let logger = options.logger()
        let database = try await Gateway.openDatabase(configuration.storage, baseDirectory: options.fileURL.deletingLastPathComponent(), logger: logger,
                                                    pool: configuration.database)
        do {
            let applied = try await MigrationRunner(database: database.sql, logger: logger)
                .migrate([(owner: "gateway", steps: Gateway.hostMigrations)] + Gateway.pluginMigrations(PluginInstance.enabled(PluginCatalog.registrations, in: configuration)))
            print(applied.isEmpty ? "up to date" : applied.map { "applied \($0.plugin) \($0.version): \($0.name)" }.joined(separator: "\n"))
        } catch {
            await database.shutdown()
            throw error
        }
        await database.shutdown()
    }
}

struct OpenAPICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "openapi", abstract: "Print the OpenAPI 3.1 document of the enabled plugins.")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let data = try await options.describe { try OpenAPIDocumentBuilder.json($0.openAPIDocument) }
        print(String(decoding: data, as: UTF8.self))
    }
}

struct Call: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run one operation in-process, through the same pipeline as HTTP, and print its JSON reply.",
        discussion: """
            Arguments are name=value pairs: path parameters fill the path, query parameters the query, \
            and the rest become fields of a JSON body (values that parse as JSON are sent as such). \
            --body sends a whole JSON body instead. Exits 1 on a 4xx or 5xx reply.
            Example: gateway call suggest.complete q=bei limit=5
            """)
    @OptionGroup var options: ConfigOptions
    @Argument(help: "The operation's name, such as suggest.complete (see `gateway routes`).") var operation: String
    @Argument(help: "name=value pairs.") var arguments: [String] = []
    @Option(help: "A session token to call as.") var token: String?
    @Option(help: "An API key to call as.") var key: String?
    @Option(help: "A JSON body, sent as is.") var body: String?

    func run() async throws {
        let (_, gateway) = try await options.start(demo: false)
        guard let (plugin, operation) = gateway.operation(named: operation) else {
            await gateway.shutdown()
            throw ValidationError("no operation named '\(self.operation)'; `gateway routes` lists them")
        }
        var pairs: [(String, String)] = []
        for argument in arguments {
            guard let equals = argument.firstIndex(of: "=") else {
                await gateway.shutdown()
                throw ValidationError("'\(argument)' is not name=value")
            }
            pairs.append((String(argument[..<equals]), String(argument[argument.index(after: equals)...])))
        }
        let request: (target: String, body: ByteBuffer?)
        do {
            request = try CallRequest.build(operation: operation, mount: plugin.mount, arguments: pairs, body: body)
        } catch let error as CallError {
            await gateway.shutdown()
            throw ValidationError(error.description)
        }
        var headers = HTTPFields()
        if let token { headers[.authorization] = "Bearer \(token)" }
        if let key, let name = HTTPField.Name("X-Api-Key") { headers[name] = key }
        if request.body != nil { headers[.contentType] = "application/json" }
        let response = try await gateway.handle(operation.method, request.target, headers: headers, body: request.body)
        let text = String(buffer: response.body)
        print(CallRequest.pretty(text))
        await gateway.shutdown()
        if response.status >= 400 { throw ExitCode(1) }
    }
}

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import", abstract: "Load a file into a plugin (`gateway import suggest terms.tsv --dictionary movies`).",
        discussion: "Options after the file are passed to the plugin's importer as --name value pairs. Bad lines are reported with their numbers.")
    @OptionGroup var options: ConfigOptions
    @Argument(help: "The plugin's id.") var plugin: String
    @Argument(help: "The file to load.") var file: String
    @Argument(parsing: .allUnrecognized, help: "Importer options, such as --dictionary movies or --strict.") var importerOptions: [String] = []

    func run() async throws {
        var pairs: [String: String] = [:]
        var index = 0
        while index < importerOptions.count {
            let name = importerOptions[index]
            guard name.hasPrefix("--"), name.count > 2 else { throw ValidationError("importer options are --name value pairs or --flag; '\(name)' is not") }
            // A name without a value (the last, or followed by another name) is a flag: `--strict`.
            if index + 1 < importerOptions.count, !importerOptions[index + 1].hasPrefix("--") {
                pairs[String(name.dropFirst(2))] = importerOptions[index + 1]
                index += 2
            } else {
                pairs[String(name.dropFirst(2))] = "true"
                index += 1
            }
        }
        let url = URL(fileURLWithPath: file)
        guard FileManager.default.isReadableFile(atPath: url.path) else { throw ValidationError("\(file) cannot be read") }
        // An operator's import may run statements longer than a request's budget.
        let (_, gateway) = try await options.start(demo: false, unboundedStatements: true)
        guard let loaded = gateway.plugins.first(where: { $0.id == plugin }) else {
            await gateway.shutdown()
            throw ValidationError("no enabled plugin '\(plugin)'")
        }
        guard let importer = loaded.instance.importers.first(where: { $0.accepts(url) }) else {
            await gateway.shutdown()
            throw ValidationError("\(plugin) has no importer for \(url.lastPathComponent) (it reads: \(loaded.instance.importers.map(\.summary).joined(separator: "; ")))")
        }
        do {
            let report = try await importer.importFile(url, options: pairs, progress: ProgressBar.update)
            FileHandle.standardError.write(Data("\n".utf8))
            print("imported \(report.imported) records; rejected \(report.rejected.count)")
            for rejection in report.rejected.prefix(50) { print("  line \(rejection.line): \(rejection.reason)") }
            if report.rejected.count > 50 { print("  ... and \(report.rejected.count - 50) more") }
        } catch {
            await gateway.shutdown()
            throw error
        }
        await gateway.shutdown()
    }
}

/// Draws `[#####     ] 52%` on standard error.
enum ProgressBar {
    @Sendable static func update(done: Int, total: Int?) {
        guard let total, total > 0 else {
            FileHandle.standardError.write(Data("\r\(done) records".utf8))
            return
        }
        let filled = min(30, done * 30 / total)
        let bar = String(repeating: "#", count: filled) + String(repeating: " ", count: 30 - filled)
        FileHandle.standardError.write(Data("\r[\(bar)] \(done * 100 / total)%  \(done)/\(total)".utf8))
    }
}
