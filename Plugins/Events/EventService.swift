import Foundation
import GatewayCore
import SQLKit

/// What the native API and the twShow dialect share: checks against the configured categories and
/// cities, who may see and change what, reservations and the notifications they post.
struct EventService: Sendable {
    let store: EventStore
    let settings: EventsPlugin.Configuration
    let context: PluginContext
    let categoryTitles: [Int: String]
    let cities: [Int: (city: EventCity, zone: TimeZone)]
    /// The zone of events without a city, and of lists that name none.
    let defaultZone: TimeZone

    init(store: EventStore, settings: EventsPlugin.Configuration, context: PluginContext) {
        self.store = store
        self.settings = settings
        self.context = context
        categoryTitles = Dictionary(settings.categories.map { ($0.id, $0.title) }, uniquingKeysWith: { first, _ in first })
        var cities: [Int: (EventCity, TimeZone)] = [:]
        for city in settings.cities {
            cities[city.id] = (city, TimeZone(identifier: city.timeZone) ?? TimeZone(identifier: "UTC")!)
        }
        self.cities = cities
        defaultZone = TimeZone(identifier: settings.timeZone) ?? TimeZone(identifier: "UTC")!
    }

    /// The time zone whose days a city's lists use.
    func zone(of city: Int?) -> TimeZone {
        city.flatMap { cities[$0]?.zone } ?? defaultZone
    }

    // MARK: Checks

    /// 422 naming `pointer` for a city that is not configured.
    func checkCity(_ city: Int?, pointer: String) throws {
        if let city, cities[city] == nil {
            throw GatewayError.invalid(field: pointer, "is not a known city (see GET /v1/events/cities)")
        }
    }

    func checkCategory(_ category: Int?, pointer: String) throws {
        if let category, categoryTitles[category] == nil {
            throw GatewayError.invalid(field: pointer, "is not a known category (see GET /v1/events/categories)")
        }
    }

    func checkCategories(_ categories: [Int]?) throws {
        for (index, category) in (categories ?? []).enumerated() {
            try checkCategory(category, pointer: "/categories/\(index)")
        }
    }

    func checkVenues(_ showings: [ShowingInput], pointer: String = "/showings") async throws {
        for (index, showing) in showings.enumerated() {
            if let venue = showing.venue, try await store.venue(venue) == nil {
                throw GatewayError.invalid(field: pointer.isEmpty ? "/venue" : "\(pointer)/\(index)/venue", "is not a known venue")
            }
        }
    }

    /// A list's range of days in `city`'s zone (422 for a malformed one, done by the query's validation).
    func window(city: Int?, from: String?, to: String?) -> (start: Date, end: Date) {
        let zone = zone(of: city)
        return DayRange.resolve(from: from, to: to, now: context.clock.now(), zone: zone).window(in: zone)
    }

    /// The event, if the caller may see it: published and cancelled events are public, drafts
    /// belong to their owner and administrators (404 for everyone else).
    func visibleEvent(_ id: Int64, principal: Principal) async throws -> EventStore.EventRow {
        guard let event = try await store.event(id) else { throw GatewayError.notFound("No such event.") }
        if event.status == .draft, !principal.isAdmin, event.owner == nil || event.owner != principal.userID {
            throw GatewayError.notFound("No such event.")
        }
        return event
    }

    /// The event, if the caller may change it: its owner or an administrator (404 otherwise, so
    /// that others do not learn of drafts).
    func ownedEvent(_ id: Int64, context: OperationContext) async throws -> EventStore.EventRow {
        guard let event = try await store.event(id) else { throw GatewayError.notFound("No such event.") }
        try context.requireOwner(event.owner, resource: "event")
        return event
    }

    // MARK: Events

    func create(_ input: EventInput, context: OperationContext) async throws -> EventDetail {
        guard let title = input.title else { throw GatewayError.invalid(field: "/title", "is required") }
        try checkCity(input.city, pointer: "/city")
        try checkCategories(input.categories)
        try await checkVenues(input.showings ?? [])
        let status = input.status ?? .published
        let id = try await store.database.transaction { db in
            try await store.insertEvent(input, title: title, owner: context.principal.userID, uid: nil, status: status, on: db)
        }
        await store.changed(events: [id])
        return try await detail(id)
    }

