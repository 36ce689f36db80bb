import Foundation
import GatewayServer
import Logging
import NotesFixturePlugin

// The gateway with the notes fixture plugin on a fresh SQLite database, for the benchmark.
// Logging is at warning level, as a production gateway would run.
var port = 8080
if let index = CommandLine.arguments.firstIndex(of: "--port"), index + 1 < CommandLine.arguments.count, let value = Int(CommandLine.arguments[index + 1]) {
    port = value
}
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-bench-\(ProcessInfo.processInfo.processIdentifier)")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
var configuration = GatewayConfiguration(storage: .sqlite(path: directory.appendingPathComponent("bench.sqlite").path))
configuration.plugins = ["notes": PluginSettings()]
var options = Gateway.Options(baseDirectory: directory)
options.logger.logLevel = .warning
let gateway = try await Gateway.start(configuration: configuration, registrations: [PluginRegistration(NotesPlugin.self)], options: options)
try await gateway.run(host: "127.0.0.1", port: port) { port in
    print("gateway-bench-server listening on http://127.0.0.1:\(port)")
}
try? FileManager.default.removeItem(at: directory)
