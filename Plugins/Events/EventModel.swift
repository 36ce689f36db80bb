import Foundation
import GatewayCore

// MARK: Reference data

/// A category of events (music, drama, ...). Ids are the old service's `catID`s.
public struct EventCategory: Codable, Sendable, Equatable {
    public var id: Int
    public var title: String

    public init(id: Int, title: String) {
        self.id = id
        self.title = title
    }
}

/// A city. Its time zone decides what "a day" means for its events.
public struct EventCity: Codable, Sendable, Equatable {
    public var id: Int
    public var name: String
    /// An IANA time zone name, such as `Asia/Taipei`.
    public var timeZone: String

    public init(id: Int, name: String, timeZone: String) {
        self.id = id
        self.name = name
        self.timeZone = timeZone
    }
}

/// Whether an event is listed.
public enum EventStatus: String, Codable, Sendable, CaseIterable {
    /// Seen only by its owner and administrators.
    case draft
    /// Listed and open for reservations.
    case published
    /// Still readable, no longer listed or reservable.
    case cancelled
}

/// How a reservation is decided.
public enum ReservationPolicy: String, Codable, Sendable, CaseIterable {
    /// Confirmed at once while seats remain.
    case auto
    /// Requested; the event's owner confirms or rejects it later.
    case manual
}

/// Where a reservation stands.
public enum ReservationStatus: String, Codable, Sendable, CaseIterable {
    case requested, confirmed, rejected, cancelled

    /// Whether it holds seats.
    var isActive: Bool { self == .requested || self == .confirmed }
}

// MARK: Outputs

/// A place where showings happen.
public struct Venue: Codable, Sendable, Equatable {
    public var id: Int64
    public var name: String
    public var address: String?
    public var city: Int?
    public var lat: Double?
    public var lon: Double?
    public var owner: String?
}

/// One showing of an event: a time at a venue.
public struct Showing: Codable, Sendable, Equatable {
    public var id: Int64
    public var event: Int64
    public var start: Date
    public var end: Date
    /// A whole-day showing (an iCalendar DATE): `start` and `end` are midnights in the city's zone.
    public var allDay: Bool
    public var venue: Venue?
    public var priceText: String?
    public var isFree: Bool
    /// Seats in all; nil means unlimited.
    public var capacity: Int?
    /// Seats not held by a requested or confirmed reservation; nil means unlimited.
    public var seatsRemaining: Int?
}

/// An event in a list, with its showings inside the list's window.
public struct EventSummary: Codable, Sendable, Equatable {
    public var id: Int64
    public var title: String
    public var imageURL: String?
    public var city: Int?
    public var categories: [Int]
    public var status: EventStatus
    /// For lists near a point: metres from the point to the nearest venue.
    public var distance: Double?
    public var showings: [Showing]
}

/// An event with every showing and venue.
public struct EventDetail: Codable, Sendable, Equatable {
    public var id: Int64
    public var title: String
    public var description: String?
    public var organizer: String?
    public var infoSource: String?
    public var saleURL: String?
    public var imageURL: String?
    public var city: Int?
    public var categories: [EventCategory]
    public var tags: [String]
    public var status: EventStatus
    /// This event's own policy; nil means the plugin's default (`reservationPolicy` in plugins.yaml).
    public var reservationPolicy: ReservationPolicy?
    public var owner: String?
    /// The iCalendar UID it was imported with, if any.
    public var uid: String?
    public var createdAt: Date
    public var updatedAt: Date
    public var showings: [Showing]
}

/// A user's reservation of seats at a showing.
public struct Reservation: Codable, Sendable, Equatable {
    public var id: Int64
    public var showing: Int64
    public var event: Int64
    public var user: String
    public var seats: Int
    public var status: ReservationStatus
    public var requestedAt: Date
    public var decidedAt: Date?
    /// The user id of who confirmed or rejected it (nil for an automatic decision).
    public var decidedBy: String?
    public var reason: String?
    public var cancelledAt: Date?
}

