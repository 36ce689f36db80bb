import Foundation

/// Every active feed's schedule in memory, immutable: what every query reads. An import builds a
/// new network and the plugin swaps it in whole.
///
/// Ids are OneBusAway's `{agencyId}_{id}`: a route and its trips take their agency's id, a stop or
/// shape the id of its feed's first agency (a feed whose agency.txt names no `agency_id` uses the
/// feed's id). The stop times are kept as parallel arrays, grouped by trip in stop order, and each
/// stop keeps its own stop times sorted by departure, so arrivals are a binary search per service day.
final class TransitNetwork: Sendable {
    struct Feed: Sendable {
        var id: String
        var version: Int64
        var agencyID: String
        var zone: TimeZone
        var source: String
        var importedAt: Int64
        var summary: FeedSummary
    }

    struct Agency: Sendable {
        var id: String
        var name: String
        var url: String
        var timeZone: String
        var lang: String?
        var phone: String?
        var fareURL: String?
        var email: String?
        var feed: Int32
    }

    struct Stop: Sendable {
        var id: String
        var gtfsID: String
        var code: String?
        var name: String
        var description: String?
        var lat: Double
        var lon: Double
        var locationType: Int
        var parent: Int32
        var wheelchair: Int
        var platform: String?
        var feed: Int32
        var routes: [Int32] = []
        var children: [Int32] = []
    }

    struct Route: Sendable {
        var id: String
        var gtfsID: String
        var agency: String
        var shortName: String?
        var longName: String?
        var description: String?
        var type: Int
        var url: String?
        var color: String?
        var textColor: String?
        var sortOrder: Int?
        var feed: Int32
        /// Per direction (nil, 0, 1), the stops in order of the direction's longest trip.
        var directions: [Direction] = []
        var shapes: [Int32] = []

        var displayName: String { shortName ?? longName ?? gtfsID }
    }

    struct Direction: Sendable {
        var id: Int?
        var headsign: String?
        var stops: [Int32]
    }

    struct Trip: Sendable {
        var id: String
        var gtfsID: String
        var route: Int32
        var service: Int32
        var headsign: String?
        var shortName: String?
        var direction: Int?
        var block: String?
        var shape: Int32
        var wheelchair: Int
        /// Its stop times: `first ..< first + count` of the network's stop-time arrays.
        var first: Int32
        var count: Int32
    }

    struct Shape: Sendable {
        var id: String
        var points: [(lat: Double, lon: Double)]
    }

    let feeds: [Feed]
    let agencies: [Agency]
    let stops: [Stop]
    let routes: [Route]
    let trips: [Trip]
    let services: [ServiceCalendar]
    /// Each service's GTFS service_id.
    let serviceNames: [String]
    /// The box around every stop and station (nil without any).
    let bounds: (minLat: Double, maxLat: Double, minLon: Double, maxLon: Double)?
    let shapes: [Shape]
    let stopIndex: [String: Int32]
    let routeIndex: [String: Int32]
    let tripIndex: [String: Int32]
    let agencyIndex: [String: Int32]
    /// Per feed, trips by their GTFS id (GTFS-realtime names trips so).
    let feedTrips: [[String: Int32]]
    /// Stop times, by trip in stop order.
    let stStop: [Int32]
    let stArrival: [Int32]
    let stDeparture: [Int32]
    let stSequence: [Int32]
    let stTrip: [Int32]
    let stHeadsign: [String?]
    /// Each stop's stop times sorted by departure: `stopTimes[stopTimesStart[s] ..< stopTimesStart[s + 1]]`.
    let stopTimesStart: [Int32]
    let stopTimes: [Int32]
    /// The latest time of day any stop time has (a service day may run past 24:00:00).
    let maxTime: Int32
    let spatial: SpatialIndex
    let names: NameIndex

    static let empty = TransitNetwork(builder: NetworkBuilder())

