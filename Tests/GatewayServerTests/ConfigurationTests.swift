import Foundation
import GatewayCore
import GatewayServer
import NotesFixturePlugin
import Testing

@Suite("plugins.yaml")
struct ConfigurationTests {
    static let known = ["events", "feeds", "notes", "suggest", "todo", "transit"]

    func parse(_ text: String, environment: [String: String] = [:]) throws(ConfigurationFileError) -> GatewayConfiguration {
        try GatewayConfiguration.parse(Data(text.utf8), file: "plugins.yaml", knownPlugins: Self.known, environment: environment)
    }

    func error(_ text: String, environment: [String: String] = [:]) -> ConfigurationFileError? {
        do {
            _ = try parse(text, environment: environment)
            return nil
        } catch {
            return error
        }
    }

    @Test("the shipped plugins.yaml is valid")
    func shippedFileIsValid() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../plugins.yaml").standardized
        let configuration = try GatewayConfiguration.load(contentsOf: file, knownPlugins: Self.known)
        #expect(configuration.storage == .sqlite(path: "data/gateway.sqlite"))
        #expect(configuration.demo)
    }

    @Test("an empty file gives every default")
    func defaults() throws {
        let configuration = try parse("")
        #expect(configuration.server.port == 8080)
        #expect(configuration.server.maxBodySize.bytes == 1 << 20)
        #expect(configuration.limits.anonymous == RateSpec(count: 60, period: 60))
        #expect(configuration.plugins.isEmpty)
    }

    @Test("values in their written forms decode: durations, sizes, rates, storage")
    func writtenForms() throws {
        let configuration = try parse("""
            server: { port: 9000, maxBodySize: 512KB, cors: { allowOrigins: ["https://a.example"] } }
            storage: postgres://gw:secret@127.0.0.1:5432/gw
            auth: { sessionTTL: 12h, registration: closed }
            limits: { policy: cluster, anonymous: 30/s, user: 1000/h, key: 5/min }
            cache: { maxEntries: 10, maxBytes: 1GB }
            plugins:
              notes:
                mount: /api/notes
                limits: { anonymous: 10/s }
                cache: { ttl: 5m }
                config: { greeting: hi }
            """)
        #expect(configuration.server.port == 9000)
        #expect(configuration.server.maxBodySize.bytes == 512 * 1024)
        #expect(configuration.server.cors?.allowOrigins == ["https://a.example"])
        #expect(configuration.storage == .postgres(url: "postgres://gw:secret@127.0.0.1:5432/gw"))
        #expect(configuration.storage.description == "postgres://gw:***@127.0.0.1:5432/gw")
        #expect(configuration.auth.sessionTTL.seconds == 43_200)
        #expect(configuration.auth.registration == .closed)
        #expect(configuration.limits.policy == .cluster)
        #expect(configuration.limits.anonymous == RateSpec(count: 30, period: 1))
        #expect(configuration.cache.maxBytes.bytes == 1 << 30)
        #expect(configuration.plugins["notes"]?.mount == "/api/notes")
        #expect(configuration.plugins["notes"]?.cache?.ttl?.seconds == 300)
        let notes = try #require(configuration.plugins["notes"]?.config).decode(NotesPlugin.Configuration.self)
        #expect(notes.greeting == "hi")
    }

    @Test("a bad duration names the file, line, column, key path and the accepted forms")
    func badDuration() {
        let text = """
            server:
              port: 8080
            plugins:
              suggest:
                enabled: true
                cache:
                  ttl: 5 min
            """
        let problem = error(text)
        #expect(problem?.description == #"plugins.yaml:7:12: plugins.suggest.cache.ttl: "5 min" is not a duration (use 500ms, 30s, 5m, 1h, 7d)"#)
    }

    @Test("server.tracing: a collector URL, a protocol, a sample ratio; each mistake at its line")
    func tracingSettings() throws {
        let parsed = try parse("server:\n  tracing: { otlp: \"http://collector:4318\", protocol: http/json, sampleRatio: 0.25, exportDelay: 1s }\n")
        #expect(parsed.server.tracing?.otlp == "http://collector:4318")
        #expect(parsed.server.tracing?.protocol == "http/json" && parsed.server.tracing?.sampleRatio == 0.25)
        #expect(parsed.server.tracing?.serviceName == "gateway")
        #expect(try parse("server: {}\n").server.tracing == nil)
        #expect(error("server:\n  tracing: { otlp: collector }\n")?.keyPath == "server.tracing.otlp")
        #expect(error("server:\n  tracing: { otlp: \"http://c:4318\", protocol: grpc }\n")?.message.contains("http/protobuf or http/json") == true)
        #expect(error("server:\n  tracing: { otlp: \"http://c:4318\", sampleRatio: 2 }\n")?.keyPath == "server.tracing.sampleRatio")
    }

    @Test("an unknown key is an error at its line")
    func unknownKey() {
        let problem = error("server:\n  host: 127.0.0.1\n  prot: 8080\n")
        #expect(problem?.line == 3)
        #expect(problem?.keyPath == "server.prot")
        #expect(problem?.message == "unknown key 'prot'")
    }

    @Test("an unknown key inside a plugin's config block is an error when that block is decoded")
    func unknownPluginConfigKey() throws {
        let configuration = try parse("plugins:\n  notes:\n    config:\n      greeting: hi\n      colour: red\n")
        #expect(throws: ConfigurationFileError.self) {
            try configuration.plugins["notes"]?.config?.decode(NotesPlugin.Configuration.self)
        }
        do {
            _ = try configuration.plugins["notes"]?.config?.decode(NotesPlugin.Configuration.self)
        } catch let error as ConfigurationFileError {
            #expect(error.line == 5)
            #expect(error.keyPath == "plugins.notes.config.colour")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("an unknown plugin id is an error naming the bundled ones")
    func unknownPlugin() {
        let problem = error("plugins:\n  weather:\n    enabled: true\n")
        #expect(problem?.keyPath == "plugins.weather")
        #expect(problem?.message.contains("unknown plugin 'weather'") == true)
        #expect(problem?.message.contains("notes, suggest") == true)
        #expect(problem?.line != nil)
    }

    @Test("wrong types say what was expected", arguments: [
        ("server: { port: eighty }", "server.port", "\"eighty\" is not a whole number"),
        ("server: { port: 99999999999999999999999 }", "server.port", "is not a whole number"),
        ("server: { port: 70000 }", "server.port", "70000 is not a port"),
        ("demo: maybe", "demo", "\"maybe\" is not true or false"),
        ("server: [1, 2]", "server", "expected a mapping"),
        ("limits: { user: lots }", "limits.user", "is not a rate"),
        ("cache: { maxBytes: 3 parsecs }", "cache.maxBytes", "is not a size"),
        ("storage: mysql://x", "storage", "is not a storage location"),
        ("storage: \"sqlite::memory:\"", "storage", "is not a storage location"),
        ("plugins: { notes: { mount: no-slash } }", "plugins.notes.mount", "is not a mount path"),
        ("auth: { bcryptCost: 4 }", "auth.bcryptCost", "outside 10 to 16"),
    ])
    func wrongTypes(text: String, keyPath: String, message: String) {
        let problem = error(text)
        #expect(problem?.keyPath == keyPath, "\(String(describing: problem))")
        #expect(problem?.message.contains(message) == true, "\(String(describing: problem))")
        #expect(problem?.line == 1)
    }

    @Test("${NAME} is replaced from the environment, and an unset variable is an error")
    func environmentSubstitution() throws {
        let configuration = try parse("storage: postgres://gw:${DB_PASSWORD}@db/gw\n", environment: ["DB_PASSWORD": "s3cret"])
        #expect(configuration.storage == .postgres(url: "postgres://gw:s3cret@db/gw"))
        let problem = error("storage: postgres://gw:${DB_PASSWORD}@db/gw\n")
        #expect(problem?.message == "the environment variable DB_PASSWORD is not set (nor DB_PASSWORD_FILE)")
        #expect(problem?.line == 1)
    }

    @Test("invalid YAML and invalid UTF-8 are located")
    func invalidSyntax() throws {
        let yaml = error("server:\n  host: [unclosed\n")
        #expect(yaml?.message.hasPrefix("not valid YAML") == true)
        #expect(yaml?.line != nil)
        var bytes = Data("server:\n  host: ".utf8)
        bytes.append(contentsOf: [0xC3, 0x28])
        do {
            _ = try GatewayConfiguration.parse(bytes, file: "plugins.yaml", knownPlugins: [])
            Issue.record("invalid UTF-8 was accepted")
        } catch {
            #expect(error.message == "the file is not valid UTF-8")
            #expect(error.line == 2)
            #expect(error.column == 9)
        }
    }

    @Test("an alias bomb is refused instead of expanded")
    func aliasBomb() {
        var text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        for level in 1...8 {
            text += "a\(level): &a\(level) [" + Array(repeating: "*a\(level - 1)", count: 10).joined(separator: ", ") + "]\n"
        }
        text += "server: *a8\n"
        let problem = error(text)
        #expect(problem != nil)
    }

    /// One hour, written every way a duration may be written.
    static let hourSpellings = ["1h", "60m", "3600s", "3600000ms", "1hour", "1hours", "60min", "60minutes", "3600sec", "3600seconds", "0.5h"]

    @Test("every duration field of the host and of a plugin accepts the same spellings", arguments: hourSpellings)
    func durationSpellings(spelling: String) throws {
        let configuration = try parse("""
            auth: { sessionTTL: \(spelling) }
            server: { cors: { allowOrigins: ["*"], maxAge: \(spelling) } }
            plugins:
              notes:
                cache: { ttl: \(spelling) }
                config: { recountEvery: \(spelling) }
            """)
        let seconds = spelling == "0.5h" ? 1800.0 : 3600.0
        #expect(configuration.auth.sessionTTL.seconds == seconds)
        #expect(configuration.server.cors?.maxAge.seconds == seconds)
        #expect(configuration.plugins["notes"]?.cache?.ttl?.seconds == seconds)
        #expect(try configuration.plugins["notes"]?.config?.decode(NotesPlugin.Configuration.self).recountEvery.seconds == seconds)
    }

    @Test("a text that is no duration gets the same message in every field", arguments: ["auth: { sessionTTL: %@ }", "plugins: { notes: { cache: { ttl: %@ } } }",
                                                                                         "plugins: { notes: { config: { recountEvery: %@ } } }"])
    func durationMessages(template: String) throws {
        let text = template.replacingOccurrences(of: "%@", with: "soon")
        var message: String?
        do {
            let configuration = try parse(text)
            _ = try configuration.plugins["notes"]?.config?.decode(NotesPlugin.Configuration.self)
        } catch let error as ConfigurationFileError {
            message = error.message
        }
        #expect(message == #""soon" is not a duration (use 500ms, 30s, 5m, 1h, 7d)"#)
    }

    @Test("a plugin's defaults fill the keys its block leaves out; an unknown key is still an error; its own validation runs in check")
    func pluginDefaults() throws {
        let configuration = try parse("plugins:\n  notes:\n    config: { greeting: hi }\n")
        let decoded = try #require(try configuration.plugins["notes"]?.config?.decode(NotesPlugin.Configuration.self))
        #expect(decoded.greeting == "hi")
        #expect(decoded.maxNotes == NotesPlugin.Configuration.defaults.maxNotes)
        #expect(decoded.recountEvery == NotesPlugin.Configuration.defaults.recountEvery)
        // An empty or absent block is the defaults.
        let empty = try parse("plugins:\n  notes:\n    config: {}\n")
        #expect(try empty.plugins["notes"]?.config?.decode(NotesPlugin.Configuration.self).greeting == "hello")
        // `gateway check` validates a block the way `serve` does: a value that decodes but cannot be used, at its line.
        let invalid = try parse("plugins:\n  notes:\n    config:\n      maxNotes: 0\n")
        #expect(throws: ConfigurationFileError.self) { try PluginRegistration(NotesPlugin.self).validate(invalid.plugins["notes"]?.config) }
        do {
            try PluginRegistration(NotesPlugin.self).validate(invalid.plugins["notes"]?.config)
        } catch let error as ConfigurationFileError {
            #expect(error.description == "plugins.yaml:4:17: plugins.notes.config.maxNotes: must be at least 1")
        }
    }

    @Test("durations, sizes and rates are written back in their shortest spelling")
    func canonicalSpellings() {
        #expect(ConfigDuration(parsing: "90m")?.description == "90m")
        #expect(ConfigDuration(parsing: "3600s")?.description == "1h")
        #expect(ConfigDuration(parsing: "30days")?.description == "30d")
        #expect(ConfigDuration(parsing: "500ms")?.description == "500ms")
        #expect(ConfigDuration(parsing: "1week")?.seconds == 604_800)
        #expect(ConfigDuration(parsing: "5 min") == nil && ConfigDuration(parsing: "m") == nil && ConfigDuration(parsing: "-1s") == nil)
        #expect(ByteSize(parsing: "64MB")?.description == "64MB")
        #expect(ByteSize(bytes: 1000).description == "1000")
        #expect(RateSpec(parsing: "60/min")?.description == "60/min")
    }
}
