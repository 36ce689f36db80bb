import Foundation

/// A strict OneBusAway client, as OBAKit (iOS) decodes the API with `Codable`: every member these
/// types name is required with its type (a missing key, a null or a wrong type fails the decoding),
/// and every id an entry mentions must be in the references (OBAKit force-unwraps them).
enum StrictOBA {
    struct Envelope<Data: Decodable>: Decodable {
        var code: Int
        var currentTime: Int64
        var text: String
        var version: Int
        var data: Data
    }

    struct Entry<Value: Decodable>: Decodable {
        var entry: Value
        var references: References
    }

    struct List<Value: Decodable>: Decodable {
        var list: [Value]
        var limitExceeded: Bool
        var outOfRange: Bool?
        var references: References
    }

    struct References: Decodable {
        var agencies: [Agency]
        var routes: [Route]
        var stops: [Stop]
        var trips: [Trip]
        var situations: [Situation]
        var stopTimes: [Situation]

        /// Every route's agency, every trip's route and every stop's routes are present.
        func checkClosure() -> [String] {
            var missing: [String] = []
            let agencyIDs = Set(agencies.map(\.id)), routeIDs = Set(routes.map(\.id))
            for route in routes where !agencyIDs.contains(route.agencyId) { missing.append("agency \(route.agencyId) of route \(route.id)") }
            for trip in trips where !routeIDs.contains(trip.routeId) { missing.append("route \(trip.routeId) of trip \(trip.id)") }
            for stop in stops {
                for route in stop.routeIds where !routeIDs.contains(route) { missing.append("route \(route) of stop \(stop.id)") }
            }
            return missing
        }
    }

    struct Situation: Decodable {}

    struct Agency: Decodable {
        var id: String
        var name: String
        var url: URL
        var timezone: String
        var lang: String
        var phone: String
        var email: String
        var fareUrl: String
        var disclaimer: String
        var privateService: Bool
    }

    struct Coverage: Decodable {
        var agencyId: String
        var lat: Double
        var latSpan: Double
        var lon: Double
        var lonSpan: Double
    }

    struct Route: Decodable {
        var id: String
        var agencyId: String
        var shortName: String
        var longName: String
        var description: String
        var type: Int
        var url: String
        var color: String
        var textColor: String
        var nullSafeShortName: String
    }

    struct Stop: Decodable {
        var id: String
        var code: String
        var name: String
        var lat: Double
        var lon: Double
        var direction: String
        var locationType: Int
        var parent: String
        var routeIds: [String]
        var staticRouteIds: [String]
        var wheelchairBoarding: String
    }

    struct Trip: Decodable {
        var id: String
        var routeId: String
        var serviceId: String
        var blockId: String
        var routeShortName: String
        var tripShortName: String
        var tripHeadsign: String
        var timeZone: String
        var shapeId: String
        var directionId: String
        var peakOffpeak: Int
    }

    struct Position: Decodable {
        var lat: Double
        var lon: Double
    }

    struct TripStatus: Decodable {
        var activeTripId: String
        var blockTripSequence: Int
        var closestStop: String
        var closestStopTimeOffset: Int
        var distanceAlongTrip: Double
        var lastKnownDistanceAlongTrip: Int
        var lastLocationUpdateTime: Int64
        var lastUpdateTime: Int64
        var nextStop: String
        var nextStopTimeOffset: Int
        var occupancyCapacity: Int
        var occupancyCount: Int
        var occupancyStatus: String
        var orientation: Double
        var phase: String
        var predicted: Bool
        var scheduleDeviation: Int
        var scheduledDistanceAlongTrip: Double
        var serviceDate: Int64
        var situationIds: [String]
        var status: String
        var totalDistanceAlongTrip: Double
        var vehicleId: String
        var position: Position?
    }

    struct Arrival: Decodable {
        var arrivalEnabled: Bool
        var blockTripSequence: Int
        var departureEnabled: Bool
        var distanceFromStop: Double
        var lastUpdateTime: Int64
        var numberOfStopsAway: Int
        var predicted: Bool
        var predictedArrivalTime: Int64
        var predictedDepartureTime: Int64
        var routeId: String
        var routeShortName: String
        var routeLongName: String
        var scheduledArrivalTime: Int64
        var scheduledDepartureTime: Int64
        var serviceDate: Int64
        var situationIds: [String]
        var status: String
        var stopId: String
        var stopSequence: Int
        var totalStopsInTrip: Int
        var tripHeadsign: String
        var tripId: String
        var vehicleId: String
        var historicalOccupancy: String
        var occupancyStatus: String
        var predictedOccupancy: String
        var tripStatus: TripStatus?
    }

    struct StopArrivals: Decodable {
        var arrivalsAndDepartures: [Arrival]
        var nearbyStopIds: [String]
        var situationIds: [String]
        var stopId: String
    }

    struct Polyline: Decodable {
        var length: Int
        var levels: String
        var points: String
    }

    struct Name: Decodable {
        var name: String
        var names: [String]
        var type: String
    }

    struct StopGroup: Decodable {
        var id: String
        var name: Name
        var polylines: [Polyline]
        var stopIds: [String]
        var subGroups: [Situation]
    }

    struct StopGrouping: Decodable {
        var ordered: Bool
        var type: String
        var stopGroups: [StopGroup]
    }

    struct StopsForRoute: Decodable {
        var routeId: String
        var polylines: [Polyline]
        var stopIds: [String]
        var stopGroupings: [StopGrouping]
    }

    struct ScheduleStopTime: Decodable {
        var arrivalEnabled: Bool
        var arrivalTime: Int64
        var departureEnabled: Bool
        var departureTime: Int64
        var serviceId: String
        var stopHeadsign: String
        var tripId: String
    }

    struct DirectionSchedule: Decodable {
        var scheduleFrequencies: [Situation]
        var scheduleStopTimes: [ScheduleStopTime]
        var tripHeadsign: String
    }

    struct RouteSchedule: Decodable {
        var routeId: String
        var stopRouteDirectionSchedules: [DirectionSchedule]
    }

    struct StopSchedule: Decodable {
        var date: Double
        var stopId: String
        var stopRouteSchedules: [RouteSchedule]
    }

    struct TripStopTime: Decodable {
        var arrivalTime: Int
        var departureTime: Int
        var stopId: String
        var stopHeadsign: String
        var distanceAlongTrip: Double
    }

    struct TripSchedule: Decodable {
        var timeZone: String
        var stopTimes: [TripStopTime]
        var nextTripId: String
        var previousTripId: String
    }

    struct TripDetails: Decodable {
        var tripId: String
        var serviceDate: Int64
        var situationIds: [String]
        var schedule: TripSchedule
        var status: TripStatus?
    }

    struct CurrentTime: Decodable {
        var readableTime: String
        var time: Int64
    }

    struct Failure: Decodable {
        var code: Int
        var currentTime: Int64
        var text: String
        var version: Int
    }
}
