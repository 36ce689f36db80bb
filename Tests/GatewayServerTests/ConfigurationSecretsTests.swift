import Foundation
import GatewayCore
import GatewayServer
import NotesFixturePlugin
import Testing

/// `${NAME:-default}`, `${file:PATH}` and `NAME_FILE`: secrets kept out of plugins.yaml.
extension ConfigurationTests {
    /// A fresh folder for secret files, removed by the caller.
    func secretsFolder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-secrets-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    @Test("${NAME:-default} gives the default when NAME is unset or empty, and NAME's value otherwise")
    func environmentDefault() throws {
        let text = "server: { host: \"${HOST:-0.0.0.0}\", port: \"${PORT:-9000}\", publicURL: \"https://${DOMAIN:-}example.com\" }\n"
        let unset = try parse(text)
        #expect(unset.server.host == "0.0.0.0" && unset.server.port == 9000 && unset.server.publicURL == "https://example.com")
        let empty = try parse(text, environment: ["HOST": "", "PORT": ""])
        #expect(empty.server.host == "0.0.0.0" && empty.server.port == 9000)
        let set = try parse(text, environment: ["HOST": "10.0.0.1", "PORT": "8443", "DOMAIN": "api."])
        #expect(set.server.host == "10.0.0.1" && set.server.port == 8443 && set.server.publicURL == "https://api.example.com")
    }

    @Test("${file:PATH} is the file's contents less one trailing newline; relative paths are read beside the configuration")
    func fileSubstitution() throws {
        let folder = try secretsFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        try "s3cret\n".write(to: folder.appendingPathComponent("db"), atomically: true, encoding: .utf8)
        try "two lines\n\n".write(to: folder.appendingPathComponent("greeting"), atomically: true, encoding: .utf8)
        let absolute = try parse("storage: postgres://gw:${file:\(folder.path)/db}@db/gw\n")
        #expect(absolute.storage == .postgres(url: "postgres://gw:s3cret@db/gw"))

        let file = folder.appendingPathComponent("plugins.yaml")
        try "storage: \"postgres://gw:${file:db}@db/gw\"\nplugins:\n  notes:\n    config:\n      greeting: \"${file:greeting}\"\n"
            .write(to: file, atomically: true, encoding: .utf8)
        let relative = try GatewayConfiguration.load(contentsOf: file, knownPlugins: Self.known, environment: [:])
        #expect(relative.storage == .postgres(url: "postgres://gw:s3cret@db/gw"))
        let notes = try #require(relative.plugins["notes"]?.config).decode(NotesPlugin.Configuration.self)
        #expect(notes.greeting == "two lines\n", "only one trailing newline is removed, in a plugin's block too")
    }

    @Test("a secret file that is missing or unreadable is an error at its line that names the path")
    func unreadableSecretFile() throws {
        let folder = try secretsFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let missing = error("server:\n  host: 127.0.0.1\nstorage: postgres://gw:${file:\(folder.path)/absent}@db/gw\n")
        #expect(missing?.line == 3 && missing?.column == 10 && missing?.keyPath == "storage", "\(String(describing: missing))")
        #expect(missing?.message == "the secret file \(folder.path)/absent cannot be read: it does not exist", "\(String(describing: missing))")

        let notAFile = error("storage: postgres://gw:${file:\(folder.path)}@db/gw\n")
        #expect(notAFile?.message == "the secret file \(folder.path) cannot be read: it is a folder", "\(String(describing: notAFile))")
    }

    @Test("${NAME} with NAME unset reads the file NAME_FILE names; NAME itself wins")
    func fileVariables() throws {
        let folder = try secretsFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let secret = folder.appendingPathComponent("password")
        try "from-file\n".write(to: secret, atomically: true, encoding: .utf8)
        let text = "storage: postgres://gw:${DB_PASSWORD}@db/gw\n"
        let fromFile = try parse(text, environment: ["DB_PASSWORD_FILE": secret.path])
        #expect(fromFile.storage == .postgres(url: "postgres://gw:from-file@db/gw"))
        let fromVariable = try parse(text, environment: ["DB_PASSWORD": "direct", "DB_PASSWORD_FILE": secret.path])
        #expect(fromVariable.storage == .postgres(url: "postgres://gw:direct@db/gw"))
        let defaulted = try parse("storage: postgres://gw:${DB_PASSWORD:-none}@db/gw\n", environment: ["DB_PASSWORD_FILE": secret.path])
        #expect(defaulted.storage == .postgres(url: "postgres://gw:from-file@db/gw"), "NAME_FILE comes before the default")

        let neither = error(text)
        #expect(neither?.message == "the environment variable DB_PASSWORD is not set (nor DB_PASSWORD_FILE)")
        let missing = error(text, environment: ["DB_PASSWORD_FILE": folder.path + "/absent"])
        #expect(missing?.line == 1 && missing?.column == 10, "\(String(describing: missing))")
        #expect(missing?.message == "the secret file \(folder.path)/absent (DB_PASSWORD_FILE) cannot be read: it does not exist",
                "\(String(describing: missing))")
    }

    @Test("an error about a value read from a secret file shows the ${...} that read it, never the secret")
    func secretNeverInErrors() throws {
        let folder = try secretsFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        try "hunter2\n".write(to: folder.appendingPathComponent("port"), atomically: true, encoding: .utf8)
        let expression = "${file:\(folder.path)/port}"
        let problem = error("server:\n  port: \"\(expression)\"\n")
        #expect(problem?.line == 2, "\(String(describing: problem))")
        #expect(problem?.message.contains("hunter2") == false, "\(String(describing: problem))")
        #expect(problem?.message.contains(expression) == true, "\(String(describing: problem))")
        let fromVariable = error("server:\n  port: \"${PORT}\"\n", environment: ["PORT_FILE": folder.path + "/port"])
        #expect(fromVariable?.message.contains("hunter2") == false, "\(String(describing: fromVariable))")
        // A message that quotes the value cut short (here at 80 characters) shows none of the secret either.
        let long = String(repeating: "k", count: 100)
        try long.write(to: folder.appendingPathComponent("token"), atomically: true, encoding: .utf8)
        let cut = error("storage: \"mysql://${file:\(folder.path)/token}\"\n")
        #expect(cut?.message.contains("kkkk") == false, "\(String(describing: cut))")
        #expect(cut?.message.contains("mysql://${file:\(folder.path)/token}") == true, "\(String(describing: cut))")
    }
}
