import GatewayCore
import Hummingbird

/// Whether the principal may call the route: the plugin's `accept` list of credential kinds, the
/// route's access rule (public, user, scope of a key or token, administrator), a key's restriction
/// to some resources (a path parameter outside it is a 404, as if it did not exist), and the
/// plugin's own `authorize` hook. Runs before the cache lookup, so that a stored reply is never
/// served to a caller the route refuses.
struct AuthorizeStage {
    func run(_ call: RouteCall) async throws {
        let mounted = call.mounted
        try Self.checkAccepted(call.principal, accept: mounted.accept, plugin: mounted.pluginID)
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

    /// 401 when the plugin's `accept` list leaves out the kind of credential presented.
    static func checkAccepted(_ principal: Principal, accept: Set<String>?, plugin: String) throws {
        guard let accept, let kind = principal.credentialKind, !accept.contains(kind) else { return }
        throw GatewayError.unauthorized("The \(plugin) API does not take this kind of credential (\(kind)); it takes \(accept.sorted().joined(separator: ", ")).")
    }
}
