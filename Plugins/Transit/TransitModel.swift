import Foundation
import GatewayCore
import NIOCore

// The native API's shapes. Times are RFC 3339 instants; service dates `yyyy-MM-dd` in the agency's zone.

public struct AgencyInfo: Codable, Sendable, Equatable {
    public var id: String
    public var name: String
    public var url: String
    public var timeZone: String
    public var lang: String?
    public var phone: String?
    public var feed: String
}

public struct StopInfo: Codable, Sendable, Equatable {
    public var id: String
    public var code: String?
    public var name: String
    public var description: String?
    public var lat: Double
    public var lon: Double
    /// 0 stop or platform, 1 station, 2 entrance, 3 generic node, 4 boarding area.
    public var locationType: Int
    public var parent: String?
    /// 0 unknown, 1 possible, 2 not possible.
    public var wheelchairBoarding: Int
    /// The routes serving it (a station: its stops).
    public var routes: [String]
    /// Metres from the point asked, in lists by distance.
    public var distance: Double?
}

public struct RouteInfo: Codable, Sendable, Equatable {
    public var id: String
    public var agency: String
    public var shortName: String?
    public var longName: String?
    public var description: String?
    /// GTFS route_type: 0 tram, 1 subway, 2 rail, 3 bus, 4 ferry, ...
    public var type: Int
    public var url: String?
    public var color: String?
    public var textColor: String?
}

public struct StopDetail: Codable, Sendable {
    public var stop: StopInfo
    public var routes: [RouteInfo]
    /// A station's stops.
    public var stops: [StopInfo]
}

public struct RouteDirection: Codable, Sendable {
    /// GTFS direction_id (0 or 1), nil when the feed gives none.
    public var direction: Int?
    public var headsign: String?
    public var stops: [StopInfo]
}

public struct RouteDetail: Codable, Sendable {
    public var route: RouteInfo
    public var directions: [RouteDirection]
    /// The route's shapes as Google encoded polylines.
    public var polylines: [String]
}

public struct ArrivalInfo: Codable, Sendable {
    public var trip: String
    public var route: String
    public var routeShortName: String?
    public var headsign: String?
    public var stop: String
    public var serviceDate: String
    public var stopSequence: Int
    public var totalStops: Int
    /// Stops between the vehicle and this stop at the time asked: 0 next, negative once passed.
    public var stopsAway: Int
    public var scheduledArrival: Date
    public var scheduledDeparture: Date
    public var predictedArrival: Date?
    public var predictedDeparture: Date?
    /// `scheduled`, `predicted`, `skipped`, `noData` or `cancelled`.
    public var status: String
}

public struct ArrivalsReply: Codable, Sendable {
    public var stop: StopInfo
    public var time: Date
    public var from: Date
    public var to: Date
    public var items: [ArrivalInfo]
}

public struct ScheduleReply: Codable, Sendable {
    public var stop: StopInfo
    public var date: String
    public var items: [ArrivalInfo]
}

public struct TripStopTime: Codable, Sendable {
    public var stop: String
    public var stopName: String
    public var stopSequence: Int
    public var scheduledArrival: Date
    public var scheduledDeparture: Date
    public var predictedArrival: Date?
    public var predictedDeparture: Date?
    public var status: String
}

public struct TripDetail: Codable, Sendable {
    public var id: String
    public var route: RouteInfo
    public var headsign: String?
    public var shortName: String?
    public var direction: Int?
    public var block: String?
    public var serviceDate: String
    public var stopTimes: [TripStopTime]
    public var polyline: String?
}

public struct FeedInfo: Codable, Sendable {
    public var id: String
    public var agencies: [String]
    public var timeZone: String
    public var source: String
    public var importedAt: Date
    public var stops: Int
    public var routes: Int
    public var trips: Int
    public var stopTimes: Int
    public var realtime: RealtimeStatus?
}

/// What the realtime data of a feed is doing.
public struct RealtimeStatus: Codable, Sendable, Equatable {
    /// When the last good message arrived, and the time its header says.
    public var receivedAt: Date?
    public var messageTime: Date?
    public var tripUpdates: Int
    /// Trip updates naming a trip the schedule does not know (counted, ignored).
    public var unknownTrips: Int
    /// Stop time updates naming a stop the trip does not have (counted, ignored).
    public var unmatchedStops: Int
    /// The last failure (a fetch or an unreadable message), if the last attempt failed.
    public var lastError: String?
    public var lastErrorAt: Date?
}

