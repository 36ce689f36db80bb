import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import EventsPlugin
import Testing

@Suite("events: the admin console's reservations")
struct EventsAdminViewTests {
    static let view = "/v1/admin/plugins/events/views/reservations"

    @Test("requested reservations are listed; Confirm and Reject decide them and tell the user; administrators only", arguments: TestStorage.available)
    func reservations(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue, capacity: 4))
            _ = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"reservationPolicy": "manual"}"#)
            let ann = try await gateway.register("ann")
            let ben = try await gateway.register("ben")
            let annRequest = try await gateway.call(.post, "/v1/events/showings/\(event.showings[0])/reservations", token: ann.token, json: #"{"seats": 2}"#)
            #expect(annRequest.json["status"]?.string == "requested", "\(annRequest.text)")
            let benRequest = try await gateway.call(.post, "/v1/events/showings/\(event.showings[0])/reservations", token: ben.token, json: #"{"seats": 1}"#)
            let annID = try #require(annRequest.json["id"]?.int)
            let benID = try #require(benRequest.json["id"]?.int)
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            gateway.gateway.forgetCredentials(userID: root.userID)

            // Users, even the event's owner, are refused the view and its actions.
            #expect(try await gateway.call(.get, Self.view, token: ann.token).status == 403)
            #expect(try await gateway.call(.post, Self.view + "/actions/confirm", token: organizer.token,
                                           json: #"{"arguments": {"reservation": "\#(annID)"}}"#).status == 403)
            #expect(try await gateway.call(.get, "/v1/events/reservations/\(annID)", token: ann.token).json["status"]?.string == "requested")

            let page = try await gateway.call(.get, Self.view, token: root.token)
            #expect(page.status == 200, "\(page.text)")
            #expect(page.json["title"]?.string == "Reservations")
            let table = try #require(page.json["sections"]?[0])
            #expect(table["kind"]?.string == "table", "\(page.text)")
            #expect(table["columns"]?.arrayValue?.count == 6)
            let rows = table["rows"]?.arrayValue ?? []
            #expect(rows.compactMap { $0["cells"]?[0]?.string } == [String(benID), String(annID)], "newest first: \(page.text)")
            let annRow = try #require(rows.last)
            #expect(annRow["cells"]?[1]?.string?.contains("港都管樂之夜") == true, "\(page.text)")
            #expect(annRow["cells"]?[2]?.string == "2026-11-25 19:30 (Asia/Taipei)", "\(page.text)")
            #expect(annRow["cells"]?[3]?.string == "ann (\(ann.userID))")
            #expect(annRow["cells"]?[4]?.string == "2")
            #expect(annRow["actions"]?.arrayValue?.compactMap { $0["action"]?.string } == ["confirm", "reject"])
            #expect(annRow["actions"]?[0]?["arguments"]?["reservation"]?.string == String(annID))

            // Confirm Ann's from the view: confirmed, and in her inbox.
            let confirmed = try await gateway.call(.post, Self.view + "/actions/confirm", token: root.token,
                                                   json: #"{"arguments": {"reservation": "\#(annID)"}}"#)
            #expect(confirmed.status == 200, "\(confirmed.text)")
            #expect(confirmed.json["message"]?.string == "Reservation \(annID) confirmed; ann (\(ann.userID)) was notified.")
            let annReservation = try await gateway.call(.get, "/v1/events/reservations/\(annID)", token: ann.token)
            #expect(annReservation.json["status"]?.string == "confirmed")
            #expect(annReservation.json["decidedBy"]?.string == root.userID)
            let inbox = try await gateway.call(.get, "/v1/me/notifications", token: ann.token).text
            #expect(inbox.contains("Confirmed: 港都管樂之夜") && inbox.contains("2 seats on 2026-11-25 19:30 (Asia/Taipei)"), "\(inbox)")
            #expect(try await gateway.call(.post, Self.view + "/actions/confirm", token: root.token,
                                           json: #"{"arguments": {"reservation": "\#(annID)"}}"#).status == 409, "decided once")

            // Reject Ben's: rejected, seats freed, and he is told.
            let rejected = try await gateway.call(.post, Self.view + "/actions/reject", token: root.token,
                                                  json: #"{"arguments": {"reservation": "\#(benID)"}}"#)
            #expect(rejected.json["message"]?.string == "Reservation \(benID) rejected; ben (\(ben.userID)) was notified.", "\(rejected.text)")
            #expect(try await gateway.call(.get, "/v1/events/showings/\(event.showings[0])").json["seatsRemaining"]?.int == 2)
            #expect(try await gateway.call(.get, "/v1/me/notifications", token: ben.token).text.contains("Not confirmed: 港都管樂之夜"))

            // Nothing waits now; unknown and malformed ids are refused.
            let empty = try await gateway.call(.get, Self.view, token: root.token)
            #expect(empty.json["sections"]?[0]?["kind"]?.string == "text", "\(empty.text)")
            #expect(try await gateway.call(.post, Self.view + "/actions/confirm", token: root.token,
                                           json: #"{"arguments": {"reservation": "987654"}}"#).status == 404)
            #expect(try await gateway.call(.post, Self.view + "/actions/confirm", token: root.token,
                                           json: #"{"arguments": {"reservation": "ann"}}"#).status == 422)
            #expect(try await gateway.call(.post, Self.view + "/actions/nothing", token: root.token, json: #"{"arguments": {}}"#).status == 404)
        }
    }
}
