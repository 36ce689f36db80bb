import GatewayCore
import SQLKit

/// The suggest plugin's schema, every step in order. Never edit a shipped step: add the next.
enum SuggestMigrations {
    static let all: [Migration] = [
        Migration(1, "create suggest_terms") { db in
            try await db.create(table: "suggest_terms")
                .column("dictionary", type: .text, .notNull)
                .column("keyword", type: .text, .notNull)
                .column("text", type: .text, .notNull)
                .column("weight", type: .double, .notNull)
                .primaryKey("dictionary", "keyword")
                .run()
        },
    ]
}
