/// Generates the wall-clock starts of an RRULE in increasing order, from DTSTART on.
///
/// The rule is expanded one period at a time (a year for FREQ=YEARLY, a month, a week, a day, an hour, a
/// minute or a second), periods `INTERVAL` apart and anchored at DTSTART's period. Within a period every
/// day is tested against the BYxxx parts that RFC 5545 §3.3.10 lets "limit" or "expand" at that
/// frequency; since expanding a set and then limiting it selects the same days as testing each day
/// against all the parts, one filter serves every frequency. The period's instances are the chosen days
/// crossed with the chosen times of day, in order, and BYSETPOS picks from that product by position,
/// without ever materialising it (a rule with every BYHOUR, BYMINUTE and BYSECOND has 31 million
/// instances a year).
///
/// Defaults follow the RFC: with none of BYWEEKNO, BYYEARDAY, BYMONTHDAY and BYDAY, a yearly rule falls
/// on DTSTART's month and day, a monthly one on DTSTART's day and a weekly one on DTSTART's weekday; the
/// time of day comes from DTSTART unless BYHOUR, BYMINUTE or BYSECOND say otherwise. Dates that do not
/// exist (the 31st of a short month, February 29th of a common year) are never generated, rather than
/// moved. BYDAY ordinals count within the month for MONTHLY and for YEARLY with BYMONTH, within the year
/// for YEARLY without it, and are ignored at other frequencies.
///
/// Every period examined and every instance produced is a step; after `maxIterations` steps, or past
/// the year 9999, the iterator stops and says so in `hitIterationLimit`. That is what makes a rule that
/// never matches finish.
struct ICalendarRecurrenceIterator {
    typealias Frequency = ICalendarRecurrenceRule.Frequency

    private static let secondsPerDay = CivilCalendar.secondsPerDay
    private static let lastDay = CivilCalendar.dayNumber(year: 9999, month: 12, day: 31)

    private let frequency: Frequency
    private let interval: Int
    private let startWall: Int
    private let startDay: Int
    private let startYear: Int
    private let startMonthIndex: Int
    private let firstWeekStart: Int
    private let weekStart: Int

    private let months: [Int]
    private let monthMask: Int
    private let monthDaysPositive: UInt64
    private let monthDaysNegative: UInt64
    private let plainWeekdays: Int
    private let ordinalWeekdays: [(weekday: Int, ordinal: Int)]
    private let ordinalsWithinYear: Bool
    private let yearDays: Set<Int>
    private let weekNumbers: Set<Int>
    private let setPositions: [Int]

    /// Times of day (seconds) for DAILY and longer frequencies.
    private let timesOfDay: [Int]
    /// For HOURLY and shorter: bit masks of the allowed hours, minutes and seconds (nil: any), and the
    /// minutes and seconds a period expands to.
    private let hourMask: UInt64?
    private let minuteMask: UInt64?
    private let secondMask: UInt64?
    private let expandedMinutes: [Int]
    private let expandedSeconds: [Int]
    /// For HOURLY and shorter: the first period's start and the distance between periods, in seconds.
    private let subDailyBase: Int
    private let subDailyStep: Int

    private let maxIterations: Int
    private var periodIndex: Int
    private var minimumWall: Int
    private var days: [Int] = []
    private var times: [Int] = []
    private var selected: [Int]?
    private var cursor = 0
    private var cursorEnd = 0
    private var finished = false
    private(set) var iterations = 0
    private(set) var hitIterationLimit = false

