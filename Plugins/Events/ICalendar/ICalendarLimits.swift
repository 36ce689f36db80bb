/// Bounds that keep reading and expanding an untrusted calendar cheap, whatever the file holds.
///
/// | Limit | Default | When broken |
/// | --- | --- | --- |
/// | `maxContentLineBytes` | 1 MiB (1,048,576 bytes) per content line, after unfolding | the line is discarded as it streams past (never buffered beyond the limit) and reported as a problem |
/// | `maxEvents` | 100,000 VEVENTs per calendar | parsing stops with `ICalendarError.Kind.limitExceeded` at the first VEVENT over the limit |
/// | `maxNestingDepth` | 16 nested components (VCALENDAR counts as one) | parsing stops with `limitExceeded` |
/// | `maxProblems` | 1,000 problems per calendar | parsing stops with `limitExceeded` (the input is probably not iCalendar at all) |
/// | `maxOccurrencesPerEvent` | 10,000 occurrences per event and expansion window | expansion returns the first 10,000 and says it stopped early |
/// | `maxRecurrenceIterations` | 100,000 steps per expansion: a step is one period examined (a year, month, week, day, hour, minute or second, by FREQ) or one instance generated | expansion returns what it found and says it stopped early |
/// | `maxCalendarRecurrenceIterations` | 2,000,000 steps for all events together, in `ICalendar.expandAll` | later events are expanded without their RRULE and say they stopped early |
///
/// Recurrence expansion also never goes past the year 9999. Together these make a rule that can never
/// match (`FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30`), an endless `FREQ=SECONDLY`, or a `COUNT` of a billion
/// cost at most about 20 ms (release build), and a whole calendar of such rules about half a second
/// through `ICalendar.expandAll`. A rule without COUNT is expanded from the window on, not from DTSTART,
/// so a daily event that began in 1970 costs no more than one that began yesterday. `FREQ=SECONDLY`,
/// `MINUTELY` and `HOURLY` are supported under the same limits. The reader holds one content line and
/// one event at a time, so memory is bounded by `maxContentLineBytes` plus the parsed events themselves,
/// whatever the size of the file.
public struct ICalendarLimits: Sendable, Hashable {
    /// The longest content line accepted, in bytes after unfolding.
    public var maxContentLineBytes: Int
    /// The most VEVENT components in one calendar (overrides included).
    public var maxEvents: Int
    /// The deepest nesting of components.
    public var maxNestingDepth: Int
    /// The most problems collected before the input is given up on.
    public var maxProblems: Int
    /// The most occurrences one expansion returns.
    public var maxOccurrencesPerEvent: Int
    /// The most steps (periods examined plus instances generated) one expansion takes.
    public var maxRecurrenceIterations: Int
    /// The most steps all the expansions of `ICalendar.expandAll` take together.
    public var maxCalendarRecurrenceIterations: Int

    public init(
        maxContentLineBytes: Int = 1 << 20, maxEvents: Int = 100_000, maxNestingDepth: Int = 16, maxProblems: Int = 1_000,
        maxOccurrencesPerEvent: Int = 10_000, maxRecurrenceIterations: Int = 100_000, maxCalendarRecurrenceIterations: Int = 2_000_000
    ) {
        self.maxContentLineBytes = maxContentLineBytes
        self.maxEvents = maxEvents
        self.maxNestingDepth = maxNestingDepth
        self.maxProblems = maxProblems
        self.maxOccurrencesPerEvent = maxOccurrencesPerEvent
        self.maxRecurrenceIterations = maxRecurrenceIterations
        self.maxCalendarRecurrenceIterations = maxCalendarRecurrenceIterations
    }
}
