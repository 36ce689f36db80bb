import HTTPTypes

/// Who may call an operation. The host enforces it before decoding input or running the handler.
///
/// Scopes narrow what a key may do; they never grant a user anything. A signed-in user passes
/// `.scope` rules (their keys need the scope among their own), so data shared by everyone — a
/// dictionary, a transit feed, a bucket's definition — is written under `.granted` or `.admin`,
/// never under `.scope` alone.
public enum AccessRule: Sendable, Equatable {
    /// Anyone, including guests.
    case `public`
    /// A signed-in user, or a key owned by a user.
    case user
    /// A signed-in user, or a key holding the named scope (such as `events:write`): the scope only
    /// narrows keys. For the caller's own data; shared data takes ``granted(_:)``.
    case scope(String)
    /// Writes to shared data: an administrator, or a user an administrator granted the named scope
    /// (``Principal/grants``; a master key's grants are its own scopes). A key of either still
    /// needs the scope among its own.
    case granted(String)
    /// A signed-in user acting on a resource they own; the handler confirms ownership with
    /// ``OperationContext/requireOwner(_:resource:)`` because only it can load the resource.
    case owner
    /// A gateway administrator (a key needs the scope `admin` or `*`).
    case admin

    /// The OpenAPI-facing words for the rule.
    public var summary: String {
        switch self {
        case .public: "public"
        case .user: "signed-in user"
        case .scope(let scope): "signed-in user (a key needs scope \(scope))"
        case .granted(let scope): "administrator, or a user granted \(scope)"
        case .owner: "owner of the resource"
        case .admin: "administrator"
        }
    }
}

extension AccessRule {
    /// Enforces the rule for `principal` calling a route of `plugin` with `method`, as the host
    /// does before every operation, dialect route and WebSocket upgrade (a plugin that dispatches
    /// requests itself — a socket protocol that runs dialect routes — calls it the same way). A key,
    /// master or not, is further bounded by its scopes on every route, public ones included (a key
    /// is a capability: it acts for its owner, so a read-only key must not write even where a guest
    /// could): a read (GET/HEAD) needs `<plugin>:read` and anything else `<plugin>:write` (or
    /// `<plugin>:*`, or `*`); an administrators' route needs `admin` (or `*`) instead.
    /// Throws 401 for a guest where a caller must be known, 403 otherwise.
    public func enforce(principal: Principal, plugin: String, method: HTTPRequest.Method) throws {
        let credential = if case .token(let provider, _) = principal.kind { provider == Principal.certificateKind ? "certificate" : "token" } else { "key" }
        if principal.isBoundByScopes {
            if self == .admin {
                guard principal.keyAllows(Principal.adminScope) else {
                    throw GatewayError.forbidden("This \(credential) lacks the scope \(Principal.adminScope).")
                }
            } else {
                let needed = "\(plugin):" + (method == .get || method == .head ? "read" : "write")
                guard principal.keyAllows(needed) else {
                    throw GatewayError.forbidden("This \(credential) lacks the scope \(needed).")
                }
            }
        }
        switch self {
        case .public:
            return
        case .user, .owner:
            guard principal.userID != nil || principal.isAdmin else {
                throw principal.isAnonymous ? GatewayError.unauthorized() : GatewayError.forbidden("This operation acts for a user; this \(credential) has none.")
            }
        case .scope(let scope):
            if principal.isAnonymous { throw GatewayError.unauthorized() }
            guard principal.keyAllows(scope) else { throw GatewayError.forbidden("This \(credential) lacks the scope \(scope).") }
            guard principal.userID != nil || principal.isAdmin || principal.holdsGrant(scope) else {
                throw GatewayError.forbidden("This operation acts for a user; this \(credential) has none.")
            }
        case .granted(let scope):
            if principal.isAnonymous { throw GatewayError.unauthorized() }
            guard principal.keyAllows(scope) else { throw GatewayError.forbidden("This \(credential) lacks the scope \(scope).") }
            guard principal.isAdmin || principal.holdsGrant(scope) else {
                throw GatewayError.forbidden("This changes shared data: only administrators, or users an administrator granted \(scope), may do it.")
            }
        case .admin:
            guard principal.isAdmin else {
                throw principal.isAnonymous ? GatewayError.unauthorized() : GatewayError.forbidden("Only administrators may do this.")
            }
        }
    }
}
