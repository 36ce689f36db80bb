import Foundation
import GatewayCore
import NIOCore
import ServiceLifecycle
import SQLKit

/// Arts and culture events by city, category and dates, with showings at venues, reservations,
/// iCalendar import and export, and the COIMOTION twShow dialect of the old app (seed 000).
public struct EventsPlugin: ServicePlugin {
    public static let id = "events"
    public static let summary = "Events: arts and culture events by city, category and dates, with showings, venues and reservations"
    public static let migrations = EventsMigrations.all

    public struct Configuration: PluginConfiguration {
        /// The categories events may have; ids are the old service's `catID`s.
        public var categories: [EventCategory] = [
            EventCategory(id: 1, title: "音樂"), EventCategory(id: 2, title: "戲劇"), EventCategory(id: 3, title: "舞蹈"),
            EventCategory(id: 4, title: "親子"), EventCategory(id: 6, title: "展覽"), EventCategory(id: 7, title: "講座"),
            EventCategory(id: 8, title: "電影"), EventCategory(id: 15, title: "其他"), EventCategory(id: 17, title: "演唱會"),
        ]
        /// The cities events may be in; ids are the old service's `ctID`s.
        public var cities: [EventCity] = [EventCity(id: 15, name: "高雄市", timeZone: "Asia/Taipei")]
        /// The zone of events without a city and of lists that name no city (an IANA name).
        public var timeZone = "Asia/Taipei"
        /// How reservations are decided unless an event says otherwise: `auto` or `manual`.
        public var reservationPolicy = ReservationPolicy.auto
        /// How many requested or confirmed reservations one user may hold for one showing (0: no limit).
        public var reservationsPerUser = 1
        /// The most seats one reservation may hold.
        public var maxSeatsPerReservation = 10
        /// How far ahead a recurring imported event becomes showings.
        public var recurrenceHorizon = ConfigDuration(seconds: 365 * 86_400)
        /// Calendars loaded on the first start with `demo: true` (beside a week of sample events in Kaohsiung).
        public var demoCalendars: [String] = []

        public init() {}
        public static let defaults = Configuration()

        public func validate() throws {
            guard !categories.isEmpty else { throw ConfigurationError(key: "categories", "must name at least one category") }
            if let duplicate = Dictionary(grouping: categories, by: \.id).first(where: { $0.value.count > 1 }) {
                throw ConfigurationError(key: "categories", "names category \(duplicate.key) twice")
            }
            if let duplicate = Dictionary(grouping: cities, by: \.id).first(where: { $0.value.count > 1 }) {
                throw ConfigurationError(key: "cities", "names city \(duplicate.key) twice")
            }
            for (index, city) in cities.enumerated() where TimeZone(identifier: city.timeZone) == nil {
                throw ConfigurationError(key: "cities[\(index)].timeZone", "'\(city.timeZone)' is not an IANA time zone (such as Asia/Taipei)")
            }
            guard TimeZone(identifier: timeZone) != nil else {
                throw ConfigurationError(key: "timeZone", "'\(timeZone)' is not an IANA time zone (such as Asia/Taipei)")
            }
            guard reservationsPerUser >= 0 else { throw ConfigurationError(key: "reservationsPerUser", "must be 0 (no limit) or more") }
            guard (1...10_000).contains(maxSeatsPerReservation) else { throw ConfigurationError(key: "maxSeatsPerReservation", "must be between 1 and 10000") }
            guard (86_400...(5 * 366 * 86_400)).contains(recurrenceHorizon.seconds) else {
                throw ConfigurationError(key: "recurrenceHorizon", "must be between 1d and 5 years")
            }
        }
    }

    let configuration: Configuration
    let context: PluginContext
    let store: EventStore
    let service: EventService

    public init(configuration: Configuration, context: PluginContext) async throws {
        self.configuration = configuration
        self.context = context
        store = EventStore(database: context.database, clock: context.clock, bus: context.events, logger: context.logger)
        service = EventService(store: store, settings: configuration, context: context)
        try await store.sync(categories: configuration.categories, cities: configuration.cities)
        try await store.catalog.reload()
    }

