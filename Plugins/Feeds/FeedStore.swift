import Foundation
import GatewayCore
import SQLKit

/// The feeds plugin's tables and every query on them. Knows nothing of callers and access: the
/// plugin decides who may do what and then calls the store.
///
/// Datapoints live in one narrow table keyed by (stream, at) — `WITHOUT ROWID` on SQLite — so a
/// history range is one index range scan and re-sending a datapoint replaces it.
struct FeedStore: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock

    static let migrations: [Migration] = [
        Migration(1, "feeds, datastreams and datapoints") { db in
            let serial = db.isSQLite ? "INTEGER PRIMARY KEY AUTOINCREMENT" : "BIGSERIAL PRIMARY KEY"
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
                  PRIMARY KEY (stream, at))\(unsafeRaw: db.isSQLite ? " WITHOUT ROWID" : "")
                """).run()
        },
    ]

    /// Rows per INSERT statement.
    static let rowsPerInsert = 5_000

    func now() -> Int64 { UTCTimestamp.micros(clock.now()) }

    // MARK: Feeds

    static let feedColumns = """
        id, title, description, website, tags, private, creator_id, creator_name, location_name, location_domain, \
        location_exposure, location_disposition, lat, lon, ele, created, updated, retention_seconds
        """

    func decodeFeed(_ row: any SQLRow) throws -> FeedRecord {
        FeedRecord(
            id: try row.decode(column: "id", as: Int64.self),
            title: try row.decode(column: "title", as: String.self),
            description: try row.decode(column: "description", as: String?.self),
            website: try row.decode(column: "website", as: String?.self),
            tags: Self.decodeTags(try row.decode(column: "tags", as: String.self)),
            isPrivate: try row.decode(column: "private", as: Int.self) != 0,
            creatorID: try row.decode(column: "creator_id", as: String?.self),
            creatorName: try row.decode(column: "creator_name", as: String?.self),
            location: FeedLocation(
                name: try row.decode(column: "location_name", as: String?.self),
                domain: try row.decode(column: "location_domain", as: String?.self),
                exposure: try row.decode(column: "location_exposure", as: String?.self),
                disposition: try row.decode(column: "location_disposition", as: String?.self),
                lat: try row.decode(column: "lat", as: Double?.self),
                lon: try row.decode(column: "lon", as: Double?.self),
                ele: try row.decode(column: "ele", as: String?.self)),
            created: try row.decode(column: "created", as: Int64.self),
            updated: try row.decode(column: "updated", as: Int64.self),
            retentionSeconds: try row.decode(column: "retention_seconds", as: Int64?.self))
    }

    static func encodeTags(_ tags: [String]) -> String {
        var bytes: [UInt8] = []
        JSONValue.array(tags.map(JSONValue.string)).write(into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    static func decodeTags(_ text: String) -> [String] {
        (try? JSONValue.parse(text))?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    func feed(_ id: Int64) async throws -> FeedRecord? {
        try await database.raw("SELECT \(unsafeRaw: Self.feedColumns) FROM feeds_feeds WHERE id = \(bind: id)").first().map(decodeFeed)
    }

    /// Creates a feed and its datastreams in one transaction.
    func createFeed(_ draft: FeedDraft, creatorID: String?, creatorName: String?) async throws -> FeedRecord {
        let now = now()
        let location = draft.location ?? FeedLocation()
        return try await database.transaction { db in
            let row = try await db.raw("""
                INSERT INTO feeds_feeds (title, description, website, tags, private, creator_id, creator_name, location_name, location_domain,
                  location_exposure, location_disposition, lat, lon, ele, created, updated, retention_seconds)
                VALUES (\(bind: draft.title ?? ""), \(bind: draft.description ?? nil), \(bind: draft.website ?? nil), \(bind: Self.encodeTags(draft.tags ?? [])),
                  \(bind: (draft.isPrivate ?? false) ? 1 : 0), \(bind: creatorID), \(bind: creatorName), \(bind: location.name), \(bind: location.domain),
                  \(bind: location.exposure), \(bind: location.disposition), \(bind: location.lat), \(bind: location.lon), \(bind: location.ele),
                  \(bind: now), \(bind: now), \(bind: draft.retentionSeconds ?? nil))
                RETURNING id
                """).first()
            guard let id = try row?.decode(column: "id", as: Int64.self) else { throw GatewayError.internalError("The feed was not created.") }
            for stream in draft.datastreams {
                try await upsertDatastream(stream, feedID: id, now: now, on: db)
            }
            return FeedRecord(id: id, title: draft.title ?? "", description: draft.description ?? nil, website: draft.website ?? nil,
                              tags: draft.tags ?? [], isPrivate: draft.isPrivate ?? false, creatorID: creatorID, creatorName: creatorName,
                              location: location, created: now, updated: now, retentionSeconds: draft.retentionSeconds ?? nil)
        }
    }

    /// Changes the members `draft` carries and creates or updates its datastreams, in one transaction.
    func updateFeed(_ feed: FeedRecord, with draft: FeedDraft) async throws -> FeedRecord {
        var changed = feed
        if let title = draft.title { changed.title = title }
        if let description = draft.description { changed.description = description }
        if let website = draft.website { changed.website = website }
        if let tags = draft.tags { changed.tags = tags }
        if let isPrivate = draft.isPrivate { changed.isPrivate = isPrivate }
        if let location = draft.location { changed.location = location }
        if let retention = draft.retentionSeconds { changed.retentionSeconds = retention }
        let now = max(now(), feed.updated)
        changed.updated = now
        // Only the members the draft carries are written, so that concurrent changes of other
        // members (a device updating values while its owner makes the feed private) are kept.
        var sets: [SQLQueryString] = ["updated = \(bind: now)"]
        if let title = draft.title { sets.append("title = \(bind: title)") }
        if let description = draft.description { sets.append("description = \(bind: description)") }
        if let website = draft.website { sets.append("website = \(bind: website)") }
        if let tags = draft.tags { sets.append("tags = \(bind: Self.encodeTags(tags))") }
        if let isPrivate = draft.isPrivate { sets.append("private = \(bind: isPrivate ? 1 : 0)") }
        if let location = draft.location {
            sets.append("""
                location_name = \(bind: location.name), location_domain = \(bind: location.domain), location_exposure = \(bind: location.exposure), \
                location_disposition = \(bind: location.disposition), lat = \(bind: location.lat), lon = \(bind: location.lon), ele = \(bind: location.ele)
                """)
        }
        if let retention = draft.retentionSeconds { sets.append("retention_seconds = \(bind: retention)") }
        let assignments = sets.joined(separator: ", ")
        let feedID = feed.id
        let fresh = try await database.transaction { db in
            try await db.raw("UPDATE feeds_feeds SET " + assignments + " WHERE id = \(bind: feedID)").run()
            for stream in draft.datastreams {
                try await upsertDatastream(stream, feedID: feedID, now: now, on: db)
            }
            return try await db.raw("SELECT \(unsafeRaw: Self.feedColumns) FROM feeds_feeds WHERE id = \(bind: feedID)").first().map(decodeFeed)
        }
        if let fresh { changed = fresh }
        return changed
    }

    /// Deletes a feed with its datastreams and datapoints.
    func deleteFeed(_ id: Int64) async throws {
        try await database.transaction { db in
            try await db.raw("DELETE FROM feeds_datapoints WHERE stream IN (SELECT stream_key FROM feeds_datastreams WHERE feed_id = \(bind: id))").run()
            try await db.raw("DELETE FROM feeds_datastreams WHERE feed_id = \(bind: id)").run()
            try await db.raw("DELETE FROM feeds_feeds WHERE id = \(bind: id)").run()
        }
    }

    /// What a feed list asks for.
    struct FeedFilter: Sendable {
        /// Words that must each appear in the title, description or tags.
        var query: String?
        var tag: String?
        var user: String?
        /// live: updated within `frozenAfter`; frozen: not.
        var status: String?
        /// Feeds with a datastream whose unit label or symbol is one of these.
        var units: [String] = []
        /// A circle: feeds with a location inside it.
        var near: (lat: Double, lon: Double, kilometres: Double)?
        /// The caller's user id: private feeds of others are left out unless `seesPrivate`.
        var viewer: String?
        var seesPrivate = false
        var order: Order = .id
        var offset = 0
        var limit = 50

        enum Order: Sendable { case id, created, updated }
    }

    /// A page of feeds and how many match in all.
    func listFeeds(_ filter: FeedFilter, frozenAfter: Int64) async throws -> (total: Int, feeds: [FeedRecord]) {
        var conditions: [SQLQueryString] = []
        if !filter.seesPrivate {
            if let viewer = filter.viewer {
                conditions.append("(private = 0 OR creator_id = \(bind: viewer))")
            } else {
                conditions.append("private = 0")
            }
        }
        for word in (filter.query ?? "").split(whereSeparator: \.isWhitespace).prefix(10) {
            let pattern = "%" + Self.escapeLike(word.lowercased()) + "%"
            conditions.append("(LOWER(title) LIKE \(bind: pattern) ESCAPE '\\' OR LOWER(COALESCE(description, '')) LIKE \(bind: pattern) ESCAPE '\\' OR LOWER(tags) LIKE \(bind: pattern) ESCAPE '\\')")
        }
        if let tag = filter.tag {
            let pattern = "%" + Self.escapeLike(Self.encodeTags([tag.lowercased()]).dropFirst().dropLast()) + "%"
            conditions.append("LOWER(tags) LIKE \(bind: pattern) ESCAPE '\\'")
        }
        if let user = filter.user { conditions.append("creator_name = \(bind: user)") }
        let threshold = now() - frozenAfter
        switch filter.status {
        case "live": conditions.append("updated >= \(bind: threshold)")
        case "frozen": conditions.append("updated < \(bind: threshold)")
        default: break
        }
        if !filter.units.isEmpty {
            conditions.append("EXISTS (SELECT 1 FROM feeds_datastreams d WHERE d.feed_id = feeds_feeds.id AND (d.unit_label IN (\(binds: filter.units)) OR d.unit_symbol IN (\(binds: filter.units))))")
        }
        if let near = filter.near {
            // A bounding box in SQL, the exact distance in Swift below.
            let latDelta = near.kilometres / 111.2
            let lonDelta = near.kilometres / max(0.01, 111.2 * cos(near.lat * .pi / 180))
            conditions.append("lat BETWEEN \(bind: near.lat - latDelta) AND \(bind: near.lat + latDelta)")
            if lonDelta < 180 { conditions.append("lon BETWEEN \(bind: near.lon - lonDelta) AND \(bind: near.lon + lonDelta)") }
        }
        let whereClause: SQLQueryString = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let orderClause: SQLQueryString = switch filter.order {
        case .id: " ORDER BY id"
        case .created: " ORDER BY created DESC, id DESC"
        case .updated: " ORDER BY updated DESC, id DESC"
        }
        if let near = filter.near {
            // Distance filtering happens after the box: fetch the box, filter, then page.
            let rows = try await database.raw("SELECT \(unsafeRaw: Self.feedColumns) FROM feeds_feeds" + whereClause + orderClause + " LIMIT 100000").all()
            let inside = try rows.map(decodeFeed).filter { feed in
                guard let lat = feed.location.lat, let lon = feed.location.lon else { return false }
                return Self.kilometres(from: (near.lat, near.lon), to: (lat, lon)) <= near.kilometres
            }
            return (inside.count, Array(inside.dropFirst(filter.offset).prefix(filter.limit)))
        }
        let count = try await database.raw("SELECT COUNT(*) AS n FROM feeds_feeds" + whereClause).first()?.decode(column: "n", as: Int.self) ?? 0
        let rows = try await database.raw("SELECT \(unsafeRaw: Self.feedColumns) FROM feeds_feeds" + whereClause + orderClause
                                          + " LIMIT \(literal: filter.limit) OFFSET \(literal: filter.offset)").all()
        return (count, try rows.map(decodeFeed))
    }

    static func escapeLike(_ text: some StringProtocol) -> String {
        var escaped = ""
        for character in text {
            if character == "%" || character == "_" || character == "\\" { escaped.append("\\") }
            escaped.append(character)
        }
        return escaped
    }

    /// Great-circle distance (haversine).
    static func kilometres(from a: (Double, Double), to b: (Double, Double)) -> Double {
        let radians = Double.pi / 180
        let dLat = (b.0 - a.0) * radians
        let dLon = (b.1 - a.1) * radians
        let h = sin(dLat / 2) * sin(dLat / 2) + cos(a.0 * radians) * cos(b.0 * radians) * sin(dLon / 2) * sin(dLon / 2)
        return 6_371.0 * 2 * atan2(sqrt(h), sqrt(max(0, 1 - h)))
    }

    // MARK: Datastreams

    static let streamColumns = "stream_key, feed_id, id, tags, unit_label, unit_symbol, unit_type, current_value, at, min_value, max_value, created, updated"

    func decodeStream(_ row: any SQLRow) throws -> DatastreamRecord {
        DatastreamRecord(
            key: try row.decode(column: "stream_key", as: Int64.self),
            feedID: try row.decode(column: "feed_id", as: Int64.self),
            id: try row.decode(column: "id", as: String.self),
            tags: Self.decodeTags(try row.decode(column: "tags", as: String.self)),
            unit: DatastreamUnit(label: try row.decode(column: "unit_label", as: String?.self),
                                 symbol: try row.decode(column: "unit_symbol", as: String?.self),
                                 type: try row.decode(column: "unit_type", as: String?.self)),
            currentValue: try row.decode(column: "current_value", as: Double?.self),
            at: try row.decode(column: "at", as: Int64?.self),
            minValue: try row.decode(column: "min_value", as: Double?.self),
            maxValue: try row.decode(column: "max_value", as: Double?.self),
            created: try row.decode(column: "created", as: Int64.self),
            updated: try row.decode(column: "updated", as: Int64.self))
    }

    /// The datastreams of a feed, by id.
    func datastreams(of feedID: Int64) async throws -> [DatastreamRecord] {
        // Sorted here: the databases' collations differ (PostgreSQL's may ignore case).
        try await database.raw("SELECT \(unsafeRaw: Self.streamColumns) FROM feeds_datastreams WHERE feed_id = \(bind: feedID)").all().map(decodeStream)
            .sorted { $0.id < $1.id }
    }

    /// The datastreams of several feeds at once, grouped by feed.
    func datastreams(of feedIDs: [Int64]) async throws -> [Int64: [DatastreamRecord]] {
        guard !feedIDs.isEmpty else { return [:] }
        let rows = try await database.raw("SELECT \(unsafeRaw: Self.streamColumns) FROM feeds_datastreams WHERE feed_id IN (\(binds: feedIDs))").all()
        return Dictionary(grouping: try rows.map(decodeStream).sorted { $0.id < $1.id }, by: \.feedID)
    }

    func datastream(feedID: Int64, id: String) async throws -> DatastreamRecord? {
        try await database.raw("SELECT \(unsafeRaw: Self.streamColumns) FROM feeds_datastreams WHERE feed_id = \(bind: feedID) AND id = \(bind: id)")
            .first().map(decodeStream)
    }

    /// Creates datastreams that must not exist yet (409 naming the first that does), in one transaction.
    func createDatastreams(_ drafts: [DatastreamDraft], feedID: Int64) async throws {
        let now = now()
        try await database.transaction { db in
            for draft in drafts {
                if try await db.raw("SELECT 1 AS x FROM feeds_datastreams WHERE feed_id = \(bind: feedID) AND id = \(bind: draft.id)").first() != nil {
                    throw GatewayError.conflict("The feed already has a datastream '\(draft.id)'.")
                }
                try await upsertDatastream(draft, feedID: feedID, now: now, on: db)
            }
            try await db.raw("UPDATE feeds_feeds SET updated = \(bind: now) WHERE id = \(bind: feedID) AND updated < \(bind: now)").run()
        }
    }

    /// Changes a datastream's tags and unit, and records its new current value if one is given.
    func updateDatastream(_ draft: DatastreamDraft, feedID: Int64) async throws {
        let now = now()
        try await database.transaction { db in
            try await upsertDatastream(draft, feedID: feedID, now: now, on: db)
            try await db.raw("UPDATE feeds_feeds SET updated = \(bind: now) WHERE id = \(bind: feedID) AND updated < \(bind: now)").run()
        }
    }

    /// Creates the datastream or changes the members `draft` carries; a current value becomes a datapoint.
    private func upsertDatastream(_ draft: DatastreamDraft, feedID: Int64, now: Int64, on db: any SQLDatabase) async throws {
        let existing = try await db.raw("SELECT \(unsafeRaw: Self.streamColumns) FROM feeds_datastreams WHERE feed_id = \(bind: feedID) AND id = \(bind: draft.id)")
            .first().map(decodeStream)
        let key: Int64
        if let existing {
            let unit = draft.unit ?? existing.unit
            try await db.raw("""
                UPDATE feeds_datastreams SET tags = \(bind: Self.encodeTags(draft.tags ?? existing.tags)), unit_label = \(bind: unit.label),
                  unit_symbol = \(bind: unit.symbol), unit_type = \(bind: unit.type), updated = \(bind: now)
                WHERE stream_key = \(bind: existing.key)
                """).run()
            key = existing.key
        } else {
            let unit = draft.unit ?? DatastreamUnit()
            let row = try await db.raw("""
                INSERT INTO feeds_datastreams (feed_id, id, tags, unit_label, unit_symbol, unit_type, created, updated)
                VALUES (\(bind: feedID), \(bind: draft.id), \(bind: Self.encodeTags(draft.tags ?? [])), \(bind: unit.label), \(bind: unit.symbol),
                  \(bind: unit.type), \(bind: now), \(bind: now))
                RETURNING stream_key
                """).first()
            guard let newKey = try row?.decode(column: "stream_key", as: Int64.self) else { throw GatewayError.internalError("The datastream was not created.") }
            key = newKey
        }
        if let value = draft.currentValue {
            try await write([Datapoint(at: draft.at ?? now, value: value)], stream: key, feedID: feedID, now: now, on: db)
        }
    }

    /// Deletes a datastream and its datapoints.
    func deleteDatastream(_ stream: DatastreamRecord) async throws {
        let now = now()
        try await database.transaction { db in
            try await db.raw("DELETE FROM feeds_datapoints WHERE stream = \(bind: stream.key)").run()
            try await db.raw("DELETE FROM feeds_datastreams WHERE stream_key = \(bind: stream.key)").run()
            try await db.raw("UPDATE feeds_feeds SET updated = \(bind: now) WHERE id = \(bind: stream.feedID) AND updated < \(bind: now)").run()
        }
    }

    // MARK: Datapoints

    /// Records datapoints, all or none: a datapoint at an existing `at` replaces it. Keeps the
    /// stream's current value (the latest datapoint), minimum and maximum, and the feed's `updated`.
    func ingest(_ points: [Datapoint], into stream: DatastreamRecord) async throws {
        guard !points.isEmpty else { return }
        let now = now()
        try await database.transaction { db in
            try await write(points, stream: stream.key, feedID: stream.feedID, now: now, on: db)
        }
    }

    private func write(_ points: [Datapoint], stream: Int64, feedID: Int64, now: Int64, on db: any SQLDatabase) async throws {
        var start = 0
        while start < points.count {
            // The rows travel as one JSON array of [at, value] pairs that the database unpacks
            // itself (json_each, jsonb_array_elements): a short statement to parse and one bind,
            // far cheaper than a thousand. Nothing from the client is copied into it: the plugin
            // writes the numbers, in forms that read back as the same doubles.
            let chunk = points[start..<min(points.count, start + Self.rowsPerInsert)]
            var text: [UInt8] = []
            text.reserveCapacity(2 + chunk.count * 40)
            text.append(UInt8(ascii: "["))
            for (index, point) in chunk.enumerated() {
                text.append(contentsOf: index > 0 ? [UInt8(ascii: ","), UInt8(ascii: "[")] : [UInt8(ascii: "[")])
                Self.write(integer: point.at, into: &text)
                text.append(UInt8(ascii: ","))
                Self.write(double: point.value, into: &text)
                text.append(UInt8(ascii: "]"))
            }
            text.append(UInt8(ascii: "]"))
            let rows = String(decoding: text, as: UTF8.self)
            let sql: SQLQueryString = db.isSQLite
                ? "INSERT INTO feeds_datapoints (stream, at, value) SELECT \(bind: stream), value ->> 0, value ->> 1 FROM jsonb_each(\(bind: rows)) WHERE true ON CONFLICT (stream, at) DO UPDATE SET value = excluded.value"
                : "INSERT INTO feeds_datapoints (stream, at, value) SELECT \(bind: stream), (e ->> 0)::bigint, (e ->> 1)::double precision FROM jsonb_array_elements(\(bind: rows)::jsonb) AS e ON CONFLICT (stream, at) DO UPDATE SET value = excluded.value"
            try await db.raw(sql).run()
            start += Self.rowsPerInsert
        }
        var latest = points[0]
        var low = points[0].value
        var high = points[0].value
        for point in points.dropFirst() {
            if point.at >= latest.at { latest = point }
            low = min(low, point.value)
            high = max(high, point.value)
        }
        try await db.raw("""
            UPDATE feeds_datastreams SET
              current_value = CASE WHEN at IS NULL OR at <= \(bind: latest.at) THEN \(bind: latest.value) ELSE current_value END,
              at = CASE WHEN at IS NULL OR at <= \(bind: latest.at) THEN \(bind: latest.at) ELSE at END,
              min_value = CASE WHEN min_value IS NULL OR min_value > \(bind: low) THEN \(bind: low) ELSE min_value END,
              max_value = CASE WHEN max_value IS NULL OR max_value < \(bind: high) THEN \(bind: high) ELSE max_value END,
              updated = \(bind: now)
            WHERE stream_key = \(bind: stream)
            """).run()
        try await db.raw("UPDATE feeds_feeds SET updated = \(bind: now) WHERE id = \(bind: feedID) AND updated < \(bind: now)").run()
    }

    static func write(integer: Int64, into text: inout [UInt8]) {
        if integer < 0 { text.append(UInt8(ascii: "-")) }
        var magnitude = integer.magnitude
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(truncatingIfNeeded: 48 + magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            for position in stride(from: count - 1, through: 0, by: -1) { text.append(buffer[position]) }
        }
    }

    /// A finite double as a JSON number that reads back as the same double (its shortest
    /// round-trip form; always with a dot or an exponent, so that it stays REAL).
    static func write(double: Double, into text: inout [UInt8]) {
        let start = text.count
        text.append(contentsOf: double.description.utf8)
        if !text[start...].contains(where: { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") }) { text.append(contentsOf: ".0".utf8) }
    }

    /// One datapoint, or nil.
    func datapoint(_ stream: DatastreamRecord, at: Int64) async throws -> Datapoint? {
        try await database.raw("SELECT at, value FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at = \(bind: at)").first().map(Self.decodePoint)
    }

    /// Changes the value of an existing datapoint; false when there is none at `at`.
    func updateDatapoint(_ stream: DatastreamRecord, at: Int64, value: Double) async throws -> Bool {
        let now = now()
        return try await database.transaction { db in
            guard try await db.raw("SELECT 1 AS x FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at = \(bind: at)").first() != nil else { return false }
            try await write([Datapoint(at: at, value: value)], stream: stream.key, feedID: stream.feedID, now: now, on: db)
            return true
        }
    }

    /// Deletes the datapoints in [start, end] and returns how many there were. The stream's current
    /// value falls back to the latest remaining datapoint.
    func deleteDatapoints(_ stream: DatastreamRecord, from start: Int64, through end: Int64) async throws -> Int {
        let now = now()
        return try await database.transaction { db in
            let count = try await db.raw("SELECT COUNT(*) AS n FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at >= \(bind: start) AND at <= \(bind: end)")
                .first()?.decode(column: "n", as: Int.self) ?? 0
            guard count > 0 else { return 0 }
            try await db.raw("DELETE FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at >= \(bind: start) AND at <= \(bind: end)").run()
            try await db.raw("""
                UPDATE feeds_datastreams SET
                  current_value = (SELECT value FROM feeds_datapoints WHERE stream = \(bind: stream.key) ORDER BY at DESC LIMIT 1),
                  at = (SELECT at FROM feeds_datapoints WHERE stream = \(bind: stream.key) ORDER BY at DESC LIMIT 1),
                  updated = \(bind: now)
                WHERE stream_key = \(bind: stream.key)
                """).run()
            try await db.raw("UPDATE feeds_feeds SET updated = \(bind: now) WHERE id = \(bind: stream.feedID) AND updated < \(bind: now)").run()
            return count
        }
    }

    /// Removes datapoints older than each feed's retention; returns how many went.
    func applyRetention() async throws -> Int {
        let feeds = try await database.raw("SELECT id, retention_seconds FROM feeds_feeds WHERE retention_seconds IS NOT NULL").all()
        var removed = 0
        let now = now()
        for row in feeds {
            let id = try row.decode(column: "id", as: Int64.self)
            let seconds = try row.decode(column: "retention_seconds", as: Int64.self)
            let cutoff = now - seconds * 1_000_000
            for stream in try await datastreams(of: id) {
                removed += try await deleteDatapoints(stream, from: Int64.min / 2, through: cutoff - 1)
            }
        }
        return removed
    }

    static func decodePoint(_ row: any SQLRow) throws -> Datapoint {
        Datapoint(at: try row.decode(column: "at", as: Int64.self), value: try row.decode(column: "value", as: Double.self))
    }

    // MARK: History

    /// The datapoints a history query selects, oldest first.
    func history(_ stream: DatastreamRecord, _ query: HistoryQuery) async throws -> [Datapoint] {
        if let function = query.function, let interval = query.interval {
            return try await aggregated(stream, query, interval: interval, function: function)
        }
        if let interval = query.interval, interval > 0 {
            return try await sampled(stream, query, interval: interval)
        }
        var points: [Datapoint]
        if query.newest {
            points = try await database.raw("""
                SELECT at, value FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at <= \(bind: query.end)
                ORDER BY at DESC LIMIT \(literal: query.limit)
                """).all().map(Self.decodePoint).reversed()
        } else {
            points = try await database.raw("""
                SELECT at, value FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at >= \(bind: query.start) AND at <= \(bind: query.end)
                ORDER BY at LIMIT \(literal: query.limit)
                """).all().map(Self.decodePoint)
        }
        if query.findPrevious, !query.newest,
           let previous = try await database.raw("""
               SELECT at, value FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at < \(bind: query.start) ORDER BY at DESC LIMIT 1
               """).first().map(Self.decodePoint) {
            points.insert(previous, at: 0)
            if points.count > query.limit { points.removeLast() }
        }
        return points
    }

    /// The value in force at each interval point from `start` (one index seek per point, in one
    /// statement). Without `discrete` each datapoint found appears once, at its own time; with it,
    /// every point appears, at the point's time.
    private func sampled(_ stream: DatastreamRecord, _ query: HistoryQuery, interval: Int64) async throws -> [Datapoint] {
        let step = interval * 1_000_000
        let lowest = query.findPrevious ? Int64.min / 2 : query.start
        let count = min(query.discrete ? Int64(query.limit) : HistoryQuery.maximumPoints, (query.end - query.start) / step + 1)
        let rows = try await database.raw("""
            WITH RECURSIVE grid(t, n) AS (SELECT CAST(\(bind: query.start) AS BIGINT), 1 UNION ALL SELECT t + \(bind: step), n + 1 FROM grid WHERE n < \(bind: count))
            SELECT t, (SELECT at FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at <= grid.t AND at >= \(bind: lowest) ORDER BY at DESC LIMIT 1) AS at,
                   (SELECT value FROM feeds_datapoints WHERE stream = \(bind: stream.key) AND at <= grid.t AND at >= \(bind: lowest) ORDER BY at DESC LIMIT 1) AS value
            FROM grid ORDER BY t
            """).all()
        var points: [Datapoint] = []
        points.reserveCapacity(min(rows.count, query.limit))
        for row in rows {
            guard let at = try row.decode(column: "at", as: Int64?.self), let value = try row.decode(column: "value", as: Double?.self) else { continue }
            if query.discrete {
                points.append(Datapoint(at: try row.decode(column: "t", as: Int64.self), value: value))
            } else if points.last?.at != at {
                points.append(Datapoint(at: at, value: value))
            }
            if points.count == query.limit { break }
        }
        return points
    }

    /// One value per interval that holds datapoints: the function over them, at the interval's
    /// start. Each interval is its own index range scan (in one statement), so the rows come in
    /// order without a sort; first and last are one seek each.
    private func aggregated(_ stream: DatastreamRecord, _ query: HistoryQuery, interval: Int64, function: HistoryFunction) async throws -> [Datapoint] {
        let step = max(1, interval) * 1_000_000
        let range = "FROM feeds_datapoints WHERE stream = \(stream.key) AND at >= grid.t AND at < grid.t + \(step) AND at <= \(query.end)"
        let expression: String = switch function {
        case .avg: "(SELECT AVG(value) \(range))"
        case .min: "(SELECT MIN(value) \(range))"
        case .max: "(SELECT MAX(value) \(range))"
        case .sum: "(SELECT SUM(value) \(range))"
        case .count: "(SELECT CAST(NULLIF(COUNT(*), 0) AS DOUBLE PRECISION) \(range))"
        case .first: "(SELECT value \(range) ORDER BY at LIMIT 1)"
        case .last: "(SELECT value \(range) ORDER BY at DESC LIMIT 1)"
        }
        let count = min(HistoryQuery.maximumPoints, (query.end - query.start) / step + 1)
        let rows = try await database.raw("""
            WITH RECURSIVE grid(t, n) AS (SELECT CAST(\(bind: query.start) AS BIGINT), 1 UNION ALL SELECT t + \(bind: step), n + 1 FROM grid WHERE n < \(bind: count))
            SELECT t, \(unsafeRaw: expression) AS value FROM grid ORDER BY t
            """).all()
        var points: [Datapoint] = []
        for row in rows {
            guard let value = try row.decode(column: "value", as: Double?.self) else { continue }
            points.append(Datapoint(at: try row.decode(column: "t", as: Int64.self), value: value))
            if points.count == query.limit { break }
        }
        return points
    }
}
