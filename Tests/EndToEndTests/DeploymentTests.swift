import Foundation
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension GatewayBinaryTests {
    @Test("started from another folder, `serve --config` resolves relative paths against plugins.yaml's folder; GATEWAY_HOST and GATEWAY_STORAGE override the shipped defaults")
    func anyWorkingDirectory() async throws {
        let home = try temporaryDirectory()
        let elsewhere = try temporaryDirectory()
        defer {
            try? FileManager.default.removeItem(at: home)
            try? FileManager.default.removeItem(at: elsewhere)
        }
        let config = home.appendingPathComponent("plugins.yaml")
        try FileManager.default.copyItem(at: Self.packageRoot.appendingPathComponent("plugins.yaml"), to: config)
        try FileManager.default.removeItem(at: elsewhere.appendingPathComponent("data/demo"))

        let server = try await GatewayProcess(directory: elsewhere, logLevel: "warning", config: config)
        let (body, reply) = try await URLSession.shared.data(from: URL(string: server.url + "/v1/events/search?q=Thanksgiving")!)
        #expect((reply as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: body, as: UTF8.self).contains("Thanksgiving"), "the demo calendar beside plugins.yaml was read")
        server.stop()
        #expect(server.process.terminationStatus == 0)
        #expect(FileManager.default.fileExists(atPath: home.appendingPathComponent("data/gateway.sqlite").path))
        #expect(!FileManager.default.fileExists(atPath: elsewhere.appendingPathComponent("data/gateway.sqlite").path))

        // The variables the container and the systemd unit set.
        let state = elsewhere.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        let overridden = try await GatewayProcess(directory: elsewhere, logLevel: "warning", config: config,
                                                  environment: ["GATEWAY_STORAGE": "sqlite:\(state.path)/gateway.sqlite", "GATEWAY_HOST": "127.0.0.1"])
        let (_, health) = try await URLSession.shared.data(from: URL(string: overridden.url + "/healthz")!)
        #expect((health as? HTTPURLResponse)?.statusCode == 200)
        overridden.stop()
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("gateway.sqlite").path))
    }

    @Test("deploy/: the Dockerfile copies what exists, runs as a user of its own with a volume; the systemd unit runs what the binary offers")
    func deploymentFiles() async throws {
        let root = Self.packageRoot
        let dockerfile = try String(contentsOf: root.appendingPathComponent("deploy/Dockerfile"), encoding: .utf8)
        for line in dockerfile.split(separator: "\n") where line.hasPrefix("COPY ") && !line.contains("--from=") {
            let source = line.split(separator: " ")[1]
            if source == "." { continue }
            #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent(String(source)).path), "COPY \(source): missing")
        }
        #expect(dockerfile.contains("USER gateway"))
        #expect(dockerfile.contains("VOLUME /var/lib/gateway"))
        #expect(dockerfile.contains("--static-swift-stdlib"))
        let unit = try String(contentsOf: root.appendingPathComponent("deploy/gateway.service"), encoding: .utf8)
        #expect(unit.contains("User=gateway"))
        // Every command the unit runs is one the binary accepts.
        for line in unit.split(separator: "\n") where line.hasPrefix("ExecStart") {
            let words = line.split(separator: "=", maxSplits: 1)[1].split(separator: " ").map(String.init)
            let help = try await run(Array(words.dropFirst()) + ["--help"], in: root)
            #expect(help.status == 0, "\(line): \(help.output)")
        }
        // The shipped plugins.yaml is valid with the unit's and the container's variables set.
        let checked = try await run(["check", "--config", root.appendingPathComponent("plugins.yaml").path], in: root)
        #expect(checked.status == 0, "\(checked.output)")
    }
}
