import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import ServiceLifecycle
@testable import EventsPlugin
import Testing

/// The lists read the published events from memory (``EventCatalog``): every write must reach them.
@Suite("events: lists follow every write")
struct EventCatalogTests {
    /// A list read past the response cache, so that what answers is the catalog.
    static func ids(_ gateway: TestGateway, _ target: String) async throws -> [Int?] {
        try await gateway.call(.get, target, headers: [.cacheControl: "no-cache"]).json.items.map { $0["id"]?.int }
    }

    @Test("an event's title, categories, city and status; showings added, moved, deleted; venues changed; seats held and freed",
          arguments: TestStorage.available)
    func listsFollowWrites(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue, capacity: 3))
            let list = "/v1/events?city=15&category=1"
            #expect(try await Self.ids(gateway, list) == [event.id])

            // Seats: held by a reservation, freed by its cancellation, in the list at once.
            let guest = try await gateway.register("guest")
            let reserved = try await gateway.call(.post, "/v1/events/showings/\(event.showings[0])/reservations", token: guest.token, json: #"{"seats": 2}"#)
            #expect(reserved.status == 201, "\(reserved.text)")
            let seats = { try await gateway.call(.get, list, headers: [.cacheControl: "no-cache"]).json.items.first?["showings"]?[0]?["seatsRemaining"]?.int }
            let held = try await seats()
            #expect(held == 1)
            let reservation = try #require(reserved.json["id"]?.int)
            #expect(try await gateway.call(.post, "/v1/events/reservations/\(reservation)/cancel", token: guest.token).status == 200)
            let freed = try await seats()
            #expect(freed == 3)

            // Title and categories.
            _ = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"title": "改名了", "categories": [6]}"#)
            #expect(try await Self.ids(gateway, list).isEmpty)
            let renamed = try await gateway.call(.get, "/v1/events?city=15&category=6", headers: [.cacheControl: "no-cache"])
            #expect(renamed.json.items.first?["title"]?.string == "改名了")

            // Status: a draft leaves every list, published again it comes back.
            _ = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"status": "draft"}"#)
            #expect(try await Self.ids(gateway, "/v1/events?city=15").isEmpty)
            #expect(try await Self.ids(gateway, "/v1/events/near?lat=22.62&lon=120.34&radius=3000").isEmpty)
            _ = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"status": "published"}"#)
            #expect(try await Self.ids(gateway, "/v1/events?city=15") == [event.id])

            // City.
            _ = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"city": 99}"#)
            #expect(try await Self.ids(gateway, "/v1/events?city=15").isEmpty)
            #expect(try await Self.ids(gateway, "/v1/events?city=99&from=2026-11-24&to=2026-11-30") == [event.id])
            _ = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"city": 15}"#)

            // A showing added in a week with none, moved out of it, deleted.
            let week = "/v1/events?city=15&from=2026-12-07&to=2026-12-13"
            #expect(try await Self.ids(gateway, week).isEmpty)
            let added = try await gateway.call(.post, "/v1/events/\(event.id)/showings", token: organizer.token,
                                               json: #"{"venue": \#(organizer.venue), "start": "2026-12-08T11:30:00Z", "end": "2026-12-08T13:00:00Z"}"#)
            let showing = try #require(added.json["id"]?.int)
            #expect(try await Self.ids(gateway, week) == [event.id])
            _ = try await gateway.call(.patch, "/v1/events/showings/\(showing)", token: organizer.token, json: #"{"start": "2026-12-15T11:30:00Z"}"#)
            #expect(try await Self.ids(gateway, week).isEmpty)
            #expect(try await Self.ids(gateway, "/v1/events?city=15&from=2026-12-14&to=2026-12-16") == [event.id])
            #expect(try await gateway.call(.delete, "/v1/events/showings/\(showing)", token: organizer.token).status == 204)
            #expect(try await Self.ids(gateway, "/v1/events?city=15&from=2026-12-14&to=2026-12-16").isEmpty)

            // A venue renamed and moved: the lists show its new name, "near" its new place.
            let moved = try await gateway.call(.patch, "/v1/events/venues/\(organizer.venue)", token: organizer.token,
                                               json: #"{"name": "高雄流行音樂中心", "lat": 22.6203, "lon": 120.2841}"#)
            #expect(moved.status == 200, "\(moved.text)")
            let page = try await gateway.call(.get, "/v1/events?city=15", headers: [.cacheControl: "no-cache"])
            #expect(page.json.items.first?["showings"]?[0]?["venue"]?["name"]?.string == "高雄流行音樂中心")
            #expect(try await Self.ids(gateway, "/v1/events/near?lat=22.6237&lon=120.3420&radius=1000").isEmpty)
            #expect(try await Self.ids(gateway, "/v1/events/near?lat=22.6203&lon=120.2841&radius=1000") == [event.id])
            #expect(try await Self.ids(gateway, "/v1/events/near?lat=22.6203&lon=120.2841&radius=1000&category=6") == [event.id])
            #expect(try await Self.ids(gateway, "/v1/events/near?lat=22.6203&lon=120.2841&radius=1000&category=1").isEmpty)

            // Deleted: gone from every list.
            #expect(try await gateway.call(.delete, "/v1/events/\(event.id)", token: organizer.token).status == 204)
            #expect(try await Self.ids(gateway, "/v1/events?city=15").isEmpty)
            #expect(try await Self.ids(gateway, "/v1/events/near?lat=22.6203&lon=120.2841&radius=1000").isEmpty)
        }
    }

    @Test("a calendar import reaches the lists, and a restarted gateway lists what the tables hold", arguments: TestStorage.available)
    func importAndReload(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let calendar = """
                BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\nUID:imported-1@example.com\r\nDTSTAMP:20261101T000000Z\r
                DTSTART;TZID=Asia/Taipei:20261126T193000\r\nDTEND;TZID=Asia/Taipei:20261126T213000\r\nSUMMARY:匯入的音樂會\r
                LOCATION:駁二藝術特區\r\nGEO:22.6200;120.2820\r\nCATEGORIES:音樂\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n
                """
            let plugin = try gateway.eventsPlugin
            let report = try await plugin.calendarImporter.importCalendar(Data(calendar.utf8), city: 15, category: nil, strict: false, progress: { _, _ in })
            #expect(report.imported == 1)
            let listed = try await gateway.call(.get, "/v1/events?city=15&category=1", headers: [.cacheControl: "no-cache"])
            #expect(listed.json.items.map { $0["title"]?.string } == ["匯入的音樂會"], "\(listed.text)")
            #expect(listed.json.items.first?["showings"]?[0]?["venue"]?["name"]?.string == "駁二藝術特區")

            // What a fresh start reads from the tables is what the writes left.
            let before = plugin.store.catalog.summaries([Int64(listed.json.items.first?["id"]?.int ?? 0)], window: (0, Int64.max))
            try await plugin.store.catalog.reload()
            let after = plugin.store.catalog.summaries([Int64(listed.json.items.first?["id"]?.int ?? 0)], window: (0, Int64.max))
            #expect(before == after)
            #expect(after.count == 1)
        }
    }
}

