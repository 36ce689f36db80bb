import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import EventsPlugin
import SQLKit
import Testing

/// The COIMOTION twShow dialect as the old app (seed 000) calls it.
@Suite("events: the COIMOTION twShow dialect")
struct TwShowDialectTests {
    @Test("catList, byCity with the app's default week, info with every showing", arguments: TestStorage.available)
    func oldAppFlow(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue))

            let categories = try await gateway.coimotion("twShow/show/catList")
            #expect(categories["errCode"]?.int == 0)
            let first = try #require(categories["value"]?["list"]?[0]?.objectValue)
            #expect(Set(first.keys) == ["catID", "title"])
            #expect(first["catID"]?.numberValue == 1)

            // The app: {"cat": catID, "fromTm": today, "toTm": today + 7}.
            let week = try await gateway.coimotion("twShow/show/byCity/15", ["cat": "1", "fromTm": "2026-11-24", "toTm": "2026-12-01"])
            #expect(week["errCode"]?.int == 0, "\(week)")
            let rows = try #require(week["value"]?["list"]?.arrayValue)
            #expect(rows.count == 2, "one row per showing")
            #expect(Set(try #require(rows.first?.objectValue).keys) == ["spID", "title", "time", "imgURL"])
            #expect(rows.map { $0["time"]?.string } == ["2026-11-25 19:30", "2026-11-28 19:30"], "local times in Kaohsiung")
            #expect(rows.map { $0["spID"]?.int } == Array(event.showings.prefix(2)))
            #expect(rows.first?["title"]?.string == "港都管樂之夜")
            // cat as a number, and no dates: the default week.
            let numbers = try await gateway.coimotion("twShow/show/byCity/15", ["cat": 17])
            #expect(numbers["value"]?["list"]?.arrayValue?.count == 2)
            #expect(try await gateway.coimotion("twShow/show/byCity/15", ["cat": "6"])["value"]?["list"]?.arrayValue?.isEmpty == true)

            let info = try await gateway.coimotion("twShow/show/info/\(event.showings[0])", ["detail": "1"])
            #expect(info["errCode"]?.int == 0, "\(info)")
            let value = try #require(info["value"])
            #expect(value["title"]?.string == "港都管樂之夜")
            #expect(value["descTx"]?.string == "高雄市管樂團演出經典電影配樂")
            #expect(value["organizer"]?.string == "高雄市管樂團")
            #expect(value["saleURL"]?.string == "https://tickets.example.com/1")
            #expect(value["startDate"]?.string == "2026-11-25")
            #expect(value["endDate"]?.string == "2026-12-20")
            let shows = try #require(value["showInfo"]?.arrayValue)
            #expect(shows.count == 3)
            let show = try #require(shows.first?.objectValue)
            #expect(Set(show.keys) == ["time", "placeName", "addr", "priceInfo", "isFree", "latitude", "longitude"])
            #expect(show["placeName"]?.stringValue == "衛武營國家藝術文化中心")
            #expect(show["addr"]?.stringValue == "高雄市鳳山區三多一路1號")
            #expect(show["priceInfo"]?.stringValue == "300元")
            #expect(show["isFree"]?.numberValue == 0)
            #expect(show["latitude"]?.numberValue == 22.6237)
            #expect(shows[2]["isFree"]?.int == 1)
        }
    }

    @Test("bad input answers the legacy error shape: errCode, message, HTTP 200", arguments: TestStorage.available)
    func errors(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let wrongKey = try await gateway.coimotion("twShow/show/catList", key: "not-a-key")
            #expect(wrongKey["errCode"]?.int == -1)
            let cases: [(String, [String: Any], Int)] = [
                ("twShow/show/byCity/15", ["fromTm": "2026-13-01"], 1),
                ("twShow/show/byCity/15", ["fromTm": "2026-01-01", "toTm": "2027-06-01"], 1),
                ("twShow/show/byCity/15", ["fromTm": "2026-12-01", "toTm": "2026-11-01"], 1),
                ("twShow/show/byCity/15", ["cat": "music"], 1),
                ("twShow/show/byCity/15", ["cat": "5"], 1),
                ("twShow/show/byCity/3", [:], 1),
                ("twShow/show/byCity/abc", [:], 1),
                ("twShow/show/info/999999", ["detail": "1"], 4),
                ("twShow/show/info/x", [:], 1),
            ]
            for (path, parameters, code) in cases {
                let reply = try await gateway.coimotion(path, parameters)
                #expect(reply["errCode"]?.int == code, "\(path) \(parameters): \(reply)")
                #expect((reply["message"]?.string ?? "").isEmpty == false)
                #expect(reply["value"] == nil)
            }
            let notJSON = try await gateway.call(.post, "/coimotion/twShow/show/catList", json: "[1, 2")
            #expect(notJSON.status == 200)
            #expect(notJSON.json["errCode"]?.int == 1)
        }
    }

    @Test("a signed-in old client's view of an event reaches its history", arguments: TestStorage.available)
    func signedIn(storage: TestStorage) async throws {
        try await withEvents(storage) { gateway in
            let organizer = try await gateway.organizer()
            let event = try await gateway.createEvent(token: organizer.token, EventsNativeTests.concert(venue: organizer.venue))
            // The SDK's prehash: sha1(sha1(accName) + password), hex.
            let prehash = "5baa61e4c9b93f3f0682250b6cf8331b7ee68fd8"
            _ = try await gateway.coimotion("core/user/register", ["accName": "oldapp", "passwd": prehash, "passwd2": prehash])
            let login = try await gateway.coimotion("core/user/login", ["accName": "oldapp", "passwd": prehash])
            let token = try #require(login["token"]?.string)
            _ = try await gateway.coimotion("twShow/show/info/\(event.showings[0])", ["detail": "1"], token: token)
            let userID = try #require(try await gateway.gateway.accounts.user(named: "oldapp")?.id)
            let rows = try await gateway.gateway.database.sql.raw("SELECT title FROM gateway_history WHERE user_id = \(bind: userID)").all()
            #expect(try rows.map { try $0.decode(column: "title", as: String.self) } == ["港都管樂之夜"])
        }
    }
}
