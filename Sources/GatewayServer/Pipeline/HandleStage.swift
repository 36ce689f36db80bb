import GatewayCore
import Hummingbird
import Logging

/// Runs the route's handler with the caller's context (principal, request id, a logger that names
/// the request, the plugin's services, a way to charge further work to the caller's rate limit),
/// and takes its answer as the one reply type of the pipeline.
struct HandleStage {
    let logger: Logger
    let limit: LimitStage

    func run(_ call: RouteCall, request: RouteRequest) async throws -> RouteReply {
        let mounted = call.mounted
        let (principal, pluginID, limit) = (call.principal, mounted.pluginID, limit)
        let context = OperationContext(principal: principal, requestID: call.exchange.requestID, logger: logger,
                                       headers: call.exchange.request.headers, plugin: mounted.plugin,
                                       credential: call.credentialRefused ? nil : call.credential,
                                       credentialRefused: call.credentialRefused) { cost in
            // Work a handler does beyond the one request (each operation of a batch).
            _ = try await limit.charge(principal, plugin: pluginID, cost: cost)
        }
        return try await GatewayTracing.span("handler \(mounted.name)") {
            try await mounted.route(request, context: context)
        }
    }
}