    func update(_ id: Int64, with input: EventInput, context: OperationContext) async throws -> EventDetail {
        let event = try await ownedEvent(id, context: context)
        guard input.showings?.isEmpty ?? true else {
            throw GatewayError.invalid(field: "/showings", "is read-only here: add, change and delete showings at /v1/events/{id}/showings and /v1/events/showings/{id}")
        }
        try checkCity(input.city, pointer: "/city")
        try checkCategories(input.categories)
        let cancelled = try await store.database.transaction { db -> [Reservation] in
            try await store.updateEvent(event, with: input, on: db)
            guard input.status == .cancelled, event.status != .cancelled else { return [] }
            return try await store.cancelReservations(ofEvent: id, reason: "The event was cancelled.", on: db)
        }
        await store.changed(events: [id])
        for reservation in cancelled {
            await notify(reservation.user, title: "Cancelled: \(input.title ?? event.title)",
                         body: "The event was cancelled, and your reservation of \(seatsText(reservation.seats)) with it.", reservation: reservation.id)
        }
        return try await detail(id)
    }

    func delete(_ id: Int64, context: OperationContext) async throws {
        _ = try await ownedEvent(id, context: context)
        try await store.database.transaction { db in
            if try await db.raw("""
                SELECT id FROM events_reservations WHERE event_id = \(bind: id) AND status IN ('requested', 'confirmed') LIMIT 1
                """).first() != nil {
                throw GatewayError.conflict("This event has active reservations: cancel the event (status cancelled) instead, which tells their holders.")
            }
            try await store.deleteEvent(id, on: db)
        }
        await store.changed(events: [id])
    }

    func detail(_ id: Int64) async throws -> EventDetail {
        guard let detail = try await store.detail(id, titles: categoryTitles) else { throw GatewayError.notFound("No such event.") }
        return detail
    }

    // MARK: Showings

    func addShowing(_ input: ShowingInput, to eventID: Int64, context: OperationContext) async throws -> Showing {
        let event = try await ownedEvent(eventID, context: context)
        try await checkVenues([input], pointer: "")
        let id = try await store.database.transaction { db in
            let id = try await store.insertShowing(input, event: event.id, city: event.city, published: event.status == .published, on: db)
            if input.venue != nil { try await store.refreshSearchText(event.id, on: db) }
            try await store.relist(event.id, on: db)
            return id
        }
        await store.changed(events: [event.id])
        guard let showing = try await store.showing(id) else { throw GatewayError.notFound("No such showing.") }
        return showing
    }

    /// The showing and its event, when the caller owns the event (404 otherwise).
    func ownedShowing(_ id: Int64, context: OperationContext) async throws -> (Showing, EventStore.EventRow) {
        guard let showing = try await store.showing(id) else { throw GatewayError.notFound("No such showing.") }
        let event = try await ownedEvent(showing.event, context: context)
        return (showing, event)
    }

    func updateShowing(_ id: Int64, with patch: ShowingPatch, context: OperationContext) async throws -> Showing {
        let (showing, _) = try await ownedShowing(id, context: context)
        if let venue = patch.venue, try await store.venue(venue) == nil { throw GatewayError.invalid(field: "/venue", "is not a known venue") }
        try await store.database.transaction { db in try await store.updateShowing(showing, with: patch, on: db) }
        await store.changed(events: [showing.event])
        guard let updated = try await store.showing(id) else { throw GatewayError.notFound("No such showing.") }
        return updated
    }

    func deleteShowing(_ id: Int64, context: OperationContext) async throws {
        let (showing, _) = try await ownedShowing(id, context: context)
        try await store.database.transaction { db in try await store.deleteShowing(showing, on: db) }
        await store.changed(events: [showing.event])
    }

    // MARK: Venues

    func ownedVenue(_ id: Int64, context: OperationContext) async throws -> Venue {
        guard let venue = try await store.venue(id) else { throw GatewayError.notFound("No such venue.") }
        try context.requireOwner(venue.owner, resource: "venue")
        return venue
    }

    // MARK: Reservations

    /// Holds seats of a showing for the caller, confirmed at once or requested, by the event's policy.
    func reserve(showingID: Int64, seats requested: Int?, context: OperationContext) async throws -> Reservation {
        guard let user = context.principal.userID else { throw GatewayError.forbidden("Reservations are made for a user; this key has none.") }
        let seats = requested ?? 1
        guard (1...settings.maxSeatsPerReservation).contains(seats) else {
            throw GatewayError.invalid(field: "/seats", "must be between 1 and \(settings.maxSeatsPerReservation)")
        }
        guard let target = try await store.reservationTarget(showingID) else { throw GatewayError.notFound("No such showing.") }
        if target.status == .draft, !context.principal.isAdmin, target.owner == nil || target.owner != user {
            throw GatewayError.notFound("No such showing.")
        }
        guard target.status == .published else { throw GatewayError.conflict("This event is \(target.status.rawValue); it takes no reservations.") }
        guard target.end > self.context.clock.now() else { throw GatewayError.conflict("This showing is over.") }
        let policy = target.policy ?? settings.reservationPolicy
        let reservation = try await store.reserve(showing: showingID, event: target.event, user: user, seats: seats,
                                                  status: policy == .auto ? .confirmed : .requested, maxActive: settings.reservationsPerUser)
        let when = when(target.start, allDay: target.allDay, city: target.city)
        if reservation.status == .confirmed {
            await notify(user, title: "Confirmed: \(target.title)", body: "\(seatsText(seats).capitalizedFirst) on \(when).", reservation: reservation.id)
        } else if let owner = target.owner {
            await notify(owner, title: "Reservation request: \(target.title)", body: "\(seatsText(seats).capitalizedFirst) asked for on \(when).",
                         reservation: reservation.id)
        }
        return reservation
    }

