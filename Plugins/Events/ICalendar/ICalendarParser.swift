import Foundation

/// Reads an iCalendar (RFC 5545) calendar: its VEVENTs, with their recurrence and their overrides.
///
/// The parser is lenient by default: a line it cannot use is reported as an `ICalendarProblem` with its
/// line number and skipped (an event missing UID or DTSTART is skipped whole), and the rest of the
/// calendar is read. With `strict` the first such problem throws instead. Breaking one of `limits`
/// always throws, since it means the input is hostile or not a calendar at all; see `ICalendarLimits`.
///
/// A file is read in 64 KiB chunks, so reading a large file needs memory for its events only.
public struct ICalendarParser: Sendable {
    public var limits: ICalendarLimits
    public var strict: Bool

    /// How much of a file is read at a time.
    static let chunkBytes = 64 * 1024

    public init(limits: ICalendarLimits = ICalendarLimits(), strict: Bool = false) {
        self.limits = limits
        self.strict = strict
    }

    /// Reads a calendar held in memory.
    public func parse(_ data: Data) throws(ICalendarError) -> ICalendar {
        var reader = ICalendarLineReader(maxLineBytes: limits.maxContentLineBytes)
        var state = ICalendarParseState(limits: limits, strict: strict)
        do {
            try data.withUnsafeBytes { bytes in
                try reader.feed(bytes) { try state.consume($0) }
            }
            try reader.finish { try state.consume($0) }
            return try state.finish(lastLine: reader.physicalLine)
        } catch let error as ICalendarError {
            throw error
        } catch {
            throw ICalendarError(.unreadable, line: reader.physicalLine, reason: "\(error)")
        }
    }

    /// Reads a calendar from a file, a chunk at a time.
    public func parse(contentsOf url: URL) throws(ICalendarError) -> ICalendar {
        var reader = ICalendarLineReader(maxLineBytes: limits.maxContentLineBytes)
        var state = ICalendarParseState(limits: limits, strict: strict)
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: url)
        } catch {
            throw ICalendarError(.unreadable, line: 0, reason: "cannot open \(url.path): \(error.localizedDescription)")
        }
        defer { try? handle.close() }
        do {
            while let chunk = try handle.read(upToCount: Self.chunkBytes), !chunk.isEmpty {
                try chunk.withUnsafeBytes { bytes in
                    try reader.feed(bytes) { try state.consume($0) }
                }
            }
            try reader.finish { try state.consume($0) }
            return try state.finish(lastLine: reader.physicalLine)
        } catch let error as ICalendarError {
            throw error
        } catch {
            throw ICalendarError(.unreadable, line: reader.physicalLine, reason: "cannot read \(url.path): \(error.localizedDescription)")
        }
    }
}

/// The parser's state while reading: the stack of open components, the event being read, and what has
/// been collected so far.
struct ICalendarParseState {
    private struct OpenComponent {
        var name: String
        var line: Int
        /// Components other than VCALENDAR, the VEVENTs and VTIMEZONEs directly inside it and the
        /// observances of a VTIMEZONE are read past.
        var isSkipped: Bool
    }

    let limits: ICalendarLimits
    let strict: Bool
    private var problems: [ICalendarProblem] = []
    private var stack: [OpenComponent] = []
    private var calendarName: String?
    private var calendarTimeZone: TimeZone?
    private var sawCalendar = false
    private var eventCount = 0
    private var events: [ICalendarEvent] = []
    private var event: ICalendarEventBuilder?
    private var resolver = ICalendarTimeZoneResolver()
    /// The VTIMEZONE being read, and the zones of those read (by TZID): what a TZID means from then on.
    private var timeZone: ICalendarTimeZoneBuilder?
    private var definedZones: [String: TimeZone?] = [:]
    static let maximumDefinedZones = 200

    init(limits: ICalendarLimits, strict: Bool) {
        self.limits = limits
        self.strict = strict
    }

    /// Records a problem, or throws it in strict mode.
    mutating func report(line: Int, _ reason: String) throws(ICalendarError) {
        if strict { throw ICalendarError(.malformed, line: line, reason: reason) }
        guard problems.count < limits.maxProblems else {
            throw ICalendarError(
                .limitExceeded, line: line,
                reason: "more than \(limits.maxProblems) problems (maxProblems); the input does not look like iCalendar")
        }
        problems.append(ICalendarProblem(line: line, reason: reason))
    }

