import Foundation

/// A calendar read by `ICalendarParser`: its events, with each event's RECURRENCE-ID overrides attached
/// to it, and the problems met on the way.
///
/// Only what the events plugin uses is kept; a VTIMEZONE decides what its TZID means for the times
/// after it; other properties and components (VTODO, VALARM, X- components) are read past.
public struct ICalendar: Sendable, Hashable {
    /// `X-WR-CALNAME`, the name calendar applications show.
    public var name: String?
    /// `X-WR-TIMEZONE`, the zone floating and all-day values are read in. Nil when absent or unresolvable
    /// (the latter is also a problem).
    public var timeZone: TimeZone?
    /// The events in file order. An event that overrides one instance of a recurring event (it has a
    /// RECURRENCE-ID and a master with the same UID) is in its master's `overrides`, not here; one
    /// without a master in the file is here, as an event of its own, after the masters.
    public var events: [ICalendarEvent]
    /// Lines that could not be used, in file order; empty for a well-formed calendar.
    public var problems: [ICalendarProblem]

    public init(name: String? = nil, timeZone: TimeZone? = nil, events: [ICalendarEvent] = [], problems: [ICalendarProblem] = []) {
        self.name = name
        self.timeZone = timeZone
        self.events = events
        self.problems = problems
    }
}

/// One VEVENT.
public struct ICalendarEvent: Sendable, Hashable {
    /// The physical line of the event's `BEGIN:VEVENT`.
    public var line: Int
    public var uid: String
    public var summary: String?
    public var description: String?
    public var location: String?
    public var geo: ICalendarGeo?
    public var url: String?
    /// Every CATEGORIES value, in order, across repeated properties.
    public var categories: [String]
    /// STATUS as written, upper-cased (`TENTATIVE`, `CONFIRMED`, `CANCELLED`).
    public var status: String?
    public var sequence: Int?
    public var start: ICalendarDateTime
    /// DTEND as written; nil when absent (then `duration` or the RFC 5545 default applies).
    public var end: ICalendarDateTime?
    /// DURATION as written; never set together with `end`.
    public var duration: ICalendarDuration?
    public var recurrenceRule: ICalendarRecurrenceRule?
    public var recurrenceDates: [ICalendarRecurrenceDate]
    public var exceptionDates: [ICalendarDateTime]
    /// RECURRENCE-ID: set on an override, naming the instance of its master that it replaces.
    public var recurrenceID: ICalendarDateTime?
    /// The events with this event's UID and a RECURRENCE-ID, in file order.
    public var overrides: [ICalendarEvent]
    /// The calendar's `X-WR-TIMEZONE`, copied here by the parser so that an event can be expanded on its
    /// own: floating and all-day values are read in it, else in the caller's default zone.
    public var floatingTimeZone: TimeZone?

    public init(
        line: Int = 0, uid: String, summary: String? = nil, description: String? = nil, location: String? = nil,
        geo: ICalendarGeo? = nil, url: String? = nil, categories: [String] = [], status: String? = nil, sequence: Int? = nil,
        start: ICalendarDateTime, end: ICalendarDateTime? = nil, duration: ICalendarDuration? = nil,
        recurrenceRule: ICalendarRecurrenceRule? = nil, recurrenceDates: [ICalendarRecurrenceDate] = [],
        exceptionDates: [ICalendarDateTime] = [], recurrenceID: ICalendarDateTime? = nil, overrides: [ICalendarEvent] = [],
        floatingTimeZone: TimeZone? = nil
    ) {
        self.line = line
        self.uid = uid
        self.summary = summary
        self.description = description
        self.location = location
        self.geo = geo
        self.url = url
        self.categories = categories
        self.status = status
        self.sequence = sequence
        self.start = start
        self.end = end
        self.duration = duration
        self.recurrenceRule = recurrenceRule
        self.recurrenceDates = recurrenceDates
        self.exceptionDates = exceptionDates
        self.recurrenceID = recurrenceID
        self.overrides = overrides
        self.floatingTimeZone = floatingTimeZone
    }

    /// True when the event has more than its DTSTART instance to offer.
    public var isRecurring: Bool {
        recurrenceRule != nil || !recurrenceDates.isEmpty
    }
}

/// GEO: a latitude and longitude in degrees (WGS 84).
public struct ICalendarGeo: Sendable, Hashable {
    public var latitude: Double
    public var longitude: Double

    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// A line the parser could not use, and why. The parser skips the line (or the component it
/// belongs to, when the component cannot stand without it) and goes on.
public struct ICalendarProblem: Sendable, Hashable, CustomStringConvertible {
    /// The physical line number (1-based) where the offending content line starts.
    public var line: Int
    public var reason: String

    public init(line: Int, reason: String) {
        self.line = line
        self.reason = reason
    }

    public var description: String { "line \(line): \(reason)" }
}

/// Why a calendar could not be read at all.
///
/// `kind` tells a malformed calendar read in strict mode (the first problem, which a lenient parse
/// would have skipped) from one that broke an `ICalendarLimits` limit (never skipped: the input is
/// treated as hostile) and from a file that could not be read.
public struct ICalendarError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, in categories a caller may act on differently.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case malformed
            case limitExceeded = "limit exceeded"
            case unreadable
        }

        private let base: Base

        /// A strict parse met a problem.
        public static let malformed = Kind(base: .malformed)
        /// The input broke one of the `ICalendarLimits` that cannot be skipped.
        public static let limitExceeded = Kind(base: .limitExceeded)
        /// The file could not be opened or read.
        public static let unreadable = Kind(base: .unreadable)

        public var description: String { base.rawValue }
    }

    public var kind: Kind
    /// The physical line number (1-based) where reading stopped; 0 when no line was involved.
    public var line: Int
    public var reason: String

    public init(_ kind: Kind, line: Int, reason: String) {
        self.kind = kind
        self.line = line
        self.reason = reason
    }

    public var description: String { "iCalendar \(kind) at line \(line): \(reason)" }
}
