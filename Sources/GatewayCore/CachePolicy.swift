/// Whether and how the host may cache an operation's replies, and which cached replies a
/// successful call invalidates.
///
/// Tags are strings such as `suggest:terms` or `todo:bucket:{bucket}`; `{name}` is filled from the
/// operation's path parameters, so a write to one bucket purges only that bucket's lists.
public struct CachePolicy: Sendable, Equatable {
    /// Who a cached reply may be served to.
    public enum Scope: Sendable, Equatable {
        /// Replies do not depend on the caller: one entry serves everyone.
        case shared
        /// Replies depend on the caller: entries are keyed by the principal too.
        case perPrincipal
    }

    /// How long a reply stays fresh; nil means not cacheable.
    public var ttl: Duration?
    /// Who a cached reply may be served to.
    public var scope: Scope
    /// Request headers whose values take part in the cache key (`Accept`, `Accept-Language`).
    public var vary: [String]
    /// The tags a cached reply of this operation carries.
    public var tags: [String]
    /// The tags a successful call of this operation invalidates.
    public var invalidates: [String]

    public init(ttl: Duration?, scope: Scope = .shared, vary: [String] = [], tags: [String] = [], invalidates: [String] = []) {
        self.ttl = ttl
        self.scope = scope
        self.vary = vary
        self.tags = tags
        self.invalidates = invalidates
    }

    /// Never cached (the default for every operation).
    public static let none = CachePolicy(ttl: nil)

    /// Cached for `ttl`, shared by all callers, carrying `tags`.
    public static func shared(ttl: Duration, tags: [String] = [], vary: [String] = []) -> CachePolicy {
        CachePolicy(ttl: ttl, scope: .shared, vary: vary, tags: tags)
    }

    /// Cached for `ttl` separately for each caller, carrying `tags`.
    public static func perPrincipal(ttl: Duration, tags: [String] = [], vary: [String] = []) -> CachePolicy {
        CachePolicy(ttl: ttl, scope: .perPrincipal, vary: vary, tags: tags)
    }

    /// Not cached; a successful call invalidates `tags`.
    public static func invalidating(_ tags: [String]) -> CachePolicy {
        CachePolicy(ttl: nil, invalidates: tags)
    }

    /// Whether replies may be stored at all.
    public var isCacheable: Bool { ttl != nil }
}
