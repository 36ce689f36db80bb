import Foundation
import GatewayCore
import GatewaySupport
import SQLKit

/// The feeds plugin's tables and every query on them. Knows nothing of callers and access: the
/// plugin decides who may do what and then calls the store.
///
/// Datapoints live in chunks (`DatapointChunks`): rows of up to 500 consecutive datapoints of a
/// stream, keyed by (stream, first_at), so that a batch is a few rows to write and a history range
/// is one index range scan. Re-sending a datapoint replaces it.
struct FeedStore: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock
    /// Batches for one datastream that arrive while one is being written go in together, in one
    /// transaction: a stream's writers take turns on its row anyway, and on PostgreSQL each turn
    /// is a transaction of several round trips.
    let ingests: WriteCombiner<Int64, Ingest>

    /// A batch of datapoints for a datastream of a feed.
    struct Ingest: Sendable {
        let points: [Datapoint]
        let feedID: Int64
        let now: Int64
    }

    init(database: any SQLDatabase, clock: any WallClock) {
        self.database = database
        self.clock = clock
        ingests = WriteCombiner(maxItems: 32) { stream, batches in
            // In arrival order: where two batches have a time, the later one's value stays.
            let points = batches.count == 1 ? batches[0].points : batches.flatMap(\.points)
            try await database.transaction { db in
                try await Self.write(points, stream: stream, feedID: batches[0].feedID, now: batches.map(\.now).max()!, on: db)
            }
        }
    }

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
            // The datastream rows go first: writers lock a stream's row before its chunks, so
            // taking the locks in the same order cannot deadlock, and a writer that waited finds
            // its stream gone.
            let keys = try await db.raw("DELETE FROM feeds_datastreams WHERE feed_id = \(bind: id) RETURNING stream_key").all()
                .map { try $0.decode(column: "stream_key", as: Int64.self) }
            if !keys.isEmpty { try await db.raw("DELETE FROM feeds_chunks WHERE stream IN (\(binds: keys))").run() }
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
        try decodeStream(row, prefix: "")
    }

    /// A datastream from `row`, whose columns are ``streamColumns`` with `prefix` before each name.
    func decodeStream(_ row: any SQLRow, prefix: String) throws -> DatastreamRecord {
        DatastreamRecord(
            key: try row.decode(column: prefix + "stream_key", as: Int64.self),
            feedID: try row.decode(column: prefix + "feed_id", as: Int64.self),
            id: try row.decode(column: prefix + "id", as: String.self),
            tags: Self.decodeTags(try row.decode(column: prefix + "tags", as: String.self)),
            unit: DatastreamUnit(label: try row.decode(column: prefix + "unit_label", as: String?.self),
                                 symbol: try row.decode(column: prefix + "unit_symbol", as: String?.self),
                                 type: try row.decode(column: prefix + "unit_type", as: String?.self)),
            currentValue: try row.decode(column: prefix + "current_value", as: Double?.self),
            at: try row.decode(column: prefix + "at", as: Int64?.self),
            minValue: try row.decode(column: prefix + "min_value", as: Double?.self),
            maxValue: try row.decode(column: prefix + "max_value", as: Double?.self),
            created: try row.decode(column: prefix + "created", as: Int64.self),
            updated: try row.decode(column: prefix + "updated", as: Int64.self))
    }

    /// The feed's columns as `f.name`, and the datastream's as `s.name AS s_name`, for a join of the two.
    private static let joinedColumns = (feedColumns.split(separator: ",").map { "f.\($0.trimmingCharacters(in: .whitespacesAndNewlines))" }
        + streamColumns.split(separator: ",").map { column in
            let name = column.trimmingCharacters(in: .whitespaces)
            return "s.\(name) AS s_\(name)"
        }).joined(separator: ", ")

    /// A feed and one of its datastreams, in one statement (a request on a datastream needs both):
    /// nil without the feed, a nil datastream when the feed has none of that id.
    func feed(_ id: Int64, datastream streamID: String) async throws -> (feed: FeedRecord, stream: DatastreamRecord?)? {
        guard let row = try await database.rows(statement: Self.feedAndStreamSQL, [.text(streamID), .integer(id)]).first else { return nil }
        let stream = try row.decode(column: "s_stream_key", as: Int64?.self) == nil ? nil : try decodeStream(row, prefix: "s_")
        return (try decodeFeed(row), stream)
    }

    private static let feedAndStreamSQL = """
        SELECT \(joinedColumns) FROM feeds_feeds f LEFT JOIN feeds_datastreams s ON s.feed_id = f.id AND s.id = ? WHERE f.id = ?
        """

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
            try await Self.write([Datapoint(at: draft.at ?? now, value: value)], stream: key, feedID: feedID, now: now, on: db)
        }
    }

    /// Deletes a datastream and its datapoints.
    func deleteDatastream(_ stream: DatastreamRecord) async throws {
        let now = now()
        try await database.transaction { db in
            // The row first, as in `deleteFeed`.
            try await db.raw("DELETE FROM feeds_datastreams WHERE stream_key = \(bind: stream.key)").run()
            try await db.raw("DELETE FROM feeds_chunks WHERE stream = \(bind: stream.key)").run()
            try await db.raw("UPDATE feeds_feeds SET updated = \(bind: now) WHERE id = \(bind: stream.feedID) AND updated < \(bind: now)").run()
        }
    }

    // MARK: Datapoints

    /// Records datapoints, all or none: a datapoint at an existing `at` replaces it. Keeps the
    /// stream's current value (the latest datapoint), minimum and maximum, and the feed's `updated`.
    func ingest(_ points: [Datapoint], into stream: DatastreamRecord) async throws {
        guard !points.isEmpty else { return }
        try await ingests.submit(Ingest(points: points, feedID: stream.feedID, now: now()), key: stream.key)
    }

    /// Writes datapoints into the stream's chunks. The datastream's row is updated first: on
    /// PostgreSQL its lock makes concurrent writers of one stream take turns (SQLite has one
    /// writer anyway), and a stream deleted meanwhile is a 404. Only the chunks that hold a time of
    /// the batch are read, merged with it and written back; for a small batch also the chunks just
    /// before and after it when they have room, so that datapoints sent one at a time (in either
    /// order) fill chunks. Chunks in between that hold none of its times stay as they are.
    private static func write(_ incoming: [Datapoint], stream: Int64, feedID: Int64, now: Int64, on db: any SQLDatabase) async throws {
        let points = DatapointChunks.normalized(incoming)
        guard let first = points.first, let latest = points.last else { return }
        var low = first.value
        var high = first.value
        for point in points {
            low = min(low, point.value)
            high = max(high, point.value)
        }
        guard try await !db.rows(statement: Self.streamWriteSQL, [
            .integer(latest.at), .real(latest.value), .integer(latest.at), .integer(latest.at), .real(low), .real(low),
            .real(high), .real(high), .integer(now), .integer(stream),
        ]).isEmpty else { throw GatewayError.notFound("The datastream no longer exists.") }
        let candidates = try await db.rows(statement: Self.candidatesSQL, [
            .integer(stream), .integer(stream), .integer(first.at), .integer(first.at), .integer(stream), .integer(latest.at), .integer(latest.at),
        ])
        let small = points.count < DatapointChunks.capacity / 2
        var touched: [Int64] = []
        var untouched: [Int64] = []
        for row in candidates {
            let firstAt = try row.decode(column: "first_at", as: Int64.self)
            let lastAt = try row.decode(column: "last_at", as: Int64.self)
            let holds = DatapointChunks.lastIndex(atOrBefore: lastAt, in: points).map { points[$0].at >= firstAt } ?? false
            let count = try row.decode(column: "n", as: Int.self)
            let neighbour = small && (lastAt < first.at || firstAt > latest.at) && count < DatapointChunks.capacity
            if holds || neighbour { touched.append(firstAt) } else { untouched.append(firstAt) }
        }
        // The touched chunks, taken out and read in one statement each 500.
        var taken: [(firstAt: Int64, points: Data)] = []
        for group in stride(from: 0, to: touched.count, by: 500).map({ Array(touched[$0..<min(touched.count, $0 + 500)]) }) {
            let values = [StatementValue.integer(stream)] + group.map(StatementValue.integer)
            for row in try await db.rows(statement: "DELETE FROM feeds_chunks WHERE stream = ? AND first_at IN (\(Self.places(group.count))) RETURNING first_at, points", values) {
                taken.append((try row.decode(column: "first_at", as: Int64.self), try row.decode(column: "points", as: Data.self)))
            }
        }
        var existing: [Datapoint] = []
        for chunk in taken.sorted(by: { $0.firstAt < $1.firstAt }) {
            try DatapointChunks.decode(chunk.points, into: &existing)
        }
        // The merged datapoints, cut wherever a chunk left alone lies between two of them.
        var runs: [[Datapoint]] = [[]]
        var next = 0
        for point in DatapointChunks.merge(existing, points) {
            var passed = false
            while next < untouched.count, untouched[next] < point.at {
                passed = true
                next += 1
            }
            if passed, !runs[runs.count - 1].isEmpty { runs.append([]) }
            runs[runs.count - 1].append(point)
        }
        try await Self.insertChunks(runs.flatMap(DatapointChunks.split), stream: stream, on: db, touching: (feedID, now))
    }

    /// The statements of ``write``, each one text (prepared once per connection on PostgreSQL).
    private static let streamWriteSQL = """
        UPDATE feeds_datastreams SET
          current_value = CASE WHEN at IS NULL OR at <= ? THEN ? ELSE current_value END,
          at = CASE WHEN at IS NULL OR at <= ? THEN ? ELSE at END,
          min_value = CASE WHEN min_value IS NULL OR min_value > ? THEN ? ELSE min_value END,
          max_value = CASE WHEN max_value IS NULL OR max_value < ? THEN ? ELSE max_value END,
          updated = ?
        WHERE stream_key = ? RETURNING stream_key
        """
    /// The candidates, without their blobs: the chunk at or before the batch's first time, those
    /// starting inside its range, and the one after it. The neighbours are found with `ORDER BY …
    /// LIMIT 1` rather than `MAX`/`MIN`: PostgreSQL keeps one generic plan for a prepared statement,
    /// and one made while the table was empty read `MAX` by scanning every chunk of the stream.
    private static let candidatesSQL = """
        SELECT first_at, last_at, n FROM feeds_chunks WHERE stream = ?
          AND first_at >= COALESCE((SELECT first_at FROM feeds_chunks WHERE stream = ? AND first_at <= ? ORDER BY first_at DESC LIMIT 1), ?)
          AND first_at <= COALESCE((SELECT first_at FROM feeds_chunks WHERE stream = ? AND first_at > ? ORDER BY first_at LIMIT 1), ?)
        ORDER BY first_at
        """

    /// `count` placeholders, comma-separated.
    static func places(_ count: Int) -> String {
        Array(repeating: "?", count: count).joined(separator: ", ")
    }

    /// Inserts chunks (each non-empty, in increasing time), in statements of up to 50 rows. With
    /// `feed`, also sets that feed's `updated` to `now` (when it is earlier): on PostgreSQL in the
    /// first insert's statement (one round trip less in the ingest's transaction; the stream's row
    /// is locked already, so the locks are taken in the same order as before), on SQLite after it.
    static func insertChunks(_ chunks: [ArraySlice<Datapoint>], stream: Int64, on db: any SQLDatabase,
                             touching feed: (id: Int64, now: Int64)? = nil) async throws {
        let feedValues: [StatementValue] = feed.map { [.integer($0.now), .integer($0.id), .integer($0.now)] } ?? []
        var feedPending = feed != nil
        var start = 0
        while start < chunks.count {
            let rows = chunks[start..<min(chunks.count, start + 50)]
            let withFeed = feedPending && db.features.writingCTEs
            var values: [StatementValue] = withFeed ? feedValues : []
            values.reserveCapacity(values.count + rows.count * 10)
            for chunk in rows {
                let summary = DatapointChunks.summary(of: chunk)
                values += [.integer(stream), .integer(summary.firstAt), .integer(summary.lastAt), .integer(Int64(summary.count)), .real(summary.low),
                           .real(summary.high), .real(summary.total), .real(summary.firstValue), .real(summary.lastValue), .blob(DatapointChunks.encode(chunk))]
            }
            try await db.run(statement: (withFeed ? insertChunksTouchingFeedSQL : insertChunksSQL)[rows.count - 1], values)
            if withFeed { feedPending = false }
            start += 50
        }
        if feedPending { try await db.run(statement: touchFeedSQL, feedValues) }
    }

    private static let touchFeedSQL = "UPDATE feeds_feeds SET updated = ? WHERE id = ? AND updated < ?"
    /// For 1 to 50 rows, the insert of that many chunks.
    private static let insertChunksSQL = (1...50).map { count in
        "INSERT INTO feeds_chunks (stream, first_at, last_at, n, low, high, total, first_value, last_value, points) VALUES "
            + Array(repeating: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", count: count).joined(separator: ", ")
    }
    /// The same, with the feed's `updated` set in the statement (PostgreSQL).
    private static let insertChunksTouchingFeedSQL = insertChunksSQL.map { "WITH feed AS (\(touchFeedSQL)) " + $0 }

    /// The chunks of a stream that may hold datapoints in [start, end], oldest first: the one at
    /// or before `start` and those starting inside the range. `columns` are selected.
    private static func overlapping(_ stream: Int64, from start: Int64, through end: Int64, columns: String, limit: Int? = nil) -> SQLQueryString {
        """
        SELECT \(unsafeRaw: columns) FROM feeds_chunks WHERE stream = \(bind: stream) AND first_at <= \(bind: end)
          AND first_at >= COALESCE((SELECT MAX(first_at) FROM feeds_chunks WHERE stream = \(bind: stream) AND first_at <= \(bind: start)), \(bind: start))
        ORDER BY first_at\(unsafeRaw: limit.map { " LIMIT \($0)" } ?? "")
        """
    }

    /// One datapoint, or nil.
    func datapoint(_ stream: DatastreamRecord, at: Int64) async throws -> Datapoint? {
        try await Self.datapoint(stream.key, at: at, on: database)
    }

    private static func datapoint(_ stream: Int64, at: Int64, on db: any SQLDatabase) async throws -> Datapoint? {
        guard let row = try await db.raw("""
            SELECT points FROM feeds_chunks WHERE stream = \(bind: stream) AND first_at <= \(bind: at) ORDER BY first_at DESC LIMIT 1
            """).first() else { return nil }
        let points = try DatapointChunks.decode(try row.decode(column: "points", as: Data.self))
        guard let index = DatapointChunks.lastIndex(atOrBefore: at, in: points), points[index].at == at else { return nil }
        return points[index]
    }

    /// Changes the value of an existing datapoint; false when there is none at `at`.
    func updateDatapoint(_ stream: DatastreamRecord, at: Int64, value: Double) async throws -> Bool {
        let now = now()
        return try await database.transaction { db in
            // The stream's lock first (see `write`), so that a concurrent delete cannot slip in
            // between the check and the write.
            try await db.raw("UPDATE feeds_datastreams SET updated = updated WHERE stream_key = \(bind: stream.key)").run()
            guard try await Self.datapoint(stream.key, at: at, on: db) != nil else { return false }
            try await Self.write([Datapoint(at: at, value: value)], stream: stream.key, feedID: stream.feedID, now: now, on: db)
            return true
        }
    }

    /// Deletes the datapoints in [start, end] and returns how many there were. The stream's current
    /// value falls back to the latest remaining datapoint.
    func deleteDatapoints(_ stream: DatastreamRecord, from start: Int64, through end: Int64) async throws -> Int {
        let now = now()
        return try await database.transaction { db in
            // First the row lock that orders writers of the stream (see `write`).
            try await db.raw("UPDATE feeds_datastreams SET updated = updated WHERE stream_key = \(bind: stream.key)").run()
            // Chunks wholly inside the range go without being read; the (at most two) that
            // straddle an end are rewritten without the datapoints inside.
            var count = try await db.raw("""
                SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS n FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at >= \(bind: start) AND first_at <= \(bind: end)
                  AND last_at <= \(bind: end)
                """).first()?.decode(column: "n", as: Int.self) ?? 0
            if count > 0 {
                try await db.raw("""
                    DELETE FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at >= \(bind: start) AND first_at <= \(bind: end) AND last_at <= \(bind: end)
                    """).run()
            }
            for row in try await db.raw(Self.overlapping(stream.key, from: start, through: end, columns: "first_at, last_at, points")).all() {
                guard try row.decode(column: "last_at", as: Int64.self) >= start else { continue }
                let points = try DatapointChunks.decode(try row.decode(column: "points", as: Data.self))
                let kept = points.filter { $0.at < start || $0.at > end }
                guard kept.count < points.count else { continue }
                count += points.count - kept.count
                try await db.raw("""
                    DELETE FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at = \(bind: try row.decode(column: "first_at", as: Int64.self))
                    """).run()
                if !kept.isEmpty { try await Self.insertChunks([kept[...]], stream: stream.key, on: db) }
            }
            guard count > 0 else { return 0 }
            let newest = try await db.raw("""
                SELECT last_at, last_value FROM feeds_chunks WHERE stream = \(bind: stream.key) ORDER BY first_at DESC LIMIT 1
                """).first()
            let at = try newest?.decode(column: "last_at", as: Int64.self)
            let value = try newest?.decode(column: "last_value", as: Double.self)
            try await db.raw("""
                UPDATE feeds_datastreams SET current_value = \(bind: value), at = \(bind: at), updated = \(bind: now) WHERE stream_key = \(bind: stream.key)
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
        if query.newest { return try await newest(stream, query) }
        // Chunks are read a few at a time until `limit` datapoints are found. Each page starts at
        // the chunk holding the first time not yet read, and takes only datapoints from that time
        // on: a chunk split or merged by a writer between two pages can neither hide a datapoint
        // nor give one twice.
        let lowest = query.findPrevious ? Int64.min / 2 : query.start
        var previous: Datapoint?
        var points: [Datapoint] = []
        var decoded: [Datapoint] = []
        var cursor = query.start
        page: while cursor <= query.end {
            let rows = try await database.raw(Self.overlapping(stream.key, from: cursor, through: query.end, columns: "last_at, points", limit: 4)).all()
            var reached = cursor
            for row in rows {
                decoded.removeAll(keepingCapacity: true)
                try DatapointChunks.decode(try row.decode(column: "points", as: Data.self), into: &decoded)
                for point in decoded where point.at <= query.end {
                    if point.at < cursor {
                        if point.at < query.start, point.at >= lowest { previous = point }
                        continue
                    }
                    points.append(point)
                    if points.count == query.limit { break page }
                }
                reached = max(reached, try row.decode(column: "last_at", as: Int64.self) + 1)
            }
            guard rows.count == 4, reached > cursor else { break }
            cursor = reached
        }
        if query.findPrevious {
            if previous == nil {
                // Not in the chunks read (one of them starts at `start`): the last datapoint of
                // the newest chunk that ends before it.
                previous = try await database.raw("""
                    SELECT last_at AS at, last_value AS value FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at < \(bind: query.start)
                      AND last_at < \(bind: query.start)
                    ORDER BY first_at DESC LIMIT 1
                    """).first().map(Self.decodePoint)
            }
            if let previous {
                points.insert(previous, at: 0)
                if points.count > query.limit { points.removeLast() }
            }
        }
        return points
    }

    /// The newest `limit` datapoints up to `end`, oldest first: chunks read newest first.
    private func newest(_ stream: DatastreamRecord, _ query: HistoryQuery) async throws -> [Datapoint] {
        var reversed: [Datapoint] = []
        var before: Int64?
        var decoded: [Datapoint] = []
        page: while true {
            let sql: SQLQueryString = if let before {
                "SELECT first_at, points FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at < \(bind: before) ORDER BY first_at DESC LIMIT 4"
            } else {
                "SELECT first_at, points FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at <= \(bind: query.end) ORDER BY first_at DESC LIMIT 4"
            }
            let rows = try await database.raw(sql).all()
            for row in rows {
                decoded.removeAll(keepingCapacity: true)
                try DatapointChunks.decode(try row.decode(column: "points", as: Data.self), into: &decoded)
                for point in decoded.reversed() where point.at <= query.end && point.at < (reversed.last?.at ?? Int64.max) {
                    reversed.append(point)
                    if reversed.count == query.limit { break page }
                }
                before = try row.decode(column: "first_at", as: Int64.self)
            }
            if rows.count < 4 { break }
        }
        return reversed.reversed()
    }

    /// The value in force at each interval point from `start`. One statement finds, for each
    /// point, the chunk that holds it (an index seek each) and reads each such chunk once. Without
    /// `discrete` each datapoint found appears once, at its own time; with it, every point
    /// appears, at the point's time.
    private func sampled(_ stream: DatastreamRecord, _ query: HistoryQuery, interval: Int64) async throws -> [Datapoint] {
        let step = interval * 1_000_000
        let lowest = query.findPrevious ? Int64.min / 2 : query.start
        let count = min(query.discrete ? Int64(query.limit) : HistoryQuery.maximumPoints, (query.end - query.start) / step + 1)
        let rows = try await database.raw("""
            WITH RECURSIVE grid(t, n) AS (SELECT CAST(\(bind: query.start) AS BIGINT), 1 UNION ALL SELECT t + \(bind: step), n + 1 FROM grid WHERE n < \(bind: count)),
            picks AS (SELECT DISTINCT (SELECT first_at FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at <= grid.t ORDER BY first_at DESC LIMIT 1) AS f FROM grid)
            SELECT points FROM feeds_chunks WHERE stream = \(bind: stream.key) AND first_at IN (SELECT f FROM picks) ORDER BY first_at
            LIMIT \(literal: query.limit + 1)
            """).all()
        // The chunks read, in order; the value at t is the last datapoint at or before t of the
        // last chunk starting at or before t.
        var chunks: [[Datapoint]] = []
        chunks.reserveCapacity(rows.count)
        for row in rows { chunks.append(try DatapointChunks.decode(try row.decode(column: "points", as: Data.self))) }
        var points: [Datapoint] = []
        points.reserveCapacity(min(chunks.count, query.limit))
        var chunk = -1
        for k in 0..<count {
            let t = query.start + k * step
            while chunk + 1 < chunks.count, chunks[chunk + 1][0].at <= t { chunk += 1 }
            guard chunk >= 0, let index = DatapointChunks.lastIndex(atOrBefore: t, in: chunks[chunk]) else { continue }
            let found = chunks[chunk][index]
            guard found.at >= lowest else { continue }
            if query.discrete {
                points.append(Datapoint(at: t, value: found.value))
            } else if points.last?.at != found.at {
                points.append(found)
            }
            if points.count == query.limit { break }
        }
        return points
    }

    /// One value per interval that holds datapoints: the function over them, at the interval's
    /// start. A chunk wholly inside one interval counts through its summary; only chunks that
    /// straddle an interval's edge or the range's are unpacked.
    private func aggregated(_ stream: DatastreamRecord, _ query: HistoryQuery, interval: Int64, function: HistoryFunction) async throws -> [Datapoint] {
        let step = max(1, interval) * 1_000_000
        let start = query.start
        let end = query.end
        // Only the summary columns the function needs are read (a row's columns are each decoded).
        let summaryColumns = switch function {
        case .avg, .sum: "total"
        case .count: "CAST(n AS DOUBLE PRECISION) AS total"
        case .min: "low AS total"
        case .max: "high AS total"
        case .first: "first_value AS total"
        case .last: "last_value AS total"
        }
        let columns = """
            first_at, last_at, n, \(summaryColumns), \
            CASE WHEN first_at < \(start) OR last_at > \(end) OR (first_at - \(start)) / \(step) <> (last_at - \(start)) / \(step) THEN points END AS points
            """
        let rows = try await database.raw(Self.overlapping(stream.key, from: start, through: end, columns: columns)).all()
        var buckets: [Int64: Bucket] = [:]
        var order: [Int64] = []
        func bucket(_ index: Int64) -> Int64 {
            if buckets[index] == nil {
                buckets[index] = Bucket()
                order.append(index)
            }
            return index
        }
        var decoded: [Datapoint] = []
        for row in rows {
            if let blob = try row.decode(column: "points", as: Data?.self) {
                decoded.removeAll(keepingCapacity: true)
                try DatapointChunks.decode(blob, into: &decoded)
                for point in decoded where point.at >= start && point.at <= end {
                    buckets[bucket((point.at - start) / step)]!.add(point)
                }
            } else {
                // The one summary value the function needs stands in for all of them.
                let firstAt = try row.decode(column: "first_at", as: Int64.self)
                let value = try row.decode(column: "total", as: Double?.self) ?? .nan
                let summary = DatapointChunks.Summary(
                    firstAt: firstAt, lastAt: try row.decode(column: "last_at", as: Int64.self), count: try row.decode(column: "n", as: Int.self),
                    low: value, high: value, total: value, firstValue: value, lastValue: value)
                buckets[bucket((firstAt - start) / step)]!.add(summary)
            }
        }
        var points: [Datapoint] = []
        for index in order.sorted() {
            guard let value = buckets[index]!.value(function) else { continue }
            points.append(Datapoint(at: start + index * step, value: value))
            if points.count == query.limit { break }
        }
        return points
    }

    /// What an aggregate keeps of one interval.
    private struct Bucket {
        var count = 0
        var sum = CompensatedSum()
        var low = Double.infinity
        var high = -Double.infinity
        var first: Datapoint?
        var last: Datapoint?

        mutating func add(_ point: Datapoint) {
            count += 1
            sum.add(point.value)
            low = min(low, point.value)
            high = max(high, point.value)
            if first.map({ point.at < $0.at }) ?? true { first = point }
            if last.map({ point.at > $0.at }) ?? true { last = point }
        }

        mutating func add(_ summary: DatapointChunks.Summary) {
            count += summary.count
            sum.add(summary.total)
            low = min(low, summary.low)
            high = max(high, summary.high)
            if first.map({ summary.firstAt < $0.at }) ?? true { first = Datapoint(at: summary.firstAt, value: summary.firstValue) }
            if last.map({ summary.lastAt > $0.at }) ?? true { last = Datapoint(at: summary.lastAt, value: summary.lastValue) }
        }

        func value(_ function: HistoryFunction) -> Double? {
            guard count > 0 else { return nil }
            return switch function {
            case .avg: sum.value / Double(count)
            case .min: low
            case .max: high
            case .sum: sum.value
            case .count: Double(count)
            case .first: first?.value
            case .last: last?.value
            }
        }
    }
}
