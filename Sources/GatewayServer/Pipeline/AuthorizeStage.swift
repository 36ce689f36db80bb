import GatewayCore
import Hummingbird

/// Whether the principal may call the route: its access rule (public, user, API-key scope,
/// administrator), a key's restriction to some resources (a path parameter outside it is a 404,
/// as if it did not exist), and the plugin's own `authorize` hook. Runs before the cache lookup,
/// so that a stored reply is never served to a caller the route refuses.
struct AuthorizeStage {
    func run(_ call: RouteCall) async throws {
        let mounted = call.mounted
        try mounted.access.enforce(principal: call.principal, plugin: mounted.pluginID, method: call.exchange.method)
        if let resource = mounted.resourceParameter, let id = call.parameters[resource],
           !call.principal.mayAccess(resource: id, of: mounted.pluginID) {
            throw GatewayError.notFound("No such resource '\(id)'.")
        }
        if let authorize = mounted.authorize {
            try await authorize(AuthorizationRequest(
                principal: call.principal, route: mounted.name, dialect: mounted.dialect?.name, method: call.exchange.method,
                tags: mounted.tags, pathParameters: call.parameters, headers: call.exchange.request.headers))
        }
    }
}
