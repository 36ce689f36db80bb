import Foundation
import GatewayCore
import SQLKit
import Synchronization

/// The published events, their showings and the venues, in memory, so that the lists a client
/// reads on every scroll — by city, category and days, near a point, a search's page — are
/// answered without reading a million showings' indexes on every request.
///
/// The tables stay the truth. Every write refreshes what it changed from them once its
/// transaction has ended (``EventStore/changed(events:venues:)``), and tells the other instances on
/// the database through the event bus, which refresh the same events from the same tables. Seats
/// are not kept here: they change on every reservation, so a page reads its showings' seats from
/// the table (one statement by primary key, only for showings with a capacity).
final class EventCatalog: Sendable {
    /// A published event as lists show it.
    struct Entry: Sendable {
        var title: String
        var imageURL: String?
        var city: Int?
        var categories: [Int]
        /// In start order (then id).
        var showings: [Item]
    }

    /// A showing, without its seats: 56 bytes (a million showings are 56 MB).
    struct Item: Sendable {
        var id: Int64
        var start: Int64
        var end: Int64
        private var venueID: Int64
        private var seats: Int32
        var allDay: Bool
        var isFree: Bool
        var priceText: String?

        init(id: Int64, start: Int64, end: Int64, venue: Int64?, allDay: Bool, isFree: Bool, priceText: String?, capacity: Int?) {
            self.id = id
            self.start = start
            self.end = end
            venueID = venue ?? 0
            seats = capacity.map { Int32(clamping: $0) } ?? -1
            self.allDay = allDay
            self.isFree = isFree
            self.priceText = priceText
        }

        var venue: Int64? { venueID == 0 ? nil : venueID }
        var capacity: Int? { seats < 0 ? nil : Int(seats) }
    }

    /// A showing in an index: when, whose, and its event's categories as bits (`id & 63`), so
    /// that a list by category looks no event up for the showings it passes over.
    struct Ref: Sendable {
        var start: Int64
        var end: Int64
        var event: Int64
        var categories: UInt64

        static func bits(_ categories: [Int]) -> UInt64 {
            categories.reduce(0) { $0 | (1 << UInt64(truncatingIfNeeded: $1 & 63)) }
        }

        /// Whether the event may have `category`: exact for ids 0–63, a first filter for others.
        func mayHave(_ category: Int) -> Bool { categories & (1 << UInt64(truncatingIfNeeded: category & 63)) != 0 }
    }

    /// Showings of a city (`Int.min` for none) starting on one UTC day.
    struct DayKey: Hashable, Sendable {
        var city: Int
        var day: Int64
    }

    /// Showings over a day long are kept by city, apart from the day buckets: an exhibition that
    /// runs for months is in every week's list.
    static let longSpan: Int64 = 86_400

    struct State: Sendable {
        var events: [Int64: Entry] = [:]
        var venues: [Int64: Venue] = [:]
        /// The venues with a point, by latitude: "near" reads the band of its radius.
        var byLatitude: [(lat: Double, lon: Double, id: Int64)] = []
        var short: [DayKey: [Ref]] = [:]
        var long: [Int: [Ref]] = [:]
        var atVenue: [Int64: [Ref]] = [:]
        var cities: Set<Int> = []

        static func cityKey(_ city: Int?) -> Int { city ?? Int.min }
        static func day(_ seconds: Int64) -> Int64 { seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400 }

        /// Sets (or with nil removes) a venue.
        mutating func setVenue(_ id: Int64, _ venue: Venue?) {
            if let old = venues[id], let lat = old.lat {
                let index = byLatitude.partitioningIndex { $0.lat >= lat }
                if let offset = byLatitude[index...].firstIndex(where: { $0.id == id }) { byLatitude.remove(at: offset) }
            }
            venues[id] = venue
            if let venue, let lat = venue.lat, let lon = venue.lon {
                byLatitude.insert((lat, lon, id), at: byLatitude.partitioningIndex { $0.lat > lat })
            }
        }

        mutating func insert(_ id: Int64, _ entry: Entry) {
            remove(id)
            events[id] = entry
            let city = Self.cityKey(entry.city)
            cities.insert(city)
            let bits = Ref.bits(entry.categories)
            for item in entry.showings {
                let ref = Ref(start: item.start, end: item.end, event: id, categories: bits)
                if item.end - item.start > EventCatalog.longSpan {
                    long[city, default: []].append(ref)
                } else {
                    short[DayKey(city: city, day: Self.day(item.start)), default: []].append(ref)
                }
                if let venue = item.venue { atVenue[venue, default: []].append(ref) }
            }
        }

