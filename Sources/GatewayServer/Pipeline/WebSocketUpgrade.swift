import GatewayCore
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1

/// A WebSocket route placed at its full path.
struct MountedWebSocket: Sendable {
    let pluginID: String
    let dialect: Dialect
    let route: Route
    /// The route's handler (a WebSocket route's; the assembly mounts no other kind here).
    let serve: @Sendable (RouteRequest, any WebSocketConnection, OperationContext) async throws -> Void
    let plugin: PluginContext
    /// The plugin's hook, when it is an ``AuthorizingPlugin``.
    let authorize: (@Sendable (AuthorizationRequest) async throws -> Void)?
    /// The credential kinds the plugin takes (`accept`; nil: all).
    let accept: Set<String>?

    init(pluginID: String, dialect: Dialect, route: Route, plugin: PluginContext, instance: any ServicePlugin, accept: Set<String>?) {
        self.pluginID = pluginID
        self.accept = accept
        self.dialect = dialect
        self.route = route
        if case .socket(let handler) = route.handler { serve = handler } else { serve = { _, _, _ in } }
        self.plugin = plugin
        if let authorizing = instance as? any AuthorizingPlugin {
            authorize = { request in try await authorizing.authorize(request) }
        } else {
            authorize = nil
        }
    }

    /// The name the plugin's hook and the logs see: `<plugin>.<dialect> WS <path>`.
    var name: String { "\(pluginID).\(dialect.name) WS \(route.path)" }

    /// Whether `principal` may open the socket: the route's access rule and the key's scopes, as
    /// for a GET. Throws 401 or 403.
    func admit(_ principal: Principal) throws {
        try AuthorizeStage.checkAccepted(principal, accept: accept, plugin: pluginID)
        try route.access.enforce(principal: principal, plugin: pluginID, method: .get)
    }

    /// Authorizes one request made over the socket (``OperationContext/authorizeSocketRequest(_:as:)``):
    /// the access rule for `principal` as of now, the key's resource restriction, the plugin's hook.
    func authorizeRequest(_ principal: Principal, parameters: [String: String], headers: HTTPFields) async throws {
        try admit(principal)
        if let resource = route.resourceParameter, let id = parameters[resource], !principal.mayAccess(resource: id, of: pluginID) {
            throw GatewayError.notFound("No such resource '\(id)'.")
        }
        try await authorize?(AuthorizationRequest(principal: principal, route: name, dialect: dialect.name, method: .get, tags: route.tags,
                                                  pathParameters: parameters, headers: headers))
    }
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
    /// only for a caller the authenticator accepts and the route's access rule admits (with the
    /// key's scopes). A refused caller gets the route's 401 or 403 before any upgrade.
    static func upgrade(_ head: HTTPRequest, channel: any Channel, sockets: RouteTable<MountedWebSocket>, authenticator: any Authenticator,
                        proxies: ProxyTrust, limit: @escaping @Sendable (Principal, String, Int) async throws -> Void,
                        logger: Logger) async throws -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> {
        // The head has arrived whole: the connection's deadlines stop while the upgrade is decided
        // (a refused upgrade goes on as HTTP, and its request starts them again).
        channel.triggerUserOutboundEvent(HTTPExchangeEvent.upgrading, promise: nil)
        var fields = head.headerFields
        let address = proxies.client(peer: channel.remoteAddress.map(GatewayRequestContext.text(of:)) ?? "local", headers: &fields)
        guard let (mounted, request) = socketRequest(head.path ?? "/", fields: fields, authority: head.authority, sockets: sockets) else {
            return .dontUpgrade
        }
        let credential = mounted.dialect.credentials(request)
        let principal: Principal
        do {
            principal = try await authenticator.principal(for: credential, address: address)
            try mounted.admit(principal)
        } catch {
            // Refused before upgrading: the route's 401 or 403, in its dialect's shape, and the
            // connection closes (the WebSocket library would otherwise answer a bare 400).
            await refuse(mounted.dialect.renderError(error as? GatewayError ?? .unauthorized()), on: channel)
            return .dontUpgrade
        }
        // Opening the socket is a request of its own, charged to the caller's rate limit.
        guard (try? await limit(principal, mounted.pluginID, mounted.route.cost)) != nil else {
            return .dontUpgrade
        }
        let requestID = RequestID.of(head.headerFields)
        var socketLogger = logger
        socketLogger[metadataKey: "request.id"] = .string(requestID)
        let pluginID = mounted.pluginID
        // Every request the client sends over the socket counts against the caller's rate limit,
        // and each is authorized as the route's own (``OperationContext/authorizeSocketRequest(_:as:)``).
        let context = OperationContext(principal: principal, requestID: requestID, logger: socketLogger,
                                       headers: fields, plugin: mounted.plugin, credential: credential, charge: { cost in
            try await limit(principal, pluginID, cost)
        }, socketCheck: { [fields] caller, parameters in
            try await mounted.authorizeRequest(caller, parameters: parameters, headers: fields)
        })
        return .upgrade([:]) { inbound, outbound, _ in
            try await HummingbirdSocket.serve(inbound: inbound, outbound: outbound) { socket in
                try await mounted.serve(request, socket, context)
            }
        }
    }

    /// Answers a refused upgrade with `response` and closes the connection.
    private static func refuse(_ response: RouteReply, on channel: any Channel) async {
        let (fields, body) = response.whole()
        var headers = HTTPHeaders()
        for field in fields { headers.add(name: field.name.canonicalName, value: field.value) }
        headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
        headers.replaceOrAdd(name: "Connection", value: "close")
        let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: Int(response.status.code)), headers: headers)
        channel.write(HTTPServerResponsePart.head(head), promise: nil)
        channel.write(HTTPServerResponsePart.body(.byteBuffer(body)), promise: nil)
        try? await channel.writeAndFlush(HTTPServerResponsePart.end(nil))
        try? await channel.close()
    }

    /// The WebSocket route at `target` (a path with its query) and the upgrade request as its
    /// dialect reads credentials from it; nil when no route is there or the query is malformed.
    static func socketRequest(_ target: String, fields: HTTPFields, authority: String?,
                              sockets: RouteTable<MountedWebSocket>) -> (MountedWebSocket, RouteRequest)? {
        let path = target.split(separator: "?", maxSplits: 1).first.map(Substring.init) ?? "/"
        let query = target.split(separator: "?", maxSplits: 1).dropFirst().first.map(Substring.init) ?? ""
        guard case .found(let mounted, let parameters) = try? sockets.resolve(.get, path: path),
              let queryParameters = try? PercentDecoding.queryParameters(query) else {
            return nil
        }
        return (mounted, RouteRequest(method: .get, path: String(path), pathParameters: parameters, queryParameters: queryParameters,
                                        headers: fields, authority: authority))
    }
}
