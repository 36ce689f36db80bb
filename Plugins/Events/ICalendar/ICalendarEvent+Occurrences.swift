import Foundation

/// One occurrence of an event: an instance of its recurrence set, or the override that replaced it.
public struct ICalendarOccurrence: Sendable, Hashable {
    public var start: Date
    public var end: Date
    /// True when the instance comes from a DATE value: it runs from midnight to midnight, local time.
    public var allDay: Bool
    /// The start the instance has in the recurrence set before any override moved it (the override's
    /// RECURRENCE-ID); equal to `start` for an instance that was not overridden. Stable across edits of
    /// an override, so a good key for storing occurrences.
    public var recurrenceID: Date
    /// The component that replaced this instance, whose summary, location and other fields then apply
    /// instead of the master's. Nil for an instance of the master itself.
    public var override: ICalendarEvent? {
        get { overrideBox?.event }
        set { overrideBox = newValue.map(ICalendarEventBox.init) }
    }

    /// Kept behind a reference so that an occurrence stays a few words long: expansions make and sort
    /// hundreds of thousands of them, and an inline event would make every move copy all its fields.
    private var overrideBox: ICalendarEventBox?

    public init(start: Date, end: Date, allDay: Bool, recurrenceID: Date? = nil, override: ICalendarEvent? = nil) {
        self.start = start
        self.end = end
        self.allDay = allDay
        self.recurrenceID = recurrenceID ?? start
        self.overrideBox = override.map(ICalendarEventBox.init)
    }
}

/// An immutable event behind a reference, compared by value.
private final class ICalendarEventBox: Sendable, Hashable {
    let event: ICalendarEvent

    init(_ event: ICalendarEvent) {
        self.event = event
    }

    static func == (left: ICalendarEventBox, right: ICalendarEventBox) -> Bool {
        left.event == right.event
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(event)
    }
}

/// The occurrences of an event in a window, and whether a limit cut them short.
public struct ICalendarExpansion: Sendable, Hashable {
    /// Why an expansion stopped before the end of its window.
    public enum Truncation: Sendable, Hashable {
        /// The caller's limit or `ICalendarLimits.maxOccurrencesPerEvent` was reached.
        case occurrenceLimit
        /// `ICalendarLimits.maxRecurrenceIterations` was reached before the window was covered: the rule
        /// matches too rarely, or never (a rule proven to have no more instances before the year 9999 is
        /// not truncated, just finished).
        case iterationLimit
    }

    /// In order of start (then end).
    public var occurrences: [ICalendarOccurrence]
    public var truncation: Truncation?
    /// The recurrence steps the expansion took (see `ICalendarLimits.maxRecurrenceIterations`).
    public var steps: Int = 0
}

extension ICalendarEvent {
    /// The occurrences that overlap `from..<to` (an instant occurrence is kept when it starts in the
    /// window), at most `limit` and at most `limits.maxOccurrencesPerEvent`.
    ///
    /// Floating and all-day values are read in the calendar's `X-WR-TIMEZONE` when it had one
    /// (`floatingTimeZone`), else in `defaultTimeZone`. See `expand(from:to:defaultTimeZone:limit:limits:)`
    /// for the rules followed.
    public func occurrences(
        from: Date, to: Date, defaultTimeZone: TimeZone, limit: Int, limits: ICalendarLimits = ICalendarLimits()
    ) -> [ICalendarOccurrence] {
        expand(from: from, to: to, defaultTimeZone: defaultTimeZone, limit: limit, limits: limits).occurrences
    }

    /// The occurrences that overlap `from..<to`, and whether a limit cut the list short.
    ///
    /// The recurrence set is DTSTART, the instances of RRULE and the RDATEs, less the EXDATEs (RFC 5545
    /// §3.8.5); DTSTART counts as the first instance towards COUNT, and COUNT counts instances before
    /// EXDATEs remove any. Each override in `overrides` takes the place of the instance its RECURRENCE-ID
    /// names, with its own DTSTART and DTEND. Local and floating times recur on the wall clock (09:00
    /// stays 09:00 across a daylight-saving change) and only then become instants; a wall-clock time
    /// skipped by a change moves forward by the length of the gap (§3.3.5), and one that happens twice
    /// is the first. All-day occurrences run from midnight to midnight in the floating zone.
    ///
    /// Each instance lasts as long as the event: exactly DTEND − DTSTART for a timed event, that many
    /// days for an all-day one, or DURATION (days and weeks on the wall clock, the rest exact); an
    /// RDATE PERIOD has its own length. Matching an EXDATE or a RECURRENCE-ID is by instant, or by local
    /// date for a DATE value. RECURRENCE-ID's RANGE=THISANDFUTURE is read as the single instance.
    public func expand(
        from: Date, to: Date, defaultTimeZone: TimeZone, limit: Int, limits: ICalendarLimits = ICalendarLimits()
    ) -> ICalendarExpansion {
        expand(
            from: from, to: to, defaultTimeZone: defaultTimeZone, limit: limit, limits: limits, stepBudget: limits.maxRecurrenceIterations)
    }