        mutating func remove(_ id: Int64) {
            guard let entry = events.removeValue(forKey: id) else { return }
            let city = Self.cityKey(entry.city)
            for item in entry.showings {
                if item.end - item.start > EventCatalog.longSpan {
                    long[city]?.removeAll { $0.event == id }
                } else {
                    let key = DayKey(city: city, day: Self.day(item.start))
                    short[key]?.removeAll { $0.event == id }
                    if short[key]?.isEmpty == true { short[key] = nil }
                }
                if let venue = item.venue {
                    atVenue[venue]?.removeAll { $0.event == id }
                    if atVenue[venue]?.isEmpty == true { atVenue[venue] = nil }
                }
            }
        }
    }

    private let state = Mutex(State())
    let database: any SQLDatabase

    init(database: any SQLDatabase) {
        self.database = database
    }

    var count: Int { state.withLock { $0.events.count } }

    // MARK: Reading the tables

    private static let eventSelect = "SELECT id, title, image_url, city_id FROM events_events WHERE status = 'published'"
    private static let showingSelect = """
        SELECT event_id, id, starts_at, ends_at, venue_id, all_day, is_free, price_text, capacity FROM events_showings WHERE published = 1
        """

    /// Reads every published event, showing and venue: on start, and when another instance
    /// replaced many events at once.
    func reload() async throws {
        var fresh = State()
        for row in try await database.raw("SELECT \(unsafeRaw: EventStore.venueColumns) FROM events_venues").all() {
            let venue = try EventStore.decodeVenue(row)
            fresh.venues[venue.id] = venue
            if let lat = venue.lat, let lon = venue.lon { fresh.byLatitude.append((lat, lon, venue.id)) }
        }
        fresh.byLatitude.sort { ($0.lat, $0.id) < ($1.lat, $1.id) }
        // A few thousand events at a time, by id: the rows of a million showings are never all held at once.
        var after: Int64 = 0
        while true {
            let ids = try await database.raw("""
                SELECT id FROM events_events WHERE status = 'published' AND id > \(bind: after) ORDER BY id LIMIT \(bind: Self.pageSize)
                """).all().map { try $0.decode(column: "id", as: Int64.self) }
            guard let last = ids.last else { break }
            for (id, entry) in try await read(.range(after, last)) { fresh.insert(id, entry) }
            after = last
            if ids.count < Self.pageSize { break }
        }
        state.withLock { $0 = fresh }
    }

    /// Reads `events` again (an event no longer published leaves the lists) and `venues`.
    func refresh(events: [Int64], venues: [Int64] = []) async throws {
        var found: [Int64: Entry] = [:]
        for chunk in stride(from: 0, to: events.count, by: 500).map({ Array(events[$0 ..< min($0 + 500, events.count)]) }) {
            found.merge(try await read(.ids(chunk)), uniquingKeysWith: { _, new in new })
        }
        // Venues the showings name that are not known yet, and those asked for.
        let known = state.withLock { state in Set(state.venues.keys) }
        var wanted = Set(venues)
        for entry in found.values { for item in entry.showings { if let venue = item.venue, !known.contains(venue) { wanted.insert(venue) } } }
        var readVenues: [Int64: Venue] = [:]
        if !wanted.isEmpty {
            let ids = Array(wanted)
            for chunk in stride(from: 0, to: ids.count, by: 500).map({ Array(ids[$0 ..< min($0 + 500, ids.count)]) }) {
                for row in try await database.raw("SELECT \(unsafeRaw: EventStore.venueColumns) FROM events_venues WHERE id IN (\(binds: chunk))").all() {
                    let venue = try EventStore.decodeVenue(row)
                    readVenues[venue.id] = venue
                }
            }
        }
        state.withLock { state in
            for id in wanted { state.setVenue(id, readVenues[id]) }
            for id in events {
                if let entry = found[id] { state.insert(id, entry) } else { state.remove(id) }
            }
        }
    }

    static let pageSize = 2_000

    /// Which events a read is for: some, or those with ids in `(after, last]`.
    private enum Which {
        case ids([Int64])
        case range(Int64, Int64)

        func condition(_ column: String) -> SQLQueryString {
            switch self {
            case .ids(let ids): "\(ident: column) IN (\(binds: ids.isEmpty ? [-1] : ids))"
            case .range(let after, let last): "\(ident: column) > \(bind: after) AND \(ident: column) <= \(bind: last)"
            }
        }
    }

