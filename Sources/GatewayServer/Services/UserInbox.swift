import Foundation
import GatewayCore
import SQLKit

/// The per-user inbox and activity history that plugins post to, stored in the gateway's own
/// tables (`gateway_notifications`, `gateway_history`). Writes are durable when the call returns.
public struct UserInbox: Notifier, ActivityRecorder {
    public let database: any SQLDatabase
    public let clock: any WallClock

    public init(database: any SQLDatabase, clock: any WallClock = SystemClock()) {
        self.database = database
        self.clock = clock
    }

    /// The host's own tables.
    public static let migrations: [Migration] = [
        Migration(1, "notifications and history") { db in
            try await db.create(table: "gateway_notifications").ifNotExists()
                .column("id", type: .text, .primaryKey(autoIncrement: false))
                .column("user_id", type: .text, .notNull)
                .column("plugin", type: .text, .notNull)
                .column("title", type: .text, .notNull)
                .column("body", type: .text, .notNull)
                .column("link", type: .text)
                .column("created_at", type: .double, .notNull)
                .column("read_at", type: .double)
                .run()
            try await db.create(index: "gateway_notifications_user").on("gateway_notifications").column("user_id").column("created_at").run()
            try await db.create(table: "gateway_history").ifNotExists()
                .column("id", type: .text, .notNull, .unique)
                .column("user_id", type: .text, .notNull)
                .column("plugin", type: .text, .notNull)
                .column("resource", type: .text, .notNull)
                .column("title", type: .text, .notNull)
                .column("viewed_at", type: .double, .notNull)
                .primaryKey("user_id", "plugin", "resource")
                .run()
            try await db.create(table: "gateway_demo_data").ifNotExists()
                .column("plugin", type: .text, .primaryKey(autoIncrement: false))
                .column("loaded_at", type: .text, .notNull)
                .run()
        },
    ]

    public func post(_ notification: UserNotification) async throws {
        try await database.insert(into: "gateway_notifications")
            .columns("id", "user_id", "plugin", "title", "body", "link", "created_at")
            .values(SQLBind(UUID().uuidString.lowercased()), SQLBind(notification.userID), SQLBind(notification.plugin),
                    SQLBind(notification.title), SQLBind(notification.body), SQLBind(notification.link), SQLBind(clock.now().timeIntervalSince1970))
            .run()
    }

    public func record(userID: String, plugin: String, resource: String, title: String) async throws {
        // One row per resource: viewing it again moves it to the top.
        try await database.insert(into: "gateway_history")
            .columns("id", "user_id", "plugin", "resource", "title", "viewed_at")
            .values(SQLBind(UUID().uuidString.lowercased()), SQLBind(userID), SQLBind(plugin), SQLBind(resource), SQLBind(title),
                    SQLBind(clock.now().timeIntervalSince1970))
            .onConflict(with: ["user_id", "plugin", "resource"]) { $0.set(excludedValueOf: "title").set(excludedValueOf: "viewed_at") }
            .run()
    }
}
