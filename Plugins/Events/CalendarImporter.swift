import Foundation
import GatewayCore
import SQLKit

/// Loads iCalendar (RFC 5545) files: each VEVENT (with its RECURRENCE-ID overrides) becomes an
/// event, and its occurrences become showings — `gateway import events FILE.ics [--city ID]
/// [--category ID] [--strict]` and `POST /v1/events/import`.
///
/// - Matched by UID: importing a calendar again updates its events in place (showings that hold
///   active reservations are kept), never duplicates them. The whole file is written in one
///   transaction: readers see the calendar before or after, never half of it.
/// - Floating times are read in the calendar's `X-WR-TIMEZONE`, else the city's zone (`--city`),
///   else the plugin's `timeZone`. DATE values make all-day showings.
/// - A recurring event becomes the showings from a year ago up to `recurrenceHorizon` ahead; a
///   recurrence that ended before that keeps its first 100 showings, so old events keep a history.
/// - LOCATION (with GEO) names a venue, made the first time it is seen; CATEGORIES whose text is a
///   configured category's title add that category, and all of them become tags; URL becomes the
///   information source; `STATUS:CANCELLED` makes a cancelled event.
/// - A malformed line is reported with its number and skipped; `--strict` stops at the first one.
///   The parser's limits (``ICalendarLimits``) bound what a hostile file can cost.
struct CalendarImporter: Importer {
    let service: EventService

    var format: String { "ics" }
    var summary: String { "iCalendar .ics (VEVENTs become events, recurrences showings; --city ID, --category ID, --strict)" }

    func accepts(_ file: URL) -> Bool {
        if ["ics", "ical", "icalendar"].contains(file.pathExtension.lowercased()) { return true }
        guard let handle = try? FileHandle(forReadingFrom: file) else { return false }
        defer { try? handle.close() }
        let start = (try? handle.read(upToCount: 64)) ?? Data()
        return String(decoding: start, as: UTF8.self).uppercased().contains("BEGIN:VCALENDAR")
    }

