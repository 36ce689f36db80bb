import GatewayCore
import SQLKit

/// The transit plugin's schema, every step in order. Never edit a shipped step: add the next.
///
/// Every GTFS row carries the `version` of the import that wrote it. An import writes a whole new
/// version beside the one being served, then switches the feed to it in one update
/// (`transit_feeds.version`) and deletes the old rows: readers see the old feed or the new one,
/// never half of either, and other writers are never held up for the length of an import.
/// Times are seconds after the service day's start (noon − 12 h), dates days since 1970-01-01.
enum TransitMigrations {
    static let all: [Migration] = [
        Migration(1, "feeds, imports and the GTFS tables") { db in
            let serial = db.features.serialPrimaryKey
            try await db.raw("""
                CREATE TABLE transit_imports (version \(unsafeRaw: serial), feed_id TEXT NOT NULL, source TEXT NOT NULL,
                  started_at BIGINT NOT NULL)
                """).run()
            try await db.raw("""
                CREATE TABLE transit_feeds (id TEXT PRIMARY KEY, version BIGINT NOT NULL, agency_id TEXT NOT NULL, time_zone TEXT NOT NULL,
                  source TEXT NOT NULL, digest TEXT NOT NULL, imported_at BIGINT NOT NULL, summary TEXT NOT NULL)
                """).run()
            try await db.raw("""
                CREATE TABLE transit_agencies (version BIGINT NOT NULL, agency_id TEXT NOT NULL, name TEXT NOT NULL, url TEXT NOT NULL,
                  time_zone TEXT NOT NULL, lang TEXT, phone TEXT, fare_url TEXT, email TEXT, PRIMARY KEY (version, agency_id))
                """).run()
            try await db.raw("""
                CREATE TABLE transit_stops (version BIGINT NOT NULL, stop_id TEXT NOT NULL, code TEXT, name TEXT NOT NULL, description TEXT,
                  lat DOUBLE PRECISION NOT NULL, lon DOUBLE PRECISION NOT NULL, location_type INTEGER NOT NULL, parent_id TEXT,
                  wheelchair INTEGER NOT NULL, platform TEXT, PRIMARY KEY (version, stop_id))
                """).run()
            try await db.raw("""
                CREATE TABLE transit_routes (version BIGINT NOT NULL, route_id TEXT NOT NULL, agency_id TEXT NOT NULL, short_name TEXT,
                  long_name TEXT, description TEXT, type INTEGER NOT NULL, url TEXT, color TEXT, text_color TEXT, sort_order INTEGER,
                  PRIMARY KEY (version, route_id))
                """).run()
            try await db.raw("""
                CREATE TABLE transit_trips (version BIGINT NOT NULL, trip_id TEXT NOT NULL, route_id TEXT NOT NULL, service_id TEXT NOT NULL,
                  headsign TEXT, short_name TEXT, direction INTEGER, block_id TEXT, shape_id TEXT, wheelchair INTEGER NOT NULL,
                  PRIMARY KEY (version, trip_id))
                """).run()
            // No primary key: a feed's million rows load fastest without one; the version index
            // serves the load and the removal of an old version.
            try await db.raw("""
                CREATE TABLE transit_stop_times (version BIGINT NOT NULL, trip_id TEXT NOT NULL, stop_sequence INTEGER NOT NULL,
                  stop_id TEXT NOT NULL, arrival INTEGER, departure INTEGER, headsign TEXT, pickup INTEGER NOT NULL, drop_off INTEGER NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX transit_stop_times_version ON transit_stop_times (version, trip_id, stop_sequence)").run()
            try await db.raw("""
                CREATE TABLE transit_calendar (version BIGINT NOT NULL, service_id TEXT NOT NULL, weekdays INTEGER NOT NULL,
                  first_day INTEGER NOT NULL, last_day INTEGER NOT NULL, PRIMARY KEY (version, service_id))
                """).run()
            try await db.raw("""
                CREATE TABLE transit_calendar_dates (version BIGINT NOT NULL, service_id TEXT NOT NULL, day INTEGER NOT NULL,
                  exception INTEGER NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX transit_calendar_dates_version ON transit_calendar_dates (version)").run()
            try await db.raw("""
                CREATE TABLE transit_shapes (version BIGINT NOT NULL, shape_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                  lat DOUBLE PRECISION NOT NULL, lon DOUBLE PRECISION NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX transit_shapes_version ON transit_shapes (version, shape_id, sequence)").run()
        },
        Migration(2, "each feed's last good GTFS-realtime message, shared by the instances of a cluster") { db in
            try await db.raw("""
                CREATE TABLE transit_realtime (feed_id TEXT PRIMARY KEY, message \(unsafeRaw: db.features.binaryType) NOT NULL,
                  received_at BIGINT NOT NULL)
                """).run()
        },
    ]

    /// The tables holding a version's rows, in the order a removal deletes them.
    static let versionedTables = ["transit_stop_times", "transit_shapes", "transit_calendar_dates", "transit_calendar", "transit_trips",
                                  "transit_routes", "transit_stops", "transit_agencies"]
}