// MARK: - Inputs

public struct StopPath: Codable, Sendable {
    public var id: String
}

public struct FeedPath: Codable, Sendable {
    public var feed: String
}

public struct NearStopsQuery: Codable, Sendable, ValidatableInput {
    public static let fieldRules: [String: FieldRule] = [
        "lat": TransitInput.latitudeRule, "lon": TransitInput.longitudeRule,
        "radius": FieldRule.number(above: 0).described("Metres (default the plugin's `defaultRadius`; larger values are capped at its `maxRadius`)."),
        "limit": TransitInput.limitRule,
    ]

    public var lat: Double
    public var lon: Double
    /// Metres (default 500; larger values are capped at the plugin's `maxRadius`).
    public var radius: Double?
    public var limit: Int?

    public func validate() -> [GatewayError.FieldError] {
        var problems = TransitInput.point(lat: lat, lon: lon)
        if let radius, !(radius > 0) { problems.append(.init(pointer: "radius", detail: "must be more than 0 metres")) }
        if let limit, !TransitInput.limits.contains(limit) { problems.append(.init(pointer: "limit", detail: "must be between 1 and 1000")) }
        return problems
    }
}

public struct StopSearchQuery: Codable, Sendable, ValidatableInput {
    /// The longest search, in characters (Unicode code points).
    static let longestQuery = 200

    public static let fieldRules: [String: FieldRule] = [
        "q": FieldRule.nonBlank(maxLength: longestQuery).described("The start of a word of the stop's name; not blank."),
        "limit": TransitInput.limitRule,
    ]

    public var q: String
    public var limit: Int?

    public func validate() -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if q.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { problems.append(.init(pointer: "q", detail: "must not be empty")) }
        if q.unicodeScalars.count > Self.longestQuery { problems.append(.init(pointer: "q", detail: "must be at most 200 characters")) }
        if let limit, !TransitInput.limits.contains(limit) { problems.append(.init(pointer: "limit", detail: "must be between 1 and 1000")) }
        return problems
    }
}

public struct ArrivalsQuery: Codable, Sendable, ValidatableInput {
    /// The minutes a window may reach before and after `time`.
    static let windowMinutes = 0...1440

    public static let fieldRules: [String: FieldRule] = [
        "time": TransitInput.instantRule,
        "minutesBefore": FieldRule.integer(windowMinutes).described("Minutes before `time` (default 5)."),
        "minutesAfter": FieldRule.integer(windowMinutes).described("Minutes after `time` (default 35)."),
    ]

    /// The instant asked about (RFC 3339, or milliseconds since 1970); default now.
    public var time: String?
    public var minutesBefore: Int?
    public var minutesAfter: Int?

    public func validate() -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if let time, TransitInput.instant(time) == nil {
            problems.append(.init(pointer: "time", detail: "must be an RFC 3339 time (2026-11-24T08:00:00Z) or milliseconds since 1970"))
        }
        if let minutesBefore, !Self.windowMinutes.contains(minutesBefore) { problems.append(.init(pointer: "minutesBefore", detail: "must be between 0 and 1440")) }
        if let minutesAfter, !Self.windowMinutes.contains(minutesAfter) { problems.append(.init(pointer: "minutesAfter", detail: "must be between 0 and 1440")) }
        return problems
    }
}

public struct ScheduleQuery: Codable, Sendable, ValidatableInput {
    public static let fieldRules: [String: FieldRule] = ["date": FieldRule.date.described("`yyyy-MM-dd` in the agency's time zone (default today there).")]

    /// `yyyy-MM-dd` in the agency's zone; default today there.
    public var date: String?

    public func validate() -> [GatewayError.FieldError] {
        if let date, TransitInput.date(date) == nil { return [.init(pointer: "date", detail: "must be a date (yyyy-MM-dd)")] }
        return []
    }
}

public struct TripQuery: Codable, Sendable, ValidatableInput {
    public static let fieldRules: [String: FieldRule] = [
        "serviceDate": FieldRule.date.described("The service date, `yyyy-MM-dd` (default the day the trip runs nearest to `time`)."),
        "time": TransitInput.instantRule,
    ]

