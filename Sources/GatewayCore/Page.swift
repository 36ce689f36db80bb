/// One page of a native list: `{"items": [...], "nextCursor": "..."}`, the one list shape of every
/// native API (`nextCursor` is null on the last page).
///
/// Return it from an operation (with ``PageQuery`` or the same `limit` and `cursor` parameters in
/// its query) and the host adds the RFC 8288 `Link: <...?cursor=...>; rel="next"` header, built
/// from the request's own path and query.
public struct Page<Item: Encodable & Sendable>: Encodable, Sendable, PagedOutput {
    public var items: [Item]
    /// The opaque cursor of the next page; nil on the last page.
    public var nextCursor: String?

    public init(items: [Item], nextCursor: String?) {
        self.items = items
        self.nextCursor = nextCursor
    }

    private enum Key: String, CodingKey { case items, nextCursor }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(items, forKey: .items)
        try container.encode(nextCursor, forKey: .nextCursor)
    }
}

extension Page: Decodable where Item: Decodable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        items = try container.decode([Item].self, forKey: .items)
        nextCursor = try container.decode(String?.self, forKey: .nextCursor)
    }
}

/// An output that is one page of a list: the host links the next page (`Link: <...>; rel="next"`).
package protocol PagedOutput {
    /// The cursor of the next page; nil on the last page.
    var nextCursor: String? { get }
}

/// The query of a native list: `limit` (1 to 1000, default 50) and `cursor` (a page's `nextCursor`).
public struct PageQuery: Codable, Sendable, Equatable, ValidatableInput {
    public static let fieldRules: [String: FieldRule] = ["limit": limitRule, "cursor": cursorRule]

    public var limit: Int?
    public var cursor: String?

    public init(limit: Int? = nil, cursor: String? = nil) {
        self.limit = limit
        self.cursor = cursor
    }

    /// The page size asked for: ``limit`` or 50.
    public var size: Int { limit ?? 50 }

    public func validate() -> [GatewayError.FieldError] {
        Self.problems(limit: limit, cursor: cursor)
    }

    /// The page sizes a list takes.
    public static let limits = 1...1000
    /// The longest cursor a list takes (its own are far shorter).
    public static let longestCursor = 1000
    /// `limit` as the document states it.
    public static let limitRule = FieldRule.integer(limits).described("Items per page, 1 to 1000 (default 50).")
    /// `cursor` as the document states it.
    public static let cursorRule = FieldRule.text(maxLength: longestCursor).described("The `nextCursor` of the page before.")

    /// The problems with a list's `limit` and `cursor`, for query types that carry them beside
    /// filters of their own: a limit outside 1...1000, a cursor longer than 1000 characters.
    public static func problems(limit: Int?, cursor: String?) -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if let limit, !limits.contains(limit) { problems.append(.init(pointer: "limit", detail: "must be from 1 to 1000")) }
        if let cursor, cursor.unicodeScalars.count > longestCursor { problems.append(.init(pointer: "cursor", detail: "is not a cursor this list gave")) }
        return problems
    }
}