    func importFile(_ file: URL, options: [String: String], progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> ImportReport {
        let unknown = Set(options.keys).subtracting(["city", "category", "strict"])
        guard unknown.isEmpty else {
            throw GatewayError.invalid(field: unknown.sorted()[0], "is not an option of the iCalendar importer (it takes --city ID, --category ID and --strict)")
        }
        let city = try options["city"].map { text -> Int in
            guard let value = Int(text) else { throw GatewayError.invalid(field: "city", "must be a city id") }
            return value
        }
        let category = try options["category"].map { text -> Int in
            guard let value = Int(text) else { throw GatewayError.invalid(field: "category", "must be a category id") }
            return value
        }
        try service.checkCity(city, pointer: "city")
        try service.checkCategory(category, pointer: "category")
        let strict = options["strict"].map { ["true", "1", "yes"].contains($0.lowercased()) } ?? false
        let calendar = try Self.reading { () throws(ICalendarError) in try ICalendarParser(strict: strict).parse(contentsOf: file) }
        return try await store(calendar, city: city, category: category, progress: progress)
    }

    /// Imports a calendar held in memory (an upload).
    func importCalendar(_ data: Data, city: Int?, category: Int?, strict: Bool, progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> ImportReport {
        let calendar = try Self.reading { () throws(ICalendarError) in try ICalendarParser(strict: strict).parse(data) }
        return try await store(calendar, city: city, category: category, progress: progress)
    }

    /// Runs the parser, turning its errors into problems a client can read: a malformed line under
    /// `--strict` is a 422 naming the line, a broken limit a 413.
    static func reading(_ parse: () throws(ICalendarError) -> ICalendar) throws -> ICalendar {
        do {
            return try parse()
        } catch {
            switch error.kind {
            case .limitExceeded: throw GatewayError.tooLarge("The calendar is too large to import: \(error.reason) (line \(error.line)).")
            case .unreadable: throw GatewayError.badRequest("The calendar cannot be read: \(error.reason).")
            default: throw GatewayError.invalid("Line \(error.line) of the calendar is malformed: \(error.reason).",
                                                errors: [.init(pointer: "line \(error.line)", detail: error.reason)])
            }
        }
    }

    /// How far back a recurring event's showings are made.
    static let lookBack: TimeInterval = 366 * 86_400
    /// Showings kept of a recurrence that ended before the look-back window.
    static let pastOccurrences = 100

    /// Writes the calendar's events in one transaction.
    func store(_ calendar: ICalendar, city: Int?, category: Int?, progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> ImportReport {
        let store = service.store
        let now = service.context.clock.now()
        let zone = city.map { service.zone(of: $0) } ?? service.defaultZone
        let horizon = now.addingTimeInterval(service.settings.recurrenceHorizon.seconds)
        let categoryIDs = Dictionary(service.settings.categories.map { ($0.title.lowercased(), $0.id) }, uniquingKeysWith: { first, _ in first })
        progress(0, calendar.events.count)
        // Every recurrence over one window, with one budget of steps for the whole file
        // (`ICalendarLimits.maxCalendarRecurrenceIterations`): a file of rules that never match
        // costs bounded time, whatever their number.
        let expansions = calendar.expandAll(from: now.addingTimeInterval(-Self.lookBack), to: horizon, defaultTimeZone: zone, limitPerEvent: 10_000)
        let (imported, skipped, touched) = try await store.database.transaction { db -> (Int, [ImportReport.Rejection], [Int64]) in
            var imported = 0
            var touched: [Int64] = []
            var rejected: [ImportReport.Rejection] = []
            var known: [String: EventStore.EventRow] = [:]
            var venues: [String: (id: Int64, name: String)] = [:]
            for (index, event) in calendar.events.enumerated() {
                if index % 100 == 0 { progress(index, calendar.events.count) }
                guard let title = event.summary?.trimmingCharacters(in: .whitespacesAndNewlines), !title.isEmpty else {
                    rejected.append(.init(line: event.line, reason: "the VEVENT has no SUMMARY (an event needs a title)"))
                    continue
                }
                var occurrences = expansions[index].occurrences
                if !event.isRecurring {
                    occurrences = event.occurrences(from: .distantPast, to: .distantFuture, defaultTimeZone: zone, limit: 1)
                } else if occurrences.isEmpty, expansions[index].truncation == nil {
                    // The recurrence ended before the window: keep its first showings as its history.
                    occurrences = event.occurrences(from: .distantPast, to: horizon, defaultTimeZone: zone, limit: Self.pastOccurrences)
                }
                if occurrences.isEmpty {
                    rejected.append(.init(line: event.line, reason: "the VEVENT has no occurrence (its rule never matches, or every instance is excluded)"))
                    continue
                }
                if let bad = occurrences.first(where: { !EventRules.plausible($0.start) || $0.end.timeIntervalSince($0.start) > EventRules.longestShowing }) {
                    rejected.append(.init(line: event.line, reason: "an occurrence on \(bad.start) is outside 1900–2200 or longer than 400 days"))
                    continue
                }
                // The venue: LOCATION, at GEO when given.
                var venue: (id: Int64, name: String)?
                if let location = event.location?.trimmingCharacters(in: .whitespacesAndNewlines), !location.isEmpty {
                    let key = "\(location)|\(event.geo.map { "\($0.latitude),\($0.longitude)" } ?? "")"
                    if let cached = venues[key] {
                        venue = cached
                    } else {
                        let id = try await store.findOrCreateVenue(name: String(location.prefix(500)), lat: event.geo?.latitude, lon: event.geo?.longitude,
                                                                   city: city, on: db)
                        venue = (id, String(location.prefix(500)))
                        venues[key] = venue
                    }
                }
                var categories = Set(event.categories.compactMap { categoryIDs[$0.trimmingCharacters(in: .whitespaces).lowercased()] })
                if let category { categories.insert(category) }
                let tags = Array(event.categories.map { String($0.prefix(100)) }.filter { !$0.isEmpty }.prefix(50))
                let status: EventStatus = event.status == "CANCELLED" ? .cancelled : .published
                let input = EventInput(title: String(title.prefix(500)), description: event.description.map { String($0.prefix(20_000)) },
                                       infoSource: event.url.map { String($0.prefix(500)) }, city: city, categories: categories.sorted(), tags: tags,
                                       status: status)
                let showings = occurrences.map { occurrence in
                    ShowingInput(venue: venue?.id, start: occurrence.start, end: occurrence.end, allDay: occurrence.allDay)
                }
                if known.isEmpty, index == 0 {
                    for row in try await db.raw("SELECT \(unsafeRaw: EventStore.eventColumns) FROM events_events WHERE uid IS NOT NULL").all() {
                        let existing = try EventStore.decodeEvent(row)
                        if let uid = existing.uid { known[uid] = existing }
                    }
                }
                let uid = String(event.uid.prefix(500))
                if let existing = known[uid] {
                    try await store.updateEvent(existing, with: input, on: db)
                    touched.append(existing.id)
                    try await replaceShowings(of: existing.id, with: showings, city: city, published: status == .published, on: db)
                } else {
                    var withShowings = input
                    withShowings.showings = showings
                    // The parser keeps one event per UID, so a new one is not met again in this file.
                    touched.append(try await store.insertEvent(withShowings, title: input.title ?? title, owner: nil, uid: uid, status: status, on: db,
                                                    venueNames: venue.map { [$0.id: $0.name] } ?? [:]))
                }
                imported += 1
            }
            return (imported, rejected, touched)
        }
        await store.changed(events: touched)
        let rejected = calendar.problems.map { ImportReport.Rejection(line: $0.line, reason: $0.reason) } + skipped
        progress(calendar.events.count, calendar.events.count)
        await service.context.purgeCache(tags: ["events"])
        return ImportReport(imported: imported, rejected: rejected.sorted { $0.line < $1.line })
    }

    /// Makes an event's showings the calendar's occurrences: showings at the same start are kept
    /// (with the new end and venue), others removed unless they hold active reservations.
    private func replaceShowings(of event: Int64, with showings: [ShowingInput], city: Int?, published: Bool, on db: any SQLDatabase) async throws {
        let store = service.store
        let existing = try await store.showings(where: "s.event_id = \(bind: event)", on: db)
        var byStart = Dictionary(existing.map { (Int64($0.start.timeIntervalSince1970), $0) }, uniquingKeysWith: { first, _ in first })
        for showing in showings {
            let start = Int64(showing.start.timeIntervalSince1970.rounded(.down))
            if let current = byStart.removeValue(forKey: start) {
                try await db.raw("""
                    UPDATE events_showings SET ends_at = \(bind: Int64((showing.end ?? showing.start).timeIntervalSince1970)),
                      span = \(bind: Int64((showing.end ?? showing.start).timeIntervalSince1970) - start), venue_id = \(bind: showing.venue),
                      all_day = \(bind: showing.allDay == true ? 1 : 0) WHERE id = \(bind: current.id)
                    """).run()
            } else {
                try await store.insertShowing(showing, event: event, city: city, published: published, on: db)
            }
        }
        for stale in byStart.values {
            let held = try await db.raw("""
                SELECT id FROM events_reservations WHERE showing_id = \(bind: stale.id) AND status IN ('requested', 'confirmed') LIMIT 1
                """).first()
            if held == nil {
                try await db.raw("DELETE FROM events_reservations WHERE showing_id = \(bind: stale.id)").run()
                try await db.raw("DELETE FROM events_showings WHERE id = \(bind: stale.id)").run()
            }
        }
        try await store.refreshSearchText(event, on: db)
        try await store.relist(event, on: db)
    }
}