    init(builder: NetworkBuilder) {
        feeds = builder.feeds
        agencies = builder.agencies
        services = builder.services
        serviceNames = builder.serviceNames
        shapes = builder.shapes
        agencyIndex = builder.agencyIndex
        feedTrips = builder.feedTrips
        var stops = builder.stops
        var routes = builder.routes
        var trips = builder.trips

        // Stop times: grouped by trip, in sequence order, with missing times interpolated.
        let rows = builder.stopTimes
        var order = Array(0..<Int32(rows.count))
        order.sort { rows[Int($0)].trip != rows[Int($1)].trip ? rows[Int($0)].trip < rows[Int($1)].trip : rows[Int($0)].sequence < rows[Int($1)].sequence }
        var stStop: [Int32] = [], stArrival: [Int32] = [], stDeparture: [Int32] = [], stSequence: [Int32] = [], stTrip: [Int32] = []
        var stHeadsign: [String?] = []
        stStop.reserveCapacity(rows.count); stArrival.reserveCapacity(rows.count); stDeparture.reserveCapacity(rows.count)
        stSequence.reserveCapacity(rows.count); stTrip.reserveCapacity(rows.count); stHeadsign.reserveCapacity(rows.count)
        var maxTime: Int32 = 0
        var index = 0
        while index < order.count {
            let trip = rows[Int(order[index])].trip
            var end = index
            while end < order.count, rows[Int(order[end])].trip == trip { end += 1 }
            let first = Int32(stStop.count)
            var lastSequence = Int32.min
            for position in index..<end {
                let row = rows[Int(order[position])]
                guard row.sequence != lastSequence else { continue }   // a repeated stop_sequence: the first one counts
                lastSequence = row.sequence
                stStop.append(row.stop)
                stArrival.append(row.arrival ?? row.departure ?? -1)
                stDeparture.append(row.departure ?? row.arrival ?? -1)
                stSequence.append(row.sequence)
                stTrip.append(trip)
                stHeadsign.append(row.headsign)
            }
            let count = Int32(stStop.count) - first
            Self.interpolate(first: Int(first), count: Int(count), arrival: &stArrival, departure: &stDeparture)
            trips[Int(trip)].first = first
            trips[Int(trip)].count = count
            for position in Int(first)..<Int(first + count) { maxTime = max(maxTime, stDeparture[position], stArrival[position]) }
            index = end
        }
        self.stStop = stStop; self.stArrival = stArrival; self.stDeparture = stDeparture
        self.stSequence = stSequence; self.stTrip = stTrip; self.stHeadsign = stHeadsign
        self.maxTime = maxTime

        // Each stop's stop times by departure, and the routes that serve it.
        var counts = [Int32](repeating: 0, count: stops.count + 1)
        for stop in stStop { counts[Int(stop) + 1] += 1 }
        for position in 1..<counts.count { counts[position] += counts[position - 1] }
        var fill = counts
        var byStop = [Int32](repeating: 0, count: stStop.count)
        for (position, stop) in stStop.enumerated() {
            byStop[Int(fill[Int(stop)])] = Int32(position)
            fill[Int(stop)] += 1
        }
        var routeSets = [Set<Int32>](repeating: [], count: stops.count)
        for stop in 0..<stops.count {
            let range = Int(counts[stop])..<Int(counts[stop + 1])
            byStop[range].sort { stDeparture[Int($0)] != stDeparture[Int($1)] ? stDeparture[Int($0)] < stDeparture[Int($1)] : $0 < $1 }
            for position in range { routeSets[stop].insert(trips[Int(stTrip[Int(byStop[position])])].route) }
        }
        for stop in 0..<stops.count {
            stops[stop].routes = routeSets[stop].sorted { routes[Int($0)].id < routes[Int($1)].id }
            if stops[stop].parent >= 0 { stops[Int(stops[stop].parent)].children.append(Int32(stop)) }
        }
        for stop in 0..<stops.count where !stops[stop].children.isEmpty {
            var union = Set(stops[stop].routes)
            for child in stops[stop].children { union.formUnion(stops[Int(child)].routes) }
            stops[stop].routes = union.sorted { routes[Int($0)].id < routes[Int($1)].id }
        }
        stopTimesStart = counts
        stopTimes = byStop

        // Each route's directions: the stops of its longest trip per direction.
        var longest: [Int32: [Int: Int32]] = [:]
        var shapesOfRoute: [Int32: Set<Int32>] = [:]
        for (tripIndex, trip) in trips.enumerated() where trip.count > 0 {
            let key = trip.direction ?? -1
            if let current = longest[trip.route]?[key], trips[Int(current)].count >= trip.count { } else {
                longest[trip.route, default: [:]][key] = Int32(tripIndex)
            }
            if trip.shape >= 0 { shapesOfRoute[trip.route, default: []].insert(trip.shape) }
        }
        for (route, byDirection) in longest {
            routes[Int(route)].directions = byDirection.sorted { $0.key < $1.key }.map { key, tripIndex in
                let trip = trips[Int(tripIndex)]
                return Direction(id: key < 0 ? nil : key, headsign: trip.headsign,
                                 stops: Array(stStop[Int(trip.first)..<Int(trip.first + trip.count)]))
            }
            routes[Int(route)].shapes = (shapesOfRoute[route] ?? []).sorted()
        }

        self.stops = stops
        self.routes = routes
        self.trips = trips
        stopIndex = builder.stopIndex
        routeIndex = builder.routeIndex
        tripIndex = builder.tripIndex
        let located = stops.filter { $0.locationType <= 1 }
        bounds = located.isEmpty ? nil : (located.map(\.lat).min()!, located.map(\.lat).max()!, located.map(\.lon).min()!, located.map(\.lon).max()!)
        spatial = SpatialIndex(points: stops.map { ($0.lat, $0.lon) }, include: stops.map { $0.locationType == 0 || $0.locationType == 1 })
        names = NameIndex(names: stops.map(\.name), include: stops.map { $0.locationType == 0 || $0.locationType == 1 })
    }

