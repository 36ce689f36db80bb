import GatewayServer
import Hummingbird
import HummingbirdCore
import NIOCore

/// Serves `router` on a free loopback port while `body` runs (a fake upstream service, a web hook
/// receiver), then stops it. `body` gets the port. `server` chooses the protocol (WebSocket
/// upgrades: `.http1WebSocketUpgrade(webSocketRouter: router)`).
public func withLoopbackServer<Context: InitializableFromSource<ApplicationRequestContextSource>, R: Sendable>(
    _ router: Router<Context>, server: HTTPServerBuilder = .http1(), _ body: @Sendable (Int) async throws -> R
) async throws -> R {
    try await whileServing({ started in
        Application(router: router, server: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                    onServerRunning: { channel in started(channel.localAddress?.port ?? 0) })
    }, body)
}

/// Serves `gateway` (its main listener, over real sockets) on a free loopback port while `body` runs.
public func withServing<R: Sendable>(_ gateway: Gateway, _ body: @Sendable (Int) async throws -> R) async throws -> R {
    try await whileServing({ started in gateway.makeApplication(host: "127.0.0.1", port: 0) { started($0) } }, body)
}

/// Runs the application `make` builds until `body`, given the port it bound, returns.
private func whileServing<App: ApplicationProtocol, R: Sendable>(
    _ make: (@escaping @Sendable (Int) -> Void) -> App, _ body: @Sendable (Int) async throws -> R
) async throws -> R {
    let port = AsyncStream.makeStream(of: Int.self)
    let app = make { port.continuation.yield($0) }
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await app.runService(gracefulShutdownSignals: []) }
        var iterator = port.stream.makeAsyncIterator()
        let bound = await iterator.next() ?? 0
        defer { group.cancelAll() }
        return try await body(bound)
    }
}