    /// Published events (some, or a range of ids) with their categories and published showings.
    /// Rows are folded in as they arrive: a million showings' rows are never all held at once.
    private func read(_ which: Which) async throws -> [Int64: Entry] {
        let entries = Mutex<[Int64: Entry]>([:])
        let failure = Mutex<(any Error)?>(nil)
        func folding(_ body: @escaping @Sendable (any SQLRow, inout [Int64: Entry]) throws -> Void) -> @Sendable (any SQLRow) -> Void {
            { row in
                do {
                    try entries.withLock { try body(row, &$0) }
                } catch {
                    failure.withLock { $0 = $0 ?? error }
                }
            }
        }
        try await database.raw("\(unsafeRaw: Self.eventSelect) AND " + which.condition("id")).run(folding { row, entries in
            entries[try row.decode(column: "id", as: Int64.self)] = Entry(
                title: try row.decode(column: "title", as: String.self), imageURL: try row.decode(column: "image_url", as: String?.self),
                city: try row.decode(column: "city_id", as: Int?.self), categories: [], showings: [])
        })
        try await database.raw("SELECT event_id, category_id FROM events_event_categories WHERE " + which.condition("event_id") + " ORDER BY event_id, category_id").run(folding { row, entries in
            entries[try row.decode(column: "event_id", as: Int64.self)]?.categories.append(try row.decode(column: "category_id", as: Int.self))
        })
        try await database.raw("\(unsafeRaw: Self.showingSelect) AND " + which.condition("event_id") + " ORDER BY event_id, starts_at, id").run(folding { row, entries in
            let event = try row.decode(column: "event_id", as: Int64.self)
            guard entries[event] != nil else { return }
            entries[event]!.showings.append(Item(
                id: try row.decode(column: "id", as: Int64.self), start: try row.decode(column: "starts_at", as: Int64.self),
                end: try row.decode(column: "ends_at", as: Int64.self), venue: try row.decode(column: "venue_id", as: Int64?.self),
                allDay: try row.decode(column: "all_day", as: Int.self) != 0, isFree: try row.decode(column: "is_free", as: Int.self) != 0,
                priceText: try row.decode(column: "price_text", as: String?.self), capacity: try row.decode(column: "capacity", as: Int?.self)))
        })
        if let error = failure.withLock({ $0 }) { throw error }
        return entries.withLock { $0 }
    }

    // MARK: Lists

    /// Whether a showing lies (partly) inside a window: what every list and page means by "in".
    static func overlaps(start: Int64, end: Int64, window: (start: Int64, end: Int64)) -> Bool {
        start < window.end && (end > window.start || start >= window.start)
    }

    /// Published events with a showing in `window` (in `city`, of `category`), by their first
    /// showing there, then id: `limit + 1` of them after `cursor`.
    func list(city: Int?, category: Int?, window: (start: Int64, end: Int64), limit: Int, after cursor: EventStore.Cursor?) -> [(id: Int64, first: Int64)] {
        state.withLock { state in
            var first: [Int64: Int64] = [:]
            let exact = category.map { (0 ..< 64).contains($0) } ?? true
            func consider(_ ref: Ref) {
                guard Self.overlaps(start: ref.start, end: ref.end, window: window) else { return }
                if let category {
                    guard ref.mayHave(category) else { return }
                    if !exact, state.events[ref.event]?.categories.contains(category) != true { return }
                }
                if let known = first[ref.event], known <= ref.start { return }
                first[ref.event] = ref.start
            }
            let cities = city.map { [State.cityKey($0)] } ?? Array(state.cities)
            let firstDay = State.day(window.start - Self.longSpan)
            let lastDay = State.day(window.end - 1)
            for city in cities {
                if lastDay >= firstDay {
                    for day in firstDay ... lastDay {
                        for ref in state.short[DayKey(city: city, day: day)] ?? [] { consider(ref) }
                    }
                }
                for ref in state.long[city] ?? [] { consider(ref) }
            }
            var found = first.map { (id: $0.key, first: $0.value) }
            if let cursor { found.removeAll { ($0.first, $0.id) <= (cursor.first, cursor.id) } }
            return Self.smallest(found, limit + 1) { ($0.first, $0.id) < ($1.first, $1.id) }
        }
    }