    /// Fills stop times that have no time (a stop between two timepoints) linearly by position.
    private static func interpolate(first: Int, count: Int, arrival: inout [Int32], departure: inout [Int32]) {
        var previous = -1
        for position in first..<(first + count) where arrival[position] >= 0 {
            if previous >= 0, position - previous > 1 {
                let from = Double(departure[previous]), to = Double(arrival[position])
                for gap in (previous + 1)..<position {
                    let value = Int32((from + (to - from) * Double(gap - previous) / Double(position - previous)).rounded())
                    arrival[gap] = value
                    departure[gap] = value
                }
            }
            previous = position
        }
        // Times before the first or after the last timepoint cannot be known: take the nearest.
        if previous >= 0 {
            for position in first..<(first + count) where arrival[position] < 0 {
                arrival[position] = arrival[previous]
                departure[position] = departure[previous]
            }
        }
    }

    // MARK: - Lookups

    func stop(_ id: String) -> Int32? { stopIndex[id] }
    func route(_ id: String) -> Int32? { routeIndex[id] }
    func trip(_ id: String) -> Int32? { tripIndex[id] }

    func zone(ofStop stop: Int32) -> TimeZone { feeds[Int(stops[Int(stop)].feed)].zone }
    func zone(ofTrip trip: Int32) -> TimeZone { feeds[Int(routes[Int(trips[Int(trip)].route)].feed)].zone }

    /// The stop times of `trip`, as positions in the stop-time arrays.
    func stopTimes(of trip: Int32) -> Range<Int> {
        let value = trips[Int(trip)]
        return Int(value.first)..<Int(value.first + value.count)
    }

    /// The service days whose trips may reach `from ... to` (UTC seconds) at some stop, oldest first.
    func serviceDays(covering from: Int64, _ to: Int64, zone: TimeZone) -> [Int32] {
        let reach = Int64(maxTime) / 86_400 + 1
        let first = ServiceDay.day(of: from, in: zone) - Int32(reach)
        let last = ServiceDay.day(of: to, in: zone) + 1
        return Array(first...last)
    }
}

/// One stop time row of a feed, as the builder collects them.
struct StopTimeRow: Sendable {
    var trip: Int32
    var sequence: Int32
    var stop: Int32
    var arrival: Int32?
    var departure: Int32?
    var headsign: String?
}

/// What a feed holds, counted at import.
struct FeedSummary: Codable, Sendable, Equatable {
    var agencies = 0
    var stops = 0
    var routes = 0
    var trips = 0
    var stopTimes = 0
    var services = 0
    var shapes = 0
    var frequencyTrips = 0
    var rejected = 0
}

/// Collects feeds' rows (from the database) into a ``TransitNetwork``.
struct NetworkBuilder {
    var feeds: [TransitNetwork.Feed] = []
    var agencies: [TransitNetwork.Agency] = []
    var stops: [TransitNetwork.Stop] = []
    var routes: [TransitNetwork.Route] = []
    var trips: [TransitNetwork.Trip] = []
    var services: [ServiceCalendar] = []
    var serviceNames: [String] = []
    var shapes: [TransitNetwork.Shape] = []
    var stopTimes: [StopTimeRow] = []
    var agencyIndex: [String: Int32] = [:]
    var stopIndex: [String: Int32] = [:]
    var routeIndex: [String: Int32] = [:]
    var tripIndex: [String: Int32] = [:]
    var feedTrips: [[String: Int32]] = []
}