    /// `expand(from:to:defaultTimeZone:limit:limits:)` with at most `stepBudget` recurrence steps.
    func expand(
        from: Date, to: Date, defaultTimeZone: TimeZone, limit: Int, limits: ICalendarLimits, stepBudget: Int
    ) -> ICalendarExpansion {
        let cap = max(0, min(limit, limits.maxOccurrencesPerEvent))
        guard cap > 0, from < to, !to.timeIntervalSince1970.isNaN else { return ICalendarExpansion(occurrences: [], truncation: nil) }
        let context = ICalendarExpansionContext(
            floatingTimeZone: floatingTimeZone ?? defaultTimeZone, from: CivilCalendar.clampedSeconds(from.timeIntervalSince1970),
            to: CivilCalendar.clampedSeconds(to.timeIntervalSince1970.rounded(.up)))
        // Excluded instances are dropped as they are made, so that the rule is expanded until `cap`
        // instances survive and no further.
        var instances = ICalendarInstanceSet(context: context)
        for date in exceptionDates { instances.exclude(date, allDayOnly: false) }
        for replacement in overrides {
            if let recurrenceID = replacement.recurrenceID { instances.exclude(recurrenceID, allDayOnly: true) }
        }
        var truncation: ICalendarExpansion.Truncation?
        var steps = 0

        let length = ICalendarInstanceLength(of: self, context: context)
        let clock = start.clock(floatingTimeZone: context.floatingTimeZone)
        let startWall = start.wallClock
        let startInstance = context.instance(wall: startWall, clock: clock, length: length, allDay: start.isDate)
        instances.insert(startInstance)

        if let rule = recurrenceRule {
            let until = rule.until.map { ICalendarUntil($0, eventClock: clock, context: context) }
            let margin = length.maximumSeconds + 2 * CivilCalendar.secondsPerDay
            let fromWall = clock.wallClock(instant: context.from) - margin
            let toWall = clock.wallClock(instant: context.to) + 2 * CivilCalendar.secondsPerDay
            let maxSteps = max(0, min(stepBudget, limits.maxRecurrenceIterations))
            var iterator = ICalendarRecurrenceIterator(
                rule: rule, start: start, skippingTo: rule.count == nil ? fromWall : nil, maxIterations: maxSteps)
            var counted = 1
            while let wall = iterator.next() {
                if wall == startWall { continue }
                if let count = rule.count {
                    guard counted < count else { break }
                    counted += 1
                }
                if wall > toWall { break }
                if let until, !until.allows(wall: wall, clock: clock) { break }
                if wall < fromWall { continue }
                instances.insert(context.instance(wall: wall, clock: clock, length: length, allDay: start.isDate))
                if instances.count >= cap {
                    truncation = .occurrenceLimit
                    break
                }
            }
            if iterator.hitIterationLimit { truncation = .iterationLimit }
            steps = min(iterator.iterations, maxSteps)
        }
        for date in recurrenceDates {
            instances.insert(context.instance(of: date, masterLength: length, masterIsAllDay: start.isDate))
        }

        var occurrences: [ICalendarOccurrence] = []
        occurrences.reserveCapacity(instances.count + overrides.count)
        let ownRecurrenceID = recurrenceID.map { $0.instant(floatingTimeZone: context.floatingTimeZone) }
        for instance in instances.all {
            let start = Date(timeIntervalSince1970: Double(instance.start))
            let isOwnStart = instance.start == startInstance.start
            occurrences.append(
                ICalendarOccurrence(
                    start: start, end: Date(timeIntervalSince1970: Double(instance.end)), allDay: instance.allDay,
                    recurrenceID: isOwnStart ? ownRecurrenceID ?? start : start))
        }
        for replacement in overrides {
            guard let recurrenceID = replacement.recurrenceID else { continue }
            let replacementLength = ICalendarInstanceLength(of: replacement, context: context)
            let replacementClock = replacement.start.clock(floatingTimeZone: context.floatingTimeZone)
            let instance = context.instance(
                wall: replacement.start.wallClock, clock: replacementClock, length: replacementLength, allDay: replacement.start.isDate)
            guard context.overlaps(instance) else { continue }
            occurrences.append(
                ICalendarOccurrence(
                    start: Date(timeIntervalSince1970: Double(instance.start)), end: Date(timeIntervalSince1970: Double(instance.end)),
                    allDay: instance.allDay, recurrenceID: recurrenceID.instant(floatingTimeZone: context.floatingTimeZone),
                    override: replacement))
        }
        occurrences.sort { ($0.start, $0.end) < ($1.start, $1.end) }
        if occurrences.count > cap {
            occurrences.removeLast(occurrences.count - cap)
            truncation = .occurrenceLimit
        }
        return ICalendarExpansion(occurrences: occurrences, truncation: truncation, steps: steps)
    }
}