    /// Published events at venues within `radius` metres of a point with a showing in `window`:
    /// `limit` of them, nearest first (then by first showing, then id), with their distances.
    func near(lat: Double, lon: Double, radius: Double, category: Int?, window: (start: Int64, end: Int64), limit: Int) -> [(id: Int64, distance: Double)] {
        let latSpan = radius / 111_320
        let lonSpan = radius / max(1, 111_320 * cos(lat * .pi / 180))
        return state.withLock { state in
            var distances: [(venue: Int64, distance: Double)] = []
            var index = state.byLatitude.partitioningIndex { $0.lat >= lat - latSpan }
            while index < state.byLatitude.count, state.byLatitude[index].lat <= lat + latSpan {
                let venue = state.byLatitude[index]
                index += 1
                guard abs(venue.lon - lon) <= lonSpan, state.atVenue[venue.id] != nil else { continue }
                let distance = Geo.distance(lat, lon, venue.lat, venue.lon)
                if distance <= radius { distances.append((venue.id, distance)) }
            }
            // The nearest venues first, at most a few thousand: a radius over a dense city stays bounded.
            let venues = Self.smallest(distances, 4000) { ($0.distance, $0.venue) < ($1.distance, $1.venue) }
            var best: [Int64: (distance: Double, first: Int64)] = [:]
            for venue in venues {
                for ref in state.atVenue[venue.venue] ?? [] where Self.overlaps(start: ref.start, end: ref.end, window: window) {
                    if let category {
                        guard ref.mayHave(category) else { continue }
                        if !(0 ..< 64).contains(category), state.events[ref.event]?.categories.contains(category) != true { continue }
                    }
                    if let known = best[ref.event], (known.distance, known.first) <= (venue.distance, ref.start) { continue }
                    best[ref.event] = (venue.distance, ref.start)
                }
            }
            let ordered = Self.smallest(best.map { (id: $0.key, distance: $0.value.distance, first: $0.value.first) }, limit) {
                ($0.distance, $0.first, $0.id) < ($1.distance, $1.first, $1.id)
            }
            return ordered.map { ($0.id, $0.distance) }
        }
    }

    /// The `count` smallest elements in order: a partial sort, as a page is small beside what a
    /// list considers.
    static func smallest<Element>(_ elements: [Element], _ count: Int, by less: (Element, Element) -> Bool) -> [Element] {
        guard elements.count > count * 4 else { return Array(elements.sorted(by: less).prefix(count)) }
        var kept: [Element] = []
        kept.reserveCapacity(count + 1)
        for element in elements {
            if kept.count == count, let last = kept.last, !less(element, last) { continue }
            let index = kept.partitioningIndex { less(element, $0) }
            kept.insert(element, at: index)
            if kept.count > count { kept.removeLast() }
        }
        return kept
    }

    /// Summaries of `ids` (those still published), in that order, each with at most 20 of its
    /// showings inside `window` and their venues; seats remaining still to be filled in.
    func summaries(_ ids: [Int64], window: (start: Int64, end: Int64)) -> [EventSummary] {
        state.withLock { state in
            ids.compactMap { id -> EventSummary? in
                guard let entry = state.events[id] else { return nil }
                var showings: [Showing] = []
                for item in entry.showings where Self.overlaps(start: item.start, end: item.end, window: window) {
                    showings.append(Showing(
                        id: item.id, event: id, start: Date(timeIntervalSince1970: Double(item.start)), end: Date(timeIntervalSince1970: Double(item.end)),
                        allDay: item.allDay, venue: item.venue.flatMap { state.venues[$0] }, priceText: item.priceText, isFree: item.isFree,
                        capacity: item.capacity, seatsRemaining: item.capacity))
                    if showings.count == 20 { break }
                }
                return EventSummary(id: id, title: entry.title, imageURL: entry.imageURL, city: entry.city, categories: entry.categories,
                                    status: .published, distance: nil, showings: showings)
            }
        }
    }
}

extension Array {
    /// The first index whose element satisfies `belongsInSecondPartition`, which must be false
    /// for a prefix of the array and true for the rest (binary search).
    func partitioningIndex(where belongsInSecondPartition: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if belongsInSecondPartition(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}

/// What another instance changed in the events tables; ``EventCatalogListener`` applies it.
struct CatalogChange: Codable, Sendable {
    var origin: String
    var events: [Int64]
    var venues: [Int64]
    /// Many events at once (an import): read everything again.
    var all: Bool

    static let topic = "events/catalog"
}
