import Foundation

/// The realtime predictions of every feed, resolved against one network.
struct RealtimeIndex: Sendable {
    struct Key: Hashable, Sendable {
        var trip: Int32
        var day: Int32
    }

    var predictions: [Key: TripPrediction] = [:]
    /// The largest delay any prediction carries, in seconds (how far before a window a late
    /// vehicle's scheduled time may lie).
    var maxDelay: Int64 = 0

    static let empty = RealtimeIndex()

    func prediction(trip: Int32, day: Int32) -> TripPrediction? {
        predictions.isEmpty ? nil : predictions[Key(trip: trip, day: day)]
    }

    mutating func add(_ prediction: TripPrediction, delay: Int64) {
        predictions[Key(trip: prediction.trip, day: prediction.serviceDay)] = prediction
        maxDelay = max(maxDelay, min(delay, 4 * 3600))
    }
}

/// A stop time of one trip on one service day: what arrival lists are made of.
struct TripStop: Sendable {
    /// The stop time's position in the network's stop-time arrays.
    var stopTime: Int32
    var trip: Int32
    var serviceDay: Int32
    /// The service day's start (noon − 12 h, UTC seconds).
    var base: Int64
    var scheduledArrival: Int64
    var scheduledDeparture: Int64
    var predicted: PredictedTime
    /// Stops between the vehicle and this stop at the time asked (0: at or next to arrive; negative: passed).
    var stopsAway: Int
    /// The stop time's place in its trip (0-based) and the trip's number of stops.
    var index: Int
    var totalStops: Int

    var predictedOrScheduledDeparture: Int64 { predicted.departure ?? scheduledDeparture }
    var predictedOrScheduledArrival: Int64 { predicted.arrival ?? scheduledArrival }
}

/// The network with its realtime predictions: every query the APIs answer.
struct TransitView: Sendable {
    let network: TransitNetwork
    let realtime: RealtimeIndex

    /// Stops (and stations) within `radius` metres, nearest first.
    func nearestStops(lat: Double, lon: Double, radius: Double, limit: Int) -> [(stop: Int32, distance: Double)] {
        network.spatial.nearest(lat: lat, lon: lon, radius: radius, limit: limit).map { ($0.index, $0.distance) }
    }

    /// Routes serving the stops within `radius` metres, those of the nearest stops first.
    func routesNear(lat: Double, lon: Double, radius: Double, limit: Int) -> [Int32] {
        var seen = Set<Int32>()
        var result: [Int32] = []
        for (stop, _) in nearestStops(lat: lat, lon: lon, radius: radius, limit: 1000) {
            for route in network.stops[Int(stop)].routes where seen.insert(route).inserted {
                result.append(route)
                if result.count == limit { return result }
            }
        }
        return result
    }

    /// Stops whose name has a word starting with `query`.
    func searchStops(_ query: String, limit: Int) -> [Int32] {
        let stops = network.stops
        return network.names.search(query, limit: limit) { a, b in
            let x = stops[Int(a)], y = stops[Int(b)]
            return x.name.count != y.name.count ? x.name.count < y.name.count : (x.name != y.name ? x.name < y.name : x.id < y.id)
        }
    }

    /// The stop itself, or a station's stops.
    func servedStops(_ stop: Int32) -> [Int32] {
        let value = network.stops[Int(stop)]
        return value.children.isEmpty ? [stop] : [stop] + value.children
    }

    /// The predicted times of a trip instance, or nil without realtime data for it.
    func predictions(trip: Int32, day: Int32, base: Int64) -> [PredictedTime]? {
        guard let prediction = realtime.prediction(trip: trip, day: day) else { return nil }
        let range = network.stopTimes(of: trip)
        return prediction.predict(arrivals: range.map { base + Int64(network.stArrival[$0]) },
                                  departures: range.map { base + Int64(network.stDeparture[$0]) })
    }

    /// Arrivals and departures at `stop` (a station: at its stops) whose departure, scheduled or
    /// predicted, falls within `from ... to` — or, with `anyTime`, whose arrival or departure does
    /// (OneBusAway's rule) — by that time.
    func arrivals(at stop: Int32, time: Int64, from: Int64, to: Int64, anyTime: Bool = false) -> [TripStop] {
        let zone = network.zone(ofStop: stop)
        let slack = realtime.maxDelay
        // A vehicle arriving in the window may leave after it: look that much further.
        let dwell: Int64 = anyTime ? 1800 : 0
        var result: [TripStop] = []
        var tripTimes: [Int32: [PredictedTime]?] = [:]
        for served in servedStops(stop) {
            let lower = Int(network.stopTimesStart[Int(served)]), upper = Int(network.stopTimesStart[Int(served) + 1])
            guard lower < upper else { continue }
            for day in network.serviceDays(covering: from - slack, to + slack, zone: zone) {
                let base = ServiceDay.start(of: day, in: zone)
                // The first stop time departing at or after the window's start (less the largest delay).
                let earliest = from - slack - base
                guard earliest <= Int64(network.maxTime), to + slack - base >= 0 else { continue }
                var low = lower, high = upper
                while low < high {
                    let middle = (low + high) / 2
                    if Int64(network.stDeparture[Int(network.stopTimes[middle])]) < earliest { low = middle + 1 } else { high = middle }
                }
                var position = low
                while position < upper {
                    let stopTime = network.stopTimes[position]
                    position += 1
                    let departure = Int64(network.stDeparture[Int(stopTime)])
                    if departure > to + slack + dwell - base { break }
                    let trip = network.stTrip[Int(stopTime)]
                    guard network.services[Int(network.trips[Int(trip)].service)].runs(on: day) else { continue }
                    let item = tripStop(stopTime, trip: trip, day: day, base: base, time: time, cache: &tripTimes)
                    let window = from...to
                    var inside = window.contains(item.scheduledDeparture) || item.predicted.departure.map(window.contains) == true
                    if anyTime && !inside {
                        inside = window.contains(item.scheduledArrival) || item.predicted.arrival.map(window.contains) == true
                    }
                    if inside { result.append(item) }
                }
            }
        }
        result.sort { a, b in
            a.predictedOrScheduledDeparture != b.predictedOrScheduledDeparture
                ? a.predictedOrScheduledDeparture < b.predictedOrScheduledDeparture : a.stopTime < b.stopTime
        }
        return result
    }