extension ICalendar {
    /// Expands every event over one window, with a budget for the whole calendar: at most
    /// `limits.maxCalendarRecurrenceIterations` recurrence steps in all, so that a file of many rules
    /// that never match costs a bounded time (each could otherwise take up to `maxRecurrenceIterations`
    /// steps). Once the budget is spent, later rules are expanded no further than their DTSTART, RDATEs
    /// and overrides, and their expansions say `.iterationLimit`.
    ///
    /// - Returns: one expansion per event, in the order of `events`.
    public func expandAll(
        from: Date, to: Date, defaultTimeZone: TimeZone, limitPerEvent: Int, limits: ICalendarLimits = ICalendarLimits()
    ) -> [ICalendarExpansion] {
        var remaining = limits.maxCalendarRecurrenceIterations
        return events.map { event in
            let expansion = event.expand(
                from: from, to: to, defaultTimeZone: defaultTimeZone, limit: limitPerEvent, limits: limits,
                stepBudget: remaining)
            remaining = max(0, remaining - expansion.steps)
            return expansion
        }
    }
}

/// One member of a recurrence set, in seconds since 1970.
struct ICalendarInstance: Hashable {
    var start: Int
    var end: Int
    var allDay: Bool
    /// The local date the instance starts on, for matching DATE values of EXDATE and RECURRENCE-ID.
    var localDay: Int
}

/// A recurrence set as it is assembled, limited to the window: at most one instance per start (RFC 5545
/// sets have no duplicates; the first added wins), none that an EXDATE or an override's RECURRENCE-ID
/// names.
struct ICalendarInstanceSet {
    private let context: ICalendarExpansionContext
    private var byStart: [Int: ICalendarInstance] = [:]
    private var excludedInstants: Set<Int> = []
    private var excludedDays: Set<Int> = []
    private var excludedAllDayDays: Set<Int> = []

    init(context: ICalendarExpansionContext) {
        self.context = context
    }

    /// Excludes the instances a value of EXDATE or RECURRENCE-ID names: by instant, or by local date for
    /// a DATE. An EXDATE DATE removes every instance that day; a RECURRENCE-ID DATE (`allDayOnly`) names
    /// the all-day instance of that day.
    mutating func exclude(_ value: ICalendarDateTime, allDayOnly: Bool) {
        if value.isDate {
            if allDayOnly {
                excludedAllDayDays.insert(value.dayNumber)
            } else {
                excludedDays.insert(value.dayNumber)
            }
        } else {
            excludedInstants.insert(Int(value.instant(floatingTimeZone: context.floatingTimeZone).timeIntervalSince1970))
        }
    }

    mutating func insert(_ instance: ICalendarInstance) {
        guard context.overlaps(instance), byStart[instance.start] == nil,
            !excludedInstants.contains(instance.start), !excludedDays.contains(instance.localDay),
            !(instance.allDay && excludedAllDayDays.contains(instance.localDay))
        else { return }
        byStart[instance.start] = instance
    }

    var count: Int { byStart.count }

    var all: Dictionary<Int, ICalendarInstance>.Values { byStart.values }
}

/// How long each instance of an event lasts.
enum ICalendarInstanceLength {
    /// Exact seconds (a timed event's DTEND − DTSTART).
    case exact(Int)
    /// Days on the wall clock, then exact seconds (an all-day event, or a DURATION).
    case nominal(days: Int, seconds: Int)

