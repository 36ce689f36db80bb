import Foundation
import GatewayCore
import NIOCore

/// Events as iCalendar (RFC 5545): `GET /v1/events/{id}.ics` and the subscribable
/// `GET /v1/events.ics`. One VEVENT per event (UID kept from an import, else `<id>@events`), its
/// showings as DTSTART/DTEND and RDATE periods, so that the calendar reads back through
/// ``CalendarImporter`` into the same events and showings.
enum CalendarExport {
    static let mediaType = "text/calendar; charset=utf-8"
    /// The most events one subscribable calendar holds.
    static let maxEvents = 5000

    static func calendar(of detail: EventDetail, service: EventService) -> RawReply {
        let writer = ICalendarWriter(calendarName: detail.title, timeZone: service.zone(of: detail.city), timestamp: service.context.clock.now())
        return RawReply(ByteBuffer(string: writer.write([export(detail.id, uid: detail.uid, title: detail.title, description: detail.description,
                                                             infoSource: detail.infoSource, saleURL: detail.saleURL, status: detail.status,
                                                             categories: detail.categories.map(\.title), showings: detail.showings)])),
                        contentType: mediaType)
    }

    static func calendar(service: EventService, city: Int?, category: Int?, from: String?, to: String?) async throws -> RawReply {
        let zone = service.zone(of: city)
        let window: (start: Date, end: Date)
        if from == nil, to == nil {
            let now = service.context.clock.now()
            window = (now.addingTimeInterval(-30 * 86_400), now.addingTimeInterval(service.settings.recurrenceHorizon.seconds))
        } else {
            window = service.window(city: city, from: from, to: to)
        }
        let events = try await service.store.calendarEvents(city: city, category: category, window: window, limit: maxEvents)
        let name = ["Events", city.flatMap { service.cities[$0]?.city.name }, category.flatMap { service.categoryTitles[$0] }]
            .compactMap { $0 }.joined(separator: " – ")
        let writer = ICalendarWriter(calendarName: name, timeZone: zone, timestamp: service.context.clock.now())
        let exported = events.map { event, categories, showings in
            export(event.id, uid: event.uid, title: event.title, description: event.description, infoSource: event.infoSource, saleURL: event.saleURL,
                   status: event.status, categories: categories.map { service.categoryTitles[$0] ?? String($0) }, showings: showings)
        }
        return RawReply(ByteBuffer(string: writer.write(exported)), contentType: mediaType)
    }

    static func export(_ id: Int64, uid: String?, title: String, description: String?, infoSource: String?, saleURL: String?, status: EventStatus,
                       categories: [String], showings: [Showing]) -> ICalendarExportEvent {
        let venue = showings.first { $0.venue != nil }?.venue
        let url = [infoSource, saleURL].compactMap { $0 }.first { $0.hasPrefix("http://") || $0.hasPrefix("https://") }
        return ICalendarExportEvent(
            uid: uid ?? "\(id)@events", summary: title, description: description, location: venue?.name, url: url, categories: categories,
            geo: venue.flatMap { venue in venue.lat.flatMap { lat in venue.lon.map { ICalendarGeo(latitude: lat, longitude: $0) } } },
            status: status == .cancelled ? "CANCELLED" : "CONFIRMED",
            occurrences: showings.map { .init(start: $0.start, end: $0.end, allDay: $0.allDay) })
    }
}
