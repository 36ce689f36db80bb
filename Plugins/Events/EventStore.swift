import Foundation
import GatewayCore
import Logging
import NIOCore
import SQLKit

/// The events plugin's tables: the same SQL on SQLite and PostgreSQL; lists read the published
/// events from the ``EventCatalog`` in memory, which every write refreshes.
struct EventStore: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock
    let catalog: EventCatalog
    /// Tells the other instances on the database what changed (``CatalogChange``).
    let bus: (any EventBus)?
    let logger: Logger
    /// This instance, so that it skips its own announcements.
    let instance = UUID().uuidString
    private let refreshes = SerialRefreshes()

    init(database: any SQLDatabase, clock: any WallClock, bus: (any EventBus)? = nil, logger: Logger = Logger(label: "events")) {
        self.database = database
        self.clock = clock
        self.bus = bus
        self.logger = logger
        catalog = EventCatalog(database: database)
    }

    // MARK: The catalog

    /// Refreshes the catalog after a write has ended (committed or not: the tables are read
    /// again), and tells the other instances. Refreshes run one at a time, in the order the writes
    /// ended, so the last one reads what the last write left.
    func changed(events: [Int64] = [], venues: [Int64] = [], all: Bool = false) async {
        await apply(CatalogChange(origin: instance, events: events, venues: venues, all: all))
        guard let bus, let payload = try? JSONEncoder().encode(CatalogChange(origin: instance, events: events, venues: venues, all: all)) else { return }
        await bus.publish(GatewayEvent(topic: CatalogChange.topic, payload: ByteBuffer(bytes: payload)))
    }

    /// Applies another instance's change (``CatalogChange``) to this instance's catalog.
    func applyRemote(_ event: GatewayEvent) async {
        guard let change = try? JSONDecoder().decode(CatalogChange.self, from: Data(event.payload.readableBytesView)), change.origin != instance else { return }
        await apply(change)
    }

    private func apply(_ change: CatalogChange) async {
        let catalog = self.catalog
        let logger = self.logger
        await refreshes.run {
            do {
                if change.all {
                    try await catalog.reload()
                } else {
                    try await catalog.refresh(events: change.events, venues: change.venues)
                }
            } catch {
                logger.error("the events catalog could not be refreshed; lists may miss a change until the next one",
                             metadata: ["events": "\(change.events)", "error": "\(error)"])
            }
        }
    }

    func now() -> Int64 { Int64(clock.now().timeIntervalSince1970.rounded(.down)) }

    // MARK: Reference data

    /// Makes the tables hold exactly the configured categories and cities (ids are stable, titles may change).
    func sync(categories: [EventCategory], cities: [EventCity]) async throws {
        try await database.transaction { db in
            for category in categories {
                try await db.raw("""
                    INSERT INTO events_categories (id, title) VALUES (\(bind: category.id), \(bind: category.title))
                    ON CONFLICT (id) DO UPDATE SET title = excluded.title
                    """).run()
            }
            try await db.raw("DELETE FROM events_categories WHERE id NOT IN (\(binds: categories.map(\.id) + [-1]))").run()
            for city in cities {
                try await db.raw("""
                    INSERT INTO events_cities (id, name, time_zone) VALUES (\(bind: city.id), \(bind: city.name), \(bind: city.timeZone))
                    ON CONFLICT (id) DO UPDATE SET name = excluded.name, time_zone = excluded.time_zone
                    """).run()
            }
            try await db.raw("DELETE FROM events_cities WHERE id NOT IN (\(binds: cities.map(\.id) + [-1]))").run()
        }
    }

    // MARK: Venues

    static let venueColumns = "id, name, address, city_id, lat, lon, owner_id"

    static func decodeVenue(_ row: any SQLRow, prefix: String = "") throws -> Venue {
        Venue(id: try row.decode(column: prefix + "id", as: Int64.self), name: try row.decode(column: prefix + "name", as: String.self),
              address: try row.decode(column: prefix + "address", as: String?.self), city: try row.decode(column: prefix + "city_id", as: Int?.self),
              lat: try row.decode(column: prefix + "lat", as: Double?.self), lon: try row.decode(column: prefix + "lon", as: Double?.self),
              owner: try row.decode(column: prefix + "owner_id", as: String?.self))
    }

    func venue(_ id: Int64, on db: (any SQLDatabase)? = nil) async throws -> Venue? {
        try await (db ?? database).raw("SELECT \(unsafeRaw: Self.venueColumns) FROM events_venues WHERE id = \(bind: id)").first().map { try Self.decodeVenue($0) }
    }

    func createVenue(_ input: VenueInput, name: String, owner: String?, on db: (any SQLDatabase)? = nil) async throws -> Venue {
        let now = now()
        let row = try await (db ?? database).raw("""
            INSERT INTO events_venues (name, address, city_id, lat, lon, owner_id, created_at, updated_at)
            VALUES (\(bind: name), \(bind: input.address), \(bind: input.city), \(bind: input.lat), \(bind: input.lon), \(bind: owner), \(bind: now), \(bind: now))
            RETURNING id
            """).first()
        guard let id = try row?.decode(column: "id", as: Int64.self) else { throw GatewayError.internalError("The venue was not created.") }
        return Venue(id: id, name: name, address: input.address, city: input.city, lat: input.lat, lon: input.lon, owner: owner)
    }

    func updateVenue(_ venue: Venue, with input: VenueInput) async throws -> Venue {
        var changed = venue
        if let name = input.name { changed.name = name }
        if let address = input.address { changed.address = address.isEmpty ? nil : address }
        if let city = input.city { changed.city = city }
        if let lat = input.lat, let lon = input.lon { (changed.lat, changed.lon) = (lat, lon) }
        let updated = changed
        try await database.transaction { db in
            try await db.raw("""
                UPDATE events_venues SET name = \(bind: updated.name), address = \(bind: updated.address), city_id = \(bind: updated.city),
                  lat = \(bind: updated.lat), lon = \(bind: updated.lon), updated_at = \(bind: now()) WHERE id = \(bind: updated.id)
                """).run()
            if updated.name != venue.name {
                let events = try await db.raw("SELECT DISTINCT event_id FROM events_showings WHERE venue_id = \(bind: venue.id)").all()
                for row in events { try await refreshSearchText(try row.decode(column: "event_id", as: Int64.self), on: db) }
            }
        }
        return updated
    }

    /// Deletes a venue no showing uses (409 otherwise).
    func deleteVenue(_ id: Int64) async throws {
        try await database.transaction { db in
            if try await db.raw("SELECT id FROM events_showings WHERE venue_id = \(bind: id) LIMIT 1").first() != nil {
                throw GatewayError.conflict("Showings take place at this venue; move or delete them first.")
            }
            try await db.raw("DELETE FROM events_venues WHERE id = \(bind: id)").run()
        }
    }

    func venues(city: Int?, query: String?, limit: Int, after: Int64?) async throws -> Page<Venue> {
        var sql: SQLQueryString = "SELECT \(unsafeRaw: Self.venueColumns) FROM events_venues WHERE id > \(bind: after ?? 0)"
        if let city { sql += " AND city_id = \(bind: city)" }
        if let query, !query.isEmpty { sql += " AND LOWER(name) LIKE \(bind: "%" + Self.escapeLike(query.lowercased()) + "%") ESCAPE '\\'" }
        sql += " ORDER BY id LIMIT \(bind: limit + 1)"
        let venues = try await database.raw(sql).all().map { try Self.decodeVenue($0) }
        return Page(items: Array(venues.prefix(limit)), nextCursor: venues.count > limit ? String(venues[limit - 1].id) : nil)
    }

    /// A venue named `name` (at the same point, when a point is given), made when there is none.
    func findOrCreateVenue(name: String, lat: Double?, lon: Double?, city: Int?, on db: any SQLDatabase) async throws -> Int64 {
        let rows = try await db.raw("SELECT \(unsafeRaw: Self.venueColumns) FROM events_venues WHERE name = \(bind: name)").all()
        for row in rows {
            let venue = try Self.decodeVenue(row)
            if let lat, let lon {
                if let vlat = venue.lat, let vlon = venue.lon, abs(vlat - lat) < 1e-6, abs(vlon - lon) < 1e-6 { return venue.id }
            } else if venue.lat == nil {
                return venue.id
            }
        }
        return try await createVenue(VenueInput(name: name, city: city, lat: lat, lon: lon), name: name, owner: nil, on: db).id
    }

    static func escapeLike(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_")
    }

    // MARK: Events

    /// The stored members of an event that access decisions and edits need.
    struct EventRow: Sendable {
        var id: Int64
        var title: String
        var description: String?
        var organizer: String?
        var infoSource: String?
        var saleURL: String?
        var imageURL: String?
        var city: Int?
        var owner: String?
        var status: EventStatus
        var policy: ReservationPolicy?
        var tags: [String]
        var uid: String?
        var createdAt: Int64
        var updatedAt: Int64
    }

    static let eventColumns = "id, title, description, organizer, info_source, sale_url, image_url, city_id, owner_id, status, reservation_policy, tags, uid, created_at, updated_at"

    static func decodeEvent(_ row: any SQLRow) throws -> EventRow {
        let tags = try row.decode(column: "tags", as: String.self)
        return EventRow(
            id: try row.decode(column: "id", as: Int64.self), title: try row.decode(column: "title", as: String.self),
            description: try row.decode(column: "description", as: String?.self), organizer: try row.decode(column: "organizer", as: String?.self),
            infoSource: try row.decode(column: "info_source", as: String?.self), saleURL: try row.decode(column: "sale_url", as: String?.self),
            imageURL: try row.decode(column: "image_url", as: String?.self), city: try row.decode(column: "city_id", as: Int?.self),
            owner: try row.decode(column: "owner_id", as: String?.self),
            status: EventStatus(rawValue: try row.decode(column: "status", as: String.self)) ?? .draft,
            policy: try row.decode(column: "reservation_policy", as: String?.self).flatMap(ReservationPolicy.init(rawValue:)),
            tags: (try? JSONDecoder().decode([String].self, from: Data(tags.utf8))) ?? [],
            uid: try row.decode(column: "uid", as: String?.self),
            createdAt: try row.decode(column: "created_at", as: Int64.self), updatedAt: try row.decode(column: "updated_at", as: Int64.self))
    }

    func event(_ id: Int64, on db: (any SQLDatabase)? = nil) async throws -> EventRow? {
        try await (db ?? database).raw("SELECT \(unsafeRaw: Self.eventColumns) FROM events_events WHERE id = \(bind: id)").first().map(Self.decodeEvent)
    }

    func event(uid: String, on db: any SQLDatabase) async throws -> EventRow? {
        try await db.raw("SELECT \(unsafeRaw: Self.eventColumns) FROM events_events WHERE uid = \(bind: uid)").first().map(Self.decodeEvent)
    }

    func categories(of ids: [Int64], on db: (any SQLDatabase)? = nil) async throws -> [Int64: [Int]] {
        guard !ids.isEmpty else { return [:] }
        var result: [Int64: [Int]] = [:]
        for row in try await (db ?? database).raw("""
            SELECT event_id, category_id FROM events_event_categories WHERE event_id IN (\(binds: ids)) ORDER BY event_id, category_id
            """).all() {
            result[try row.decode(column: "event_id", as: Int64.self), default: []].append(try row.decode(column: "category_id", as: Int.self))
        }
        return result
    }

    /// The event with its categories and every showing, or nil.
    func detail(_ id: Int64, titles: [Int: String]) async throws -> EventDetail? {
        guard let event = try await event(id) else { return nil }
        let categories = try await categories(of: [id])[id] ?? []
        let showings = try await showings(where: "s.event_id = \(bind: id)")
        return EventDetail(
            id: event.id, title: event.title, description: event.description, organizer: event.organizer, infoSource: event.infoSource,
            saleURL: event.saleURL, imageURL: event.imageURL, city: event.city,
            categories: categories.map { EventCategory(id: $0, title: titles[$0] ?? String($0)) }, tags: event.tags, status: event.status,
            reservationPolicy: event.policy, owner: event.owner, uid: event.uid,
            createdAt: Date(timeIntervalSince1970: Double(event.createdAt)), updatedAt: Date(timeIntervalSince1970: Double(event.updatedAt)),
            showings: showings)
    }

    /// Creates an event with its categories and showings, in the caller's transaction.
    /// `venueNames` may name the showings' venues (an import knows them), saving their lookup.
    func insertEvent(_ input: EventInput, title: String, owner: String?, uid: String?, status: EventStatus, on db: any SQLDatabase,
                     venueNames: [Int64: String] = [:]) async throws -> Int64 {
        let now = now()
        var names = venueNames
        let unnamed = Set((input.showings ?? []).compactMap(\.venue)).subtracting(names.keys)
        if !unnamed.isEmpty {
            for row in try await db.raw("SELECT id, name FROM events_venues WHERE id IN (\(binds: Array(unnamed)))").all() {
                names[try row.decode(column: "id", as: Int64.self)] = try row.decode(column: "name", as: String.self)
            }
        }
        let venues = Set((input.showings ?? []).compactMap { $0.venue.flatMap { names[$0] } })
        let search = Self.searchText(title: title, description: input.description, organizer: input.organizer, venues: Array(venues))
        let row = try await db.raw("""
            INSERT INTO events_events (title, description, organizer, info_source, sale_url, image_url, city_id, owner_id, status,
              reservation_policy, tags, uid, search_text, created_at, updated_at)
            VALUES (\(bind: title), \(bind: Self.nonEmpty(input.description)), \(bind: Self.nonEmpty(input.organizer)), \(bind: Self.nonEmpty(input.infoSource)),
              \(bind: Self.nonEmpty(input.saleURL)), \(bind: Self.nonEmpty(input.imageURL)), \(bind: input.city), \(bind: owner), \(bind: status.rawValue),
              \(bind: input.reservationPolicy?.rawValue), \(bind: Self.encodeTags(input.tags ?? [])), \(bind: uid), \(bind: search), \(bind: now), \(bind: now))
            RETURNING id
            """).first()
        guard let id = try row?.decode(column: "id", as: Int64.self) else { throw GatewayError.internalError("The event was not created.") }
        let categories = Set(input.categories ?? []).sorted()
        if !categories.isEmpty {
            let rows = categories.map { "(\(bind: id), \(bind: $0))" as SQLQueryString }
            try await db.raw("INSERT INTO events_event_categories (event_id, category_id) VALUES " + rows.joined(separator: ", ")).run()
        }
        try await insertShowings(input.showings ?? [], event: id, city: input.city, published: status == .published, on: db)
        if !(input.showings ?? []).isEmpty, !(input.categories ?? []).isEmpty, status == .published { try await relist(id, on: db, fresh: true) }
        return id
    }

    /// Applies the members `input` carries.
    func updateEvent(_ event: EventRow, with input: EventInput, on db: any SQLDatabase) async throws {
        var changed = event
        if let title = input.title { changed.title = title }
        if let description = input.description { changed.description = Self.nonEmpty(description) }
        if let organizer = input.organizer { changed.organizer = Self.nonEmpty(organizer) }
        if let infoSource = input.infoSource { changed.infoSource = Self.nonEmpty(infoSource) }
        if let saleURL = input.saleURL { changed.saleURL = Self.nonEmpty(saleURL) }
        if let imageURL = input.imageURL { changed.imageURL = Self.nonEmpty(imageURL) }
        if let city = input.city { changed.city = city }
        if let tags = input.tags { changed.tags = tags }
        if let status = input.status { changed.status = status }
        if let policy = input.reservationPolicy { changed.policy = policy }
        try await db.raw("""
            UPDATE events_events SET title = \(bind: changed.title), description = \(bind: changed.description), organizer = \(bind: changed.organizer),
              info_source = \(bind: changed.infoSource), sale_url = \(bind: changed.saleURL), image_url = \(bind: changed.imageURL),
              city_id = \(bind: changed.city), status = \(bind: changed.status.rawValue), reservation_policy = \(bind: changed.policy?.rawValue),
              tags = \(bind: Self.encodeTags(changed.tags)), updated_at = \(bind: now()) WHERE id = \(bind: event.id)
            """).run()
        if let categories = input.categories {
            try await db.raw("DELETE FROM events_event_categories WHERE event_id = \(bind: event.id)").run()
            for category in Set(categories) {
                try await db.raw("INSERT INTO events_event_categories (event_id, category_id) VALUES (\(bind: event.id), \(bind: category))").run()
            }
        }
        if changed.city != event.city || changed.status != event.status {
            try await db.raw("""
                UPDATE events_showings SET city_id = \(bind: changed.city), published = \(bind: changed.status == .published ? 1 : 0)
                WHERE event_id = \(bind: event.id)
                """).run()
        }
        try await refreshSearchText(event.id, on: db)
        try await relist(event.id, on: db)
    }

    /// Deletes an event, its showings and its reservations' history.
    func deleteEvent(_ id: Int64, on db: any SQLDatabase) async throws {
        try await db.raw("DELETE FROM events_listing WHERE event_id = \(bind: id)").run()
        try await db.raw("DELETE FROM events_reservations WHERE event_id = \(bind: id)").run()
        try await db.raw("DELETE FROM events_showings WHERE event_id = \(bind: id)").run()
        try await db.raw("DELETE FROM events_event_categories WHERE event_id = \(bind: id)").run()
        try await db.raw("DELETE FROM events_events WHERE id = \(bind: id)").run()
    }

    /// Rewrites an event's rows of the listing (``EventsMigrations``): one per category of each of
    /// its showings while it is published. Called by every write that changes the event's showings,
    /// categories, city or status, in the same transaction.
    func relist(_ id: Int64, on db: any SQLDatabase, fresh: Bool = false) async throws {
        if !fresh { try await db.raw("DELETE FROM events_listing WHERE event_id = \(bind: id)").run() }
        try await db.raw("""
            INSERT INTO events_listing (category_id, city_id, starts_at, ends_at, span, event_id, showing_id)
            SELECT c.category_id, s.city_id, s.starts_at, s.ends_at, s.span, s.event_id, s.id FROM events_showings s
            JOIN events_event_categories c ON c.event_id = s.event_id WHERE s.event_id = \(bind: id) AND s.published = 1
            """).run()
    }

    /// Rewrites the text search reads: title, description, organizer and the venues' names.
    func refreshSearchText(_ id: Int64, on db: any SQLDatabase) async throws {
        guard let event = try await event(id, on: db) else { return }
        let venues = try await db.raw("""
            SELECT DISTINCT v.name AS name FROM events_showings s JOIN events_venues v ON v.id = s.venue_id WHERE s.event_id = \(bind: id)
            """).all().map { try $0.decode(column: "name", as: String.self) }
        let text = Self.searchText(title: event.title, description: event.description, organizer: event.organizer, venues: venues)
        try await db.raw("UPDATE events_events SET search_text = \(bind: text) WHERE id = \(bind: id)").run()
    }

    /// What text search reads of an event: its title, description, organizer and venues' names, folded.
    static func searchText(title: String, description: String?, organizer: String?, venues: [String]) -> String {
        EventRules.searchable(([title, description ?? "", organizer ?? ""] + Set(venues).sorted()).joined(separator: "\n"))
    }

    static func nonEmpty(_ text: String?) -> String? {
        guard let text, !text.isEmpty else { return nil }
        return text
    }

    static func encodeTags(_ tags: [String]) -> String {
        (try? String(decoding: JSONEncoder().encode(tags), as: UTF8.self)) ?? "[]"
    }

    // MARK: Showings

    static let showingSelect = """
        SELECT s.id AS id, s.event_id AS event_id, s.starts_at AS starts_at, s.ends_at AS ends_at, s.all_day AS all_day,
          s.price_text AS price_text, s.is_free AS is_free, s.capacity AS capacity, s.seats_taken AS seats_taken, s.venue_id AS venue_id,
          v.id AS v_id, v.name AS v_name, v.address AS v_address, v.city_id AS v_city_id, v.lat AS v_lat, v.lon AS v_lon, v.owner_id AS v_owner_id
        FROM events_showings s LEFT JOIN events_venues v ON v.id = s.venue_id
        """

    static func decodeShowing(_ row: any SQLRow) throws -> Showing {
        let capacity = try row.decode(column: "capacity", as: Int?.self)
        let taken = try row.decode(column: "seats_taken", as: Int.self)
        let venue = try row.decode(column: "venue_id", as: Int64?.self) == nil ? nil : try decodeVenue(row, prefix: "v_")
        return Showing(
            id: try row.decode(column: "id", as: Int64.self), event: try row.decode(column: "event_id", as: Int64.self),
            start: Date(timeIntervalSince1970: Double(try row.decode(column: "starts_at", as: Int64.self))),
            end: Date(timeIntervalSince1970: Double(try row.decode(column: "ends_at", as: Int64.self))),
            allDay: try row.decode(column: "all_day", as: Int.self) != 0, venue: venue,
            priceText: try row.decode(column: "price_text", as: String?.self), isFree: try row.decode(column: "is_free", as: Int.self) != 0,
            capacity: capacity, seatsRemaining: capacity.map { max(0, $0 - taken) })
    }

    /// Showings (with their venues) matching `condition`, in start order.
    func showings(where condition: SQLQueryString, on db: (any SQLDatabase)? = nil) async throws -> [Showing] {
        let sql: SQLQueryString = "\(unsafeRaw: Self.showingSelect) WHERE " + condition + " ORDER BY s.starts_at, s.id"
        return try await (db ?? database).raw(sql).all().map(Self.decodeShowing)
    }

    func showing(_ id: Int64, on db: (any SQLDatabase)? = nil) async throws -> Showing? {
        try await showings(where: "s.id = \(bind: id)", on: db).first
    }

    @discardableResult
    func insertShowing(_ input: ShowingInput, event: Int64, city: Int?, published: Bool, on db: any SQLDatabase) async throws -> Int64 {
        let start = Int64(input.start.timeIntervalSince1970.rounded(.down))
        let end = max(start, Int64((input.end ?? input.start).timeIntervalSince1970.rounded(.down)))
        let row = try await db.raw("""
            INSERT INTO events_showings (event_id, venue_id, city_id, published, starts_at, ends_at, span, all_day, price_text, is_free, capacity, seats_taken)
            VALUES (\(bind: event), \(bind: input.venue), \(bind: city), \(bind: published ? 1 : 0), \(bind: start), \(bind: end), \(bind: end - start),
              \(bind: input.allDay == true ? 1 : 0), \(bind: Self.nonEmpty(input.priceText)), \(bind: input.isFree == true ? 1 : 0), \(bind: input.capacity), 0)
            RETURNING id
            """).first()
        guard let id = try row?.decode(column: "id", as: Int64.self) else { throw GatewayError.internalError("The showing was not created.") }
        return id
    }

    /// Creates showings of an event, a few hundred to a statement (an import writes thousands).
    func insertShowings(_ inputs: [ShowingInput], event: Int64, city: Int?, published: Bool, on db: any SQLDatabase) async throws {
        for chunk in stride(from: 0, to: inputs.count, by: 400).map({ inputs[$0 ..< min($0 + 400, inputs.count)] }) {
            let rows = chunk.map { input -> SQLQueryString in
                let start = Int64(input.start.timeIntervalSince1970.rounded(.down))
                let end = max(start, Int64((input.end ?? input.start).timeIntervalSince1970.rounded(.down)))
                return """
                    (\(bind: event), \(bind: input.venue), \(bind: city), \(bind: published ? 1 : 0), \(bind: start), \(bind: end), \(bind: end - start),
                     \(bind: input.allDay == true ? 1 : 0), \(bind: Self.nonEmpty(input.priceText)), \(bind: input.isFree == true ? 1 : 0), \(bind: input.capacity), 0)
                    """
            }
            try await db.raw("""
                INSERT INTO events_showings (event_id, venue_id, city_id, published, starts_at, ends_at, span, all_day, price_text, is_free, capacity, seats_taken)
                VALUES
                """ + rows.joined(separator: ", ")).run()
        }
    }

    /// Changes a showing. Capacity may not drop below the seats held.
    func updateShowing(_ showing: Showing, with patch: ShowingPatch, on db: any SQLDatabase) async throws {
        let start = patch.start ?? showing.start
        let end = patch.end ?? (patch.start.map { $0.addingTimeInterval(showing.end.timeIntervalSince(showing.start)) } ?? showing.end)
        guard end >= start else { throw GatewayError.invalid(field: "/end", "must not be before start") }
        let startSeconds = Int64(start.timeIntervalSince1970.rounded(.down))
        let endSeconds = Int64(end.timeIntervalSince1970.rounded(.down))
        let capacity = patch.capacity ?? showing.capacity
        let venue = patch.venue ?? showing.venue?.id
        let updated = try await db.raw("""
            UPDATE events_showings SET venue_id = \(bind: venue), starts_at = \(bind: startSeconds), ends_at = \(bind: endSeconds),
              span = \(bind: endSeconds - startSeconds), price_text = \(bind: patch.priceText.map { Self.nonEmpty($0) } ?? showing.priceText),
              is_free = \(bind: (patch.isFree ?? showing.isFree) ? 1 : 0), capacity = \(bind: capacity)
            WHERE id = \(bind: showing.id) AND (\(bind: capacity) IS NULL OR seats_taken <= \(bind: capacity))
            RETURNING id
            """).first()
        if updated == nil {
            throw GatewayError.conflict("Reservations hold more seats than that capacity; cancel or reject some first.")
        }
        if venue != showing.venue?.id { try await refreshSearchText(showing.event, on: db) }
        try await relist(showing.event, on: db)
    }

    /// Deletes a showing that holds no requested or confirmed reservation (409 otherwise).
    func deleteShowing(_ showing: Showing, on db: any SQLDatabase) async throws {
        if try await db.raw("""
            SELECT id FROM events_reservations WHERE showing_id = \(bind: showing.id) AND status IN ('requested', 'confirmed') LIMIT 1
            """).first() != nil {
            throw GatewayError.conflict("This showing has active reservations; cancel or reject them first.")
        }
        try await db.raw("DELETE FROM events_reservations WHERE showing_id = \(bind: showing.id)").run()
        try await db.raw("DELETE FROM events_showings WHERE id = \(bind: showing.id)").run()
        try await db.raw("DELETE FROM events_listing WHERE showing_id = \(bind: showing.id)").run()
        if showing.venue != nil { try await refreshSearchText(showing.event, on: db) }
    }

    // MARK: Lists

    /// A list position: the first start of the last event listed and its id.
    struct Cursor: Equatable {
        var first: Int64
        var id: Int64

        init(first: Int64, id: Int64) {
            self.first = first
            self.id = id
        }

        init?(_ text: String) {
            let parts = text.split(separator: "_")
            guard parts.count == 2, let first = Int64(parts[0]), let id = Int64(parts[1]) else { return nil }
            self.init(first: first, id: id)
        }

        var text: String { "\(first)_\(id)" }
    }

    /// The listed showings inside `window` as a subquery of `event_id, starts_at, showing_id`: short
    /// showings by start time, long ones (over a day) by end time, each from a covering index — of
    /// the listing when a category is asked for, of the showings otherwise.
    static func windowShowings(city: Int?, category: Int?, start: Int64, end: Int64) -> SQLQueryString {
        var filter: SQLQueryString = category.map { "category_id = \(bind: $0) AND " } ?? "published = 1 AND "
        if let city { filter = "city_id = \(bind: city) AND " + filter }
        let select: SQLQueryString = category == nil ? "SELECT event_id, starts_at, id AS showing_id FROM events_showings WHERE "
                                                     : "SELECT event_id, starts_at, showing_id FROM events_listing WHERE "
        return select + filter
            + "starts_at >= \(bind: start - 86_400) AND starts_at < \(bind: end) AND (ends_at > \(bind: start) OR starts_at >= \(bind: start))"
            + " AND span <= 86400 UNION ALL " + select + filter + "span > 86400 AND ends_at > \(bind: start) AND starts_at < \(bind: end)"
    }

    /// Published events with a showing in `window`, by their first showing there, a page at a time.
    func list(city: Int?, category: Int?, window: (start: Date, end: Date), limit: Int, cursor: Cursor?) async throws -> Page<EventSummary> {
        let span = (start: Int64(window.start.timeIntervalSince1970), end: Int64(window.end.timeIntervalSince1970))
        let found = catalog.list(city: city, category: category, window: span, limit: limit, after: cursor)
        let page = Array(found.prefix(limit))
        let items = try await summaries(page.map(\.id), window: span)
        let next = found.count > limit ? page.last.map { Cursor(first: $0.first, id: $0.id).text } : nil
        return Page(items: items, nextCursor: next)
    }

    /// Published events at venues within `radius` metres of a point with a showing in `window`,
    /// nearest first.
    func near(lat: Double, lon: Double, radius: Double, category: Int?, window: (start: Date, end: Date), limit: Int) async throws -> Page<EventSummary> {
        let span = (start: Int64(window.start.timeIntervalSince1970), end: Int64(window.end.timeIntervalSince1970))
        let found = catalog.near(lat: lat, lon: lon, radius: radius, category: category, window: span, limit: limit)
        let distances = Dictionary(found.map { ($0.id, $0.distance) }, uniquingKeysWith: { first, _ in first })
        var items = try await summaries(found.map(\.id), window: span)
        for index in items.indices { items[index].distance = (distances[items[index].id]).map { ($0 * 10).rounded() / 10 } }
        return Page(items: items, nextCursor: nil)
    }

    /// Published events whose title, description, organizer or venue contains `text`, newest first,
    /// each with its upcoming showings.
    func search(_ text: String, city: Int?, category: Int?, limit: Int, before: Int64?) async throws -> Page<EventSummary> {
        let pattern = "%" + Self.escapeLike(EventRules.searchable(text.trimmingCharacters(in: .whitespacesAndNewlines))) + "%"
        var sql: SQLQueryString = "SELECT e.id AS id FROM events_events e"
        if let category {
            sql += " JOIN events_event_categories c ON c.event_id = e.id AND c.category_id = \(bind: category)"
        }
        sql += " WHERE e.status = 'published' AND e.search_text LIKE \(bind: pattern) ESCAPE '\\'"
        if let city { sql += " AND e.city_id = \(bind: city)" }
        if let before { sql += " AND e.id < \(bind: before)" }
        sql += " ORDER BY e.id DESC LIMIT \(bind: limit + 1)"
        let ids = try await database.raw(sql).all().map { try $0.decode(column: "id", as: Int64.self) }
        let page = Array(ids.prefix(limit))
        let now = now()
        let items = try await summaries(page, window: (now, now + Int64(EventRules.longestRange) * 86_400))
        return Page(items: items, nextCursor: ids.count > limit ? page.last.map(String.init) : nil)
    }

    /// Summaries of `ids`, in that order, each with at most 20 of its showings inside `window`,
    /// from the catalog; the seats remaining of those with a capacity read from the table (one
    /// statement), as every reservation changes them.
    func summaries(_ ids: [Int64], window: (start: Int64, end: Int64)) async throws -> [EventSummary] {
        var items = catalog.summaries(ids, window: window)
        let limited = items.flatMap { $0.showings.filter { $0.capacity != nil }.map(\.id) }
        guard !limited.isEmpty else { return items }
        var seats: [Int64: (capacity: Int?, taken: Int)] = [:]
        for row in try await database.raw("SELECT id, capacity, seats_taken FROM events_showings WHERE id IN (\(binds: limited))").all() {
            seats[try row.decode(column: "id", as: Int64.self)] = (try row.decode(column: "capacity", as: Int?.self), try row.decode(column: "seats_taken", as: Int.self))
        }
        for item in items.indices {
            for showing in items[item].showings.indices where items[item].showings[showing].capacity != nil {
                guard let known = seats[items[item].showings[showing].id] else { continue }
                items[item].showings[showing].capacity = known.capacity
                items[item].showings[showing].seatsRemaining = known.capacity.map { max(0, $0 - known.taken) }
            }
        }
        return items
    }

    /// The events (with every showing inside `window`) of a subscribable calendar.
    func calendarEvents(city: Int?, category: Int?, window: (start: Date, end: Date), limit: Int) async throws -> [(EventRow, [Int], [Showing])] {
        let start = Int64(window.start.timeIntervalSince1970)
        let end = Int64(window.end.timeIntervalSince1970)
        var sql: SQLQueryString = "SELECT DISTINCT w.event_id AS event_id FROM (" + Self.windowShowings(city: city, category: category, start: start, end: end) + ") w"
        sql += " ORDER BY event_id LIMIT \(bind: limit)"
        let ids = try await database.raw(sql).all().map { try $0.decode(column: "event_id", as: Int64.self) }
        guard !ids.isEmpty else { return [] }
        let categories = try await categories(of: ids)
        var events: [Int64: EventRow] = [:]
        for row in try await database.raw("SELECT \(unsafeRaw: Self.eventColumns) FROM events_events WHERE id IN (\(binds: ids))").all() {
            let event = try Self.decodeEvent(row)
            events[event.id] = event
        }
        var showings: [Int64: [Showing]] = [:]
        for showing in try await self.showings(where: "s.event_id IN (\(binds: ids)) AND s.starts_at < \(bind: end) AND s.ends_at > \(bind: start)") {
            showings[showing.event, default: []].append(showing)
        }
        return ids.compactMap { id in events[id].map { ($0, categories[id] ?? [], showings[id] ?? []) } }
    }

    /// Rows for the old app's list: one per showing of a city's published events in `window`, by time.
    func showingRows(city: Int, category: Int?, window: (start: Date, end: Date), limit: Int) async throws -> [(showing: Int64, title: String, start: Int64, image: String?)] {
        let start = Int64(window.start.timeIntervalSince1970)
        let end = Int64(window.end.timeIntervalSince1970)
        let sql: SQLQueryString = "SELECT w.showing_id AS id, w.starts_at AS starts_at, e.title AS title, e.image_url AS image_url FROM ("
            + Self.windowShowings(city: city, category: category, start: start, end: end)
            + ") w JOIN events_events e ON e.id = w.event_id ORDER BY w.starts_at, e.title, w.showing_id LIMIT \(bind: limit)"
        return try await database.raw(sql).all().map { row in
            (try row.decode(column: "id", as: Int64.self), try row.decode(column: "title", as: String.self),
             try row.decode(column: "starts_at", as: Int64.self), try row.decode(column: "image_url", as: String?.self))
        }
    }
}

/// Distances on the Earth's surface.
enum Geo {
    /// Great-circle distance in metres (haversine, mean Earth radius).
    static func distance(_ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double) -> Double {
        let radians = Double.pi / 180
        let dLat = (lat2 - lat1) * radians
        let dLon = (lon2 - lon1) * radians
        let a = sin(dLat / 2) * sin(dLat / 2) + cos(lat1 * radians) * cos(lat2 * radians) * sin(dLon / 2) * sin(dLon / 2)
        return 6_371_008.8 * 2 * atan2(a.squareRoot(), (1 - a).squareRoot())
    }
}

/// Runs jobs one at a time, in the order they were handed in.
actor SerialRefreshes {
    private var last: Task<Void, Never>?

    func run(_ job: @escaping @Sendable () async -> Void) async {
        let previous = last
        let task = Task {
            await previous?.value
            await job()
        }
        last = task
        await task.value
    }
}
