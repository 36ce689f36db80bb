import GatewayCore
import Hummingbird
import Logging
import NIOCore

/// The request context of the gateway's Hummingbird application.
public struct GatewayRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The client's address (no port), as the socket reports it.
    public let remoteAddress: String

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress?.ipAddress ?? "local"
    }

    /// A context for a request made in-process (`gateway call`), not over a socket.
    public init(logger: Logger, remoteAddress: String) {
        struct LocalSource: RequestContextSource { let logger: Logger }
        coreContext = .init(source: LocalSource(logger: logger))
        self.remoteAddress = remoteAddress
    }

    /// The body is collected by the pipeline itself, against the configured limit.
    public var maxUploadSize: Int { .max }
}

/// An operation placed at its full path under its plugin's mount.
struct MountedOperation: Sendable {
    let pluginID: String
    let operation: ServiceOperation
    let plugin: PluginContext
    let template: String
    /// The cache policy after plugins.yaml overrides.
    let cache: CachePolicy
}

/// A dialect route placed at its full path.
struct MountedDialectRoute: Sendable {
    let pluginID: String
    let dialect: Dialect
    let route: DialectRoute
    let plugin: PluginContext
    let template: String
}

/// One of the gateway's own endpoints (`/healthz`, `/openapi.json`, ...).
struct GatewayEndpoint: Sendable {
    let name: String
    let summary: String
    let handler: @Sendable (Request, GatewayRequestContext) async throws -> Response
}

/// What a path resolves to.
enum Endpoint: Sendable {
    case operation(MountedOperation)
    case dialect(MountedDialectRoute)
    case gateway(GatewayEndpoint)

    /// The label under which metrics and logs report it.
    var name: String {
        switch self {
        case .operation(let mounted): mounted.operation.name
        case .dialect(let mounted): "\(mounted.pluginID).\(mounted.dialect.name) \(mounted.route.method.rawValue) \(mounted.route.path)"
        case .gateway(let endpoint): endpoint.name
        }
    }

    var summary: String {
        switch self {
        case .operation(let mounted): mounted.operation.summary
        case .dialect(let mounted): "[\(mounted.dialect.name)] \(mounted.route.summary)"
        case .gateway(let endpoint): endpoint.summary
        }
    }
}