// MARK: Inputs

/// `GET /events`: a city's (or every city's) published events in a range of days.
public struct EventListQuery: Codable, Sendable, ValidatableInput {
    public var city: Int?
    public var category: Int?
    /// The first day, `yyyy-MM-dd` in the city's time zone (default today).
    public var from: String?
    /// The last day, inclusive (default `from` + 7 days).
    public var to: String?
    public var limit: Int?
    public var cursor: String?

    public func validate() -> [GatewayError.FieldError] {
        PageQuery.problems(limit: limit, cursor: cursor) + DayRange.problems(from: from, to: to)
    }
}

/// `GET /events/near`: published events at venues within `radius` metres of a point.
public struct NearQuery: Codable, Sendable, ValidatableInput {
    public var lat: Double
    public var lon: Double
    /// Metres, 1 to 50,000 (default 2,000).
    public var radius: Double?
    public var category: Int?
    public var from: String?
    public var to: String?
    public var limit: Int?

    public func validate() -> [GatewayError.FieldError] {
        var problems = PageQuery.problems(limit: limit, cursor: nil) + DayRange.problems(from: from, to: to)
        if !(-90...90).contains(lat) { problems.append(.init(pointer: "lat", detail: "must be between -90 and 90")) }
        if !(-180...180).contains(lon) { problems.append(.init(pointer: "lon", detail: "must be between -180 and 180")) }
        if let radius, !(1...50_000).contains(radius) { problems.append(.init(pointer: "radius", detail: "must be between 1 and 50000 metres")) }
        return problems
    }
}

/// `GET /events/search`: published events whose title, description or venue contains `q`.
public struct SearchQuery: Codable, Sendable, ValidatableInput {
    public var q: String
    public var city: Int?
    public var category: Int?
    public var limit: Int?
    public var cursor: String?

    public func validate() -> [GatewayError.FieldError] {
        var problems = PageQuery.problems(limit: limit, cursor: cursor)
        let trimmed = q.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty { problems.append(.init(pointer: "q", detail: "must not be empty")) }
        if q.count > 100 { problems.append(.init(pointer: "q", detail: "must be at most 100 characters")) }
        return problems
    }
}

/// A path naming an event; `{id}.ics` asks for the event as iCalendar.
public struct EventPath: Codable, Sendable, ValidatableInput {
    public var id: String

    /// The event's id and whether iCalendar was asked for.
    var parsed: (id: Int64, calendar: Bool)? {
        let calendar = id.hasSuffix(".ics")
        guard let number = Int64(calendar ? String(id.dropLast(4)) : id), number > 0 else { return nil }
        return (number, calendar)
    }

    public func validate() -> [GatewayError.FieldError] {
        parsed == nil ? [.init(pointer: "id", detail: "is not an event id (a positive integer, optionally followed by .ics)")] : []
    }
}

/// A path naming a venue, showing or reservation by number.
public struct NumberPath: Codable, Sendable, ValidatableInput {
    public var id: Int64

    public func validate() -> [GatewayError.FieldError] {
        id > 0 ? [] : [.init(pointer: "id", detail: "must be a positive integer")]
    }
}

/// `GET /events.ics`: a subscribable calendar of published events.
public struct CalendarQuery: Codable, Sendable, ValidatableInput {
    public var city: Int?
    public var category: Int?
    public var from: String?
    public var to: String?

    public func validate() -> [GatewayError.FieldError] { DayRange.problems(from: from, to: to) }
}

/// A list of reservations.
public struct ReservationListQuery: Codable, Sendable, ValidatableInput {
    public var status: ReservationStatus?
    public var limit: Int?
    public var cursor: String?

    public func validate() -> [GatewayError.FieldError] { PageQuery.problems(limit: limit, cursor: cursor) }
}

