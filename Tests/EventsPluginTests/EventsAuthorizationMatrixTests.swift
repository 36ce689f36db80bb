import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import EventsPlugin
import Testing

/// Every events operation, called by every kind of caller, against the status the access rules
/// and ownership promise. Targets belong to A (events, showings, venues, A's own reservation);
/// B holds the reservation the owner decides on. Keys belong to A.
@Suite("events authorization matrix")
struct EventsAuthorizationMatrixTests {
    typealias Caller = MatrixCaller

    static let expected: [String: [Caller: Int]] = {
        let row = MatrixCaller.row
        let publicRead = row(200, 200, 200, 200, 403, 200, 200)
        let ownerChange = row(401, 200, 404, 403, 200, 200, 200)
        let ownerDelete = row(401, 204, 404, 403, 204, 204, 204)
        let anyWriterCreates = row(401, 201, 201, 403, 201, 201, 201)
        return [
            "events.categories": publicRead, "events.cities": publicRead, "events.list": publicRead, "events.near": publicRead,
            "events.search": publicRead, "events.calendar": publicRead, "events.get": publicRead, "events.showings.get": publicRead,
            "events.venues.list": publicRead, "events.venues.get": publicRead,
            "events.create": anyWriterCreates, "events.venues.create": anyWriterCreates,
            "events.update": ownerChange, "events.showings.update": ownerChange, "events.venues.update": ownerChange,
            "events.delete": ownerDelete, "events.showings.delete": ownerDelete, "events.venues.delete": ownerDelete,
            "events.showings.create": row(401, 201, 404, 403, 201, 201, 201),
            "events.reservations.create": anyWriterCreates,
            "events.reservations.mine": row(401, 200, 200, 200, 403, 200, 200),
            "events.reservations.get": row(401, 200, 404, 200, 403, 200, 200),
            "events.reservations.cancel": ownerChange,
            "events.reservations.forEvent": row(401, 200, 404, 200, 403, 200, 200),
            "events.reservations.confirm": ownerChange,
            "events.reservations.reject": ownerChange,
            // Imported events are everyone's: an administrator, or a user an administrator granted
            // events:write, imports; A's events:write key does not (A holds no grant).
            "events.import": row(401, 403, 403, 403, 403, 403, 200).granting(200),
        ]
    }()

    @Test("every events operation, as every kind of caller: zero unexpected allows")
    func matrix() async throws {
        let clock = TestClock(eventsNow)
        let yaml = "  sessionTTL: 1h\n" + eventsYAML.replacingOccurrences(of: "auth:\n", with: "") + "\n      reservationsPerUser: 0\n"
        try await withEvents(.sqlite, yaml: "auth:\n" + yaml, clock: clock) { gateway in
            let callers = try await MatrixCallers.prepare(gateway, clock: clock, plugin: "events", otherResources: #"["none"]"#)
            let a = callers.a.token
            let b = callers.b.token
            let operations = try gateway.eventsPlugin.operations
            #expect(Set(operations.map(\.name)) == Set(Self.expected.keys), "the matrix must cover every operation")
            var unexpectedAllows: [String] = []
            var mismatches: [String] = []
            for operation in operations {
                for caller in Caller.allCases {
                    // Fresh targets for every cell, so that writes do not interfere.
                    let venue = Int(try await gateway.call(.post, "/v1/events/venues", token: a, json: #"{"name": "Hall", "lat": 22.62, "lon": 120.34}"#).json["id"]?.numberValue ?? 0)
                    let spare = Int(try await gateway.call(.post, "/v1/events/venues", token: a, json: #"{"name": "Spare"}"#).json["id"]?.numberValue ?? 0)
                    let event = try await gateway.createEvent(token: a, """
                        {"title": "Matrix", "city": 15, "reservationPolicy": "manual",
                         "showings": [{"venue": \(venue), "start": "2026-11-25T11:30:00Z", "capacity": 1000}, {"start": "2026-11-26T11:30:00Z"}]}
                        """)
                    let bare = try await gateway.createEvent(token: a, #"{"title": "Bare", "city": 15}"#)
                    let mine = try await gateway.call(.post, "/v1/events/showings/\(event.showings[0])/reservations", token: a, json: "{}")
                    let theirs = try await gateway.call(.post, "/v1/events/showings/\(event.showings[0])/reservations", token: b, json: "{}")
                    var path = operation.path
                    var body: String? = nil
                    var headers = callers.headers(caller)
                    switch operation.name {
                    case "events.update", "events.showings.create", "events.reservations.forEvent":
                        path = path.replacingOccurrences(of: "{id}", with: String(event.id))
                    case "events.get":
                        path = path.replacingOccurrences(of: "{id}", with: String(event.id))
                    case "events.delete":
                        path = path.replacingOccurrences(of: "{id}", with: String(bare.id))
                    case "events.showings.get", "events.showings.update", "events.reservations.create":
                        path = path.replacingOccurrences(of: "{id}", with: String(event.showings[0]))
                    case "events.showings.delete":
                        path = path.replacingOccurrences(of: "{id}", with: String(event.showings[1]))
                    case "events.venues.get", "events.venues.update":
                        path = path.replacingOccurrences(of: "{id}", with: String(venue))
                    case "events.venues.delete":
                        path = path.replacingOccurrences(of: "{id}", with: String(spare))
                    case "events.reservations.get", "events.reservations.cancel":
                        path = path.replacingOccurrences(of: "{id}", with: String(mine.json["id"]?.int ?? 0))
                    case "events.reservations.confirm", "events.reservations.reject":
                        path = path.replacingOccurrences(of: "{id}", with: String(theirs.json["id"]?.int ?? 0))
                    default: break
                    }
                    switch operation.name {
                    case "events.near": path += "?lat=22.62&lon=120.34"
                    case "events.search": path += "?q=Matrix"
                    case "events.create": body = #"{"title": "New"}"#
                    case "events.update": body = #"{"title": "Renamed"}"#
                    case "events.venues.update": body = #"{"name": "Renamed"}"#
                    case "events.venues.create": body = #"{"name": "New hall"}"#
                    case "events.showings.create": body = #"{"start": "2026-11-27T11:30:00Z"}"#
                    case "events.showings.update": body = #"{"priceText": "free"}"#
                    case "events.reservations.create", "events.reservations.confirm", "events.reservations.reject": body = "{}"
                    case "events.import":
                        headers[.contentType] = "text/calendar"
                        body = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nUID:m@x\r\nDTSTART:20261201T100000Z\r\nSUMMARY:Imported\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
                    default: break
                    }
                    let response = try await gateway.gateway.handle(operation.method, "/v1/events" + (path == "/" ? "" : path), headers: headers,
                                                                    body: body.map { ByteBuffer(string: $0) })
                    let want = try #require(Self.expected[operation.name]?[caller])
                    if response.status != want {
                        mismatches.append("\(operation.name) as \(caller.rawValue): \(response.status), expected \(want): \(String(buffer: response.body).prefix(200))")
                        if response.status < 300 && want >= 400 { unexpectedAllows.append("\(operation.name) as \(caller.rawValue)") }
                    }
                }
            }
            #expect(unexpectedAllows.isEmpty, "unexpected allows: \(unexpectedAllows)")
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        }
    }
}