    init(of event: ICalendarEvent, context: ICalendarExpansionContext) {
        if let end = event.end {
            if event.start.isDate {
                self = .nominal(days: max(0, end.dayNumber - event.start.dayNumber), seconds: 0)
            } else {
                let seconds = end.instant(floatingTimeZone: context.floatingTimeZone)
                    .timeIntervalSince(event.start.instant(floatingTimeZone: context.floatingTimeZone))
                self = .exact(max(0, Int(seconds)))
            }
        } else if let duration = event.duration {
            self = .nominal(days: max(0, duration.days), seconds: max(0, duration.seconds))
        } else {
            // RFC 5545 §3.6.1: without DTEND or DURATION an all-day event lasts a day, a timed one no time.
            self = event.start.isDate ? .nominal(days: 1, seconds: 0) : .exact(0)
        }
    }

    /// An upper bound in seconds, for deciding how far before a window an instance may start.
    var maximumSeconds: Int {
        switch self {
        case .exact(let seconds): return seconds
        case .nominal(let days, let seconds): return days * CivilCalendar.secondsPerDay + seconds + 3600
        }
    }
}

/// UNTIL, compared the way its value type asks: a DATE against the instance's local date, a floating
/// DATE-TIME against its wall clock, a UTC or zoned one against its instant.
struct ICalendarUntil {
    private enum Bound {
        case day(Int)
        case wall(Int)
        case instant(Int, approximateWall: Int)
    }

    private let bound: Bound

    init(_ until: ICalendarDateTime, eventClock: ICalendarZoneClock, context: ICalendarExpansionContext) {
        if until.isDate {
            bound = .day(until.dayNumber)
        } else if until.zone == .floating {
            bound = .wall(until.wallClock)
        } else {
            let instant = Int(until.instant(floatingTimeZone: context.floatingTimeZone).timeIntervalSince1970)
            bound = .instant(instant, approximateWall: eventClock.wallClock(instant: instant))
        }
    }

    func allows(wall: Int, clock: ICalendarZoneClock) -> Bool {
        switch bound {
        case .day(let day):
            return CivilCalendar.dayNumber(wallClock: wall) <= day
        case .wall(let limit):
            return wall <= limit
        case .instant(let instant, let approximateWall):
            // Converting every instance would cost zone look-ups; only those within a day of the bound need it.
            if wall < approximateWall - CivilCalendar.secondsPerDay { return true }
            if wall > approximateWall + CivilCalendar.secondsPerDay { return false }
            return clock.instant(wallClock: wall) <= instant
        }
    }
}

/// What every instance of one expansion shares: the zone for floating values and the window.
struct ICalendarExpansionContext {
    let floatingTimeZone: TimeZone
    let from: Int
    let to: Int

    func overlaps(_ instance: ICalendarInstance) -> Bool {
        instance.start < to && (instance.end > from || (instance.start == instance.end && instance.start >= from))
    }

    func instance(wall: Int, clock: ICalendarZoneClock, length: ICalendarInstanceLength, allDay: Bool) -> ICalendarInstance {
        let start = clock.instant(wallClock: wall)
        let end: Int
        switch length {
        case .exact(let seconds):
            end = start + seconds
        case .nominal(let days, let seconds):
            end = (days == 0 ? start : clock.instant(wallClock: wall + days * CivilCalendar.secondsPerDay)) + seconds
        }
        return ICalendarInstance(start: start, end: end, allDay: allDay, localDay: CivilCalendar.dayNumber(wallClock: wall))
    }

    /// An RDATE's instance. A PERIOD has its own end; a DATE-TIME lasts as long as the master; a DATE is
    /// an all-day instance as long as an all-day master, or one day.
    func instance(of date: ICalendarRecurrenceDate, masterLength: ICalendarInstanceLength, masterIsAllDay: Bool) -> ICalendarInstance {
        let clock = date.start.clock(floatingTimeZone: floatingTimeZone)
        let wall = date.start.wallClock
        if let end = date.end {
            let start = clock.instant(wallClock: wall)
            let endInstant = Int(end.instant(floatingTimeZone: floatingTimeZone).timeIntervalSince1970)
            return ICalendarInstance(
                start: start, end: max(start, endInstant), allDay: false, localDay: CivilCalendar.dayNumber(wallClock: wall))
        }
        if let duration = date.duration {
            return instance(wall: wall, clock: clock, length: .nominal(days: duration.days, seconds: duration.seconds), allDay: false)
        }
        if date.start.isDate {
            return instance(wall: wall, clock: clock, length: masterIsAllDay ? masterLength : .nominal(days: 1, seconds: 0), allDay: true)
        }
        return instance(wall: wall, clock: clock, length: masterLength, allDay: false)
    }
}
