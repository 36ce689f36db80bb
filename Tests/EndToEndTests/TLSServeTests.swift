import AsyncHTTPClient
import Foundation
import GatewayTesting
import NIOCore
import NIOHTTP1
import NIOSSL
import Testing

extension GatewayBinaryTests {
    /// A GET by a client that trusts only the authority of `certificates`, over a connection of its own.
    static func get(_ url: String, trusting certificates: TestCertificates) async throws -> UInt {
        var configuration = HTTPClient.Configuration(tlsConfiguration: try certificates.clientConfiguration())
        configuration.timeout.connect = .seconds(2)   // a refused handshake is retried until then
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            return response.status.code
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    @Test("`gateway serve` with server.tls answers HTTPS and, on SIGHUP, presents the certificate now in its files")
    func serveTLSWithReload() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = try TestCertificates.make("first")
        try first.write(to: directory)
        // Relative paths: read from plugins.yaml's folder.
        try "server:\n  tls: { certificate: cert.pem, key: key.pem }\nplugins:\n  todo: { enabled: true }\n"
            .write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)
        let server = try await GatewayProcess(directory: directory, logLevel: "warning")
        #expect(server.url.hasPrefix("https://"))
        let url = server.url + "/healthz"
        #expect(try await Self.get(url, trusting: first) == 200)

        let second = try TestCertificates.make("second")
        try second.write(to: directory)
        kill(server.process.processIdentifier, SIGHUP)
        var switched = false
        for _ in 0..<300 where !switched {
            switched = (try? await Self.get(url, trusting: second)) == 200
            if !switched { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(switched, "after SIGHUP the new certificate is presented")
        await #expect(throws: (any Error).self) { _ = try await Self.get(url, trusting: first) }
        #expect(server.process.isRunning, "SIGHUP does not stop the gateway")

        server.stop()
        #expect(server.process.terminationStatus == 0)
    }
}
