import Foundation
import GatewayCore
import GatewayTesting
import NIOCore
import NIOFoundationCompat
@testable import TransitPlugin
import Testing

let publicOBA = transitYAML.replacingOccurrences(of: "transit: {}", with: "transit:\n    config: { oneBusAwayPublic: true }")

extension TestGateway {
    /// GETs a OneBusAway path, checks the envelope, and decodes `data` as a strict client does.
    func oba<Data: Decodable>(_ target: String, as _: Data.Type) async throws -> (data: Data, reply: TransitReply) {
        let reply = try await send(.get, target)
        #expect(reply.status == 200, "\(target): \(reply.text)")
        #expect(reply.headers[.contentType]?.hasPrefix("application/json") == true)
        let envelope = try JSONDecoder().decode(StrictOBA.Envelope<Data>.self, from: Foundation.Data(reply.text.utf8))
        #expect(envelope.code == 200 && envelope.version == 2 && envelope.text == "OK")
        return (envelope.data, reply)
    }

    /// A failure as OneBusAway answers it: the HTTP status equal to `code`, the envelope without data.
    func obaFailure(_ target: String) async throws -> (status: Int, failure: StrictOBA.Failure, reply: TransitReply) {
        let reply = try await send(.get, target)
        let failure = try JSONDecoder().decode(StrictOBA.Failure.self, from: Foundation.Data(reply.text.utf8))
        #expect(failure.code == reply.status)
        #expect(reply.headers[.contentType]?.hasPrefix("application/json") == true)
        return (reply.status, failure, reply)
    }
}

@Suite("transit: the OneBusAway API, as a strict client reads it")
struct OneBusAwayDialectTests {
    /// 2010-06-01 08:00 in Los Angeles, in milliseconds; the service day starts at 07:00 UTC.
    static let morning = "1275404400000"
    static let serviceDate: Int64 = 1_275_375_600_000

    @Test("arrivals and departures: the reference server's shape, 0-based stop sequences, references closed", arguments: TestStorage.available)
    func arrivals(storage: TestStorage) async throws {
        try await withTransit(storage, yaml: publicOBA) { gateway in
            let (data, reply) = try await gateway.oba("/api/where/arrivals-and-departures-for-stop/DTA_STAGECOACH.json?time=\(Self.morning)&minutesBefore=0&minutesAfter=30",
                                                      as: StrictOBA.Entry<StrictOBA.StopArrivals>.self)
            let arrivals = data.entry.arrivalsAndDepartures
            #expect(arrivals.map(\.tripId) == ["DTA_CITY1@08:00:00", "DTA_STBA@08:00:00", "DTA_CITY1@08:10:00", "DTA_CITY1@08:20:00",
                                               "DTA_CITY2@08:00:00", "DTA_CITY1@08:30:00", "DTA_STBA@08:30:00"])
            let first = try #require(arrivals.first)
            #expect(first.stopSequence == 0 && first.totalStopsInTrip == 5)
            #expect(first.arrivalEnabled == false && first.departureEnabled)
            #expect(first.serviceDate == Self.serviceDate)
            #expect(first.scheduledDepartureTime == 1_275_404_400_000)
            #expect(first.predicted == false && first.predictedArrivalTime == 0 && first.vehicleId == "" && first.status == "default")
            #expect(first.tripStatus?.activeTripId == "DTA_CITY1@08:00:00", "a trip leaving now is in service")
            let city2 = try #require(arrivals.first { $0.tripId == "DTA_CITY2@08:00:00" })
            #expect(city2.stopSequence == 4 && city2.arrivalEnabled && city2.departureEnabled == false)
            #expect(city2.numberOfStopsAway == 4)
            #expect(city2.distanceFromStop > 1000)
            #expect(data.entry.stopId == "DTA_STAGECOACH")
            #expect(data.entry.nearbyStopIds.isEmpty)