    /// The service date (`yyyy-MM-dd`); default the day the trip runs nearest to `time`.
    public var serviceDate: String?
    public var time: String?

    public func validate() -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if let serviceDate, TransitInput.date(serviceDate) == nil { problems.append(.init(pointer: "serviceDate", detail: "must be a date (yyyy-MM-dd)")) }
        if let time, TransitInput.instant(time) == nil {
            problems.append(.init(pointer: "time", detail: "must be an RFC 3339 time (2026-11-24T08:00:00Z) or milliseconds since 1970"))
        }
        return problems
    }
}

public struct FeedImportQuery: Codable, Sendable {
    public var strict: Bool?
}

/// A GTFS zip body.
public struct FeedArchiveBody: RawBodyInput {
    public static let acceptedMediaTypes = ["application/zip", "application/octet-stream", "application/x-zip-compressed"]
    public var bytes: Data

    public init(bytes: ByteBuffer, contentType: String) throws {
        self.bytes = Data(bytes.readableBytesView)
    }

    public init(from decoder: any Decoder) throws {
        throw GatewayError.unsupportedMediaType("application/json", accepted: Self.acceptedMediaTypes)
    }
}

/// A GTFS-realtime FeedMessage body.
public struct RealtimeBody: RawBodyInput {
    public static let acceptedMediaTypes = ["application/x-protobuf", "application/protobuf", "application/octet-stream"]
    public var bytes: Data

    public init(bytes: ByteBuffer, contentType: String) throws {
        self.bytes = Data(bytes.readableBytesView)
    }

    public init(from decoder: any Decoder) throws {
        throw GatewayError.unsupportedMediaType("application/json", accepted: Self.acceptedMediaTypes)
    }
}

enum TransitInput {
    static let latitudes = -90.0...90.0
    static let longitudes = -180.0...180.0
    /// The sizes of the native API's lists.
    static let limits = PageQuery.limits
    /// The most digits of an instant in milliseconds (up to the year 5138).
    static let longestMilliseconds = 14

    static let latitudeRule = FieldRule.number(latitudes).described("Latitude in degrees.")
    static let longitudeRule = FieldRule.number(longitudes).described("Longitude in degrees.")
    static let limitRule = FieldRule.integer(limits).described("Items, 1 to 1000 (default 20).")
    /// An instant as ``instant(_:)`` reads it.
    static let instantRule = FieldRule(keywords: [
        "anyOf": .array([
            .object(["type": .string("string"), "format": .string("date-time")]),
            .object(["type": .string("string"), "format": .string("date"), "pattern": .string("^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]),
            .object(["type": .string("string"), "pattern": .string("^[0-9]{1,\(longestMilliseconds)}$")]),
        ]),
    ]).described("An RFC 3339 time (`2026-11-24T08:00:00Z`), a date (its midnight UTC) or milliseconds since 1970 (default now).")

    static func point(lat: Double, lon: Double) -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if !latitudes.contains(lat) { problems.append(.init(pointer: "lat", detail: "must be between -90 and 90")) }
        if !longitudes.contains(lon) { problems.append(.init(pointer: "lon", detail: "must be between -180 and 180")) }
        return problems
    }

    /// An instant: RFC 3339, a date (midnight UTC) or milliseconds since 1970 (at most
    /// ``longestMilliseconds`` digits). UTC seconds.
    static func instant(_ text: String) -> Int64? {
        let utf8 = text.utf8
        if !utf8.isEmpty, utf8.count <= longestMilliseconds, utf8.allSatisfy({ (48...57).contains($0) }), let millis = Int64(text) {
            return millis / 1000
        }
        guard let micros = UTCTimestamp.parse(text) else { return nil }
        return micros.floorDivided(by: 1_000_000)
    }

    /// A date of the native API, `yyyy-MM-dd` (any year from 0000 to 9999): days since 1970.
    static func date(_ text: String) -> Int32? {
        guard text.utf8.count == 10, let micros = UTCTimestamp.parse(text) else { return nil }
        return Int32(micros.floorDivided(by: 86_400_000_000))
    }
}

extension Int64 {
    func floorDivided(by divisor: Int64) -> Int64 { floorDiv(divisor) }
}
