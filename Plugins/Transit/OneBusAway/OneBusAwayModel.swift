import Foundation

// The OneBusAway REST API's (v2) JSON, as its reference server writes it: members in alphabetical
// order, a missing string as "", a missing number as 0, a missing list as [], and `frequency` and
// the `*Interval` members present as null. Strict clients (OBAKit, onebusaway-android, the
// generated SDKs) decode exactly these shapes.

/// A member always written, as `null`.
struct OBANull: Encodable, Sendable {
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encodeNil()
    }
}

/// An empty object list (`situations`, `stopTimes`).
struct OBANothing: Encodable, Sendable {}

struct OBAEnvelope<Data: Encodable & Sendable>: Encodable, Sendable {
    var code: Int
    var currentTime: Int64
    var data: Data?
    var text: String
    var version: Int
}

/// An error without data (`{"code":404,"currentTime":…,"text":"resource not found","version":2}`).
struct OBAError: Encodable, Sendable {
    var code: Int
    var currentTime: Int64
    var text: String
    var version: Int
}

/// A 400 (`"text": "validation error"` with the failing fields).
struct OBAValidationError: Encodable, Sendable {
    struct Errors: Encodable, Sendable {
        var actionErrors: [String]
        var fieldErrors: [String: [String]]
    }

    var code: Int
    var currentTime: Int64
    var data: Errors
    var text: String
    var version: Int
}

struct OBAReferences: Encodable, Sendable {
    var agencies: [OBAAgency] = []
    var routes: [OBARoute] = []
    var situations: [OBANothing] = []
    var stopTimes: [OBANothing] = []
    var stops: [OBAStop] = []
    var trips: [OBATrip] = []
}

struct OBAEntry<Entry: Encodable & Sendable>: Encodable, Sendable {
    var entry: Entry
    var references: OBAReferences
}

struct OBAList<Item: Encodable & Sendable>: Encodable, Sendable {
    var limitExceeded: Bool
    var list: [Item]
    /// Absent from agencies-with-coverage, present in the location and search lists.
    var outOfRange: Bool?
    var references: OBAReferences
}

struct OBAAgency: Encodable, Sendable {
    var disclaimer: String
    var email: String
    var fareUrl: String
    var id: String
    var lang: String
    var name: String
    var phone: String
    var privateService: Bool
    var timezone: String
    var url: String
}

struct OBACoverage: Encodable, Sendable {
    var agencyId: String
    var lat: Double
    var latSpan: Double
    var lon: Double
    var lonSpan: Double
}

struct OBARoute: Encodable, Sendable {
    var agencyId: String
    var color: String
    var description: String
    var id: String
    var longName: String
    var nullSafeShortName: String
    var shortName: String
    var textColor: String
    var type: Int
    var url: String
}

struct OBAStop: Encodable, Sendable {
    var code: String
    var direction: String
    var id: String
    var lat: Double
    var locationType: Int
    var lon: Double
    var name: String
    var parent: String
    var routeIds: [String]
    var staticRouteIds: [String]
    var wheelchairBoarding: String
}

struct OBATrip: Encodable, Sendable {
    var blockId: String
    var directionId: String
    var id: String
    var peakOffpeak: Int
    var routeId: String
    var routeShortName: String
    var serviceId: String
    var shapeId: String
    var timeZone: String
    var tripHeadsign: String
    var tripShortName: String
}

struct OBAPosition: Encodable, Sendable {
    var lat: Double
    var lon: Double
}

struct OBATripStatus: Encodable, Sendable {
    var activeTripId: String
    var blockTripSequence: Int
    var closestStop: String
    var closestStopTimeOffset: Int
    var distanceAlongTrip: Double
    var frequency: OBANull
    var lastKnownDistanceAlongTrip: Int
    var lastKnownOrientation: Double
    var lastLocationUpdateTime: Int64
    var lastUpdateTime: Int64
    var nextStop: String
    var nextStopTimeOffset: Int
    var occupancyCapacity: Int
    var occupancyCount: Int
    var occupancyStatus: String
    var orientation: Double
    var phase: String
    var position: OBAPosition?
    var predicted: Bool
    var scheduleDeviation: Int
    var scheduledDistanceAlongTrip: Double
    var serviceDate: Int64
    var situationIds: [String]
    var status: String
    var totalDistanceAlongTrip: Double
    var vehicleFeatures: [String]
    var vehicleId: String
}