@Suite("events across instances", .enabled(if: TestStorage.available.contains(.postgres)))
struct EventsClusterTests {
    @Test("an event created, changed or deleted through one instance reaches the other's lists")
    func writesReachEveryCatalog() async throws {
        try await TestGateway.withTwoListening(events, yaml: eventsYAML) { first, second in
            let other = try #require(second.plugins.first { $0.id == "events" }?.instance as? EventsPlugin)
            let listener = try #require(other.services.first)
            let task = Task { try await listener.run() }
            defer { task.cancel() }
            try await Task.sleep(for: .milliseconds(100))   // subscribed
            // The instances run on the wall clock: the lists ask for the week of the concert's showing.

            let writer = TestGateway(gateway: first, storage: .postgres)
            let organizer = try await writer.organizer()
            let event = try await writer.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue))
            let reader = TestGateway(gateway: second, storage: .postgres)
            let listed = try await eventually(within: .seconds(15)) { try await EventCatalogTests.ids(reader, "/v1/events?city=15&category=1&from=2026-11-20") == [event.id] }
            #expect(listed, "the other instance does not list the new event")

            _ = try await writer.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"title": "換了名字"}"#)
            let renamed = try await eventually(within: .seconds(15)) {
                try await reader.call(.get, "/v1/events?city=15&from=2026-11-20", headers: [.cacheControl: "no-cache"]).json.items.first?["title"]?.string == "換了名字"
            }
            #expect(renamed, "the other instance lists the old title")

            #expect(try await writer.call(.delete, "/v1/events/\(event.id)", token: organizer.token).status == 204)
            let gone = try await eventually(within: .seconds(15)) { try await EventCatalogTests.ids(reader, "/v1/events?city=15&from=2026-11-20").isEmpty }
            #expect(gone, "the other instance still lists the deleted event")
        }
    }
}
