import Foundation
import Testing

/// A `gateway serve` process started in `directory` on a free port; ``url`` is the address it
/// printed on its first line.
final class GatewayProcess: @unchecked Sendable {
    let process = Process()
    let url: String
    /// What it printed when it started: its address, its plugins and the requests to try.
    let banner: String

    /// `config`: a plugins.yaml elsewhere than `directory` (the working directory); `environment`
    /// is added to the test's own.
    init(directory: URL, logLevel: String = "error", config: URL? = nil, environment: [String: String] = [:], port: Int = 0) async throws {
        process.executableURL = try GatewayBinaryTests.binary()
        process.arguments = ["serve", "--port", String(port), "--log-level", logLevel] + (config.map { ["--config", $0.path] } ?? [])
        process.currentDirectoryURL = directory
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new } }
        let pipe = Pipe()
        let errors = Pipe()
        process.standardOutput = pipe
        process.standardError = errors
        await SpawnGate.waitForFewDescriptors()
        try process.run()
        // Read on a thread of its own: the read blocks until the server writes, and a blocked task
        // thread would stall every other test meanwhile.
        let output: String = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var output = ""
                let deadline = Date().addingTimeInterval(30)
                while !output.contains("\n"), Date() < deadline {
                    let chunk = pipe.fileHandleForReading.availableData
                    if chunk.isEmpty { Thread.sleep(forTimeInterval: 0.05) }
                    output += String(decoding: chunk, as: UTF8.self)
                }
                continuation.resume(returning: output)
            }
        }
        guard let found = output.split(separator: " ").first(where: { $0.hasPrefix("http://") || $0.hasPrefix("https://") }).map(String.init) else {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            let logged = String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self)
            throw GatewayProcessError(description: "the server printed no URL: \(output)\n\(logged)")
        }
        url = found
        banner = output
    }

    /// SIGKILL, as a crash would.
    func kill() {
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM, and waits for the exit.
    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    deinit {
        if process.isRunning { process.terminate() }
    }
}

struct GatewayProcessError: Error, CustomStringConvertible {
    var description: String
}