struct OBAArrival: Encodable, Sendable {
    var actualTrack: String
    var arrivalEnabled: Bool
    var blockTripSequence: Int
    var departureEnabled: Bool
    var distanceFromStop: Double
    var frequency: OBANull
    var historicalOccupancy: String
    var lastUpdateTime: Int64
    var numberOfStopsAway: Int
    var occupancyStatus: String
    var predicted: Bool
    var predictedArrivalInterval: OBANull
    var predictedArrivalTime: Int64
    var predictedDepartureInterval: OBANull
    var predictedDepartureTime: Int64
    var predictedOccupancy: String
    var routeId: String
    var routeLongName: String
    var routeShortName: String
    var scheduledArrivalInterval: OBANull
    var scheduledArrivalTime: Int64
    var scheduledDepartureInterval: OBANull
    var scheduledDepartureTime: Int64
    var scheduledTrack: String
    var serviceDate: Int64
    var situationIds: [String]
    var status: String
    var stopId: String
    var stopSequence: Int
    var totalStopsInTrip: Int
    var tripHeadsign: String
    var tripId: String
    var tripStatus: OBATripStatus?
    var vehicleId: String
}

struct OBAStopArrivals: Encodable, Sendable {
    var arrivalsAndDepartures: [OBAArrival]
    var nearbyStopIds: [String]
    var situationIds: [String]
    var stopId: String
}

struct OBAName: Encodable, Sendable {
    var name: String
    var names: [String]
    var type: String
}

struct OBAPolyline: Encodable, Sendable {
    var length: Int
    var levels: String
    var points: String
}

struct OBAStopGroup: Encodable, Sendable {
    var id: String
    var name: OBAName
    var polylines: [OBAPolyline]
    var stopIds: [String]
    var subGroups: [OBANothing]
}

struct OBAStopGrouping: Encodable, Sendable {
    var ordered: Bool
    var stopGroups: [OBAStopGroup]
    var type: String
}

struct OBAStopsForRoute: Encodable, Sendable {
    var polylines: [OBAPolyline]
    var routeId: String
    var stopGroupings: [OBAStopGrouping]
    var stopIds: [String]
}

struct OBAScheduleStopTime: Encodable, Sendable {
    var arrivalEnabled: Bool
    var arrivalTime: Int64
    var departureEnabled: Bool
    var departureTime: Int64
    var serviceId: String
    var stopHeadsign: String
    var tripId: String
}

struct OBAStopRouteDirectionSchedule: Encodable, Sendable {
    var scheduleFrequencies: [OBANothing]
    var scheduleStopTimes: [OBAScheduleStopTime]
    var tripHeadsign: String
}

struct OBAStopRouteSchedule: Encodable, Sendable {
    var routeId: String
    var stopRouteDirectionSchedules: [OBAStopRouteDirectionSchedule]
}

struct OBAStopSchedule: Encodable, Sendable {
    var date: Int64
    var stopId: String
    var stopRouteSchedules: [OBAStopRouteSchedule]
}

struct OBATripStopTime: Encodable, Sendable {
    var arrivalTime: Int
    var departureTime: Int
    var distanceAlongTrip: Double
    var historicalOccupancy: String
    var stopHeadsign: String
    var stopId: String
}

struct OBATripSchedule: Encodable, Sendable {
    var frequency: OBANull
    var nextTripId: String
    var previousTripId: String
    var stopTimes: [OBATripStopTime]
    var timeZone: String
}

struct OBATripDetails: Encodable, Sendable {
    var frequency: OBANull
    var schedule: OBATripSchedule?
    var serviceDate: Int64
    var situationIds: [String]
    var status: OBATripStatus?
    var tripId: String
}

struct OBACurrentTime: Encodable, Sendable {
    var readableTime: String
    var time: Int64
}
