import Foundation
import GatewayCore
import GatewayTesting
import NIOCore
@testable import TransitPlugin
import Testing

@Suite("transit: the native API on the GTFS example feed")
struct TransitNativeTests {
    @Test("the example feed imports whole: frequencies expanded into trips, on both databases", arguments: TestStorage.available)
    func imports(storage: TestStorage) async throws {
        try await withTransit(storage, feed: nil) { gateway in
            let result = try await gateway.transitPlugin.feeds.importFile(sampleFeed, feed: "sample", source: "test", strict: true,
                                                                          progress: { _, _ in })
            #expect(result.rejected.isEmpty)
            // 11 trips, 3 of them frequency templates: STBA every 30 min from 6:00 to 22:00 (32), CITY1 and CITY2 52 each.
            #expect(result.summary == FeedSummary(agencies: 1, stops: 9, routes: 5, trips: 144, stopTimes: 600, services: 2, shapes: 0,
                                                  frequencyTrips: 136, rejected: 0))
            let network = try gateway.transitPlugin.runtime.network
            #expect(network.trips.count == 144)
            #expect(network.stStop.count == 600)
            #expect(network.trip("DTA_CITY2@06:00:00") != nil)
            #expect(network.trip("DTA_CITY2") == nil, "a frequency template is not served itself")
            let agencies = try await gateway.send(.get, "/v1/transit/agencies")
            #expect(agencies.items.first?["id"]?.stringValue == "DTA")
            #expect(agencies.items.first?["timeZone"]?.stringValue == "America/Los_Angeles")
        }
    }

    @Test("stops near a point, nearest first, within the radius; bad coordinates are 422; a huge radius is capped", arguments: TestStorage.available)
    func near(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let near = try await gateway.send(.get, "/v1/transit/stops/near?lat=36.915682&lon=-116.751677&radius=1500")
            #expect(near.status == 200)
            let ids = near.items.compactMap { $0["id"]?.stringValue }
            // Doing Ave / D Ave N is about 1.6 km away.
            #expect(ids == ["DTA_STAGECOACH", "DTA_NANAA", "DTA_EMSI", "DTA_NADAV"])
            let distances = near.items.compactMap { $0["distance"]?.numberValue }
            #expect(distances == distances.sorted())
            #expect(distances.first == 0)
            #expect(near.items.first?["routes"]?.arrayValue?.compactMap(\.stringValue) == ["DTA_CITY", "DTA_STBA"])

            let two = try await gateway.send(.get, "/v1/transit/stops/near?lat=36.915682&lon=-116.751677&radius=1500&limit=2")
            #expect(two.items.count == 2)
            // Furnace Creek is about 60 km away: beyond the cap of 10 km however large the radius asked.
            let far = try await gateway.send(.get, "/v1/transit/stops/near?lat=36.915682&lon=-116.751677&radius=100000000&limit=100")
            #expect(far.status == 200)
            #expect(far.items.contains { $0["id"]?.stringValue == "DTA_FUR_CREEK_RES" } == false)
            #expect(far.items.contains { $0["id"]?.stringValue == "DTA_BULLFROG" })

            for bad in ["lat=91&lon=0", "lat=0&lon=-181", "lat=abc&lon=0", "lon=0", "lat=0&lon=0&radius=-5", "lat=0&lon=0&limit=0"] {
                let reply = try await gateway.send(.get, "/v1/transit/stops/near?" + bad)
                #expect(reply.status == 422, "\(bad): \(reply.text)")
                #expect(reply.headers[.contentType] == "application/problem+json")
            }
            let routes = try await gateway.send(.get, "/v1/transit/routes/near?lat=36.868446&lon=-116.784582&radius=100")
            #expect(routes.items.compactMap { $0["id"]?.stringValue } == ["DTA_AAMV", "DTA_AB", "DTA_STBA"])
        }
    }

    @Test("a stop's detail lists the routes that serve it; unknown ids are 404", arguments: TestStorage.available)
    func stopDetail(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let airport = try await gateway.send(.get, "/v1/transit/stops/DTA_BEATTY_AIRPORT")
            #expect(airport.status == 200)
            #expect(airport["stop", "name"]?.stringValue == "Nye County Airport (Demo)")
            #expect(airport["routes"]?.arrayValue?.compactMap { $0["shortName"]?.stringValue } == ["50", "10", "30"])
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_NOWHERE").status == 404)
            #expect(try await gateway.send(.get, "/v1/transit/routes/DTA_NOWHERE").status == 404)
            #expect(try await gateway.send(.get, "/v1/transit/trips/DTA_NOWHERE").status == 404)
        }
    }

    @Test("arrivals at a stop in a window: frequency trips at their departures, both ends included", arguments: TestStorage.available)
    func arrivals(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let reply = try await gateway.send(.get, "/v1/transit/stops/DTA_STAGECOACH/arrivals?minutesBefore=0&minutesAfter=30")
            #expect(reply.status == 200)
            let rows = reply.items.map { ($0["trip"]?.stringValue ?? "", $0["scheduledDeparture"]?.stringValue ?? "") }
            // STBA at 8:00 and 8:30; CITY1 every 10 min from 8:00; CITY2 (starting 8:00 at EMSI) reaches Stagecoach at 8:28.
            #expect(rows.map(\.0) == ["DTA_CITY1@08:00:00", "DTA_STBA@08:00:00", "DTA_CITY1@08:10:00", "DTA_CITY1@08:20:00", "DTA_CITY2@08:00:00",
                                      "DTA_CITY1@08:30:00", "DTA_STBA@08:30:00"])
            #expect(rows.first?.1 == "2010-06-01T15:00:00Z")
            let first = try #require(reply.items.first)
            #expect(first["serviceDate"]?.stringValue == "2010-06-01")
            #expect(first["status"]?.stringValue == "scheduled")
            #expect(first["stopSequence"]?.numberValue == 1)
            #expect(first["totalStops"]?.numberValue == 5)
            #expect(first["stopsAway"]?.numberValue == 0)
            #expect(first["predictedArrival"] == nil || first["predictedArrival"] == .null)
            // CITY2 reaches Stagecoach as its 5th stop; at 8:00 it is at its first.
            let city2 = try #require(reply.items.first { $0["trip"]?.stringValue == "DTA_CITY2@08:00:00" })
            #expect(city2["stopsAway"]?.numberValue == 4)

            // Any instant may be asked, in RFC 3339 or milliseconds.
            let later = try await gateway.send(.get, "/v1/transit/stops/DTA_AMV/arrivals?time=2010-06-05T16:00:00Z&minutesBefore=0&minutesAfter=60")
            // AAMV1 ends there at 9:00, AAMV2 leaves at 10:00 (Saturday 2010-06-05, PDT).
            #expect(later.items.map { $0["trip"]?.stringValue } == ["DTA_AAMV1", "DTA_AAMV2"])
            let millis = try await gateway.send(.get, "/v1/transit/stops/DTA_AMV/arrivals?time=1275753600000&minutesBefore=0&minutesAfter=59")
            #expect(millis.items.map { $0["trip"]?.stringValue } == ["DTA_AAMV1"])
            // The weekend service does not run on a Tuesday.
            let weekday = try await gateway.send(.get, "/v1/transit/stops/DTA_AMV/arrivals?minutesBefore=0&minutesAfter=600")
            #expect(weekday.items.isEmpty)

            for bad in ["time=yesterday", "minutesBefore=-1", "minutesAfter=100000"] {
                #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_AMV/arrivals?" + bad).status == 422, "\(bad)")
            }
        }
    }

    @Test("a stop's schedule for a date follows calendar.txt and calendar_dates.txt", arguments: TestStorage.available)
    func schedule(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let saturday = try await gateway.send(.get, "/v1/transit/stops/DTA_AMV/schedule?date=2010-06-05")
            #expect(saturday.items.count == 4)
            #expect(saturday.items.first?["scheduledArrival"]?.stringValue == "2010-06-05T16:00:00Z")
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_AMV/schedule?date=2010-06-01").items.isEmpty)
            // 2007-06-04 is removed from FULLW.
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_BULLFROG/schedule?date=2007-06-04").items.isEmpty)
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_BULLFROG/schedule?date=2007-06-05").items.count == 4)
            // Outside the calendar's dates.
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_BULLFROG/schedule?date=2011-06-05").items.isEmpty)
            #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_BULLFROG/schedule?date=2010-13-01").status == 422)
        }
    }

    @Test("a route's stops in order per direction; a trip's stop times", arguments: TestStorage.available)
    func routesAndTrips(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let city = try await gateway.send(.get, "/v1/transit/routes/DTA_CITY")
            #expect(city.status == 200)
            let directions = try #require(city["directions"]?.arrayValue)
            #expect(directions.map { $0["direction"]?.numberValue } == [0, 1])
            #expect(directions[0]["stops"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
                    == ["DTA_STAGECOACH", "DTA_NANAA", "DTA_NADAV", "DTA_DADAN", "DTA_EMSI"])
            #expect(directions[1]["stops"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
                    == ["DTA_EMSI", "DTA_DADAN", "DTA_NADAV", "DTA_NANAA", "DTA_STAGECOACH"])

            let trip = try await gateway.send(.get, "/v1/transit/trips/DTA_AB1?serviceDate=2010-06-01")
            #expect(trip.status == 200)
            #expect(trip["headsign"]?.stringValue == "to Bullfrog")
            let times = try #require(trip["stopTimes"]?.arrayValue)
            #expect(times.map { $0["stop"]?.stringValue } == ["DTA_BEATTY_AIRPORT", "DTA_BULLFROG"])
            #expect(times[1]["scheduledArrival"]?.stringValue == "2010-06-01T15:10:00Z")
            #expect(times[1]["scheduledDeparture"]?.stringValue == "2010-06-01T15:15:00Z")
            // Without a date: the day it runs nearest to now.
            #expect(try await gateway.send(.get, "/v1/transit/trips/DTA_AB1")["serviceDate"]?.stringValue == "2010-06-01")
        }
    }

    @Test("stop search: a prefix of any word, whatever the case and accents; Chinese names from any character", arguments: TestStorage.available)
    func search(storage: TestStorage) async throws {
        var files = FeedFiles.minimal
        files["stops.txt"] = """
            stop_id,stop_name,stop_lat,stop_lon
            A,Café Zürich,36.9,-116.7
            B,台北車站,25.0478,121.517
            C,Zurich Airport,36.92,-116.72

            """
        let feed = try FeedFiles.zip(files)
        try await withTransit(storage, feed: feed) { gateway in
            let names = { @Sendable (query: String) async throws -> [String] in
                let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? query
                return try await gateway.send(.get, "/v1/transit/stops/search?q=\(encoded)").items.compactMap { $0["name"]?.stringValue }
            }
            let found0 = try await names("zur")
            #expect(found0 == ["Zurich Airport", "Café Zürich"], "names that start with it first")
            let found1 = try await names("ZÜRICH")
            #expect(found1 == ["Zurich Airport", "Café Zürich"])
            let found2 = try await names("cafe")
            #expect(found2 == ["Café Zürich"])
            let found3 = try await names("airp")
            #expect(found3 == ["Zurich Airport"])
            let found4 = try await names("車站")
            #expect(found4 == ["台北車站"])
            let found5 = try await names("台北")
            #expect(found5 == ["台北車站"])
            let found6 = try await names("urich")
            #expect(found6.isEmpty, "a match starts a word")
            #expect(try await gateway.send(.get, "/v1/transit/stops/search?q=").status == 422)
        }
    }
}
