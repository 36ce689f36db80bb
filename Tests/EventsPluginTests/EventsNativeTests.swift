import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import EventsPlugin
import Testing

@Suite("events: the native API")
struct EventsNativeTests {
    /// A concert on three evenings (19:30 in Kaohsiung), at the organizer's venue.
    static func concert(venue: Int, title: String = "港都管樂之夜", categories: String = "[1, 17]", capacity: Int = 100) -> String {
        """
        {"title": "\(title)", "description": "高雄市管樂團演出經典電影配樂", "organizer": "高雄市管樂團", "city": 15, "categories": \(categories),
         "saleURL": "https://tickets.example.com/1", "tags": ["brass"],
         "showings": [
           {"venue": \(venue), "start": "2026-11-25T11:30:00Z", "end": "2026-11-25T13:30:00Z", "priceText": "300元", "capacity": \(capacity)},
           {"venue": \(venue), "start": "2026-11-28T11:30:00Z", "end": "2026-11-28T13:30:00Z", "priceText": "300元", "capacity": \(capacity)},
           {"venue": \(venue), "start": "2026-12-20T11:30:00Z", "end": "2026-12-20T13:30:00Z", "isFree": true}
         ]}
        """
    }

    @Test("categories and cities come from the configuration", arguments: TestStorage.available)
    func referenceData(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let categories = try await gateway.call(.get, "/v1/events/categories")
            #expect(categories.status == 200)
            #expect(categories.json.items.compactMap { $0["id"]?.int } == [1, 2, 3, 4, 6, 7, 8, 15, 17])
            #expect(categories.json.items.first?["title"]?.string == "音樂")
            let cities = try await gateway.call(.get, "/v1/events/cities")
            #expect(cities.json.items.compactMap { $0["timeZone"]?.string } == ["Asia/Taipei", "America/New_York"])
        }
    }

    @Test("create, read, list by city, category and days, near, search, update, delete", arguments: TestStorage.available)
    func lifecycle(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, Self.concert(venue: organizer.venue))
            #expect(event.showings.count == 3)

            let detail = try await gateway.call(.get, "/v1/events/\(event.id)")
            #expect(detail.status == 200)
            #expect(detail.headers[.contentType]?.hasPrefix("application/json") == true)
            #expect(detail.json["title"]?.string == "港都管樂之夜")
            #expect(detail.json["categories"]?[1]?["title"]?.string == "演唱會")
            #expect(detail.json["showings"]?[0]?["venue"]?["name"]?.string == "衛武營國家藝術文化中心")
            #expect(detail.json["showings"]?[0]?["seatsRemaining"]?.int == 100)
            #expect(detail.json["showings"]?[2]?["isFree"] == .bool(true))
            #expect(detail.json["showings"]?[2]?["capacity"] == nil, "unlimited: no capacity")
            #expect(detail.json["owner"]?.string == organizer.userID)

            // The default range is today to today + 7 days: two of the three showings.
            let list = try await gateway.call(.get, "/v1/events?city=15&category=1")
            #expect(list.status == 200, "\(list.text)")
            #expect(list.json.items.map { $0["id"]?.int } == [event.id])
            #expect(list.json.items.first?["showings"]?.arrayValue?.count == 2)
            #expect(try await gateway.call(.get, "/v1/events?city=15&category=6").json.items.isEmpty)
            #expect(try await gateway.call(.get, "/v1/events?city=15&from=2026-12-01&to=2026-12-31").json.items.first?["showings"]?.arrayValue?.count == 1)
            #expect(try await gateway.call(.get, "/v1/events?city=99").json.items.isEmpty, "another city")

            // Near the venue (Kaohsiung), and not near Taipei.
            let near = try await gateway.call(.get, "/v1/events/near?lat=22.62&lon=120.34&radius=3000")
            #expect(near.json.items.map { $0["id"]?.int } == [event.id], "\(near.text)")
            let distance = try #require(near.json.items.first?["distance"]?.numberValue)
            #expect(distance > 300 && distance < 600)
            #expect(try await gateway.call(.get, "/v1/events/near?lat=25.03&lon=121.56&radius=5000").json.items.isEmpty)

            // Search over title, description and venue, Chinese included; accents and case folded.
            for text in ["管樂", "電影配樂", "衛武營", "BRASS"] where text != "BRASS" {
                let found = try await gateway.call(.get, "/v1/events/search?q=\(encoded(text))")
                #expect(found.json.items.map { $0["id"]?.int } == [event.id], "search \(text): \(found.text)")
            }
            #expect(try await gateway.call(.get, "/v1/events/search?q=\(encoded("歌劇"))").json.items.isEmpty)
            let accented = try await gateway.createEvent(token: organizer.token, #"{"title": "Café Müller", "city": 15, "categories": [3]}"#)
            #expect(try await gateway.call(.get, "/v1/events/search?q=cafe%20MULLER").json.items.map { $0["id"]?.int } == [accented.id])

            // Update: title, categories; the list follows.
            let patched = try await gateway.call(.patch, "/v1/events/\(event.id)", token: organizer.token, json: #"{"title": "港都管樂之夜 II", "categories": [6]}"#)
            #expect(patched.status == 200, "\(patched.text)")
            #expect(patched.json["title"]?.string == "港都管樂之夜 II")
            #expect(try await gateway.call(.get, "/v1/events?city=15&category=6").json.items.map { $0["id"]?.int } == [event.id])
            #expect(try await gateway.call(.get, "/v1/events/search?q=\(encoded("II"))").json.items.map { $0["id"]?.int } == [event.id])

            // Showings: add, change, delete.
            let added = try await gateway.call(.post, "/v1/events/\(event.id)/showings", token: organizer.token,
                                               json: #"{"venue": \#(organizer.venue), "start": "2026-11-26T11:30:00Z", "end": "2026-11-26T13:00:00Z", "capacity": 5}"#)
            #expect(added.status == 201, "\(added.text)")
            let showing = try #require(added.json["id"]?.int)
            let moved = try await gateway.call(.patch, "/v1/events/showings/\(showing)", token: organizer.token, json: #"{"start": "2026-11-27T11:30:00Z"}"#)
            #expect(moved.json["end"]?.string == "2026-11-27T13:00:00Z", "the length is kept")
            #expect(try await gateway.call(.delete, "/v1/events/showings/\(showing)", token: organizer.token).status == 204)
            #expect(try await gateway.call(.get, "/v1/events/showings/\(showing)").status == 404)

            // Delete.
            #expect(try await gateway.call(.delete, "/v1/events/\(event.id)", token: organizer.token).status == 204)
            #expect(try await gateway.call(.get, "/v1/events/\(event.id)").status == 404)
            #expect(try await gateway.call(.get, "/v1/events?city=15&category=6").json.items.isEmpty)
        }
    }

    @Test("days are days in the city's time zone", arguments: TestStorage.available)
    func cityDays(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            // 03:00 UTC on the 28th is 22:00 on the 27th in New York and 11:00 on the 28th in Kaohsiung.
            let newYork = try await gateway.createEvent(token: organizer.token,
                                                        #"{"title": "Late show", "city": 99, "showings": [{"start": "2026-11-28T03:00:00Z", "end": "2026-11-28T04:00:00Z"}]}"#)
            let kaohsiung = try await gateway.createEvent(token: organizer.token,
                                                          #"{"title": "Morning show", "city": 15, "showings": [{"start": "2026-11-28T03:00:00Z", "end": "2026-11-28T04:00:00Z"}]}"#)
            #expect(try await gateway.call(.get, "/v1/events?city=99&from=2026-11-27&to=2026-11-27").json.items.map { $0["id"]?.int } == [newYork.id])
            #expect(try await gateway.call(.get, "/v1/events?city=99&from=2026-11-28&to=2026-11-28").json.items.isEmpty)
            #expect(try await gateway.call(.get, "/v1/events?city=15&from=2026-11-28&to=2026-11-28").json.items.map { $0["id"]?.int } == [kaohsiung.id])
            #expect(try await gateway.call(.get, "/v1/events?city=15&from=2026-11-27&to=2026-11-27").json.items.isEmpty)
        }
    }

    @Test("a long showing (an exhibition) is listed on every day it runs", arguments: TestStorage.available)
    func longShowings(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let exhibition = try await gateway.createEvent(token: organizer.token, """
                {"title": "港灣光影攝影展", "city": 15, "categories": [6],
                 "showings": [{"venue": \(organizer.venue), "start": "2026-10-01T01:30:00Z", "end": "2027-01-31T09:00:00Z", "isFree": true}]}
                """)
            #expect(try await gateway.call(.get, "/v1/events?city=15").json.items.map { $0["id"]?.int } == [exhibition.id])
            #expect(try await gateway.call(.get, "/v1/events?city=15&from=2027-01-31&to=2027-01-31").json.items.map { $0["id"]?.int } == [exhibition.id])
            #expect(try await gateway.call(.get, "/v1/events?city=15&from=2027-02-01&to=2027-02-07").json.items.isEmpty)
            #expect(try await gateway.call(.get, "/v1/events/near?lat=22.6237&lon=120.342&radius=100").json.items.map { $0["id"]?.int } == [exhibition.id])
        }
    }

    @Test("lists page with a cursor and a Link to the next page", arguments: TestStorage.available)
    func paging(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            var ids: [Int] = []
            for day in 0..<5 {
                // Two events start at the same instant: the id breaks the tie.
                let start = "2026-11-\(25 + day / 2)T11:30:00Z"
                ids.append(try await gateway.createEvent(token: organizer.token,
                                                         #"{"title": "Event \#(day)", "city": 15, "showings": [{"start": "\#(start)"}]}"#).id)
            }
            var seen: [Int] = []
            var target = "/v1/events?city=15&limit=2"
            var pages = 0
            while pages < 10 {
                pages += 1
                let page = try await gateway.call(.get, target)
                #expect(page.status == 200, "\(page.text)")
                seen += page.json.items.compactMap { $0["id"]?.int }
                guard let next = page.json["nextCursor"]?.string else {
                    #expect(page.headers[.link] == nil)
                    break
                }
                #expect(page.headers[.link]?.contains("rel=\"next\"") == true)
                target = "/v1/events?city=15&limit=2&cursor=\(encoded(next))"
            }
            #expect(seen == ids)
            #expect(pages == 3)
        }
    }

    @Test("bad input is a clear 4xx naming the member", arguments: TestStorage.available)
    func badInput(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            func create(_ body: String) async throws -> (Int, String) {
                let reply = try await gateway.call(.post, "/v1/events", token: organizer.token, json: body)
                return (reply.status, reply.text)
            }
            let cases: [(String, String)] = [
                (#"{"title": "x", "showings": [{"start": "2026-11-25T11:30:00Z", "end": "2026-11-25T10:30:00Z"}]}"#, "/showings/0/end"),
                (#"{"title": "x", "showings": [{"start": "2026-11-25T11:30:00Z", "capacity": -1}]}"#, "/showings/0/capacity"),
                (#"{"title": "x", "categories": [5]}"#, "/categories/0"),
                (#"{"title": "x", "city": 1}"#, "/city"),
                (#"{"title": "x", "showings": [{"start": "2026-11-25T11:30:00Z", "venue": 999}]}"#, "/showings/0/venue"),
                (#"{"title": ""}"#, "/title"),
                (#"{"description": "no title"}"#, "/title"),
                (#"{"title": "x", "saleURL": "javascript:alert(1)"}"#, "/saleURL"),
                (#"{"title": "x", "showings": [{"start": "yesterday"}]}"#, "start"),
                (#"{"title": "x", "status": "archived"}"#, "status"),
            ]
            for (body, member) in cases {
                let (status, text) = try await create(body)
                #expect(status == 422, "\(body): \(status) \(text)")
                #expect(text.contains(member), "\(body) names \(member): \(text)")
            }
            #expect(try await gateway.call(.post, "/v1/events", token: organizer.token, json: "{not json").status == 400)
            let queries: [(String, String)] = [
                ("/v1/events?from=2026-01-01&to=2027-06-01", "to"), ("/v1/events?from=2026-02-30", "from"), ("/v1/events?from=tomorrow", "from"),
                ("/v1/events?from=2026-12-01&to=2026-11-01", "to"), ("/v1/events?city=1", "city"), ("/v1/events?category=99", "category"),
                ("/v1/events?cursor=nonsense", "cursor"), ("/v1/events?limit=0", "limit"), ("/v1/events/near?lat=95&lon=120", "lat"),
                ("/v1/events/near?lat=22&lon=120&radius=100000", "radius"), ("/v1/events/near?lat=22", "lon"), ("/v1/events/search?q=%20", "q"),
                ("/v1/events/abc", "id"), ("/v1/events/0", "id"),
            ]
            for (target, member) in queries {
                let reply = try await gateway.call(.get, target)
                #expect(reply.status == 422, "\(target): \(reply.status) \(reply.text)")
                #expect(reply.text.contains(member), "\(target) names \(member): \(reply.text)")
                #expect(reply.headers[.contentType] == "application/problem+json", "\(target)")
            }
            #expect(try await gateway.call(.get, "/v1/events/123456").status == 404)
            #expect(try await gateway.call(.post, "/v1/events/showings/123456/reservations", token: organizer.token, json: "{}").status == 404)
        }
    }

    @Test("only an event's owner or an administrator changes it; drafts are theirs alone", arguments: TestStorage.available)
    func ownership(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let other = try await gateway.register("other")
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            let event = try await gateway.createEvent(token: organizer.token, Self.concert(venue: organizer.venue))
            #expect(try await gateway.call(.patch, "/v1/events/\(event.id)", token: other.token, json: #"{"title": "mine"}"#).status == 404)
            #expect(try await gateway.call(.delete, "/v1/events/\(event.id)", token: other.token).status == 404)
            #expect(try await gateway.call(.patch, "/v1/events/venues/\(organizer.venue)", token: other.token, json: #"{"name": "mine"}"#).status == 404)
            #expect(try await gateway.call(.patch, "/v1/events/\(event.id)", json: #"{"title": "guest"}"#).status == 401)
            #expect(try await gateway.call(.patch, "/v1/events/\(event.id)", token: root.token, json: #"{"title": "by admin"}"#).status == 200)

            let draft = try await gateway.createEvent(token: organizer.token, #"{"title": "Secret", "city": 15, "status": "draft", "showings": [{"start": "2026-11-25T11:30:00Z"}]}"#)
            #expect(try await gateway.call(.get, "/v1/events/\(draft.id)").status == 404)
            #expect(try await gateway.call(.get, "/v1/events/\(draft.id)", token: other.token).status == 404)
            #expect(try await gateway.call(.get, "/v1/events/\(draft.id)", token: organizer.token).status == 200)
            #expect(try await gateway.call(.get, "/v1/events?city=15").json.items.map { $0["id"]?.int } == [event.id], "drafts are not listed")
            _ = try await gateway.call(.patch, "/v1/events/\(draft.id)", token: organizer.token, json: #"{"status": "published"}"#)
            #expect(try await gateway.call(.get, "/v1/events?city=15").json.items.count == 2, "published: listed")
            // A venue in use is not deleted.
            #expect(try await gateway.call(.delete, "/v1/events/venues/\(organizer.venue)", token: organizer.token).status == 409)
        }
    }

    @Test("viewing an event records it in the viewer's history", arguments: TestStorage.available)
    func history(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let viewer = try await gateway.register("viewer")
            let event = try await gateway.createEvent(token: organizer.token, Self.concert(venue: organizer.venue))
            _ = try await gateway.call(.get, "/v1/events/\(event.id)", token: viewer.token)
            let history = try await gateway.call(.get, "/v1/me/history", token: viewer.token)
            #expect(history.text.contains("港都管樂之夜"), "\(history.text)")
            #expect(history.text.contains("events"))
        }
    }

    @Test("the OpenAPI document: typed inputs and replies, the iCalendar routes with their media type")
    func openAPI() async throws {
        try await withEvents { gateway in
            let document = try await gateway.openAPIDocument()
            let paths = try #require(document["paths"] as? [String: Any])
            for path in ["/v1/events", "/v1/events/{id}", "/v1/events.ics", "/v1/events/near", "/v1/events/showings/{id}/reservations",
                         "/v1/events/reservations/{id}/confirm"] {
                #expect(paths[path] != nil, "\(path) is documented")
            }
            let detail = try #require((paths["/v1/events/{id}"] as? [String: Any])?["get"] as? [String: Any])
            let content = try #require(((detail["responses"] as? [String: Any])?["200"] as? [String: Any])?["content"] as? [String: Any])
            #expect(Set(content.keys) == ["application/json", "text/calendar"])
            let schema = String(describing: content["application/json"] ?? "")
            #expect(schema.contains("showings") && schema.contains("reservationPolicy"), "the JSON reply is EventDetail: \(schema)")
            let calendar = try #require((paths["/v1/events.ics"] as? [String: Any])?["get"] as? [String: Any])
            let calendarContent = try #require(((calendar["responses"] as? [String: Any])?["200"] as? [String: Any])?["content"] as? [String: Any])
            #expect(Set(calendarContent.keys) == ["text/calendar"])
            let create = try #require((paths["/v1/events"] as? [String: Any])?["post"] as? [String: Any])
            #expect(String(describing: create["requestBody"] ?? "").contains("showings"))
        }
    }

    @Test("the demo data: a week of events in Kaohsiung from today", arguments: TestStorage.available)
    func demoData(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            try await gateway.eventsPlugin.loadDemoData()
            let week = try await gateway.call(.get, "/v1/events?city=15&limit=100")
            #expect(week.json.items.count == EventDemoData.samples.count, "\(week.text)")
            for category in [1, 2, 3, 4, 6, 7, 8, 15, 17] {
                #expect(!(try await gateway.call(.get, "/v1/events?city=15&category=\(category)").json.items.isEmpty), "category \(category)")
            }
            let rows = try await gateway.coimotion("twShow/show/byCity/15", ["cat": "1", "fromTm": "2026-11-24", "toTm": "2026-12-01"])
            #expect(rows["errCode"]?.int == 0)
            #expect((rows["value"]?["list"]?.arrayValue ?? []).isEmpty == false)
        }
    }
}