/// A new event (POST) or the members to change (PATCH). Members left out are kept; an empty
/// string clears a text member.
public struct EventInput: Codable, Sendable, ValidatableInput {
    public var title: String?
    public var description: String?
    public var organizer: String?
    public var infoSource: String?
    public var saleURL: String?
    public var imageURL: String?
    public var city: Int?
    public var categories: [Int]?
    public var tags: [String]?
    public var status: EventStatus?
    public var reservationPolicy: ReservationPolicy?
    /// Showings to create with the event (POST only).
    public var showings: [ShowingInput]?

    public init(title: String? = nil, description: String? = nil, organizer: String? = nil, infoSource: String? = nil, saleURL: String? = nil,
                imageURL: String? = nil, city: Int? = nil, categories: [Int]? = nil, tags: [String]? = nil, status: EventStatus? = nil,
                reservationPolicy: ReservationPolicy? = nil, showings: [ShowingInput]? = nil) {
        self.title = title
        self.description = description
        self.organizer = organizer
        self.infoSource = infoSource
        self.saleURL = saleURL
        self.imageURL = imageURL
        self.city = city
        self.categories = categories
        self.tags = tags
        self.status = status
        self.reservationPolicy = reservationPolicy
        self.showings = showings
    }

    public func validate() -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        func text(_ value: String?, _ name: String, _ limit: Int) {
            if let value, value.count > limit { problems.append(.init(pointer: "/\(name)", detail: "must be at most \(limit) characters")) }
        }
        if let title, title.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            problems.append(.init(pointer: "/title", detail: "must not be empty"))
        }
        text(title, "title", 500)
        text(description, "description", 20_000)
        text(organizer, "organizer", 500)
        text(infoSource, "infoSource", 500)
        for (value, name) in [(saleURL, "saleURL"), (imageURL, "imageURL")] {
            text(value, name, 2000)
            if let value, !value.isEmpty, value.wholeMatch(of: EventRules.webAddress) == nil {
                problems.append(.init(pointer: "/\(name)", detail: "must be an http or https URL"))
            }
        }
        if let categories, categories.count > 20 { problems.append(.init(pointer: "/categories", detail: "must have at most 20 entries")) }
        if let tags {
            if tags.count > 50 { problems.append(.init(pointer: "/tags", detail: "must have at most 50 entries")) }
            for (index, tag) in tags.enumerated() where tag.isEmpty || tag.count > 100 {
                problems.append(.init(pointer: "/tags/\(index)", detail: "must have 1 to 100 characters"))
            }
        }
        if let showings {
            if showings.count > 1000 { problems.append(.init(pointer: "/showings", detail: "must have at most 1000 entries")) }
            for (index, showing) in showings.enumerated() {
                problems += showing.validate().map { .init(pointer: "/showings/\(index)" + $0.pointer, detail: $0.detail) }
            }
        }
        return problems
    }
}

/// A new showing. `end` defaults to `start`; `capacity` nil means unlimited.
public struct ShowingInput: Codable, Sendable, ValidatableInput {
    public var venue: Int64?
    public var start: Date
    public var end: Date?
    public var allDay: Bool?
    public var priceText: String?
    public var isFree: Bool?
    public var capacity: Int?

    public init(venue: Int64? = nil, start: Date, end: Date? = nil, allDay: Bool? = nil, priceText: String? = nil, isFree: Bool? = nil, capacity: Int? = nil) {
        self.venue = venue
        self.start = start
        self.end = end
        self.allDay = allDay
        self.priceText = priceText
        self.isFree = isFree
        self.capacity = capacity
    }

    public func validate() -> [GatewayError.FieldError] {
        ShowingPatch(venue: venue, start: start, end: end, priceText: priceText, isFree: isFree, capacity: capacity).validate()
    }
}

/// The members of a showing to change.
public struct ShowingPatch: Codable, Sendable, ValidatableInput {
    public var venue: Int64?
    public var start: Date?
    public var end: Date?
    public var priceText: String?
    public var isFree: Bool?
    public var capacity: Int?

