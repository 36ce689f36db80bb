import Foundation
import GatewayCore
import GatewayTesting
import NIOCore
@testable import TransitPlugin
import Testing

extension TestGateway {
    /// A COIMOTION call as the old SDK sends it: a JSON body with the parameters and `_key`.
    func coimotion(_ path: String, _ parameters: [String: String] = [:], key: String? = "test-app-key") async throws -> JSONValue {
        var body = parameters
        if let key { body["_key"] = key }
        let data = try JSONSerialization.data(withJSONObject: body)
        let reply = try await send(.post, "/coimotion/" + path, body: ByteBuffer(bytes: data), contentType: "application/json")
        #expect(reply.status == 200, "\(reply.text)")
        return reply.json
    }
}

/// The COIMOTION twCtBus dialect as the old app (seed 000) calls it: stops near an event's venue,
/// the routes of a stop, a route's stops with their next arrivals.
@Suite("transit: the COIMOTION twCtBus dialect")
struct TwCtBusDialectTests {
    @Test("busStop/search, busStop/routes, busRoute/next in the old shapes", arguments: TestStorage.available)
    func oldAppFlow(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            // The app sends the venue's coordinates as strings ("%f").
            let search = try await gateway.coimotion("twCtBus/busStop/search", ["lat": "36.915682", "lng": "-116.751677"])
            #expect(search["errCode"]?.numberValue == 0)
            let stops = try #require(search["value"]?["list"]?.arrayValue)
            #expect(Set(try #require(stops.first?.objectValue).keys) == ["tsID", "stName", "stCode", "latitude", "longitude"])
            #expect(stops.first?["tsID"]?.stringValue == "DTA_STAGECOACH")
            #expect(stops.first?["stName"]?.stringValue == "Stagecoach Hotel & Casino (Demo)")
            #expect(stops.first?["latitude"]?.numberValue == 36.915682)
            #expect(stops.count == 7, "every stop within the plugin's maxRadius, nearest first")

            let routes = try await gateway.coimotion("twCtBus/busStop/routes/DTA_STAGECOACH")
            let list = try #require(routes["value"]?["list"]?.arrayValue)
            #expect(Set(try #require(list.first?.objectValue).keys) == ["rtName", "descTx", "brID"])
            #expect(list.map { $0["brID"]?.stringValue } == ["DTA_CITY", "DTA_STBA"])
            #expect(list.map { $0["rtName"]?.stringValue } == ["40", "30"])
            #expect(list.first?["descTx"]?.stringValue == "City")

            // 2010-06-01 08:00 in Los Angeles: the CITY loop, outbound then inbound.
            let next = try await gateway.coimotion("twCtBus/busRoute/next/DTA_CITY")
            let rows = try #require(next["value"]?["list"]?.arrayValue)
            #expect(Set(try #require(rows.first?.objectValue).keys) == ["stName", "arvTime", "isInBd"])
            #expect(rows.count == 10)
            #expect(rows.prefix(2).map { $0["arvTime"]?.stringValue } == ["08:00", "08:05"])
            #expect(rows.prefix(5).allSatisfy { $0["isInBd"]?.numberValue == 0 })
            #expect(rows.suffix(5).allSatisfy { $0["isInBd"]?.numberValue == 1 })
            #expect(rows[5]["stName"]?.stringValue == "E Main St / S Irving St (Demo)")
        }
    }

    @Test("a route with no vehicle in the next hours answers an empty arvTime")
    func noVehicle() async throws {
        // Saturday 18:00 in Los Angeles: the weekend route's last trip left at 15:00.
        try await withTransit(clock: TestClock(Date(timeIntervalSince1970: 1_275_786_000))) { gateway in
            let next = try await gateway.coimotion("twCtBus/busRoute/next/DTA_AAMV")
            let rows = try #require(next["value"]?["list"]?.arrayValue)
            #expect(rows.isEmpty == false)
            #expect(rows.allSatisfy { $0["arvTime"]?.stringValue == "" })
        }
    }

    @Test("bad input answers the old errCodes: a bad point 1, an unknown stop or route 4, no app key -1")
    func errors() async throws {
        try await withTransit { gateway in
            let bad = try await gateway.coimotion("twCtBus/busStop/search", ["lat": "north", "lng": "1"])
            #expect(bad["errCode"]?.numberValue == 1)
            #expect(bad["message"]?.stringValue?.contains("lat") == true)
            #expect(try await gateway.coimotion("twCtBus/busStop/search", ["lat": "95", "lng": "1"])["errCode"]?.numberValue == 1)
            #expect(try await gateway.coimotion("twCtBus/busStop/search", ["lat": "1"])["errCode"]?.numberValue == 1)
            #expect(try await gateway.coimotion("twCtBus/busStop/routes/DTA_NOWHERE")["errCode"]?.numberValue == 4)
            #expect(try await gateway.coimotion("twCtBus/busRoute/next/DTA_NOWHERE")["errCode"]?.numberValue == 4)
            #expect(try await gateway.coimotion("twCtBus/busStop/search", ["lat": "1", "lng": "1"], key: nil)["errCode"]?.numberValue == -1)
        }
    }
}
