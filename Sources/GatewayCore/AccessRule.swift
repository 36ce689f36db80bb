import HTTPTypes

/// Who may call an operation. The host enforces it before decoding input or running the handler.
public enum AccessRule: Sendable, Equatable {
    /// Anyone, including guests.
    case `public`
    /// A signed-in user, or a key owned by a user.
    case user
    /// A caller holding the named scope, such as `suggest:write`. Users (by session) hold every
    /// scope of their own; keys hold the scopes they were given (or `*`).
    case scope(String)
    /// A signed-in user acting on a resource they own; the handler confirms ownership with
    /// ``OperationContext/requireOwner(_:)`` because only it can load the resource.
    case owner
    /// A gateway administrator.
    case admin

    /// The OpenAPI-facing words for the rule.
    public var summary: String {
        switch self {
        case .public: "public"
        case .user: "signed-in user"
        case .scope(let scope): "scope \(scope)"
        case .owner: "owner of the resource"
        case .admin: "administrator"
        }
    }
}

extension AccessRule {
    /// Enforces the rule for `principal` calling a route of `plugin` with `method`, as the host
    /// does before every operation and dialect route (a plugin that dispatches requests itself —
    /// a socket protocol that runs dialect routes — calls it the same way). A key is further
    /// bounded by its scopes on every route, public ones included (a key is a capability: it acts
    /// for its owner, so a read-only key must not write even where a guest could): a read
    /// (GET/HEAD) needs `<plugin>:read` and anything else `<plugin>:write` (or `<plugin>:*`, or `*`).
    /// Throws 401 for a guest where a caller must be known, 403 otherwise.
    public func enforce(principal: Principal, plugin: String, method: HTTPRequest.Method) throws {
        if case .apiKey = principal.kind, !principal.isAdmin {
            let needed = "\(plugin):" + (method == .get || method == .head ? "read" : "write")
            guard principal.scopes.contains(needed) || principal.scopes.contains("\(plugin):*") || principal.scopes.contains("*") else {
                throw GatewayError.forbidden("This key lacks the scope \(needed).")
            }
        }
        switch self {
        case .public:
            return
        case .user, .owner:
            guard principal.userID != nil || principal.isAdmin else {
                throw principal.isAnonymous ? GatewayError.unauthorized() : GatewayError.forbidden("This operation acts for a user; this key has none.")
            }
        case .scope(let scope):
            if principal.isAdmin { return }
            switch principal.kind {
            case .anonymous: throw GatewayError.unauthorized()
            case .user: return
            case .apiKey:
                guard principal.scopes.contains(scope) || principal.scopes.contains("*") || principal.scopes.contains("\(plugin):*") else {
                    throw GatewayError.forbidden("This key lacks the scope \(scope).")
                }
            }
        case .admin:
            guard principal.isAdmin else {
                throw principal.isAnonymous ? GatewayError.unauthorized() : GatewayError.forbidden("Only administrators may do this.")
            }
        }
    }
}