    /// The reservation, when the caller made it (or is an administrator).
    func ownReservation(_ id: Int64, context: OperationContext) async throws -> Reservation {
        guard let reservation = try await store.reservation(id) else { throw GatewayError.notFound("No such reservation.") }
        try context.requireOwner(reservation.user, resource: "reservation")
        return reservation
    }

    func cancel(_ id: Int64, context: OperationContext) async throws -> Reservation {
        _ = try await ownReservation(id, context: context)
        return try await store.transition(id, from: [.requested, .confirmed], to: .cancelled, by: context.principal.userID, reason: nil)
    }

    /// The event owner's (or an administrator's) decision on a reservation; posts it to the user's inbox.
    func decide(_ id: Int64, confirm: Bool, reason: String?, context: OperationContext) async throws -> Reservation {
        try await decide(id, confirm: confirm, reason: reason, by: context.principal)
    }

    /// A decision by `decider` (the event's owner or an administrator: 404 for anyone else), as the
    /// API and the admin console make it: the reservation moves and its user is told.
    func decide(_ id: Int64, confirm: Bool, reason: String?, by decider: Principal) async throws -> Reservation {
        guard let reservation = try await store.reservation(id) else { throw GatewayError.notFound("No such reservation.") }
        guard let event = try await store.event(reservation.event) else { throw GatewayError.notFound("No such event.") }
        if !decider.isAdmin, event.owner == nil || decider.userID != event.owner {
            throw GatewayError.notFound("No such event.")
        }
        let decided = try await store.transition(id, from: confirm ? [.requested] : [.requested, .confirmed], to: confirm ? .confirmed : .rejected,
                                                 by: decider.userID, reason: reason)
        let showing = try await store.showing(reservation.showing)
        let date = showing.map { when($0, event: event) } ?? "the showing"
        if confirm {
            await notify(reservation.user, title: "Confirmed: \(event.title)", body: "\(seatsText(reservation.seats).capitalizedFirst) on \(date).", reservation: id)
        } else {
            await notify(reservation.user, title: "Not confirmed: \(event.title)",
                         body: "Your request for \(seatsText(reservation.seats)) on \(date) was declined." + (reason.map { " \($0)" } ?? ""), reservation: id)
        }
        return decided
    }

    /// Posts to a user's inbox; a failure is logged, never undoes the decision it reports.
    func notify(_ user: String, title: String, body: String, reservation: Int64) async {
        do {
            try await context.notify(userID: user, title: title, body: body, link: "/v1/events/reservations/\(reservation)")
        } catch {
            context.logger.error("A reservation notification was not posted", metadata: ["reservation": "\(reservation)", "error": "\(error)"])
        }
    }

    func seatsText(_ count: Int) -> String { count == 1 ? "1 seat" : "\(count) seats" }

    /// A showing's start in its event's city, as people read it: `2026-11-28 19:30 (Asia/Taipei)`.
    func when(_ showing: Showing, event: EventStore.EventRow) -> String {
        when(showing.start, allDay: showing.allDay, city: event.city)
    }

    func when(_ start: Date, allDay: Bool, city: Int?) -> String {
        let zone = zone(of: city)
        return LocalTime.format(start, zone: zone, withTime: !allDay) + " (\(zone.identifier))"
    }
}

/// Local dates and times as the old app and people read them.
enum LocalTime {
    /// `yyyy-MM-dd HH:mm`, or `yyyy-MM-dd` without the time.
    static func format(_ date: Date, zone: TimeZone, withTime: Bool = true) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        let day = String(format: "%04d-%02d-%02d", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0)
        return withTime ? day + String(format: " %02d:%02d", parts.hour ?? 0, parts.minute ?? 0) : day
    }
}

extension String {
    var capitalizedFirst: String { prefix(1).uppercased() + dropFirst() }
}
