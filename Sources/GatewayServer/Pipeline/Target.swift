import GatewayCore
import Hummingbird
import HTTPTypes

/// Where a request goes, the routing stage's answer: a CORS preflight, a route of a plugin, one of
/// the gateway's own endpoints, or a refusal (404, 405 with `Allow`, 400 for a path that does not
/// decode). Resolved once per request; tracing, metrics and the access log name the target.
enum Target {
    case preflight(CORSSettings)
    case route(MountedRoute, parameters: [String: String])
    case gateway(GatewayEndpoint)
    case refused(GatewayError)

    static func resolve(_ exchange: Exchange, routes: RouteTable<Endpoint>, cors: CORSSettings?) -> Target {
        if exchange.method == .options, let cors, exchange.request.headers.value(.accessControlRequestMethod) != nil {
            return .preflight(cors)
        }
        do {
            switch try routes.resolve(exchange.method, path: Substring(exchange.path)) {
            case .found(.route(let mounted), let parameters): return .route(mounted, parameters: parameters)
            case .found(.gateway(let endpoint), _): return .gateway(endpoint)
            case .methodNotAllowed(let allowed): return .refused(.methodNotAllowed(exchange.method.rawValue, allowed: allowed))
            case .notFound: return .refused(.notFound("Nothing is served at \(exchange.path.prefix(200))."))
            }
        } catch {
            return .refused(error)
        }
    }

    /// The label under which metrics, logs and traces report it.
    var name: String {
        switch self {
        case .preflight: "cors.preflight"
        case .route(let mounted, _): mounted.name
        case .gateway(let endpoint): endpoint.name
        case .refused: "unmatched"
        }
    }

    /// The plugin that answers (`gateway` for the gateway's own endpoints, preflights and refusals).
    var pluginID: String {
        if case .route(let mounted, _) = self { return mounted.pluginID }
        return "gateway"
    }

    /// The endpoint's own metric series, when it has one.
    var metrics: GatewayMetrics.EndpointSeries? {
        switch self {
        case .route(let mounted, _): mounted.metrics
        case .gateway(let endpoint): endpoint.metrics
        case .preflight, .refused: nil
        }
    }

    /// `path` as the access log and traces show it: `***` for the route's secret parameters.
    func loggedPath(_ path: String) -> String {
        guard case .route(let mounted, let parameters) = self, !mounted.secretParameters.isEmpty else { return path }
        return SecretParameters.redact(path, template: mounted.template, parameters: parameters, secret: mounted.secretParameters)
    }
}
