import Foundation

/// A trip's GTFS-realtime TripUpdate, resolved against the schedule.
struct TripPrediction: Sendable {
    enum Relationship: Sendable {
        case scheduled, skipped, noData
    }

    /// One StopTimeEvent: an absolute time or a delay.
    struct Event: Sendable {
        var time: Int64?
        var delay: Int32?

        /// The predicted instant for a stop time scheduled at `scheduled`.
        func predicted(scheduled: Int64) -> Int64? {
            if let time { return time }
            if let delay { return scheduled + Int64(delay) }
            return nil
        }
    }

    /// One StopTimeUpdate: `position` is the stop time's place in its trip (0 = first stop).
    struct Update: Sendable {
        var position: Int32
        var arrival: Event?
        var departure: Event?
        var relationship: Relationship
    }

    var trip: Int32
    var serviceDay: Int32
    var canceled: Bool
    /// Sorted by position, one per position.
    var updates: [Update]
    /// A delay for the whole trip (TripUpdate.delay) where no stop says otherwise.
    var tripDelay: Int32?
    var vehicle: String?
    var timestamp: Int64?
}

/// What the realtime data says of one stop time of a trip instance.
struct PredictedTime: Sendable, Equatable {
    enum Status: String, Sendable {
        /// No realtime data for it: the schedule stands.
        case scheduled
        /// A predicted arrival and departure.
        case predicted
        /// The vehicle will not stop (StopTimeUpdate SKIPPED).
        case skipped
        /// The realtime feed says it has no data for it (NO_DATA, carried to the later stops).
        case noData
        /// The trip is cancelled.
        case cancelled
    }

    var arrival: Int64?
    var departure: Int64?
    var status: Status

    static let scheduled = PredictedTime(arrival: nil, departure: nil, status: .scheduled)
}

extension TripPrediction {
    /// The predicted times of every stop time of the trip (scheduled at `arrivals[i]`,
    /// `departures[i]`, absolute seconds), following the GTFS-realtime rules: an update's delay
    /// carries to the later stops until the next update; a stop without an arrival prediction takes
    /// the delay carried to it, a stop without a departure prediction its arrival's delay; SKIPPED
    /// affects only its stop; NO_DATA ends the carried delay until the next update; stops before
    /// the first update have no prediction (unless the trip as a whole has a delay).
    func predict(arrivals: [Int64], departures: [Int64]) -> [PredictedTime] {
        let count = arrivals.count
        if canceled { return Array(repeating: PredictedTime(arrival: nil, departure: nil, status: .cancelled), count: count) }
        var result = Array(repeating: PredictedTime.scheduled, count: count)
        var carried: Int64? = tripDelay.map(Int64.init)
        var noData = false
        var next = 0
        for position in 0..<count {
            let scheduledArrival = arrivals[position], scheduledDeparture = departures[position]
            if next < updates.count, updates[next].position == Int32(position) {
                let update = updates[next]
                next += 1
                switch update.relationship {
                case .noData:
                    carried = nil
                    noData = true
                    result[position] = PredictedTime(arrival: nil, departure: nil, status: .noData)
                    continue
                case .skipped:
                    result[position] = PredictedTime(arrival: nil, departure: nil, status: .skipped)
                    continue
                case .scheduled:
                    noData = false
                }
                var arrival = update.arrival?.predicted(scheduled: scheduledArrival)
                var departure = update.departure?.predicted(scheduled: scheduledDeparture)
                if arrival == nil {
                    if let carried { arrival = scheduledArrival + carried } else if let departure { arrival = min(departure, scheduledArrival + (departure - scheduledDeparture)) }
                }
                if departure == nil, let arrival { departure = max(arrival, scheduledDeparture + (arrival - scheduledArrival)) }
                guard let arrival, let departure else { continue }
                result[position] = PredictedTime(arrival: arrival, departure: max(departure, arrival), status: .predicted)
                carried = max(departure, arrival) - scheduledDeparture
            } else if let carried {
                result[position] = PredictedTime(arrival: scheduledArrival + carried, departure: scheduledDeparture + carried, status: .predicted)
            } else if noData {
                result[position] = PredictedTime(arrival: nil, departure: nil, status: .noData)
            }
        }
        return result
    }
}