    public func validate() -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if let start, let end, end < start { problems.append(.init(pointer: "/end", detail: "must not be before start")) }
        if let start, let end, end.timeIntervalSince(start) > EventRules.longestShowing {
            problems.append(.init(pointer: "/end", detail: "must be at most 400 days after start"))
        }
        if let capacity, capacity < 0 { problems.append(.init(pointer: "/capacity", detail: "must not be negative")) }
        if let capacity, capacity > 10_000_000 { problems.append(.init(pointer: "/capacity", detail: "must be at most 10000000")) }
        if let priceText, priceText.count > 500 { problems.append(.init(pointer: "/priceText", detail: "must be at most 500 characters")) }
        for (date, name) in [(start, "start"), (end, "end")] {
            if let date, !EventRules.plausible(date) { problems.append(.init(pointer: "/\(name)", detail: "must be between the years 1900 and 2200")) }
        }
        return problems
    }
}

/// A new venue, or the members of one to change.
public struct VenueInput: Codable, Sendable, ValidatableInput {
    public var name: String?
    public var address: String?
    public var city: Int?
    public var lat: Double?
    public var lon: Double?

    public init(name: String? = nil, address: String? = nil, city: Int? = nil, lat: Double? = nil, lon: Double? = nil) {
        self.name = name
        self.address = address
        self.city = city
        self.lat = lat
        self.lon = lon
    }

    public func validate() -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if let name, name.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { problems.append(.init(pointer: "/name", detail: "must not be empty")) }
        if let name, name.count > 500 { problems.append(.init(pointer: "/name", detail: "must be at most 500 characters")) }
        if let address, address.count > 1000 { problems.append(.init(pointer: "/address", detail: "must be at most 1000 characters")) }
        if let lat, !(-90...90).contains(lat) { problems.append(.init(pointer: "/lat", detail: "must be between -90 and 90")) }
        if let lon, !(-180...180).contains(lon) { problems.append(.init(pointer: "/lon", detail: "must be between -180 and 180")) }
        if (lat == nil) != (lon == nil) { problems.append(.init(pointer: lat == nil ? "/lat" : "/lon", detail: "lat and lon come together")) }
        return problems
    }
}

/// `GET /venues`.
public struct VenueListQuery: Codable, Sendable, ValidatableInput {
    public var city: Int?
    public var q: String?
    public var limit: Int?
    public var cursor: String?

    public func validate() -> [GatewayError.FieldError] { PageQuery.problems(limit: limit, cursor: cursor) }
}

/// A reservation request.
public struct ReservationInput: Codable, Sendable {
    /// Seats to hold (default 1).
    public var seats: Int?
}

/// An owner's decision; the reason goes into the user's notification.
public struct DecisionInput: Codable, Sendable, ValidatableInput {
    public var reason: String?

    public func validate() -> [GatewayError.FieldError] {
        if let reason, reason.count > 1000 { return [.init(pointer: "/reason", detail: "must be at most 1000 characters")] }
        return []
    }
}

// MARK: Rules shared by the API, the dialect and the importer

enum EventRules {
    /// The longest showing accepted (an exhibition may run for a season or a year).
    static let longestShowing: TimeInterval = 400 * 86_400
    /// The longest range of days a list may ask for.
    static let longestRange = 366

    /// Whether a date is in the range the plugin stores (keeps arithmetic far from overflow).
    static func plausible(_ date: Date) -> Bool {
        (-2_208_988_800.0 ... 7_258_118_400.0).contains(date.timeIntervalSince1970)
    }

    /// Lower-cased, accent- and width-folded text for substring search (Chinese is kept as is).
    static func searchable(_ text: String) -> String {
        text.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
    }
}

/// A range of days, `yyyy-MM-dd` to `yyyy-MM-dd` inclusive, turned into instants in a time zone.
struct DayRange: Sendable, Equatable {
    var from: DateComponents
    var to: DateComponents

