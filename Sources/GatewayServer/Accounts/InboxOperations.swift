import Foundation
import GatewayCore
import SQLKit

/// `/v1/me/notifications` and `/v1/me/history`: a user's inbox and activity history. Every query
/// is scoped to the caller's user id, so nobody reads or deletes another user's entries.
enum InboxOperations {
    struct Notification: Codable, Sendable {
        var id: String
        var plugin: String
        var title: String
        var body: String
        var link: String?
        var createdAt: Date
        var read: Bool
    }

    struct NotificationRow: Codable {
        var id: String
        var user_id: String
        var plugin: String
        var title: String
        var body: String
        var link: String?
        var created_at: Double
        var read_at: Double?

        var notification: Notification {
            Notification(id: id, plugin: plugin, title: title, body: body, link: link,
                         createdAt: Date(timeIntervalSince1970: created_at), read: read_at != nil)
        }
    }

    struct HistoryEntry: Codable, Sendable {
        var id: String
        var plugin: String
        var resource: String
        var title: String
        var viewedAt: Date
    }

    struct HistoryRow: Codable {
        var id: String
        var user_id: String
        var plugin: String
        var resource: String
        var title: String
        var viewed_at: Double
    }

    struct ListQuery: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "limit": PageQuery.limitRule,
            "cursor": FieldRule.pattern("^[0-9]{1,15}(\\.[0-9]{1,6})?$").described("The `nextCursor` of the page before."),
        ]

        var limit: Int?
        var cursor: String?
        var unread: Bool?

        func validate() -> [GatewayError.FieldError] {
            var problems = PageQuery.problems(limit: limit, cursor: cursor)
            if let cursor, Double(cursor) == nil, problems.isEmpty { problems.append(.init(pointer: "cursor", detail: "is not a cursor this list gave")) }
            return problems
        }
    }

    struct EntryID: Codable, Sendable { var id: String }
    struct UnreadCount: Codable, Sendable { var unread: Int }

    /// Deletes row `id` of `table` if it belongs to `user`; a row of another user is a 404, like a missing one.
    static func deleteOwned(_ table: String, id: String, user: String, what: String, database: any SQLDatabase) async throws {
        guard try await database.select().column("id").from(table).where("id", .equal, id).where("user_id", .equal, user).first() != nil else {
            throw GatewayError.notFound("No such \(what).")
        }
        try await database.delete(from: table).where("id", .equal, id).where("user_id", .equal, user).run()
    }

    static func userID(_ context: OperationContext) throws -> String {
        guard let id = context.principal.userID else { throw GatewayError.forbidden("This credential acts for no user.") }
        return id
    }

    static func operations(database: any SQLDatabase) -> [Route] {
        [
            Route.define("accounts.notifications.list", .get, "/me/notifications", summary: "The user's notifications, newest first")
                .access(.user)
                .query(ListQuery.self)
                .returns(Page<Notification>.self) { input, context in
                    let limit = input.query.limit ?? 50
                    var query = database.select().column("*").from("gateway_notifications").where("user_id", .equal, try userID(context))
                        .orderBy("created_at", .descending).orderBy("id", .descending).limit(limit + 1)
                    if input.query.unread == true { query = query.where("read_at", .is, SQLLiteral.null) }
                    if let cursor = input.query.cursor.flatMap(Double.init) { query = query.where("created_at", .lessThan, cursor) }
                    let rows = try await query.all(decoding: NotificationRow.self)
                    let page = rows.prefix(limit)
                    return Page(items: page.map(\.notification), nextCursor: rows.count > limit ? page.last.map { String($0.created_at) } : nil)
                },
            Route.define("accounts.notifications.unread", .get, "/me/notifications/unread-count", summary: "How many notifications are unread")
                .access(.user)
                .returns(UnreadCount.self) { _, context in
                    struct Count: Decodable { var count: Int }
                    let count = try await database.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "count")
                        .from("gateway_notifications").where("user_id", .equal, try userID(context)).where("read_at", .is, SQLLiteral.null)
                        .first(decoding: Count.self)
                    return UnreadCount(unread: count?.count ?? 0)
                },
            Route.define("accounts.notifications.read", .post, "/me/notifications/{id}/read", summary: "Mark a notification read")
                .access(.user)
                .path(EntryID.self)
                .status(200)
                .returns(Notification.self) { input, context in
                    let user = try userID(context)
                    guard var row = try await database.select().column("*").from("gateway_notifications").where("id", .equal, input.path.id)
                        .where("user_id", .equal, user).first(decoding: NotificationRow.self) else { throw GatewayError.notFound("No such notification.") }
                    if row.read_at == nil {
                        row.read_at = Date().timeIntervalSince1970
                        try await database.update("gateway_notifications").set("read_at", to: row.read_at).where("id", .equal, row.id).run()
                    }
                    return row.notification
                },
            Route.define("accounts.notifications.delete", .delete, "/me/notifications/{id}", summary: "Delete a notification")
                .access(.user)
                .path(EntryID.self)
                .returns(NoContent.self) { input, context in
                    try await deleteOwned("gateway_notifications", id: input.path.id, user: try userID(context), what: "notification", database: database)
                    return NoContent()
                },
            Route.define("accounts.history.list", .get, "/me/history", summary: "What the user viewed recently, newest first")
                .access(.user)
                .query(ListQuery.self)
                .returns(Page<HistoryEntry>.self) { input, context in
                    let limit = input.query.limit ?? 50
                    var query = database.select().column("*").from("gateway_history").where("user_id", .equal, try userID(context))
                        .orderBy("viewed_at", .descending).limit(limit + 1)
                    if let cursor = input.query.cursor.flatMap(Double.init) { query = query.where("viewed_at", .lessThan, cursor) }
                    let rows = try await query.all(decoding: HistoryRow.self)
                    let page = rows.prefix(limit)
                    return Page(
                        items: page.map { HistoryEntry(id: $0.id, plugin: $0.plugin, resource: $0.resource, title: $0.title,
                                                       viewedAt: Date(timeIntervalSince1970: $0.viewed_at)) },
                        nextCursor: rows.count > limit ? page.last.map { String($0.viewed_at) } : nil)
                },
            Route.define("accounts.history.delete", .delete, "/me/history/{id}", summary: "Remove one entry from the history")
                .access(.user)
                .path(EntryID.self)
                .returns(NoContent.self) { input, context in
                    try await deleteOwned("gateway_history", id: input.path.id, user: try userID(context), what: "history entry", database: database)
                    return NoContent()
                },
            Route.define("accounts.history.clear", .delete, "/me/history", summary: "Clear the whole history")
                .access(.user)
                .returns(NoContent.self) { _, context in
                    try await database.delete(from: "gateway_history").where("user_id", .equal, try userID(context)).run()
                    return NoContent()
                },
        ]
    }
}
