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
