import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import EventsPlugin
import SQLKit
import Testing

@Suite("events: reservations")
struct ReservationTests {
    @Test("auto: confirmed while seats remain, 409 saying how many remain, one per user, cancel frees seats", arguments: TestStorage.available)
    func automatic(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue, capacity: 5))
            let showing = event.showings[0]
            let ann = try await gateway.register("ann")
            let ben = try await gateway.register("ben")

            let first = try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ann.token, json: #"{"seats": 3}"#)
            #expect(first.status == 201, "\(first.text)")
            #expect(first.json["status"]?.string == "confirmed")
            #expect(first.headers[.location] == "/v1/events/reservations/\(first.json["id"]?.int ?? 0)")
            #expect(try await gateway.call(.get, "/v1/events/showings/\(showing)").json["seatsRemaining"]?.int == 2)

            let again = try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ann.token, json: #"{"seats": 1}"#)
            #expect(again.status == 409)
            #expect(again.text.contains("already hold"), "\(again.text)")

            let tooMany = try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ben.token, json: #"{"seats": 3}"#)
            #expect(tooMany.status == 409)
            #expect(tooMany.json["detail"]?.string == "Only 2 seats remain for this showing.", "\(tooMany.text)")
            #expect(try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ben.token, json: #"{"seats": 0}"#).status == 422)
            #expect(try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ben.token, json: #"{"seats": 11}"#).status == 422)
            #expect(try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", json: #"{"seats": 1}"#).status == 401)

            // The confirmation is in Ann's inbox.
            let inbox = try await gateway.call(.get, "/v1/me/notifications", token: ann.token)
            #expect(inbox.text.contains("Confirmed: 港都管樂之夜"), "\(inbox.text)")
            #expect(inbox.text.contains("3 seats on 2026-11-25 19:30 (Asia/Taipei)"), "\(inbox.text)")

            // Ann's list; Ben cannot see or cancel Ann's reservation.
            let id = try #require(first.json["id"]?.int)
            #expect(try await gateway.call(.get, "/v1/events/reservations", token: ann.token).json.items.map { $0["id"]?.int } == [id])
            #expect(try await gateway.call(.get, "/v1/events/reservations", token: ben.token).json.items.isEmpty)
            #expect(try await gateway.call(.get, "/v1/events/reservations/\(id)", token: ben.token).status == 404)
            #expect(try await gateway.call(.post, "/v1/events/reservations/\(id)/cancel", token: ben.token).status == 404)

            let cancelled = try await gateway.call(.post, "/v1/events/reservations/\(id)/cancel", token: ann.token)
            #expect(cancelled.status == 200, "\(cancelled.text)")
            #expect(cancelled.json["status"]?.string == "cancelled")
            #expect(try await gateway.call(.get, "/v1/events/showings/\(showing)").json["seatsRemaining"]?.int == 5)
            #expect(try await gateway.call(.post, "/v1/events/reservations/\(id)/cancel", token: ann.token).status == 409, "cancelled once")
            // With her seats freed, Ben's three fit.
            #expect(try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ben.token, json: #"{"seats": 3}"#).status == 201)
            // Unlimited showings take any number.
            #expect(try await gateway.call(.post, "/v1/events/showings/\(event.showings[2])/reservations", token: ben.token, json: #"{"seats": 10}"#).status == 201)
        }
    }

    @Test("manual: requested, then the owner confirms or rejects; every decision reaches the user's inbox", arguments: TestStorage.available)
    func manual(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue, capacity: 4))
            _ = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"reservationPolicy": "manual"}"#)
            let ann = try await gateway.register("ann")
            let ben = try await gateway.register("ben")
            let showing = event.showings[0]
            let annRequest = try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ann.token, json: #"{"seats": 2}"#)
            #expect(annRequest.json["status"]?.string == "requested")
            let benRequest = try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: ben.token, json: #"{"seats": 2}"#)
            #expect(benRequest.json["status"]?.string == "requested")
            // Requests hold seats: no more remain.
            #expect(try await gateway.call(.get, "/v1/events/showings/\(showing)").json["seatsRemaining"]?.int == 0)
            #expect(try await gateway.call(.get, "/v1/me/notifications", token: organizer.token).text.contains("Reservation request"))

            let annID = try #require(annRequest.json["id"]?.int)
            let benID = try #require(benRequest.json["id"]?.int)
            // Only the owner (or an administrator) decides and lists.
            #expect(try await gateway.call(.post, "/v1/events/reservations/\(annID)/confirm", token: ben.token, json: "{}").status == 404)
            #expect(try await gateway.call(.get, "/v1/events/\(event.id)/reservations", token: ann.token).status == 404)
            let pending = try await gateway.call(.get, "/v1/events/\(event.id)/reservations?status=requested", token: organizer.token)
            #expect(Set(pending.json.items.compactMap { $0["id"]?.int }) == [annID, benID])

            let confirmed = try await gateway.call(.post, "/v1/events/reservations/\(annID)/confirm", token: organizer.token, json: "{}")
            #expect(confirmed.json["status"]?.string == "confirmed", "\(confirmed.text)")
            #expect(confirmed.json["decidedBy"]?.string == organizer.userID)
            let rejected = try await gateway.call(.post, "/v1/events/reservations/\(benID)/reject", token: organizer.token, json: #"{"reason": "The hall is full."}"#)
            #expect(rejected.json["status"]?.string == "rejected")
            #expect(try await gateway.call(.get, "/v1/events/showings/\(showing)").json["seatsRemaining"]?.int == 2, "a rejection frees its seats")
            #expect(try await gateway.call(.post, "/v1/events/reservations/\(benID)/confirm", token: organizer.token, json: "{}").status == 409)

            #expect(try await gateway.call(.get, "/v1/me/notifications", token: ann.token).text.contains("Confirmed: 港都管樂之夜"))
            let benInbox = try await gateway.call(.get, "/v1/me/notifications", token: ben.token).text
            #expect(benInbox.contains("Not confirmed") && benInbox.contains("The hall is full."), "\(benInbox)")
        }
    }

    @Test("cancelling an event cancels its reservations and tells their holders", arguments: TestStorage.available)
    func eventCancelled(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue))
            let ann = try await gateway.register("ann")
            let reservation = try await gateway.call(.post, "/v1/events/showings/\(event.showings[0])/reservations", token: ann.token, json: "{}")
            #expect(try await gateway.call(.delete, "/v1/events/\(event.id)", token: organizer.token).status == 409, "active reservations")
            #expect(try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"status": "cancelled"}"#).status == 200)
            let id = try #require(reservation.json["id"]?.int)
            #expect(try await gateway.call(.get, "/v1/events/reservations/\(id)", token: ann.token).json["status"]?.string == "cancelled")
            #expect(try await gateway.call(.get, "/v1/me/notifications", token: ann.token).text.contains("Cancelled: 港都管樂之夜"))
            #expect(try await gateway.call(.post, "/v1/events/showings/\(event.showings[0])/reservations", token: ann.token, json: "{}").status == 409)
            #expect(try await gateway.call(.get, "/v1/events?city=15").json.items.isEmpty, "cancelled events are not listed")
            #expect(try await gateway.call(.get, "/v1/events/\(event.id)").json["status"]?.string == "cancelled", "but still readable")
            #expect(try await gateway.call(.delete, "/v1/events/\(event.id)", token: organizer.token).status == 204)
        }
    }

    @Test("1,000 concurrent one-seat reservations of 100 seats: exactly 100 confirmed, 900 refused", arguments: TestStorage.available)
    func concurrent(storage: TestStorage) async throws {
        let yaml = eventsYAML + "\n      reservationsPerUser: 0\n"
        try await withEvents(storage, yaml: yaml) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue, capacity: 100))
            let showing = event.showings[0]
            // Ten users, a hundred requests each, all at once.
            var tokens: [String] = []
            for index in 0..<10 { tokens.append(try await gateway.register("crowd\(index)").token) }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<1000 {
                    let token = tokens[index % tokens.count]
                    group.addTask {
                        // A 503 (the statement budget ran out while a thousand waited for one row's
                        // lock, on a loaded machine) asks the client to try again, as a client would.
                        for _ in 0..<5 {
                            let status = try await gateway.call(.post, "/v1/events/showings/\(showing)/reservations", token: token, json: #"{"seats": 1}"#).status
                            if status != 503 { return status }
                            try await Task.sleep(for: .milliseconds(200))
                        }
                        return 503
                    }
                }
                var statuses: [Int: Int] = [:]
                for try await status in group { statuses[status, default: 0] += 1 }
                return statuses
            }
            #expect(statuses == [201: 100, 409: 900], "\(statuses)")
            #expect(try await gateway.call(.get, "/v1/events/showings/\(showing)").json["seatsRemaining"]?.int == 0)
            let rows = try await gateway.gateway.database.sql.raw("""
                SELECT COUNT(*) AS n, CAST(SUM(seats) AS BIGINT) AS seats FROM events_reservations WHERE showing_id = \(bind: showing) AND status = 'confirmed'
                """).first()
            #expect(try rows?.decode(column: "n", as: Int.self) == 100)
            #expect(try rows?.decode(column: "seats", as: Int.self) == 100)
        }
    }
}
