import GatewayServer
import Hummingbird
import HummingbirdCore
import NIOCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

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

/// Runs `body` with a loopback port where nothing listens and nothing can start listening while
/// `body` runs (a service that is down): a socket bound to the port and never listening holds it,
/// so connections are refused at once however many other tests bind ports meanwhile. A port
/// taken from a server that was then closed may be handed to the next test that binds one.
public func withRefusingPort<R>(_ body: (Int) async throws -> R) async throws -> R {
    #if canImport(Glibc)
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let descriptor = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard descriptor >= 0 else { throw RefusingPortError(step: "socket", code: errno) }
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
            bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
        }
    }
    guard bound else { throw RefusingPortError(step: "bind", code: errno) }
    return try await body(Int(UInt16(bigEndian: address.sin_port)))
}

struct RefusingPortError: Error, CustomStringConvertible {
    var step: String
    var code: Int32
    var description: String { "a refusing port: \(step) failed with errno \(code)" }
}