    /// - Parameters:
    ///   - start: DTSTART; its wall-clock fields anchor the rule.
    ///   - skippingTo: a wall-clock time before which instances are not wanted. Periods before it are
    ///     jumped over, so only pass it when nothing is counted from DTSTART (no COUNT).
    init(rule: ICalendarRecurrenceRule, start: ICalendarDateTime, skippingTo skipWall: Int? = nil, maxIterations: Int) {
        frequency = rule.frequency
        interval = max(1, rule.interval)
        startWall = start.wallClock
        startDay = start.dayNumber
        startYear = start.year
        startMonthIndex = start.year * 12 + start.month - 1
        weekStart = rule.weekStart.rawValue
        let startWeekday = CivilCalendar.weekday(dayNumber: startDay)
        firstWeekStart = startDay - (startWeekday - weekStart + 7) % 7
        self.maxIterations = maxIterations

        var byMonth = rule.byMonth
        var byMonthDay = rule.byMonthDay
        var byDay = rule.byDay
        if rule.byWeekNumber.isEmpty && rule.byYearDay.isEmpty && byMonthDay.isEmpty && byDay.isEmpty {
            switch rule.frequency {
            case .yearly:
                if byMonth.isEmpty { byMonth = [start.month] }
                byMonthDay = [start.day]
            case .monthly:
                byMonthDay = [start.day]
            case .weekly:
                byDay = [ICalendarRecurrenceRule.WeekdayOccurrence(ICalendarRecurrenceRule.Weekday(rawValue: startWeekday) ?? .monday)]
            default:
                break
            }
        }
        months = Array(Set(byMonth)).sorted()
        monthMask = byMonth.reduce(0) { $0 | 1 << $1 }
        monthDaysPositive = byMonthDay.filter { $0 > 0 }.reduce(0) { $0 | 1 << UInt64($1) }
        monthDaysNegative = byMonthDay.filter { $0 < 0 }.reduce(0) { $0 | 1 << UInt64(-$1) }
        let ordinalsApply = rule.frequency == .monthly || rule.frequency == .yearly
        plainWeekdays = byDay.filter { $0.ordinal == 0 || !ordinalsApply }.reduce(0) { $0 | 1 << $1.weekday.rawValue }
        ordinalWeekdays = ordinalsApply ? byDay.filter { $0.ordinal != 0 }.map { ($0.weekday.rawValue, $0.ordinal) } : []
        ordinalsWithinYear = rule.frequency == .yearly && rule.byMonth.isEmpty
        yearDays = Set(rule.byYearDay)
        weekNumbers = rule.frequency == .yearly ? Set(rule.byWeekNumber) : []
        setPositions = rule.bySetPosition

        func sortedUnique(_ values: [Int], otherwise fallback: Int) -> [Int] {
            values.isEmpty ? [fallback] : Array(Set(values)).sorted()
        }
        func mask(_ values: [Int]) -> UInt64? {
            values.isEmpty ? nil : values.reduce(UInt64(0)) { $0 | 1 << UInt64($1) }
        }
        // POSIX time has no leap seconds; BYSECOND=60 names a second that never comes.
        let bySecond = rule.bySecond.filter { $0 < 60 }
        let noSecond = !rule.bySecond.isEmpty && bySecond.isEmpty
        switch rule.frequency {
        case .yearly, .monthly, .weekly, .daily:
            if start.isDate {
                timesOfDay = [0]
            } else if noSecond {
                timesOfDay = []
            } else {
                var times: [Int] = []
                for hour in sortedUnique(rule.byHour, otherwise: start.hour) {
                    for minute in sortedUnique(rule.byMinute, otherwise: start.minute) {
                        for second in sortedUnique(bySecond, otherwise: start.second) {
                            times.append(hour * 3600 + minute * 60 + second)
                        }
                    }
                }
                timesOfDay = times
            }
            hourMask = nil
            minuteMask = nil
            secondMask = nil
            expandedMinutes = []
            expandedSeconds = []
            subDailyBase = 0
            subDailyStep = 0
        case .hourly, .minutely, .secondly:
            timesOfDay = []
            hourMask = mask(rule.byHour)
            let unit: Int
            switch rule.frequency {
            case .hourly:
                unit = 3600
                minuteMask = nil
                secondMask = nil
                expandedMinutes = sortedUnique(rule.byMinute, otherwise: start.minute)
                expandedSeconds = noSecond ? [] : sortedUnique(bySecond, otherwise: start.second)
            case .minutely:
                unit = 60
                minuteMask = mask(rule.byMinute)
                secondMask = nil
                expandedMinutes = []
                expandedSeconds = noSecond ? [] : sortedUnique(bySecond, otherwise: start.second)
            default:
                unit = 1
                minuteMask = mask(rule.byMinute)
                secondMask = noSecond ? 0 : mask(bySecond)
                expandedMinutes = []
                expandedSeconds = []
            }
            subDailyBase = startWall - (startWall % unit + unit) % unit
            subDailyStep = unit * interval
        }

        periodIndex = 0
        minimumWall = startWall
        if let skipWall, skipWall > startWall {
            minimumWall = skipWall
            periodIndex = firstPeriod(atOrBefore: skipWall)
        }
    }

    /// The next instance's wall-clock start, or nil when there are no more (or the limits were reached).
    mutating func next() -> Int? {
        while true {
            if cursor < cursorEnd {
                let index = selected.map { $0[cursor] } ?? cursor
                cursor += 1
                guard step() else { return nil }
                return days[index / times.count] * Self.secondsPerDay + times[index % times.count]
            }
            guard !finished, step() else { return nil }
            fillNextPeriod()
        }
    }

    private mutating func step() -> Bool {
        iterations += 1
        if iterations > maxIterations {
            hitIterationLimit = true
            finished = true
            cursor = cursorEnd
            return false
        }
        return true
    }

