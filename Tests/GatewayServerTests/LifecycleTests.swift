import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import NIOWebSocket
import NotesFixturePlugin
import ServiceLifecycle
import Testing

@Suite("lifecycle and sockets")
struct LifecycleTests {
    /// Starts a gateway with the notes plugin on a free port inside a service group.
    func withServing(_ body: @escaping @Sendable (Int, ServiceGroup) async throws -> Void) async throws {
        try await TestStorage.sqlite.withFreshLocation { location, directory in
            var configuration = GatewayConfiguration(storage: location)
            configuration.plugins = ["notes": PluginSettings()]
            var options = Gateway.Options(baseDirectory: directory)
            options.logger.logLevel = .critical
            let gateway = try await Gateway.start(configuration: configuration, registrations: notes, options: options)
            let (portStream, portContinuation) = AsyncStream<Int>.makeStream()
            let app = gateway.makeApplication(host: "127.0.0.1", port: 0) { port in portContinuation.yield(port) }
            let group = ServiceGroup(configuration: .init(services: [.init(service: app)] + gateway.plugins.flatMap(\.instance.services).map { .init(service: $0) },
                                                          logger: Logger(label: "test")))
            do {
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask { try await group.run() }
                    var ports = portStream.makeAsyncIterator()
                    let port = try #require(await ports.next())
                    try await body(port, group)
                    await group.triggerGracefulShutdown()
                    try await tasks.waitForAll()
                }
            } catch {
                // Shut down on every path: a gateway released without it trips its pools' checks.
                await gateway.shutdown()
                throw error
            }
            await gateway.shutdown()
        }
    }

    @Test("an in-flight request completes during graceful shutdown")
    func inFlightRequestCompletes() async throws {
        try await withServing { port, group in
            let client = HTTPClient.shared
            // Generous deadlines: these tests are about completion, not speed, and a loaded CI host
            // has been seen to stall a run for tens of seconds (once past a minute, in a full run).
            async let slow = client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/notes/slow?ms=800"), timeout: .seconds(300))
            try await Task.sleep(for: .milliseconds(200))
            await group.triggerGracefulShutdown()
            let response = try await slow
            #expect(response.status.code == 200)
            let body = try await response.body.collect(upTo: 1 << 16)
            #expect(String(buffer: body).contains("done"))
        }
    }

    @Test("a dialect WebSocket route upgrades and exchanges messages")
    func webSocket() async throws {
        try await withServing { port, _ in
            let replies = try await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)/legacy/live", logger: Logger(label: "ws")) { inbound, outbound, _ in
                try await outbound.write(.text("hello"))
                var iterator = inbound.messages(maxSize: 1 << 16).makeAsyncIterator()
                let reply = try await iterator.next()
                try await outbound.close(.normalClosure, reason: nil)
                #expect(reply == .text("HELLO"))
            }
            #expect(replies?.closeCode == .normalClosure)
        }
    }

    @Test("the plugin's service runs in the group and stops with it")
    func pluginServiceRuns() async throws {
        try await withServing { port, _ in
            let client = HTTPClient.shared
            let response = try await client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/readyz"), timeout: .seconds(60))
            #expect(response.status.code == 200)
        }
    }
}