    /// Parses `yyyy-MM-dd` (also `yyyy/MM/dd`).
    static func day(_ text: String) -> DateComponents? {
        let parts = text.split(whereSeparator: { $0 == "-" || $0 == "/" })
        guard parts.count == 3, parts[0].count == 4, let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
              (1...9999).contains(year), (1...12).contains(month), (1...31).contains(day) else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: year, month: month, day: day)
        guard let date = calendar.date(from: components), calendar.component(.day, from: date) == day else { return nil }
        return components
    }

    /// The problems with a range of days: a malformed day, a range that ends before it starts or
    /// is longer than ``EventRules/longestRange`` days.
    static func problems(from: String?, to: String?, fromName: String = "from", toName: String = "to") -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        let first = from.map(day)
        let last = to.map(day)
        if case .some(nil) = first { problems.append(.init(pointer: fromName, detail: "must be a date, yyyy-MM-dd")) }
        if case .some(nil) = last { problems.append(.init(pointer: toName, detail: "must be a date, yyyy-MM-dd")) }
        if let first = first ?? nil, let last = last ?? nil {
            let length = daysBetween(first, last)
            if length < 0 { problems.append(.init(pointer: toName, detail: "must not be before \(fromName)")) }
            if length > EventRules.longestRange { problems.append(.init(pointer: toName, detail: "the range must be at most \(EventRules.longestRange) days")) }
        }
        return problems
    }

    static func daysBetween(_ a: DateComponents, _ b: DateComponents) -> Int {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard let start = calendar.date(from: a), let end = calendar.date(from: b) else { return 0 }
        return Int((end.timeIntervalSince(start) / 86_400).rounded())
    }

    /// The range asked for: `from` (default today in `zone`) to `to` (default `from` + 7 days), at
    /// most ``EventRules/longestRange`` days long.
    static func resolve(from: String?, to: String?, now: Date, zone: TimeZone, defaultLength: Int = 7) -> DayRange {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let first = from.flatMap(day) ?? calendar.dateComponents([.year, .month, .day], from: now)
        func daysAfterFirst(_ count: Int) -> DateComponents {
            var utc = Calendar(identifier: .gregorian)
            utc.timeZone = TimeZone(identifier: "UTC")!
            let start = utc.date(from: DateComponents(year: first.year, month: first.month, day: first.day))!
            return utc.dateComponents([.year, .month, .day], from: start.addingTimeInterval(Double(count) * 86_400))
        }
        var last = to.flatMap(day) ?? daysAfterFirst(defaultLength)
        if daysBetween(first, last) > EventRules.longestRange { last = daysAfterFirst(EventRules.longestRange) }
        return DayRange(from: DateComponents(year: first.year, month: first.month, day: first.day),
                        to: DateComponents(year: last.year, month: last.month, day: last.day))
    }

    /// The instants the range covers in `zone`: from the first day's start to the day after the last.
    func window(in zone: TimeZone) -> (start: Date, end: Date) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let start = calendar.startOfDay(for: calendar.date(from: DateComponents(year: from.year, month: from.month, day: from.day, hour: 12))!)
        let lastNoon = calendar.date(from: DateComponents(year: to.year, month: to.month, day: to.day, hour: 12))!
        let end = calendar.startOfDay(for: calendar.date(byAdding: .day, value: 1, to: lastNoon)!)
        return (start, end)
    }
}

// MARK: What the document states of the inputs (their validation above enforces the same)

extension EventListQuery {
    public static let fieldRules: [String: FieldRule] = [
        "from": DayRange.dayRule.described("The first day, yyyy-MM-dd in the city's time zone (default today)."),
        "to": DayRange.dayRule.described("The last day, inclusive (default from + 7 days): not before from, at most 366 days after it."),
        "limit": PageQuery.limitRule,
        "cursor": FieldRule.pattern("^[+-]?[0-9]{1,18}_[+-]?[0-9]{1,18}$").described("The `nextCursor` of the page before."),
    ]
}

extension EventsPlugin {
    /// The cursor of a list ordered by id: any id is a place to continue from.
    static let idCursorRule = FieldRule.pattern("^[+-]?[0-9]{1,18}$").described("The `nextCursor` of the page before.")
}