    /// The index of the period that holds the wall-clock time `wall` (or the last one before it).
    private func firstPeriod(atOrBefore wall: Int) -> Int {
        let day = CivilCalendar.dayNumber(wallClock: wall)
        let distance: Int
        switch frequency {
        case .yearly:
            distance = CivilCalendar.date(dayNumber: day).year - startYear
        case .monthly:
            let date = CivilCalendar.date(dayNumber: day)
            distance = date.year * 12 + date.month - 1 - startMonthIndex
        case .weekly:
            distance = CivilCalendar.floorDivide(day - firstWeekStart, 7)
        case .daily:
            distance = day - startDay
        case .hourly, .minutely, .secondly:
            return max(0, CivilCalendar.floorDivide(wall - subDailyBase, subDailyStep))
        }
        return max(0, CivilCalendar.floorDivide(distance, interval))
    }

    private mutating func fillNextPeriod() {
        days.removeAll(keepingCapacity: true)
        switch frequency {
        case .yearly:
            let year = startYear + periodIndex * interval
            periodIndex += 1
            guard year <= 9999 else {
                finished = true
                return
            }
            if months.isEmpty {
                for month in 1...12 { collectDays(year: year, month: month) }
            } else {
                for month in months { collectDays(year: year, month: month) }
            }
            times = timesOfDay
        case .monthly:
            let monthIndex = startMonthIndex + periodIndex * interval
            periodIndex += 1
            let year = CivilCalendar.floorDivide(monthIndex, 12)
            guard year <= 9999 else {
                finished = true
                return
            }
            let month = monthIndex - year * 12 + 1
            if monthMask == 0 || monthMask & (1 << month) != 0 {
                collectDays(year: year, month: month)
            }
            times = timesOfDay
        case .weekly:
            let first = firstWeekStart + periodIndex * interval * 7
            periodIndex += 1
            guard first <= Self.lastDay else {
                finished = true
                return
            }
            for day in first..<(first + 7) where matches(dayNumber: day) {
                days.append(day)
            }
            times = timesOfDay
        case .daily:
            let day = startDay + periodIndex * interval
            periodIndex += 1
            guard day <= Self.lastDay else {
                finished = true
                return
            }
            if matches(dayNumber: day) { days.append(day) }
            times = timesOfDay
        case .hourly, .minutely, .secondly:
            fillSubDailyPeriod()
        }
        select()
    }

    /// One HOURLY, MINUTELY or SECONDLY period. A period on a day, hour or minute that the filters rule
    /// out is left empty and the next period is moved past that whole day, hour or minute, so a rule like
    /// `FREQ=SECONDLY;BYMONTH=2` does not visit the rest of the year a second at a time.
    private mutating func fillSubDailyPeriod() {
        let periodStart = subDailyBase + periodIndex * subDailyStep
        let day = CivilCalendar.dayNumber(wallClock: periodStart)
        guard day <= Self.lastDay else {
            finished = true
            return
        }
        func skip(to wall: Int) {
            periodIndex = max(periodIndex + 1, (wall - subDailyBase + subDailyStep - 1) / subDailyStep)
        }
        let secondOfDay = periodStart - day * Self.secondsPerDay
        let hour = secondOfDay / 3600
        let minute = secondOfDay % 3600 / 60
        let second = secondOfDay % 60
        times.removeAll(keepingCapacity: true)
        guard matches(dayNumber: day) else {
            skip(to: (day + 1) * Self.secondsPerDay)
            return
        }
        if let hourMask, hourMask & (1 << UInt64(hour)) == 0 {
            skip(to: day * Self.secondsPerDay + (hour + 1) * 3600)
            return
        }
        if let minuteMask, minuteMask & (1 << UInt64(minute)) == 0 {
            skip(to: day * Self.secondsPerDay + hour * 3600 + (minute + 1) * 60)
            return
        }
        periodIndex += 1
        if let secondMask, secondMask & (1 << UInt64(second)) == 0 { return }
        switch frequency {
        case .hourly:
            for minute in expandedMinutes {
                for second in expandedSeconds { times.append(hour * 3600 + minute * 60 + second) }
            }
        case .minutely:
            for second in expandedSeconds { times.append(hour * 3600 + minute * 60 + second) }
        default:
            times.append(secondOfDay)
        }
        days.append(day)
    }

    /// Sets the cursor over the period's instances: all of them, or those BYSETPOS picks, from
    /// `minimumWall` on.
    private mutating func select() {
        let total = days.count * times.count
        cursor = 0
        cursorEnd = 0
        selected = nil
        guard total > 0 else { return }
        func wall(at index: Int) -> Int {
            days[index / times.count] * Self.secondsPerDay + times[index % times.count]
        }
        if setPositions.isEmpty {
            var low = 0
            var high = total
            while low < high {
                let middle = (low + high) / 2
                if wall(at: middle) < minimumWall { low = middle + 1 } else { high = middle }
            }
            cursor = low
            cursorEnd = total
            return
        }
        var picks: [Int] = []
        for position in setPositions {
            let index = position > 0 ? position - 1 : total + position
            if index >= 0, index < total, wall(at: index) >= minimumWall { picks.append(index) }
        }
        let ordered = Array(Set(picks)).sorted()
        selected = ordered
        cursorEnd = ordered.count
    }

