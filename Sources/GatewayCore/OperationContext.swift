import HTTPTypes
import Logging

/// What a handler knows about the call it serves: who is calling, the request's id and headers,
/// and its plugin's shared ``PluginContext``.
public struct OperationContext: Sendable {
    /// The caller.
    public let principal: Principal
    /// The request id (`X-Request-Id`), also in the logger's metadata.
    public let requestID: String
    private let baseLogger: Logger
    /// A logger carrying the request id. Made on first use: attaching metadata costs a rendering
    /// in some log handlers, which a request that logs nothing should not pay.
    public var logger: Logger {
        var logger = baseLogger
        logger[metadataKey: "request.id"] = .string(requestID)
        return logger
    }
    /// The request's headers.
    public let headers: HTTPFields
    /// The plugin's shared services.
    public let plugin: PluginContext
    /// The credential that identified ``principal`` (from the headers or, where the route accepts
    /// it, the URL's query), for work that outlives the request — a WebSocket subscription checks
    /// it again before each push. Nil for an anonymous caller.
    public let credential: Credential?
    /// Whether the caller presented a credential that did not resolve and is served as a guest
    /// (only where the dialect's ``CredentialExtractor/invalid`` says so).
    public let credentialRefused: Bool

    /// Charges the caller's rate limit for work done on its behalf beyond what the host already
    /// counted: each request a client sends over a WebSocket, each operation of a batch past the
    /// first (the host charged the request its route's cost). Throws the quota problem (429) when
    /// the limit is exhausted.
    public let charge: @Sendable (_ cost: Int) async throws -> Void

    /// The host's check of one request made over a WebSocket (nil elsewhere); see
    /// ``authorizeSocketRequest(_:as:)``.
    private let socketCheck: (@Sendable (Principal, [String: String]) async throws -> Void)?

    /// `logger` is the base logger; ``logger`` adds the request id to it. `socketCheck` is the
    /// host's authorization of each request made over a WebSocket.
    public init(principal: Principal, requestID: String, logger: Logger, headers: HTTPFields, plugin: PluginContext,
                credential: Credential? = nil, credentialRefused: Bool = false,
                charge: @escaping @Sendable (_ cost: Int) async throws -> Void = { _ in },
                socketCheck: (@Sendable (Principal, [String: String]) async throws -> Void)? = nil) {
        self.socketCheck = socketCheck
        self.credentialRefused = credentialRefused
        self.principal = principal
        self.requestID = requestID
        self.baseLogger = logger
        self.headers = headers
        self.plugin = plugin
        self.credential = credential
        self.charge = charge
    }

    /// Authorizes one request a client makes over a WebSocket — a subscription — as the host
    /// authorizes an HTTP request: for `principal` (default the connection's caller; pass the
    /// caller identified again, or the one a message's own credential names), the socket route's
    /// access rule and the key's scopes, the key's resource restriction on the route's resource
    /// parameter, and the plugin's authorize hook with `parameters` as the path parameters. Throws
    /// the refusal (401, 403, or 404 for a resource the key may not touch). Outside a WebSocket
    /// the host has authorized the request already and this does nothing.
    public func authorizeSocketRequest(_ parameters: [String: String], as principal: Principal? = nil) async throws {
        try await socketCheck?(principal ?? self.principal, parameters)
    }

    /// Confirms the caller acts for `ownerID` (or is an admin). Answers 404 otherwise, so that a
    /// stranger cannot even learn the resource exists.
    public func requireOwner(_ ownerID: String?, resource: String = "resource") throws {
        if principal.isAdmin { return }
        guard let ownerID, principal.userID == ownerID else {
            throw GatewayError.notFound("No such \(resource).")
        }
    }

    /// Confirms the caller's key may touch `resource` of this plugin. Answers 404 otherwise.
    public func requireAccess(toResource resource: String) throws {
        guard principal.mayAccess(resource: resource, of: plugin.pluginID) else {
            throw GatewayError.notFound("No such resource '\(resource)'.")
        }
    }

    /// Records that the caller viewed `resource` (no-op for guests).
    public func recordView(of resource: String, title: String) async {
        guard let userID = principal.userID else { return }
        do {
            try await plugin.recordView(userID: userID, resource: resource, title: title)
        } catch {
            logger.warning("could not record history", metadata: ["error": "\(error)"])
        }
    }
}
