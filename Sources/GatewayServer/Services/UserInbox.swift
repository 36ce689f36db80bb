import Foundation
import GatewayCore
import SQLKit

/// The per-user inbox and activity history that plugins post to, stored in the gateway's own
/// tables (`gateway_notifications`, `gateway_history`). Writes are durable when the call returns.
public struct UserInbox: Sendable {
    public let database: any SQLDatabase
    public let clock: any WallClock

    public init(database: any SQLDatabase, clock: any WallClock = SystemClock()) {
        self.database = database
        self.clock = clock
    }

    /// Posts a message to the inbox of `userID`, from `plugin`.
    public func post(userID: String, plugin: String, title: String, body: String, link: String?) async throws {
        try await database.insert(into: "gateway_notifications")
            .columns("id", "user_id", "plugin", "title", "body", "link", "created_at")
            .values(SQLBind(UUID().uuidString.lowercased()), SQLBind(userID), SQLBind(plugin),
                    SQLBind(title), SQLBind(body), SQLBind(link), SQLBind(clock.now().timeIntervalSince1970))
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