    /// Adds the days of one month that pass the filters.
    private mutating func collectDays(year: Int, month: Int) {
        let first = CivilCalendar.dayNumber(year: year, month: month, day: 1)
        let daysInMonth = CivilCalendar.daysInMonth(year: year, month: month)
        let firstWeekday = CivilCalendar.weekday(dayNumber: first)
        let yearStart = CivilCalendar.dayNumber(year: year, month: 1, day: 1)
        let daysInYear = CivilCalendar.daysInYear(year)
        for dayOfMonth in 1...daysInMonth {
            let day = first + dayOfMonth - 1
            if matches(
                day: day, year: year, month: month, dayOfMonth: dayOfMonth, daysInMonth: daysInMonth,
                weekday: (firstWeekday + dayOfMonth - 1) % 7, dayOfYear: day - yearStart + 1, daysInYear: daysInYear)
            {
                days.append(day)
            }
        }
    }

    private func matches(dayNumber day: Int) -> Bool {
        let date = CivilCalendar.date(dayNumber: day)
        let yearStart = CivilCalendar.dayNumber(year: date.year, month: 1, day: 1)
        return matches(
            day: day, year: date.year, month: date.month, dayOfMonth: date.day,
            daysInMonth: CivilCalendar.daysInMonth(year: date.year, month: date.month),
            weekday: CivilCalendar.weekday(dayNumber: day), dayOfYear: day - yearStart + 1,
            daysInYear: CivilCalendar.daysInYear(date.year))
    }

    private func matches(
        day: Int, year: Int, month: Int, dayOfMonth: Int, daysInMonth: Int, weekday: Int, dayOfYear: Int, daysInYear: Int
    ) -> Bool {
        if monthMask != 0, monthMask & (1 << month) == 0 { return false }
        if monthDaysPositive | monthDaysNegative != 0,
            monthDaysPositive & (1 << UInt64(dayOfMonth)) == 0,
            monthDaysNegative & (1 << UInt64(daysInMonth - dayOfMonth + 1)) == 0
        {
            return false
        }
        if !yearDays.isEmpty, !yearDays.contains(dayOfYear), !yearDays.contains(dayOfYear - daysInYear - 1) {
            return false
        }
        if plainWeekdays != 0 || !ordinalWeekdays.isEmpty, plainWeekdays & (1 << weekday) == 0 {
            let position = ordinalsWithinYear ? dayOfYear : dayOfMonth
            let length = ordinalsWithinYear ? daysInYear : daysInMonth
            let fromStart = (position - 1) / 7 + 1
            let fromEnd = -((length - position) / 7 + 1)
            guard ordinalWeekdays.contains(where: { $0.weekday == weekday && ($0.ordinal == fromStart || $0.ordinal == fromEnd) }) else {
                return false
            }
        }
        if !weekNumbers.isEmpty, !weekNumberMatches(day: day, year: year) { return false }
        return true
    }

    /// BYWEEKNO: weeks start on WKST and week 1 is the first with at least four days in the year
    /// (ISO 8601 when WKST is Monday). A day early in January may be in the previous year's last week,
    /// and one late in December in the next year's first week; each is matched against the numbering of
    /// the year its week belongs to.
    private func weekNumberMatches(day: Int, year: Int) -> Bool {
        func firstWeekStart(of year: Int) -> Int {
            let januaryFirst = CivilCalendar.dayNumber(year: year, month: 1, day: 1)
            let offset = (CivilCalendar.weekday(dayNumber: januaryFirst) - weekStart + 7) % 7
            return offset <= 3 ? januaryFirst - offset : januaryFirst + 7 - offset
        }
        var weekYear = year
        var weekOne = firstWeekStart(of: year)
        if day < weekOne {
            weekYear -= 1
            weekOne = firstWeekStart(of: weekYear)
        } else {
            let nextWeekOne = firstWeekStart(of: year + 1)
            if day >= nextWeekOne {
                weekYear += 1
                weekOne = nextWeekOne
            }
        }
        let weeksInYear = (firstWeekStart(of: weekYear + 1) - weekOne) / 7
        let number = (day - weekOne) / 7 + 1
        return weekNumbers.contains(number) || weekNumbers.contains(number - weeksInYear - 1)
    }
}
