import Foundation
@testable import EventsPlugin

/// The iCalendar import: a file parsed (lenient and strict) and its events expanded as the importer
/// expands them — every recurrence over one window with one budget, single events, and the history
/// of rules that ended before the window.
enum EventsFuzz {
    static let now = Date(timeIntervalSince1970: 1_780_000_000)
    static let zone = TimeZone(identifier: "Asia/Taipei")!

    static let calendar: FuzzTargets.Target = { bytes in
        let data = Data(buffer: bytes)
        for strict in [false, true] {
            guard let calendar = try? ICalendarParser(strict: strict).parse(data) else { continue }
            let horizon = now.addingTimeInterval(400 * 86_400)
            let expansions = calendar.expandAll(from: now.addingTimeInterval(-CalendarImporter.lookBack), to: horizon, defaultTimeZone: zone,
                                                limitPerEvent: 10_000)
            for (index, event) in calendar.events.enumerated() {
                if !event.isRecurring {
                    _ = event.occurrences(from: .distantPast, to: .distantFuture, defaultTimeZone: zone, limit: 1)
                } else if expansions[index].occurrences.isEmpty, expansions[index].truncation == nil {
                    _ = event.occurrences(from: .distantPast, to: horizon, defaultTimeZone: zone, limit: CalendarImporter.pastOccurrences)
                }
            }
        }
    }
}