            // Everything the entry names is in the references; `null` only where the server writes it.
            let references = data.references
            #expect(references.checkClosure().isEmpty, "\(references.checkClosure())")
            let tripIDs = Set(references.trips.map(\.id)), stopIDs = Set(references.stops.map(\.id)), routeIDs = Set(references.routes.map(\.id))
            for arrival in arrivals {
                #expect(tripIDs.contains(arrival.tripId) && stopIDs.contains(arrival.stopId) && routeIDs.contains(arrival.routeId))
                if let status = arrival.tripStatus {
                    #expect(tripIDs.contains(status.activeTripId) && stopIDs.contains(status.closestStop) && stopIDs.contains(status.nextStop))
                }
            }
            #expect(stopIDs.contains("DTA_STAGECOACH"))
            #expect(reply.text.contains(#""frequency":null"#) && reply.text.contains(#""predictedArrivalInterval":null"#))
            #expect(reply.text.contains(":null,\"situations\"") == false)
            #expect(reply.text.hasPrefix(#"{"code":200,"currentTime":"#))
        }
    }

    @Test("predictions from GTFS-realtime reach the arrivals")
    func predicted() async throws {
        try await withTransit(yaml: publicOBA) { gateway in
            let admin = try await gateway.administrator()
            #expect(try await gateway.send(.post, "/v1/transit/feeds/sample/realtime", token: admin, body: ByteBuffer(data: try Messages.morning()),
                                           contentType: "application/x-protobuf").status == 200)
            let (data, _) = try await gateway.oba("/api/where/arrivals-and-departures-for-stop/DTA_NANAA.json?minutesBefore=0&minutesAfter=10",
                                                  as: StrictOBA.Entry<StrictOBA.StopArrivals>.self)
            let city1 = try #require(data.entry.arrivalsAndDepartures.first { $0.tripId == "DTA_CITY1@08:00:00" })
            #expect(city1.predicted)
            #expect(city1.predictedArrivalTime == 1_275_404_820_000)
            #expect(city1.scheduledArrivalTime == 1_275_404_700_000)
            #expect(city1.lastUpdateTime > 0)
            #expect(city1.tripStatus?.status == "SCHEDULED")
            let cancelled = try await gateway.oba("/api/where/arrival-and-departure-for-stop/DTA_STAGECOACH.json?tripId=DTA_CITY2@08:00:00&serviceDate=\(Self.serviceDate)",
                                                  as: StrictOBA.Entry<StrictOBA.Arrival>.self)
            #expect(cancelled.data.entry.status == "CANCELED")
        }
    }

    @Test("stops and routes near a point, stop, route, trip, stops for a route, schedule, trip details, search, coverage, time", arguments: TestStorage.available)
    func everyEndpoint(storage: TestStorage) async throws {
        try await withTransit(storage, yaml: publicOBA) { gateway in
            let near = try await gateway.oba("/api/where/stops-for-location.json?lat=36.915682&lon=-116.751677&radius=1500",
                                             as: StrictOBA.List<StrictOBA.Stop>.self).data
            #expect(near.list.map(\.id) == ["DTA_DADAN", "DTA_EMSI", "DTA_NADAV", "DTA_NANAA", "DTA_STAGECOACH"], "a box, listed by id")
            #expect(near.outOfRange == false && near.limitExceeded == false)
            #expect(near.references.checkClosure().isEmpty)
            #expect(near.list.first?.code == "DADAN", "the stop's id when it has no code")
            let limited = try await gateway.oba("/api/where/stops-for-location.json?lat=36.915682&lon=-116.751677&latSpan=0.05&lonSpan=0.05&maxCount=2",
                                                as: StrictOBA.List<StrictOBA.Stop>.self).data
            #expect(limited.list.count == 2 && limited.limitExceeded)
            let nowhere = try await gateway.oba("/api/where/stops-for-location.json?lat=0&lon=0", as: StrictOBA.List<StrictOBA.Stop>.self).data
            #expect(nowhere.list.isEmpty && nowhere.outOfRange == true)
            let byCode = try await gateway.oba("/api/where/stops-for-location.json?lat=36.9&lon=-116.8&query=AMV", as: StrictOBA.List<StrictOBA.Stop>.self).data
            #expect(byCode.list.map(\.id) == ["DTA_AMV"])

            let stop = try await gateway.oba("/api/where/stop/DTA_BEATTY_AIRPORT.json", as: StrictOBA.Entry<StrictOBA.Stop>.self).data
            #expect(stop.entry.routeIds == ["DTA_AB", "DTA_STBA", "DTA_AAMV"], "by short name: 10, 30, 50")
            #expect(stop.entry.wheelchairBoarding == "UNKNOWN" && stop.entry.parent == "")
            #expect(stop.references.routes.count == 3 && stop.references.agencies.map(\.id) == ["DTA"])

            let routes = try await gateway.oba("/api/where/routes-for-location.json?lat=36.868446&lon=-116.784582&radius=100",
                                               as: StrictOBA.List<StrictOBA.Route>.self).data
            #expect(routes.list.map(\.id) == ["DTA_AAMV", "DTA_AB", "DTA_STBA"])
            #expect(routes.references.routes.isEmpty && routes.references.agencies.count == 1)

            let route = try await gateway.oba("/api/where/route/DTA_AB.json", as: StrictOBA.Entry<StrictOBA.Route>.self).data
            #expect(route.entry.shortName == "10" && route.entry.longName == "Airport - Bullfrog" && route.entry.color == "")

            let forRoute = try await gateway.oba("/api/where/stops-for-route/DTA_CITY.json", as: StrictOBA.Entry<StrictOBA.StopsForRoute>.self).data
            let groups = try #require(forRoute.entry.stopGroupings.first?.stopGroups)
            #expect(groups.map(\.id).sorted() == ["0", "1"])
            #expect(groups.first { $0.id == "0" }?.stopIds == ["DTA_STAGECOACH", "DTA_NANAA", "DTA_NADAV", "DTA_DADAN", "DTA_EMSI"])
            #expect(forRoute.entry.stopIds == forRoute.entry.stopIds.sorted())
            #expect(Set(forRoute.references.stops.map(\.id)) == Set(forRoute.entry.stopIds))
            #expect(forRoute.references.checkClosure().isEmpty)

            let schedule = try await gateway.oba("/api/where/schedule-for-stop/DTA_AMV.json?date=2010-06-05", as: StrictOBA.Entry<StrictOBA.StopSchedule>.self).data
            #expect(schedule.entry.stopRouteSchedules.map(\.routeId) == ["DTA_AAMV"])
            let directions = try #require(schedule.entry.stopRouteSchedules.first?.stopRouteDirectionSchedules)
            #expect(directions.map(\.tripHeadsign) == ["to Amargosa Valley", "to Airport"])
            #expect(directions.flatMap(\.scheduleStopTimes).count == 4)
            #expect(directions[0].scheduleStopTimes.first?.arrivalTime == 1_275_753_600_000, "2010-06-05 09:00 PDT")
            #expect(directions[0].scheduleStopTimes.first?.serviceId == "DTA_WE")
            #expect(schedule.entry.date == 1_275_721_200_000, "local midnight of the date asked")

            let trip = try await gateway.oba("/api/where/trip/DTA_AB1.json", as: StrictOBA.Entry<StrictOBA.Trip>.self).data
            #expect(trip.entry.blockId == "DTA_1" && trip.entry.directionId == "0" && trip.entry.serviceId == "DTA_FULLW" && trip.entry.timeZone == "")
            #expect(trip.references.routes.map(\.id) == ["DTA_AB"])

            let details = try await gateway.oba("/api/where/trip-details/DTA_AB1.json?serviceDate=2010-06-01&time=1275404700000",
                                                as: StrictOBA.Entry<StrictOBA.TripDetails>.self).data
            #expect(details.entry.schedule.stopTimes.map(\.arrivalTime) == [28_800, 29_400], "seconds since the service day's start")
            #expect(details.entry.schedule.timeZone == "America/Los_Angeles")
            #expect(details.entry.serviceDate == Self.serviceDate)
            let status = try #require(details.entry.status, "running at 8:05")
            #expect(status.nextStop == "DTA_BULLFROG" && status.nextStopTimeOffset == 300)
            #expect(status.position != nil)
            #expect(details.references.trips.map(\.id).contains("DTA_AB1"))
            #expect(details.references.checkClosure().isEmpty)
            let idle = try await gateway.oba("/api/where/trip-details/DTA_AB1.json?serviceDate=2010-06-01&time=1275420000000&includeStatus=true",
                                             as: StrictOBA.Entry<StrictOBA.TripDetails>.self).data
            #expect(idle.entry.status == nil, "not running at 12:20")

            let one = try await gateway.oba("/api/where/arrival-and-departure-for-stop/DTA_BULLFROG.json?tripId=DTA_AB1&serviceDate=\(Self.serviceDate)&time=\(Self.morning)",
                                            as: StrictOBA.Entry<StrictOBA.Arrival>.self).data
            #expect(one.entry.stopSequence == 1 && one.entry.scheduledArrivalTime == 1_275_405_000_000)

            let stops = try await gateway.oba("/api/where/search/stop.json?input=bull", as: StrictOBA.List<StrictOBA.Stop>.self).data
            #expect(stops.list.map(\.id) == ["DTA_BULLFROG"])
            let searchRoutes = try await gateway.oba("/api/where/search/route.json?input=Airport", as: StrictOBA.List<StrictOBA.Route>.self).data
            #expect(searchRoutes.list.map(\.shortName) == ["10", "30", "50"])

            let coverage = try await gateway.oba("/api/where/agencies-with-coverage.json", as: StrictOBA.List<StrictOBA.Coverage>.self).data
            #expect(coverage.list.map(\.agencyId) == ["DTA"])
            #expect(coverage.list.first.map { $0.latSpan > 0.4 && $0.lonSpan > 0.7 } == true)
            #expect(coverage.references.agencies.first?.timezone == "America/Los_Angeles")

            let time = try await gateway.oba("/api/where/current-time.json", as: StrictOBA.Entry<StrictOBA.CurrentTime>.self).data
            #expect(time.entry.time / 1000 == 1_275_404_400)
            #expect(time.references.agencies.isEmpty)
        }
    }

    @Test("errors as OneBusAway answers them: 401 permission denied, 404 resource not found, 400 validation error")
    func errors() async throws {
        try await withTransit { gateway in
            let user = try await gateway.register("rider")
            let key = try await gateway.createKey(token: user.token, grant: #"{"label": "oba", "scopes": ["transit:read"]}"#)
            let other = try await gateway.createKey(token: user.token, grant: #"{"label": "other", "scopes": ["todo:read"]}"#)

            let missing = try await gateway.obaFailure("/api/where/stop/DTA_AMV.json")
            #expect(missing.status == 401 && missing.failure.text == "permission denied")
            #expect(try await gateway.obaFailure("/api/where/stop/DTA_AMV.json?key=not-a-key").status == 401)
            #expect(try await gateway.obaFailure("/api/where/stop/DTA_AMV.json?key=\(other.secret)").status == 403)
            _ = try await gateway.oba("/api/where/stop/DTA_AMV.json?key=\(key.secret)&version=2&app_uid=x&app_ver=1", as: StrictOBA.Entry<StrictOBA.Stop>.self)

            let unknown = try await gateway.obaFailure("/api/where/stop/DTA_NOWHERE.json?key=\(key.secret)")
            #expect(unknown.status == 404 && unknown.failure.text == "resource not found" && unknown.failure.version == 2)
            for path in ["route/X_Y.json", "trip/nope.json", "trip-details/nope.json", "stops-for-route/nope.json", "schedule-for-stop/nope.json",
                         "arrivals-and-departures-for-stop/nope.json", "search/stop.json?input=zzzzzz", "search/route.json?input=zzzzzz"] {
                let separator = path.contains("?") ? "&" : "?"
                #expect(try await gateway.obaFailure("/api/where/\(path)\(separator)key=\(key.secret)").status == 404, "\(path)")
            }

            let bad = try await gateway.obaFailure("/api/where/stops-for-location.json?key=\(key.secret)&lat=north&lon=1")
            #expect(bad.status == 400 && bad.failure.text == "validation error")
            #expect(bad.reply.json[path: ["data", "fieldErrors", "lat"]]?.arrayValue?.first?.stringValue == #"Invalid field value for field "lat"."#)
            let noTrip = try await gateway.obaFailure("/api/where/arrival-and-departure-for-stop/DTA_AMV.json?key=\(key.secret)")
            #expect(noTrip.status == 400)
            #expect(noTrip.reply.json[path: ["data", "fieldErrors", "tripId"]]?.arrayValue?.first?.stringValue == "missingRequiredField")
            #expect(noTrip.reply.json[path: ["data", "fieldErrors", "serviceDate"]] != nil)
            for query in ["stops-for-location.json?lat=0&lon=0&maxCount=0", "search/stop.json", "arrivals-and-departures-for-stop/DTA_AMV.json?time=soon",
                          "schedule-for-stop/DTA_AMV.json?date=2010-99-99", "stops-for-location.json?lat=100&lon=0",
                          "trip-details/DTA_AB1.json?includeStatus=maybe"] {
                #expect(try await gateway.obaFailure("/api/where/\(query)&key=\(key.secret)".replacingOccurrences(of: ".json&", with: ".json?")).status == 400,
                        "\(query)")
            }
        }
    }
}
