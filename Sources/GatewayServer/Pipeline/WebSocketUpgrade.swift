import GatewayCore
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore

/// A WebSocket route placed at its full path.
struct MountedWebSocket: Sendable {
    let pluginID: String
    let dialect: Dialect
    let route: WebSocketRoute
    let plugin: PluginContext
}

/// Adapts a Hummingbird WebSocket (a client's or the server's) to the contract's ``WebSocketConnection``.
struct HummingbirdSocket: WebSocketConnection {
    let inbound: AsyncStream<GatewayCore.WebSocketMessage>
    let outbound: WebSocketOutboundWriter

    func send(_ message: GatewayCore.WebSocketMessage) async throws {
        switch message {
        case .text(let text): try await outbound.write(.text(text))
        case .binary(let bytes): try await outbound.write(.binary(bytes))
        }
    }

    /// Runs `session` with the socket whose frames arrive on `inbound` (messages up to 1 MiB);
    /// whichever ends first, the client or the session, ends the connection.
    static func serve(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter,
                      session: @escaping @Sendable (HummingbirdSocket) async throws -> Void) async throws {
        let (stream, continuation) = AsyncStream<GatewayCore.WebSocketMessage>.makeStream()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { continuation.finish() }
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    switch message {
                    case .text(let text): continuation.yield(.text(text))
                    case .binary(let bytes): continuation.yield(.binary(bytes))
                    }
                }
            }
            group.addTask { try await session(HummingbirdSocket(inbound: stream, outbound: outbound)) }
            _ = try await group.next()
            group.cancelAll()
        }
    }
}

extension Gateway {
    /// Decides whether a request upgrades to a WebSocket: only at a declared WebSocket route, and
    /// only for a caller the authenticator accepts. Anything else continues as plain HTTP (and gets
    /// the pipeline's 404 / 401).
    static func upgrade(_ head: HTTPRequest, channel: any Channel, sockets: RouteTable<MountedWebSocket>, authenticator: any Authenticator,
                        proxies: ProxyTrust, limit: @escaping @Sendable (Principal, String, Int) async throws -> Void,
                        logger: Logger) async throws -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> {
        let target = head.path ?? "/"
        let path = target.split(separator: "?", maxSplits: 1).first.map(Substring.init) ?? "/"
        let query = target.split(separator: "?", maxSplits: 1).dropFirst().first.map(Substring.init) ?? ""
        guard case .found(let mounted, let parameters) = try? sockets.resolve(.get, path: path),
              let queryParameters = try? PercentDecoding.queryParameters(query) else {
            return .dontUpgrade
        }
        var fields = head.headerFields
        let address = proxies.client(peer: channel.remoteAddress.map(GatewayRequestContext.text(of:)) ?? "local", headers: &fields)
        let request = DialectRequest(method: .get, path: String(path), pathParameters: parameters, queryParameters: queryParameters,
                                     headers: fields, authority: head.authority)
        let credential = mounted.dialect.credentials(request)
        guard let principal = try? await authenticator.principal(for: credential, address: address) else {
            return .dontUpgrade
        }
        let requestID = GatewayResponder.requestID(from: head.headerFields)
        var socketLogger = logger
        socketLogger[metadataKey: "request.id"] = .string(requestID)
        let pluginID = mounted.pluginID
        // Every request the client sends over the socket counts against the caller's rate limit.
        let context = OperationContext(principal: principal, requestID: requestID, logger: socketLogger,
                                       headers: fields, plugin: mounted.plugin, credential: credential) { cost in
            try await limit(principal, pluginID, cost)
        }
        let socketRequest = WebSocketRequest(pathParameters: parameters, queryParameters: queryParameters, headers: fields)
        return .upgrade([:]) { inbound, outbound, _ in
            try await HummingbirdSocket.serve(inbound: inbound, outbound: outbound) { socket in
                try await mounted.route.serve(socketRequest, socket, context)
            }
        }
    }
}