    /// One stop time of a trip instance, with its prediction and the stops between it and the vehicle at `time`.
    func tripStop(_ stopTime: Int32, trip: Int32, day: Int32, base: Int64, time: Int64) -> TripStop {
        var cache: [Int32: [PredictedTime]?] = [:]
        return tripStop(stopTime, trip: trip, day: day, base: base, time: time, cache: &cache)
    }

    private func tripStop(_ stopTime: Int32, trip: Int32, day: Int32, base: Int64, time: Int64, cache: inout [Int32: [PredictedTime]?]) -> TripStop {
        let range = network.stopTimes(of: trip)
        let index = Int(stopTime) - range.lowerBound
        let predicted: [PredictedTime]?
        if let cached = cache[trip] { predicted = cached } else {
            predicted = predictions(trip: trip, day: day, base: base)
            cache[trip] = .some(predicted)
        }
        // Where the vehicle is at `time`: the first stop it has not yet left.
        var next = range.count
        for (offset, position) in range.enumerated() {
            let departure = predicted?[offset].departure ?? (base + Int64(network.stDeparture[position]))
            if departure >= time { next = offset; break }
        }
        return TripStop(stopTime: stopTime, trip: trip, serviceDay: day, base: base,
                        scheduledArrival: base + Int64(network.stArrival[Int(stopTime)]),
                        scheduledDeparture: base + Int64(network.stDeparture[Int(stopTime)]),
                        predicted: predicted?[index] ?? .scheduled, stopsAway: index - next, index: index, totalStops: range.count)
    }

    /// Every stop time of a trip on a service day.
    func tripStops(_ trip: Int32, day: Int32, time: Int64) -> [TripStop] {
        let zone = network.zone(ofTrip: trip)
        let base = ServiceDay.start(of: day, in: zone)
        var cache: [Int32: [PredictedTime]?] = [:]
        return network.stopTimes(of: trip).map { tripStop(Int32($0), trip: trip, day: day, base: base, time: time, cache: &cache) }
    }

    /// The service day of `trip` running nearest to `time` (among the days its service runs).
    func serviceDay(of trip: Int32, near time: Int64) -> Int32? {
        let zone = network.zone(ofTrip: trip)
        let range = network.stopTimes(of: trip)
        guard !range.isEmpty else { return nil }
        let today = ServiceDay.day(of: time, in: zone)
        let service = network.services[Int(network.trips[Int(trip)].service)]
        var best: (day: Int32, distance: Int64)?
        for day in (today - 2)...(today + 1) where service.runs(on: day) {
            let base = ServiceDay.start(of: day, in: zone)
            let start = base + Int64(network.stDeparture[range.lowerBound]), end = base + Int64(network.stArrival[range.upperBound - 1])
            let distance = time < start ? start - time : (time > end ? time - end : 0)
            if best == nil || distance < best!.distance { best = (day, distance) }
        }
        return best?.day
    }

    /// The stop's stop times on a service day, by departure.
    func schedule(at stop: Int32, day: Int32) -> [TripStop] {
        let zone = network.zone(ofStop: stop)
        let base = ServiceDay.start(of: day, in: zone)
        var result: [TripStop] = []
        for served in servedStops(stop) {
            for position in Int(network.stopTimesStart[Int(served)])..<Int(network.stopTimesStart[Int(served) + 1]) {
                let stopTime = network.stopTimes[position]
                let trip = network.stTrip[Int(stopTime)]
                guard network.services[Int(network.trips[Int(trip)].service)].runs(on: day) else { continue }
                let range = network.stopTimes(of: trip)
                result.append(TripStop(stopTime: stopTime, trip: trip, serviceDay: day, base: base,
                                       scheduledArrival: base + Int64(network.stArrival[Int(stopTime)]),
                                       scheduledDeparture: base + Int64(network.stDeparture[Int(stopTime)]),
                                       predicted: .scheduled, stopsAway: 0, index: Int(stopTime) - range.lowerBound, totalStops: range.count))
            }
        }
        result.sort { $0.scheduledDeparture != $1.scheduledDeparture ? $0.scheduledDeparture < $1.scheduledDeparture : $0.stopTime < $1.stopTime }
        return result
    }

    /// Each stop of a route (per direction, in order) with the route's next departure there after `time`.
    func nextOfRoute(_ route: Int32, time: Int64, horizon: Int64 = 4 * 3600) -> [(direction: TransitNetwork.Direction, stop: Int32, next: TripStop?)] {
        var result: [(TransitNetwork.Direction, Int32, TripStop?)] = []
        for direction in network.routes[Int(route)].directions {
            for stop in direction.stops {
                let next = arrivals(at: stop, time: time, from: time, to: time + horizon).first { item in
                    network.trips[Int(item.trip)].route == route && network.trips[Int(item.trip)].direction == direction.id
                        && item.predicted.status != .skipped && item.predicted.status != .cancelled
                }
                result.append((direction, stop, next))
            }
        }
        return result
    }
}
