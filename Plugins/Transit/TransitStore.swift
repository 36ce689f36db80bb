import Foundation
import GatewayCore
import SQLKit

/// The transit tables: versions of feeds written by imports, and the network loaded from the
/// active versions.
struct TransitStore: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock

    func now() -> Int64 { Int64(clock.now().timeIntervalSince1970.rounded(.down)) }

    /// A feed as recorded.
    struct FeedRecord: Sendable {
        var id: String
        var version: Int64
        var agencyID: String
        var timeZone: String
        var source: String
        var digest: String
        var importedAt: Int64
        var summary: FeedSummary
    }

    func feeds() async throws -> [FeedRecord] {
        try await database.raw("""
            SELECT id, version, agency_id, time_zone, source, digest, imported_at, summary FROM transit_feeds ORDER BY id
            """).all().map { row in
            FeedRecord(id: try row.decode(column: "id", as: String.self), version: try row.decode(column: "version", as: Int64.self),
                       agencyID: try row.decode(column: "agency_id", as: String.self), timeZone: try row.decode(column: "time_zone", as: String.self),
                       source: try row.decode(column: "source", as: String.self), digest: try row.decode(column: "digest", as: String.self),
                       importedAt: try row.decode(column: "imported_at", as: Int64.self),
                       summary: (try? JSONDecoder().decode(FeedSummary.self, from: Data(try row.decode(column: "summary", as: String.self).utf8))) ?? FeedSummary())
        }
    }

    /// A feed's last good realtime message as stored.
    struct RealtimeRecord: Sendable {
        var feed: String
        var receivedAt: Int64
    }

    /// Stores `message` as the last good realtime message of `feed`, for every instance.
    func saveRealtime(feed: String, message: Data, receivedAt: Int64) async throws {
        try await database.raw("""
            INSERT INTO transit_realtime (feed_id, message, received_at) VALUES (\(bind: feed), \(bind: message), \(bind: receivedAt))
            ON CONFLICT (feed_id) DO UPDATE SET message = excluded.message, received_at = excluded.received_at
            """).run()
    }

    /// When each feed's stored message was received.
    func realtimeRecords() async throws -> [RealtimeRecord] {
        try await database.raw("SELECT feed_id, received_at FROM transit_realtime ORDER BY feed_id").all().map { row in
            RealtimeRecord(feed: try row.decode(column: "feed_id", as: String.self), receivedAt: try row.decode(column: "received_at", as: Int64.self))
        }
    }

    /// The stored message of `feed`.
    func realtimeMessage(feed: String) async throws -> (message: Data, receivedAt: Int64)? {
        guard let row = try await database.raw("SELECT message, received_at FROM transit_realtime WHERE feed_id = \(bind: feed)").first() else { return nil }
        return (try row.decode(column: "message", as: Data.self), try row.decode(column: "received_at", as: Int64.self))
    }

    /// Starts writing a new version of `feed`.
    func beginImport(feed: String, source: String) async throws -> Int64 {
        guard let row = try await database.raw("""
            INSERT INTO transit_imports (feed_id, source, started_at) VALUES (\(bind: feed), \(bind: source), \(bind: now())) RETURNING version
            """).first() else { throw GatewayError.internalError("No import version was assigned.") }
        return try row.decode(column: "version", as: Int64.self)
    }

    /// Makes `record.version` the feed's served version in one statement, then removes the rows of
    /// the version it replaces.
    func activate(_ record: FeedRecord) async throws {
        let summary = String(decoding: try JSONEncoder().encode(record.summary), as: UTF8.self)
        let previous = try await database.transaction { db -> Int64? in
            let previous = try await db.raw("SELECT version FROM transit_feeds WHERE id = \(bind: record.id)").first()
                .map { try $0.decode(column: "version", as: Int64.self) }
            try await db.raw("""
                INSERT INTO transit_feeds (id, version, agency_id, time_zone, source, digest, imported_at, summary)
                VALUES (\(bind: record.id), \(bind: record.version), \(bind: record.agencyID), \(bind: record.timeZone), \(bind: record.source),
                        \(bind: record.digest), \(bind: record.importedAt), \(bind: summary))
                ON CONFLICT (id) DO UPDATE SET version = excluded.version, agency_id = excluded.agency_id, time_zone = excluded.time_zone,
                  source = excluded.source, digest = excluded.digest, imported_at = excluded.imported_at, summary = excluded.summary
                """).run()
            return previous
        }
        if let previous, previous != record.version { try await removeVersion(previous) }
    }

    /// Deletes a version's rows (an old one, or one an import abandoned).
    func removeVersion(_ version: Int64) async throws {
        for table in TransitMigrations.versionedTables {
            try await database.raw("DELETE FROM \(unsafeRaw: table) WHERE version = \(bind: version)").run()
        }
        try await database.raw("DELETE FROM transit_imports WHERE version = \(bind: version)").run()
    }

    /// Removes versions no feed serves whose import started more than `olderThan` seconds ago
    /// (imports that failed or whose process died).
    func removeAbandonedVersions(olderThan seconds: Int64) async throws {
        let rows = try await database.raw("""
            SELECT version FROM transit_imports WHERE started_at < \(bind: now() - seconds)
              AND version NOT IN (SELECT version FROM transit_feeds)
            """).all()
        for row in rows { try await removeVersion(try row.decode(column: "version", as: Int64.self)) }
    }

    /// Deletes a feed and its rows.
    func deleteFeed(_ id: String) async throws -> Bool {
        guard let version = try await database.raw("SELECT version FROM transit_feeds WHERE id = \(bind: id)").first()
            .map({ try $0.decode(column: "version", as: Int64.self) }) else { return false }
        try await database.raw("DELETE FROM transit_feeds WHERE id = \(bind: id)").run()
        try await removeVersion(version)
        return true
    }

    // MARK: - Loading the network

    /// Reads every served feed into a network.
    func loadNetwork() async throws -> TransitNetwork {
        var builder = NetworkBuilder()
        for record in try await feeds() {
            try await load(record, into: &builder)
        }
        return TransitNetwork(builder: builder)
    }

    private func load(_ record: FeedRecord, into builder: inout NetworkBuilder) async throws {
        let version = record.version
        let feed = Int32(builder.feeds.count)
        builder.feeds.append(TransitNetwork.Feed(id: record.id, version: version, agencyID: record.agencyID,
                                                 zone: TimeZone(identifier: record.timeZone) ?? TimeZone(identifier: "UTC")!,
                                                 source: record.source, importedAt: record.importedAt, summary: record.summary))
        let prefix = record.agencyID + "_"
        for row in try await database.raw("""
            SELECT agency_id, name, url, time_zone, lang, phone, fare_url, email FROM transit_agencies WHERE version = \(bind: version) ORDER BY agency_id
            """).all() {
            let id = try row.decode(column: "agency_id", as: String.self)
            builder.agencyIndex[id] = Int32(builder.agencies.count)
            builder.agencies.append(TransitNetwork.Agency(
                id: id, name: try row.decode(column: "name", as: String.self), url: try row.decode(column: "url", as: String.self),
                timeZone: try row.decode(column: "time_zone", as: String.self), lang: try row.decode(column: "lang", as: String?.self),
                phone: try row.decode(column: "phone", as: String?.self), fareURL: try row.decode(column: "fare_url", as: String?.self),
                email: try row.decode(column: "email", as: String?.self), feed: feed))
        }

        var localStops: [String: Int32] = [:]
        var parents: [(Int32, String)] = []
        for row in try await database.raw("""
            SELECT stop_id, code, name, description, lat, lon, location_type, parent_id, wheelchair, platform FROM transit_stops WHERE version = \(bind: version)
            """).all() {
            let gtfsID = try row.decode(column: "stop_id", as: String.self)
            let index = Int32(builder.stops.count)
            localStops[gtfsID] = index
            builder.stopIndex[prefix + gtfsID] = index
            if let parent = try row.decode(column: "parent_id", as: String?.self) { parents.append((index, parent)) }
            builder.stops.append(TransitNetwork.Stop(
                id: prefix + gtfsID, gtfsID: gtfsID, code: try row.decode(column: "code", as: String?.self), name: try row.decode(column: "name", as: String.self),
                description: try row.decode(column: "description", as: String?.self), lat: try row.decode(column: "lat", as: Double.self),
                lon: try row.decode(column: "lon", as: Double.self), locationType: try row.decode(column: "location_type", as: Int.self), parent: -1,
                wheelchair: try row.decode(column: "wheelchair", as: Int.self), platform: try row.decode(column: "platform", as: String?.self), feed: feed))
        }
        for (stop, parent) in parents { builder.stops[Int(stop)].parent = localStops[parent] ?? -1 }

        var localRoutes: [String: Int32] = [:]
        for row in try await database.raw("""
            SELECT route_id, agency_id, short_name, long_name, description, type, url, color, text_color, sort_order
            FROM transit_routes WHERE version = \(bind: version)
            """).all() {
            let gtfsID = try row.decode(column: "route_id", as: String.self)
            let agency = try row.decode(column: "agency_id", as: String.self)
            let index = Int32(builder.routes.count)
            localRoutes[gtfsID] = index
            builder.routeIndex[agency + "_" + gtfsID] = index
            builder.routes.append(TransitNetwork.Route(
                id: agency + "_" + gtfsID, gtfsID: gtfsID, agency: agency, shortName: try row.decode(column: "short_name", as: String?.self),
                longName: try row.decode(column: "long_name", as: String?.self), description: try row.decode(column: "description", as: String?.self),
                type: try row.decode(column: "type", as: Int.self), url: try row.decode(column: "url", as: String?.self),
                color: try row.decode(column: "color", as: String?.self), textColor: try row.decode(column: "text_color", as: String?.self),
                sortOrder: try row.decode(column: "sort_order", as: Int?.self), feed: feed))
        }

        var localServices: [String: Int32] = [:]
        func service(_ id: String) -> Int32 {
            if let index = localServices[id] { return index }
            let index = Int32(builder.services.count)
            builder.services.append(ServiceCalendar())
            builder.serviceNames.append(id)
            localServices[id] = index
            return index
        }
        for row in try await database.raw("""
            SELECT service_id, weekdays, first_day, last_day FROM transit_calendar WHERE version = \(bind: version)
            """).all() {
            let index = service(try row.decode(column: "service_id", as: String.self))
            builder.services[Int(index)].weekdays = UInt8(truncatingIfNeeded: try row.decode(column: "weekdays", as: Int.self))
            builder.services[Int(index)].firstDay = Int32(try row.decode(column: "first_day", as: Int.self))
            builder.services[Int(index)].lastDay = Int32(try row.decode(column: "last_day", as: Int.self))
        }
        for row in try await database.raw("""
            SELECT service_id, day, exception FROM transit_calendar_dates WHERE version = \(bind: version)
            """).all() {
            let index = service(try row.decode(column: "service_id", as: String.self))
            let day = Int32(try row.decode(column: "day", as: Int.self))
            if try row.decode(column: "exception", as: Int.self) == 1 {
                builder.services[Int(index)].added.insert(day)
            } else {
                builder.services[Int(index)].removed.insert(day)
            }
        }

        var localShapes: [String: Int32] = [:]
        var points: [(Double, Double)] = []
        var current: String?
        func finishShape() {
            guard let id = current else { return }
            localShapes[id] = Int32(builder.shapes.count)
            builder.shapes.append(TransitNetwork.Shape(id: prefix + id, points: points))
            points = []
        }
        // Shapes and stop times are read a page at a time along their index (`(key, sequence)` after
        // the last row read), so that loading a big feed never holds all its rows at once.
        var after = ("", -1)
        while true {
            let page = try await database.raw("""
                SELECT shape_id, sequence, lat, lon FROM transit_shapes WHERE version = \(bind: version)
                  AND (shape_id > \(bind: after.0) OR (shape_id = \(bind: after.0) AND sequence > \(bind: after.1)))
                ORDER BY shape_id, sequence LIMIT \(unsafeRaw: String(Self.pageSize))
                """).all()
            for row in page {
                let id = try row.decode(column: "shape_id", as: String.self)
                if id != current {
                    finishShape()
                    current = id
                }
                points.append((try row.decode(column: "lat", as: Double.self), try row.decode(column: "lon", as: Double.self)))
                after = (id, try row.decode(column: "sequence", as: Int.self))
            }
            if page.count < Self.pageSize { break }
        }
        finishShape()

        var localTrips: [String: Int32] = [:]
        defer { builder.feedTrips.append(localTrips) }
        for row in try await database.raw("""
            SELECT trip_id, route_id, service_id, headsign, short_name, direction, block_id, shape_id, wheelchair
            FROM transit_trips WHERE version = \(bind: version)
            """).all() {
            let gtfsID = try row.decode(column: "trip_id", as: String.self)
            guard let route = localRoutes[try row.decode(column: "route_id", as: String.self)] else { continue }
            let index = Int32(builder.trips.count)
            localTrips[gtfsID] = index
            let id = builder.routes[Int(route)].agency + "_" + gtfsID
            builder.tripIndex[id] = index
            builder.trips.append(TransitNetwork.Trip(
                id: id, gtfsID: gtfsID, route: route, service: service(try row.decode(column: "service_id", as: String.self)),
                headsign: try row.decode(column: "headsign", as: String?.self), shortName: try row.decode(column: "short_name", as: String?.self),
                direction: try row.decode(column: "direction", as: Int?.self), block: try row.decode(column: "block_id", as: String?.self),
                shape: (try row.decode(column: "shape_id", as: String?.self)).flatMap { localShapes[$0] } ?? -1,
                wheelchair: try row.decode(column: "wheelchair", as: Int.self), first: 0, count: 0))
        }

        builder.stopTimes.reserveCapacity(builder.stopTimes.count + record.summary.stopTimes)
        var last = ("", -1)
        while true {
            let page = try await database.raw("""
                SELECT trip_id, stop_sequence, stop_id, arrival, departure, headsign FROM transit_stop_times WHERE version = \(bind: version)
                  AND (trip_id > \(bind: last.0) OR (trip_id = \(bind: last.0) AND stop_sequence > \(bind: last.1)))
                ORDER BY trip_id, stop_sequence LIMIT \(unsafeRaw: String(Self.pageSize))
                """).all()
            for row in page {
                let tripID = try row.decode(column: "trip_id", as: String.self)
                let sequence = try row.decode(column: "stop_sequence", as: Int.self)
                last = (tripID, sequence)
                guard let trip = localTrips[tripID], let stop = localStops[try row.decode(column: "stop_id", as: String.self)] else { continue }
                builder.stopTimes.append(StopTimeRow(
                    trip: trip, sequence: Int32(sequence), stop: stop,
                    arrival: (try row.decode(column: "arrival", as: Int?.self)).map { Int32($0) },
                    departure: (try row.decode(column: "departure", as: Int?.self)).map { Int32($0) },
                    headsign: try row.decode(column: "headsign", as: String?.self)))
            }
            if page.count < Self.pageSize { break }
        }
    }

    /// Rows read per statement when loading shapes and stop times.
    static let pageSize = 20_000
}

/// Inserts rows of one table a batch at a time (one multi-row statement per batch).
struct BatchInsert {
    let table: String
    let columns: [String]
    let database: any SQLDatabase
    private var rows: [[any Encodable & Sendable]] = []
    private let batchSize: Int
    private(set) var written = 0

    init(_ table: String, columns: [String], database: any SQLDatabase) {
        self.table = table
        self.columns = columns
        self.database = database
        // Within both databases' limits on bound parameters per statement.
        batchSize = max(1, 8_000 / columns.count)
    }

    mutating func add(_ values: [any Encodable & Sendable]) async throws {
        rows.append(values)
        if rows.count >= batchSize { try await flush() }
    }

    mutating func flush() async throws {
        guard !rows.isEmpty else { return }
        var insert = database.insert(into: table).columns(columns)
        for row in rows { insert = insert.values(row) }
        try await insert.run()
        written += rows.count
        rows.removeAll(keepingCapacity: true)
    }
}