    public func loadDemoData() async throws {
        try await EventDemoData.load(into: service)
        for path in configuration.demoCalendars {
            let report = try await calendarImporter.importFile(context.resolve(path: path), options: [:], progress: { _, _ in })
            context.logger.info("Demo calendar loaded", metadata: ["file": "\(path)", "events": "\(report.imported)", "rejected": "\(report.rejected.count)"])
        }
    }

    var calendarImporter: CalendarImporter { CalendarImporter(service: service) }

    public var importers: [any Importer] { [calendarImporter] }

    /// Applies the other instances' changes to this instance's catalog of published events.
    public var services: [any Service] { [context.events.listener(topic: CatalogChange.topic, logger: context.logger) { [store] in await store.applyRemote($0) }] }

    public var dialects: [Dialect] { [TwShowDialect.make(service: service)] }

    public var routes: [Route] {
        let service = self.service
        let store = self.store
        let importer = calendarImporter
        let listed = CachePolicy.shared(ttl: .seconds(60), tags: ["events"])
        let changes = CachePolicy.invalidating(["events"])
        // The configured cities and categories, as the document states them (the handlers check them).
        let city = FieldRule.oneOf(service.settings.cities.map(\.id)).described("A city's id (GET /v1/events/cities).")
        let category = FieldRule.oneOf(service.settings.categories.map(\.id)).described("A category's id (GET /v1/events/categories).")
        let filters = ["query.city": city, "query.category": category]
        let eventBody = ["body.city": city, "body.categories": FieldRule.each(category)]
        return [
            // Reference data
            Route.define("events.categories", .get, "/categories", summary: "The categories events may have")
                .cache(.shared(ttl: .seconds(300), tags: ["events"]))
                .returns(Page<EventCategory>.self) { _, _ in Page(items: service.settings.categories, nextCursor: nil) },
            Route.define("events.cities", .get, "/cities", summary: "The cities events may be in, with their time zones")
                .cache(.shared(ttl: .seconds(300), tags: ["events"]))
                .returns(Page<EventCity>.self) { _, _ in Page(items: service.settings.cities, nextCursor: nil) },

            // Lists
            Route.define("events.list", .get, "/", summary: "Published events with a showing in a range of days, by first showing")
                .details("Days are `yyyy-MM-dd` in the city's time zone (the plugin's `timeZone` without a city); the range defaults to today to today + 7 days and may span at most 366 days.")
                .query(EventListQuery.self)
                .rules(filters)
                .cache(listed)
                .returns(Page<EventSummary>.self) { input, _ in
                    let query = input.query
                    try service.checkCity(query.city, pointer: "city")
                    try service.checkCategory(query.category, pointer: "category")
                    var cursor: EventStore.Cursor?
                    if let text = query.cursor {
                        guard let parsed = EventStore.Cursor(text) else { throw GatewayError.invalid(field: "cursor", "is not a cursor of this list") }
                        cursor = parsed
                    }
                    return try await store.list(city: query.city, category: query.category,
                                                window: service.window(city: query.city, from: query.from, to: query.to),
                                                limit: query.limit ?? 50, cursor: cursor)
                },
            Route.define("events.near", .get, "/near", summary: "Published events at venues near a point, nearest first")
                .example("/near?lat=22.62&lon=120.34&radius=2000")
                .details("`radius` in metres (default 2000, at most 50000); days as in the list, in the plugin's `timeZone`.")
                .query(NearQuery.self)
                .rules(["query.category": category])
                .cache(listed)
                .returns(Page<EventSummary>.self) { input, _ in
                    let query = input.query
                    try service.checkCategory(query.category, pointer: "category")
                    return try await store.near(lat: query.lat, lon: query.lon, radius: query.radius ?? 2000, category: query.category,
                                                window: service.window(city: nil, from: query.from, to: query.to), limit: query.limit ?? 50)
                },
            Route.define("events.search", .get, "/search", summary: "Published events whose title, description, organizer or venue contains the text")
                .query(SearchQuery.self)
                .rules(filters)
                .cache(listed)
                .returns(Page<EventSummary>.self) { input, _ in
                    let query = input.query
                    try service.checkCity(query.city, pointer: "city")
                    try service.checkCategory(query.category, pointer: "category")
                    var before: Int64?
                    if let text = query.cursor {
                        guard let id = Int64(text) else { throw GatewayError.invalid(field: "cursor", "is not a cursor of this list") }
                        before = id
                    }
                    return try await store.search(query.q, city: query.city, category: query.category, limit: query.limit ?? 50, before: before)
                },
            Route.define("events.calendar", .get, ".ics", summary: "A subscribable iCalendar of published events")
                .details("The same filters as the list; without `from` and `to` the calendar covers 30 days back to the recurrence horizon ahead.")
                .query(CalendarQuery.self)
                .rules(filters)
                .cache(.shared(ttl: .seconds(300), tags: ["events"]))
                .documentRawOutput(mediaTypes: "text/calendar")
                .returns(RawReply.self) { input, _ in
                    let query = input.query
                    try service.checkCity(query.city, pointer: "city")
                    try service.checkCategory(query.category, pointer: "category")
                    return try await CalendarExport.calendar(service: service, city: query.city, category: query.category, from: query.from, to: query.to)
                },

            // Events
            Route.define("events.get", .get, "/{id}", summary: "An event with every showing and venue; `{id}.ics` answers iCalendar")
                .details("Viewing an event records it in the signed-in viewer's history (`/v1/me/history`).")
                .path(EventPath.self)
                .documentOutput(as: EventDetail.self)
                .documentRawOutput(mediaTypes: "text/calendar")
                .returns(RawReply.self) { input, context in
                    guard let (id, calendar) = input.path.parsed else { throw GatewayError.notFound("No such event.") }
                    let event = try await service.visibleEvent(id, principal: context.principal)
                    let detail = try await service.detail(id)
                    if calendar { return CalendarExport.calendar(of: detail, service: service) }
                    await context.recordView(of: String(id), title: event.title)
                    return try RawReply(json: detail)
                },
            Route.define("events.create", .post, "/", summary: "Create an event (with showings), owned by the caller")
                .access(.scope("events:write"))
                .cache(changes)
                .body(EventInput.self)
                .rules(eventBody)
                .rules(["body": .requiring(["title"]), "body.title": FieldRule(keywords: ["type": .string("string")])])
                .replies(EventDetail.self) { input, context in
                    let detail = try await service.create(input.body, context: context)
                    return Reply(detail, status: .created, headers: [.location: "/v1/events/\(detail.id)"])
                },
            Route.define("events.update", .patch, "/{id}", summary: "Change an event's members (its owner or an administrator)")
                .details("Members left out are kept; an empty string clears a text member. Setting `status` to `cancelled` cancels every active reservation and tells its holder.")
                .access(.scope("events:write"))
                .cache(changes)
                .path(NumberPath.self)
                .body(EventInput.self)
                .rules(eventBody)
                .rules(["body.showings": FieldRule(keywords: ["maxItems": .number(0)])
                    .described("Read-only here: showings are added, changed and deleted at /v1/events/{id}/showings and /v1/events/showings/{id}.")])
                .returns(EventDetail.self) { input, context in
                    try await service.update(input.path.id, with: input.body, context: context)
                },
            Route.define("events.delete", .delete, "/{id}", summary: "Delete an event without active reservations (its owner or an administrator)")
                .access(.scope("events:write"))
                .cache(changes)
                .path(NumberPath.self)
                .returns(NoContent.self) { input, context in
                    try await service.delete(input.path.id, context: context)
                    return NoContent()
                },

            // Showings
            Route.define("events.showings.create", .post, "/{id}/showings", summary: "Add a showing to an event")
                .access(.scope("events:write"))
                .cache(changes)
                .path(NumberPath.self)
                .body(ShowingInput.self)
                .replies(Showing.self) { input, context in
                    let showing = try await service.addShowing(input.body, to: input.path.id, context: context)
                    return Reply(showing, status: .created, headers: [.location: "/v1/events/showings/\(showing.id)"])
                },
            Route.define("events.showings.get", .get, "/showings/{id}", summary: "A showing, with the seats that remain")
                .path(NumberPath.self)
                .returns(Showing.self) { input, context in
                    guard let showing = try await store.showing(input.path.id) else { throw GatewayError.notFound("No such showing.") }
                    _ = try await service.visibleEvent(showing.event, principal: context.principal)
                    return showing
                },
            Route.define("events.showings.update", .patch, "/showings/{id}", summary: "Change a showing (not below the seats reservations hold)")
                .access(.scope("events:write"))
                .cache(changes)
                .path(NumberPath.self)
                .body(ShowingPatch.self)
                .returns(Showing.self) { input, context in
                    try await service.updateShowing(input.path.id, with: input.body, context: context)
                },
            Route.define("events.showings.delete", .delete, "/showings/{id}", summary: "Delete a showing without active reservations")
                .access(.scope("events:write"))
                .cache(changes)
                .path(NumberPath.self)
                .returns(NoContent.self) { input, context in
                    try await service.deleteShowing(input.path.id, context: context)
                    return NoContent()
                },

            // Venues
            Route.define("events.venues.list", .get, "/venues", summary: "Venues, by id; `q` filters by name")
                .query(VenueListQuery.self)
                .cache(listed)
                .returns(Page<Venue>.self) { input, _ in
                    var after: Int64?
                    if let text = input.query.cursor {
                        guard let id = Int64(text) else { throw GatewayError.invalid(field: "cursor", "is not a cursor of this list") }
                        after = id
                    }
                    return try await store.venues(city: input.query.city, query: input.query.q, limit: input.query.limit ?? 50, after: after)
                },
            Route.define("events.venues.get", .get, "/venues/{id}", summary: "A venue")
                .path(NumberPath.self)
                .returns(Venue.self) { input, _ in
                    guard let venue = try await store.venue(input.path.id) else { throw GatewayError.notFound("No such venue.") }
                    return venue
                },
            Route.define("events.venues.create", .post, "/venues", summary: "Create a venue, owned by the caller")
                .access(.scope("events:write"))
                .cache(changes)
                .body(VenueInput.self)
                .rules(["body.city": city, "body": .requiring(["name"]), "body.name": FieldRule(keywords: ["type": .string("string")])])
                .replies(Venue.self) { input, context in
                    guard let name = input.body.name else { throw GatewayError.invalid(field: "/name", "is required") }
                    try service.checkCity(input.body.city, pointer: "/city")
                    let venue = try await store.createVenue(input.body, name: name, owner: context.principal.userID)
                    await store.changed(venues: [venue.id])
                    return Reply(venue, status: .created, headers: [.location: "/v1/events/venues/\(venue.id)"])
                },
            Route.define("events.venues.update", .patch, "/venues/{id}", summary: "Change a venue (its owner or an administrator)")
                .access(.scope("events:write"))
                .cache(changes)
                .path(NumberPath.self)
                .body(VenueInput.self)
                .rules(["body.city": city])
                .returns(Venue.self) { input, context in
                    let venue = try await service.ownedVenue(input.path.id, context: context)
                    try service.checkCity(input.body.city, pointer: "/city")
                    let updated = try await store.updateVenue(venue, with: input.body)
                    await store.changed(venues: [venue.id])
                    return updated
                },
            Route.define("events.venues.delete", .delete, "/venues/{id}", summary: "Delete a venue no showing uses")
                .access(.scope("events:write"))
                .cache(changes)
                .path(NumberPath.self)
                .returns(NoContent.self) { input, context in
                    _ = try await service.ownedVenue(input.path.id, context: context)
                    try await store.deleteVenue(input.path.id)
                    await store.changed(venues: [input.path.id])
                    return NoContent()
                },

            // Reservations
            Route.define("events.reservations.create", .post, "/showings/{id}/reservations", summary: "Reserve seats of a showing")
                .details("Confirmed at once while seats remain (policy `auto`) or requested for the owner to decide (`manual`); 409 says how many seats remain.")
                .access(.user)
                .path(NumberPath.self)
                .body(ReservationInput.self)
                .rules(["body.seats": FieldRule.integer(1...service.settings.maxSeatsPerReservation).described("Seats to hold (default 1).")])
                .replies(Reservation.self) { input, context in
                    let reservation = try await service.reserve(showingID: input.path.id, seats: input.body.seats, context: context)
                    return Reply(reservation, status: .created, headers: [.location: "/v1/events/reservations/\(reservation.id)"])
                },
            Route.define("events.reservations.mine", .get, "/reservations", summary: "The caller's reservations, newest first")
                .access(.user)
                .query(ReservationListQuery.self)
                .returns(Page<Reservation>.self) { input, context in
                    guard let user = context.principal.userID else { throw GatewayError.forbidden("Reservations belong to a user; this key has none.") }
                    return try await store.reservations(user: user, status: input.query.status, limit: input.query.limit ?? 50,
                                                        before: try Self.idCursor(input.query.cursor))
                },
            Route.define("events.reservations.get", .get, "/reservations/{id}", summary: "One of the caller's reservations")
                .access(.user)
                .path(NumberPath.self)
                .returns(Reservation.self) { input, context in
                    try await service.ownReservation(input.path.id, context: context)
                },
            Route.define("events.reservations.cancel", .post, "/reservations/{id}/cancel", summary: "Cancel one of the caller's reservations, freeing its seats")
                .access(.user)
                .path(NumberPath.self)
                .status(.ok)
                .returns(Reservation.self) { input, context in
                    try await service.cancel(input.path.id, context: context)
                },
            Route.define("events.reservations.forEvent", .get, "/{id}/reservations", summary: "An event's reservations (its owner or an administrator)")
                .access(.user)
                .path(NumberPath.self)
                .query(ReservationListQuery.self)
                .returns(Page<Reservation>.self) { input, context in
                    _ = try await service.ownedEvent(input.path.id, context: context)
                    return try await store.reservations(event: input.path.id, status: input.query.status, limit: input.query.limit ?? 50,
                                                        before: try Self.idCursor(input.query.cursor))
                },
            Route.define("events.reservations.confirm", .post, "/reservations/{id}/confirm", summary: "Confirm a requested reservation (the event's owner)")
                .access(.user)
                .path(NumberPath.self)
                .body(DecisionInput.self)
                .status(.ok)
                .returns(Reservation.self) { input, context in
                    try await service.decide(input.path.id, confirm: true, reason: input.body.reason, context: context)
                },
            Route.define("events.reservations.reject", .post, "/reservations/{id}/reject", summary: "Reject a reservation, freeing its seats (the event's owner)")
                .access(.user)
                .path(NumberPath.self)
                .body(DecisionInput.self)
                .status(.ok)
                .returns(Reservation.self) { input, context in
                    try await service.decide(input.path.id, confirm: false, reason: input.body.reason, context: context)
                },

            // Import
            Route.define("events.import", .post, "/import", summary: "Import an iCalendar file (administrators, or users granted events:write)")
                .details("Query `city` and `category` apply to every event of the file; `strict=true` stops at the first malformed line. Events are matched by UID: a re-import updates them.")
                // Imported events belong to nobody and are shown to everyone: shared data.
                .access(.granted("events:write"))
                .cache(changes)
                .status(.ok)
                .query(ImportQuery.self)
                .rules(filters)
                .body(CalendarBody.self)
                .returns(ImportReport.self) { input, _ in
                    try service.checkCity(input.query.city, pointer: "city")
                    try service.checkCategory(input.query.category, pointer: "category")
                    return try await importer.importCalendar(input.body.bytes, city: input.query.city, category: input.query.category,
                                                             strict: input.query.strict ?? false, progress: { _, _ in })
                },
        ]
    }

    static func idCursor(_ text: String?) throws -> Int64? {
        guard let text else { return nil }
        guard let id = Int64(text) else { throw GatewayError.invalid(field: "cursor", "is not a cursor of this list") }
        return id
    }
}

/// `POST /import`'s options.
public struct ImportQuery: Codable, Sendable {
    public var city: Int?
    public var category: Int?
    public var strict: Bool?
}

/// An iCalendar body.
public struct CalendarBody: RawBodyInput {
    public static let acceptedMediaTypes = ["text/calendar", "application/octet-stream", "text/plain"]
    public var bytes: Data

    public init(bytes: ByteBuffer, contentType: String) throws {
        self.bytes = Data(bytes.readableBytesView)
    }

    public init(from decoder: any Decoder) throws {
        bytes = Data(try decoder.singleValueContainer().decode(String.self).utf8)
    }
}