extension NearQuery {
    public static let fieldRules: [String: FieldRule] = [
        "lat": .number(-90...90), "lon": .number(-180...180),
        "radius": .number(1...50_000).described("Metres (default 2,000)."),
        "from": DayRange.dayRule, "to": DayRange.dayRule, "limit": PageQuery.limitRule,
    ]
}

extension SearchQuery {
    public static let fieldRules: [String: FieldRule] = [
        "q": .nonBlank(maxLength: 100), "limit": PageQuery.limitRule, "cursor": EventsPlugin.idCursorRule,
    ]
}

extension EventPath {
    public static let fieldRules: [String: FieldRule] = [
        "id": FieldRule.pattern("^[1-9][0-9]{0,17}(\\.ics)?$").described("The event's id; with `.ics`, the event as iCalendar."),
    ]
}

extension NumberPath {
    public static let fieldRules: [String: FieldRule] = ["id": .integer(atLeast: 1)]
}

extension CalendarQuery {
    public static let fieldRules: [String: FieldRule] = ["from": DayRange.dayRule, "to": DayRange.dayRule]
}

extension ReservationListQuery {
    public static let fieldRules: [String: FieldRule] = ["limit": PageQuery.limitRule, "cursor": EventsPlugin.idCursorRule]
}

extension VenueListQuery {
    public static let fieldRules: [String: FieldRule] = ["limit": PageQuery.limitRule, "cursor": EventsPlugin.idCursorRule]
}

extension EventInput {
    static let webAddress = FieldRule.pattern("^(\(EventRules.webAddressPattern))?$").and(.text(maxLength: 2000))
        .described("An http or https URL (an empty string clears it).")
    public static let fieldRules: [String: FieldRule] = [
        "title": .nonBlank(maxLength: 500), "description": .text(maxLength: 20_000),
        "organizer": .text(maxLength: 500), "infoSource": .text(maxLength: 500),
        "saleURL": webAddress, "imageURL": webAddress,
        "categories": .list(maxCount: 20), "tags": .list(maxCount: 50, of: .text(1...100)),
        "showings": .list(maxCount: 1000),
    ]
}

extension ShowingInput {
    public static let fieldRules = ShowingPatch.fieldRules
}

extension ShowingPatch {
    public static let fieldRules: [String: FieldRule] = [
        "start": EventRules.instantRule, "end": EventRules.instantRule.described("At or after start, at most 400 days later."),
        "capacity": .integer(0...10_000_000).described("Seats; none given means unlimited."), "priceText": .text(maxLength: 500),
    ]
}

extension VenueInput {
    public static let fieldRules: [String: FieldRule] = [
        "name": .nonBlank(maxLength: 500), "address": .text(maxLength: 1000),
        "lat": FieldRule.number(-90...90).described("Given with lon."), "lon": FieldRule.number(-180...180).described("Given with lat."),
    ]
}

extension DecisionInput {
    public static let fieldRules: [String: FieldRule] = ["reason": .text(maxLength: 1000)]
}

extension DayRange {
    /// A day as the lists take it.
    static let dayRule = FieldRule.date
}

extension EventRules {
    /// A link an event may carry: http or https, then printable ASCII without spaces.
    static let webAddressPattern = "[hH][tT][tT][pP][sS]?://[!-~]+"
    nonisolated(unsafe) static let webAddress = try! Regex(webAddressPattern)

    /// An instant of a showing as the document states it: RFC 3339 in the years 1901 to 2199 (the
    /// plugin stores 1900 to 2200 in UTC; a year inside keeps every offset inside). The pattern
    /// leaves out the 29th to 31st of a month, so that every string it allows is a real day.
    static let instantRule = FieldRule.pattern(
        "^(190[1-9]|19[1-9][0-9]|2[01][0-9]{2})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-3]):[0-5][0-9])$"
    ).described("An RFC 3339 time such as 2026-12-01T19:30:00+08:00, in the years 1900 to 2200.")
}