    mutating func consume(_ line: ICalendarLineReader.Line) throws(ICalendarError) {
        if line.isOverlong {
            let name = ICalendarContentLine.name(of: line.bytes).map { "\($0) " } ?? ""
            try report(
                line: line.number, "\(name)content line longer than \(limits.maxContentLineBytes) bytes (maxContentLineBytes); skipped")
            return
        }
        if let open = stack.last, open.isSkipped {
            // Inside a skipped component only its nesting matters; spare the full split of every line.
            guard let name = ICalendarContentLine.name(of: line.bytes), name == "BEGIN" || name == "END" else { return }
        }
        let content: ICalendarContentLine
        do {
            content = try ICalendarContentLine(parsing: line.bytes)
        } catch {
            try report(line: line.number, error.reason)
            return
        }
        switch content.name {
        case "BEGIN": try begin(content.value, line: line.number)
        case "END": try end(content.value, line: line.number)
        default: try property(content, line: line.number)
        }
    }

    private mutating func begin(_ value: String, line: Int) throws(ICalendarError) {
        let name = ICalendarText.trimmed(value).uppercased()
        guard !name.isEmpty else {
            try report(line: line, "BEGIN without a component name")
            return
        }
        guard stack.count < limits.maxNestingDepth else {
            throw ICalendarError(
                .limitExceeded, line: line,
                reason: "components nested more than \(limits.maxNestingDepth) deep (maxNestingDepth)")
        }
        if stack.isEmpty {
            if name == "VCALENDAR" {
                sawCalendar = true
                stack.append(OpenComponent(name: name, line: line, isSkipped: false))
            } else {
                try report(line: line, "BEGIN:\(name) outside VCALENDAR; skipped")
                stack.append(OpenComponent(name: name, line: line, isSkipped: true))
            }
            return
        }
        if name == "VEVENT", stack.count == 1, !stack[0].isSkipped {
            eventCount += 1
            guard eventCount <= limits.maxEvents else {
                throw ICalendarError(.limitExceeded, line: line, reason: "more than \(limits.maxEvents) VEVENTs (maxEvents)")
            }
            event = ICalendarEventBuilder(line: line)
            stack.append(OpenComponent(name: name, line: line, isSkipped: false))
            return
        }
        if name == "VTIMEZONE", stack.count == 1, !stack[0].isSkipped, definedZones.count < Self.maximumDefinedZones {
            timeZone = ICalendarTimeZoneBuilder(line: line)
            stack.append(OpenComponent(name: name, line: line, isSkipped: false))
            return
        }
        if name == "STANDARD" || name == "DAYLIGHT", stack.count == 2, stack[1].name == "VTIMEZONE", !stack[1].isSkipped, timeZone?.observance == nil {
            timeZone?.observance = .init(line: line)
            stack.append(OpenComponent(name: name, line: line, isSkipped: false))
            return
        }
        stack.append(OpenComponent(name: name, line: line, isSkipped: true))
    }

    private mutating func end(_ value: String, line: Int) throws(ICalendarError) {
        let name = ICalendarText.trimmed(value).uppercased()
        guard let index = stack.lastIndex(where: { $0.name == name }) else {
            let open = stack.last.map { " (BEGIN:\($0.name) at line \($0.line) is open)" } ?? ""
            try report(line: line, "END:\(name) without a matching BEGIN:\(name)\(open); skipped")
            return
        }
        while stack.count > index + 1 {
            let unclosed = stack.removeLast()
            try report(line: line, "END:\(name) closes BEGIN:\(unclosed.name) at line \(unclosed.line), which has no END:\(unclosed.name)")
            if unclosed.name == "VEVENT", !unclosed.isSkipped, let open = event {
                event = nil
                try report(line: open.line, "VEVENT has no END:VEVENT; skipped")
            }
        }
        let closed = stack.removeLast()
        if closed.name == "STANDARD" || closed.name == "DAYLIGHT", !closed.isSkipped, let problem = timeZone?.endObservance() {
            try report(line: closed.line, problem)
        }
        if closed.name == "VTIMEZONE", !closed.isSkipped, let finished = timeZone {
            timeZone = nil
            try define(finished)
        }
        if closed.name == "VEVENT", !closed.isSkipped, let finished = event {
            event = nil
            if let built = try finished.build(floatingTimeZone: nil, state: &self) {
                events.append(built)
            }
        }
    }

    private mutating func property(_ content: ICalendarContentLine, line: Int) throws(ICalendarError) {
        guard let open = stack.last else {
            try report(line: line, "\(content.name) outside BEGIN:VCALENDAR … END:VCALENDAR; skipped")
            return
        }
        if open.isSkipped { return }
        if open.name == "VEVENT", let builder = event {
            try builder.apply(content, line: line, state: &self)
            return
        }
        if open.name == "VTIMEZONE" || open.name == "STANDARD" || open.name == "DAYLIGHT" {
            do {
                try timeZone?.apply(content)
            } catch {
                try report(line: line, error.reason)
            }
            return
        }
        switch content.name {
        case "X-WR-CALNAME":
            if calendarName == nil { calendarName = ICalendarText.unescape(content.value) }
        case "X-WR-TIMEZONE":
            guard let zone = resolveTimeZone(ICalendarText.unescape(content.value)) else {
                try report(line: line, "X-WR-TIMEZONE '\(content.value)' is not a known time zone; floating times use the default zone")
                return
            }
            if calendarTimeZone == nil { calendarTimeZone = zone }
        default:
            break
        }
    }

