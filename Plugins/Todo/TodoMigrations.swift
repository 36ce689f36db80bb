import GatewayCore
import SQLKit

/// The todo plugin's schema, every step in order (objects and buckets, groups, the guests'
/// indexes, tenants). Never edit a shipped step: add the next.
enum TodoMigrations {
    static let all: [Migration] = [
        Migration(1, "objects and buckets") { db in
            try await db.create(table: "todo_objects")
                .column("bucket", type: .text, .notNull)
                .column("id", type: .text, .notNull)
                .column("data", type: .custom(SQLRaw(db.features.jsonType)), .notNull)
                .column("owner", type: .text)
                .column("readers", type: .text, .notNull)
                .column("acl", type: .text, .notNull)
                .column("etag", type: .text, .notNull)
                .column("created_at", type: .bigint, .notNull)
                .column("updated_at", type: .bigint, .notNull)
                .primaryKey("bucket", "id")
                .run()
            try await db.create(index: "todo_objects_updated").on("todo_objects").column("bucket").column("updated_at").column("id").run()
            try await db.create(index: "todo_objects_created").on("todo_objects").column("bucket").column("created_at").column("id").run()
            try await db.create(table: "todo_buckets")
                .column("name", type: .text, .primaryKey(autoIncrement: false))
                .column("settings", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .run()
        },
        // 1 marks an object deleted without removing it (the NEC BaaS `deleteMark=1`).
        Migration(2, "objects may be marked deleted") { db in
            try await db.raw("ALTER TABLE todo_objects ADD COLUMN deleted BIGINT NOT NULL DEFAULT 0").run()
        },
        // Groups of users and of groups, named in ACLs as `g:{name}` (``GroupDirectory``).
        Migration(3, "groups of users") { db in
            try await db.create(table: "todo_groups")
                .column("name", type: .text, .primaryKey(autoIncrement: false))
                .column("id", type: .text, .notNull)
                .column("users", type: .text, .notNull)
                .column("groups", type: .text, .notNull)
                .column("acl", type: .text, .notNull)
                .column("etag", type: .text, .notNull)
                .column("created_at", type: .bigint, .notNull)
                .column("updated_at", type: .bigint, .notNull)
                .run()
        },
        // A guest reads only the objects everyone may read: their own index, newest first, so that a
        // guest's list does not read through the private objects of every user. (The condition is
        // the one ``QuerySQL/appendVisibility(for:to:)`` writes for a guest, word for word: a
        // partial index serves the queries whose conditions include its own.)
        Migration(4, "an index of the objects guests may read") { db in
            try await db.raw("CREATE INDEX todo_objects_guest ON todo_objects (bucket, updated_at, id) WHERE \(unsafeRaw: QuerySQL.guestVisibility)").run()
        },
        // The same in the order of a list that names none (by id).
        Migration(5, "an index of the objects guests may read, by id") { db in
            try await db.raw("CREATE INDEX todo_objects_guest_id ON todo_objects (bucket, id) WHERE \(unsafeRaw: QuerySQL.guestVisibility)").run()
        },
        // What was made through a dialect's tenant (objects, groups, buckets) records the tenant, so
        // that the tenant's master key administers that and nothing else; rows from before are the
        // native API's.
        Migration(6, "objects, groups and buckets record the tenant that made them") { db in
            for table in ["todo_objects", "todo_groups", "todo_buckets"] {
                try await db.raw("ALTER TABLE \(unsafeRaw: table) ADD COLUMN tenant TEXT").run()
            }
        },
    ]
}
