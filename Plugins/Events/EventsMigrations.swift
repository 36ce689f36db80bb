import GatewayCore
import SQLKit

/// The events plugin's schema, every step in order. Never edit a shipped step: add the next.
///
/// Times are UTC seconds since 1970. A showing copies two facts of its event — the city and
/// whether the event is published — so that the hot lists (a city's showings in a week, a venue's
/// showings) read one index and no join. `span` (end − start) tells apart the few long showings
/// (an exhibition running for months) from the many short ones: short ones are found by start
/// time, long ones by end time through a partial index, so a week's list never scans months.
/// `events_listing` repeats each listed showing once per category of its event (``EventStore/relist(_:on:)``
/// keeps it), so that a list by category reads one range of one index too.
enum EventsMigrations {
    static let all: [Migration] = [
        Migration(1, "categories, cities, venues, events, showings and reservations") { db in
            let serial = db.features.serialPrimaryKey
            try await db.raw("CREATE TABLE events_categories (id BIGINT PRIMARY KEY, title TEXT NOT NULL)").run()
            try await db.raw("CREATE TABLE events_cities (id BIGINT PRIMARY KEY, name TEXT NOT NULL, time_zone TEXT NOT NULL)").run()
            try await db.raw("""
                CREATE TABLE events_venues (id \(unsafeRaw: serial), name TEXT NOT NULL, address TEXT, city_id BIGINT,
                  lat DOUBLE PRECISION, lon DOUBLE PRECISION, owner_id TEXT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX events_venues_lat ON events_venues (lat, lon)").run()
            try await db.raw("CREATE INDEX events_venues_name ON events_venues (name)").run()
            try await db.raw("""
                CREATE TABLE events_events (id \(unsafeRaw: serial), title TEXT NOT NULL, description TEXT, organizer TEXT,
                  info_source TEXT, sale_url TEXT, image_url TEXT, city_id BIGINT, owner_id TEXT, status TEXT NOT NULL,
                  reservation_policy TEXT, tags TEXT NOT NULL, uid TEXT UNIQUE, search_text TEXT NOT NULL,
                  created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX events_events_owner ON events_events (owner_id)").run()
            try await db.raw("""
                CREATE TABLE events_event_categories (event_id BIGINT NOT NULL, category_id BIGINT NOT NULL,
                  PRIMARY KEY (event_id, category_id))
                """).run()
            try await db.raw("CREATE INDEX events_event_categories_category ON events_event_categories (category_id, event_id)").run()
            try await db.raw("""
                CREATE TABLE events_showings (id \(unsafeRaw: serial), event_id BIGINT NOT NULL, venue_id BIGINT, city_id BIGINT,
                  published INTEGER NOT NULL, starts_at BIGINT NOT NULL, ends_at BIGINT NOT NULL, span BIGINT NOT NULL,
                  all_day INTEGER NOT NULL, price_text TEXT, is_free INTEGER NOT NULL, capacity BIGINT, seats_taken BIGINT NOT NULL)
                """).run()
            // Covering indexes: a list reads the index alone, never the table, until its page is known.
            try await db.raw("CREATE INDEX events_showings_event ON events_showings (event_id, starts_at, ends_at)").run()
            try await db.raw("CREATE INDEX events_showings_city ON events_showings (city_id, published, starts_at, ends_at, span, event_id)").run()
            try await db.raw("CREATE INDEX events_showings_start ON events_showings (published, starts_at, ends_at, span, event_id)").run()
            try await db.raw("CREATE INDEX events_showings_venue ON events_showings (venue_id, published, starts_at, ends_at, span, event_id)").run()
            try await db.raw("CREATE INDEX events_showings_long ON events_showings (city_id, ends_at, starts_at, event_id, span, published) WHERE span > 86400 AND published = 1").run()
            try await db.raw("CREATE INDEX events_showings_long_all ON events_showings (ends_at, starts_at, event_id, span, published) WHERE span > 86400 AND published = 1").run()
            try await db.raw("CREATE INDEX events_showings_long_venue ON events_showings (venue_id, ends_at, starts_at, event_id, span, published) WHERE span > 86400 AND published = 1").run()
            // The listing: one row per category of each showing of a published event, so that a list by
            // city, category and days is one range of one index.
            try await db.raw("""
                CREATE TABLE events_listing (category_id BIGINT NOT NULL, city_id BIGINT, starts_at BIGINT NOT NULL, ends_at BIGINT NOT NULL,
                  span BIGINT NOT NULL, event_id BIGINT NOT NULL, showing_id BIGINT NOT NULL)
                """).run()
            try await db.raw("CREATE INDEX events_listing_short ON events_listing (city_id, category_id, starts_at, ends_at, span, event_id, showing_id)").run()
            try await db.raw("CREATE INDEX events_listing_long ON events_listing (city_id, category_id, ends_at, starts_at, event_id, span, showing_id) WHERE span > 86400").run()
            try await db.raw("CREATE INDEX events_listing_all ON events_listing (category_id, starts_at, ends_at, span, event_id, showing_id)").run()
            try await db.raw("CREATE INDEX events_listing_event ON events_listing (event_id)").run()
            try await db.raw("""
                CREATE TABLE events_reservations (id \(unsafeRaw: serial), showing_id BIGINT NOT NULL, event_id BIGINT NOT NULL,
                  user_id TEXT NOT NULL, seats BIGINT NOT NULL, status TEXT NOT NULL, requested_at BIGINT NOT NULL,
                  decided_at BIGINT, decided_by TEXT, reason TEXT, cancelled_at BIGINT)
                """).run()
            try await db.raw("CREATE INDEX events_reservations_user ON events_reservations (user_id, id)").run()
            try await db.raw("CREATE INDEX events_reservations_showing ON events_reservations (showing_id, user_id)").run()
            try await db.raw("CREATE INDEX events_reservations_event ON events_reservations (event_id, id)").run()
        },
        // A reservation holds its seats in the statement that records it: the insert's trigger adds
        // them to the showing and refuses (undoing the insert) what would exceed its capacity. One
        // statement, so that a reservation holds SQLite's one writer for one statement, not a transaction.
        Migration(2, "a reservation's insert holds its seats") { db in
            if db.dialect.triggerSyntax.create.contains(.supportsBody) {
                try await db.raw("""
                    CREATE TRIGGER events_reservations_hold AFTER INSERT ON events_reservations
                    WHEN NEW.status IN ('requested', 'confirmed')
                    BEGIN
                      UPDATE events_showings SET seats_taken = seats_taken + NEW.seats WHERE id = NEW.showing_id;
                      SELECT RAISE(ABORT, 'events: too few seats remain') FROM events_showings
                        WHERE id = NEW.showing_id AND capacity IS NOT NULL AND seats_taken > capacity;
                    END
                    """).run()
            } else {
                try await db.raw("""
                    CREATE FUNCTION events_reservations_hold() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                      IF NEW.status IN ('requested', 'confirmed') THEN
                        UPDATE events_showings SET seats_taken = seats_taken + NEW.seats WHERE id = NEW.showing_id;
                        IF EXISTS (SELECT 1 FROM events_showings WHERE id = NEW.showing_id AND capacity IS NOT NULL AND seats_taken > capacity) THEN
                          RAISE EXCEPTION 'events: too few seats remain';
                        END IF;
                      END IF;
                      RETURN NEW;
                    END $$
                    """).run()
                try await db.raw("""
                    CREATE TRIGGER events_reservations_hold AFTER INSERT ON events_reservations
                    FOR EACH ROW EXECUTE FUNCTION events_reservations_hold()
                    """).run()
            }
        },
    ]
}