    /// The zone a TZID means: the one its VTIMEZONE in the file defines, if one was read, else the
    /// zone its name names.
    mutating func resolveTimeZone(_ tzid: String) -> TimeZone? {
        if let defined = definedZones[tzid] { return defined ?? resolver.resolve(tzid) }
        return resolver.resolve(tzid)
    }

    /// Takes a VTIMEZONE in: its TZID means the IANA zone that keeps its offsets from now on.
    private mutating func define(_ builder: ICalendarTimeZoneBuilder) throws(ICalendarError) {
        guard let tzid = builder.tzid, !tzid.isEmpty else {
            try report(line: builder.line, "VTIMEZONE without a TZID; skipped")
            return
        }
        let definition = ICalendarTimeZoneDefinition(tzid: tzid, observances: builder.observances)
        let named = resolver.resolve(tzid)
        let zone = definition.matchingZone(preferred: named)
        if zone == nil {
            let fallback = named.map { "the zone of its name, \($0.identifier)" } ?? "floating time"
            try report(line: builder.line, "VTIMEZONE \(tzid) keeps offsets no known time zone keeps; its times are read in \(fallback)")
        }
        definedZones[tzid] = .some(zone)
    }

    /// Reports what is still open, attaches overrides to their masters and hands the calendar over.
    mutating func finish(lastLine: Int) throws(ICalendarError) -> ICalendar {
        while let unclosed = stack.popLast() {
            try report(line: lastLine, "BEGIN:\(unclosed.name) at line \(unclosed.line) has no END:\(unclosed.name)")
            if unclosed.name == "VEVENT", !unclosed.isSkipped, let open = event {
                event = nil
                try report(line: open.line, "VEVENT has no END:VEVENT; skipped")
            }
        }
        if !sawCalendar {
            try report(line: 1, "no BEGIN:VCALENDAR found")
        }
        let grouped = try groupOverrides(events)
        return ICalendar(name: calendarName, timeZone: calendarTimeZone, events: grouped, problems: problems)
    }

    /// Moves each override (an event with a RECURRENCE-ID) into its master, and keeps one event per UID
    /// (and one override per instance): the one with the highest SEQUENCE, the first of equals.
    private mutating func groupOverrides(_ events: [ICalendarEvent]) throws(ICalendarError) -> [ICalendarEvent] {
        var result: [ICalendarEvent] = []
        var masterIndexByUID: [String: Int] = [:]
        for event in events where event.recurrenceID == nil {
            var event = event
            event.floatingTimeZone = calendarTimeZone
            if let index = masterIndexByUID[event.uid] {
                let kept = result[index]
                if (event.sequence ?? 0) > (kept.sequence ?? 0) {
                    try report(
                        line: kept.line, "VEVENT UID \(event.uid) is replaced by the one at line \(event.line), which has a higher SEQUENCE"
                    )
                    result[index] = event
                } else {
                    try report(line: event.line, "VEVENT UID \(event.uid) repeats the one at line \(kept.line); skipped")
                }
                continue
            }
            masterIndexByUID[event.uid] = result.count
            result.append(event)
        }
        var overrideIndex: [ICalendarOverrideKey: (master: Int, index: Int)] = [:]
        for event in events {
            guard let recurrenceID = event.recurrenceID else { continue }
            var event = event
            event.floatingTimeZone = calendarTimeZone
            guard let master = masterIndexByUID[event.uid] else {
                result.append(event)
                continue
            }
            let key = ICalendarOverrideKey(uid: event.uid, recurrenceID: recurrenceID)
            if let existing = overrideIndex[key] {
                let kept = result[existing.master].overrides[existing.index]
                if (event.sequence ?? 0) > (kept.sequence ?? 0) {
                    try report(
                        line: kept.line,
                        "override of UID \(event.uid) is replaced by the one at line \(event.line), which has a higher SEQUENCE")
                    result[existing.master].overrides[existing.index] = event
                } else {
                    try report(line: event.line, "override of UID \(event.uid) repeats the one at line \(kept.line); skipped")
                }
                continue
            }
            overrideIndex[key] = (master, result[master].overrides.count)
            result[master].overrides.append(event)
        }
        return result
    }
}

private struct ICalendarOverrideKey: Hashable {
    var uid: String
    var recurrenceID: ICalendarDateTime
}
