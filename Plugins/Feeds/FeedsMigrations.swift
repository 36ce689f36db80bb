import GatewayCore
import SQLKit

/// The feeds plugin's schema, every step in order. Never edit a shipped step: add the next.
enum FeedsMigrations {
    static let all: [Migration] = [
        Migration(1, "feeds, datastreams and datapoints") { db in
            let serial = db.features.serialPrimaryKey
            try await db.raw("""
                CREATE TABLE feeds_feeds (id \(unsafeRaw: serial), title TEXT NOT NULL, description TEXT, website TEXT,
                  tags TEXT NOT NULL, private INTEGER NOT NULL, creator_id TEXT, creator_name TEXT,
                  location_name TEXT, location_domain TEXT, location_exposure TEXT, location_disposition TEXT,
                  lat DOUBLE PRECISION, lon DOUBLE PRECISION, ele TEXT,
                  created BIGINT NOT NULL, updated BIGINT NOT NULL, retention_seconds BIGINT)
                """).run()
            try await db.raw("CREATE INDEX feeds_feeds_creator ON feeds_feeds (creator_name)").run()
            try await db.raw("""
                CREATE TABLE feeds_datastreams (stream_key \(unsafeRaw: serial), feed_id BIGINT NOT NULL, id TEXT NOT NULL,
                  tags TEXT NOT NULL, unit_label TEXT, unit_symbol TEXT, unit_type TEXT,
                  current_value DOUBLE PRECISION, at BIGINT, min_value DOUBLE PRECISION, max_value DOUBLE PRECISION,
                  created BIGINT NOT NULL, updated BIGINT NOT NULL, UNIQUE (feed_id, id))
                """).run()
            try await db.raw("""
                CREATE TABLE feeds_datapoints (stream BIGINT NOT NULL, at BIGINT NOT NULL, value DOUBLE PRECISION NOT NULL,
                  PRIMARY KEY (stream, at))\(unsafeRaw: db.features.keyOrderedTable)
                """).run()
        },
        Migration(2, "triggers and their deliveries") { db in
            let serial = db.features.serialPrimaryKey
            try await db.raw("""
                CREATE TABLE feeds_triggers (id \(unsafeRaw: serial), feed_id BIGINT NOT NULL, stream_id TEXT NOT NULL, url TEXT NOT NULL,
                  trigger_type TEXT NOT NULL, threshold_value DOUBLE PRECISION, user_id TEXT, user_name TEXT, notified_at BIGINT,
                  armed_state INTEGER NOT NULL, created BIGINT NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX feeds_triggers_stream ON feeds_triggers (feed_id, stream_id)").run()
            try await db.raw("""
                CREATE TABLE feeds_trigger_deliveries (id \(unsafeRaw: serial), trigger_id BIGINT NOT NULL, fired_at BIGINT NOT NULL,
                  payload TEXT NOT NULL, attempts INTEGER NOT NULL, status TEXT NOT NULL, response_status INTEGER, error TEXT,
                  next_attempt BIGINT NOT NULL, updated BIGINT NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX feeds_trigger_deliveries_due ON feeds_trigger_deliveries (status, next_attempt)").run()
            try await db.raw("CREATE INDEX feeds_trigger_deliveries_trigger ON feeds_trigger_deliveries (trigger_id, id)").run()
        },
        Migration(3, "v2 keys") { db in
            try await db.raw("""
                CREATE TABLE feeds_keys (key_id TEXT PRIMARY KEY, api_key TEXT NOT NULL UNIQUE, user_id TEXT, label TEXT NOT NULL,
                  private_access INTEGER NOT NULL, expires_at BIGINT, permissions TEXT NOT NULL, created BIGINT NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX feeds_keys_user ON feeds_keys (user_id)").run()
        },
        Migration(4, "datapoints in chunks") { db in
            // `total` is NULL where the sum is not a number (SQLite keeps NaN as NULL).
            try await db.raw("""
                CREATE TABLE feeds_chunks (stream BIGINT NOT NULL, first_at BIGINT NOT NULL, last_at BIGINT NOT NULL, n BIGINT NOT NULL,
                  low DOUBLE PRECISION NOT NULL, high DOUBLE PRECISION NOT NULL, total DOUBLE PRECISION,
                  first_value DOUBLE PRECISION NOT NULL, last_value DOUBLE PRECISION NOT NULL, points \(unsafeRaw: db.features.binaryType) NOT NULL,
                  PRIMARY KEY (stream, first_at))\(unsafeRaw: db.features.keyOrderedTable)
                """).run()
            if db.features.storageParameters {
                // Packed doubles do not compress: spare PostgreSQL the attempt.
                try await db.raw("ALTER TABLE feeds_chunks ALTER COLUMN points SET STORAGE EXTERNAL").run()
            }
            // Datapoints of the one-row-per-datapoint table move into chunks, a stream at a time.
            let streams = try await db.raw("SELECT DISTINCT stream FROM feeds_datapoints").all().map { try $0.decode(column: "stream", as: Int64.self) }
            for stream in streams {
                var after = Int64.min
                while true {
                    let points = try await db.raw("""
                        SELECT at, value FROM feeds_datapoints WHERE stream = \(bind: stream) AND at > \(bind: after) ORDER BY at LIMIT 102400
                        """).all().map(FeedStore.decodePoint)
                    guard let last = points.last else { break }
                    try await FeedStore.insertChunks(DatapointChunks.split(points), stream: stream, on: db)
                    after = last.at
                }
            }
            try await db.raw("DROP TABLE feeds_datapoints").run()
        },
        Migration(5, "chunks stored in line") { db in
            // A full chunk's row fits a page (`DatapointChunks.capacity`); PostgreSQL's default
            // target (2 KiB) would move its blob out of line, into several TOAST rows to write,
            // index and read back. Chunks written earlier keep their place until rewritten.
            if db.features.storageParameters {
                try await db.raw("ALTER TABLE feeds_chunks SET (toast_tuple_target = 8160)").run()
            }
        },
        // v2 key secrets: looked up by SHA-256, readable only sealed (``KeySeal``). The table is
        // made anew: SQLite cannot drop the plain column's constraints in place.
        Migration(6, "v2 key secrets hashed and sealed") { db in
            try await db.raw("CREATE TABLE feeds_secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL)").run()
            try await db.raw("""
                CREATE TABLE feeds_keys_sealed (key_id TEXT PRIMARY KEY, key_hash TEXT NOT NULL UNIQUE, sealed_key TEXT NOT NULL, user_id TEXT,
                  label TEXT NOT NULL, private_access INTEGER NOT NULL, expires_at BIGINT, permissions TEXT NOT NULL, created BIGINT NOT NULL)
                """).run()
            let seal = KeySeal(configured: nil, stored: try await KeySeal.storedKey(db))
            for row in try await db.raw("SELECT key_id, api_key, user_id, label, private_access, expires_at, permissions, created FROM feeds_keys").all() {
                let secret = try row.decode(column: "api_key", as: String.self)
                try await db.raw("""
                    INSERT INTO feeds_keys_sealed (key_id, key_hash, sealed_key, user_id, label, private_access, expires_at, permissions, created)
                    VALUES (\(bind: try row.decode(column: "key_id", as: String.self)), \(bind: KeySeal.hash(secret)), \(bind: try seal.seal(secret)),
                      \(bind: try row.decode(column: "user_id", as: String?.self)), \(bind: try row.decode(column: "label", as: String.self)),
                      \(bind: try row.decode(column: "private_access", as: Int.self)), \(bind: try row.decode(column: "expires_at", as: Int64?.self)),
                      \(bind: try row.decode(column: "permissions", as: String.self)), \(bind: try row.decode(column: "created", as: Int64.self)))
                    """).run()
            }
            try await db.raw("DROP TABLE feeds_keys").run()
            try await db.raw("ALTER TABLE feeds_keys_sealed RENAME TO feeds_keys").run()
            try await db.raw("CREATE INDEX feeds_keys_user ON feeds_keys (user_id)").run()
        },
    ]
}
