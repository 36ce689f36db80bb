import Foundation
import SwiftProtobuf

/// Reads a GTFS-realtime FeedMessage's TripUpdates and resolves them against the schedule:
/// trips by their GTFS id (a frequency-based trip by id and `start_time`), service days by
/// `start_date` or, without one, the day the trip runs nearest the message's time, stop time
/// updates by `stop_sequence` or else by `stop_id`. Trips and stops the schedule does not know are
/// counted and ignored.
enum RealtimeDecoder {
    struct Failure: Error {
        var message: String
    }

    struct Decoded {
        var predictions: [(TripPrediction, Int64)]
        var status: RealtimeStatus
    }

    /// The largest message read (a feed of a big city's every trip is a few megabytes).
    static let maxMessageBytes = 64 << 20

    static func decode(_ data: Data, feed: Int32, network: TransitNetwork) throws -> Decoded {
        guard data.count <= maxMessageBytes else { throw Failure(message: "it is larger than \(maxMessageBytes >> 20) MB") }
        let message: TransitRealtime_FeedMessage
        do {
            var options = BinaryDecodingOptions()
            options.messageDepthLimit = 32
            message = try TransitRealtime_FeedMessage(serializedBytes: data, options: options)
        } catch {
            throw Failure(message: "\(error)")
        }
        guard message.hasHeader, message.header.hasGtfsRealtimeVersion else {
            throw Failure(message: "it has no header with a gtfs_realtime_version")
        }
        let view = TransitView(network: network, realtime: .empty)
        let headerTime = message.header.hasTimestamp ? Int64(clamping: message.header.timestamp) : nil
        let trips = Int(feed) < network.feedTrips.count ? network.feedTrips[Int(feed)] : [:]
        var status = RealtimeStatus(tripUpdates: 0, unknownTrips: 0, unmatchedStops: 0)
        status.messageTime = headerTime.map { Date(timeIntervalSince1970: Double($0)) }
        var predictions: [(TripPrediction, Int64)] = []

        for entity in message.entity where entity.hasTripUpdate && !entity.isDeleted {
            let update = entity.tripUpdate
            status.tripUpdates += 1
            let descriptor = update.trip
            var trip: Int32?
            if descriptor.hasTripID {
                trip = trips[descriptor.tripID]
                if descriptor.hasStartTime, let expanded = trips[descriptor.tripID + "@" + normalized(descriptor.startTime)] { trip = expanded }
            }
            guard let trip else {
                status.unknownTrips += 1
                continue
            }
            let zone = network.zone(ofTrip: trip)
            let reference = update.hasTimestamp ? Int64(clamping: update.timestamp) : (headerTime ?? 0)
            var day: Int32?
            if descriptor.hasStartDate {
                day = GTFSFormat.date(descriptor.startDate)
                if day == nil {
                    status.unknownTrips += 1
                    continue
                }
            } else {
                day = view.serviceDay(of: trip, near: reference) ?? ServiceDay.day(of: reference, in: zone)
            }
            guard let day else { continue }
            let base = ServiceDay.start(of: day, in: zone)
            let range = network.stopTimes(of: trip)

            var resolved: [TripPrediction.Update] = []
            var searchFrom = range.lowerBound
            var largest: Int64 = 0
            for stopUpdate in update.stopTimeUpdate {
                var position: Int?
                if stopUpdate.hasStopSequence {
                    let sequence = Int32(clamping: stopUpdate.stopSequence)
                    position = range.first { network.stSequence[$0] == sequence }
                } else if stopUpdate.hasStopID {
                    let stopID = network.feeds[Int(feed)].agencyID + "_" + stopUpdate.stopID
                    if let stop = network.stopIndex[stopID] {
                        position = (searchFrom..<range.upperBound).first { network.stStop[$0] == stop }
                    }
                }
                guard let position else {
                    status.unmatchedStops += 1
                    continue
                }
                searchFrom = position + 1
                func event(_ has: Bool, _ value: TransitRealtime_TripUpdate.StopTimeEvent) -> TripPrediction.Event? {
                    guard has, value.hasTime || value.hasDelay else { return nil }
                    return TripPrediction.Event(time: value.hasTime ? value.time : nil, delay: value.hasDelay ? value.delay : nil)
                }
                let relationship: TripPrediction.Relationship = switch stopUpdate.scheduleRelationship {
                case .skipped: .skipped
                case .noData: .noData
                default: .scheduled
                }
                let arrival = event(stopUpdate.hasArrival, stopUpdate.arrival)
                let departure = event(stopUpdate.hasDeparture, stopUpdate.departure)
                for (given, scheduled) in [(arrival, base + Int64(network.stArrival[position])), (departure, base + Int64(network.stDeparture[position]))] {
                    if let predicted = given?.predicted(scheduled: scheduled) { largest = max(largest, abs(predicted - scheduled)) }
                }
                let item = TripPrediction.Update(position: Int32(position - range.lowerBound), arrival: arrival, departure: departure, relationship: relationship)
                if let last = resolved.last, last.position >= item.position {
                    resolved.removeAll { $0.position >= item.position }
                }
                resolved.append(item)
            }
            if update.hasDelay { largest = max(largest, Int64(abs(update.delay))) }
            let prediction = TripPrediction(
                trip: trip, serviceDay: day,
                canceled: descriptor.hasScheduleRelationship && descriptor.scheduleRelationship == .canceled,
                updates: resolved, tripDelay: update.hasDelay ? update.delay : nil,
                vehicle: update.hasVehicle && update.vehicle.hasID ? update.vehicle.id : nil,
                timestamp: update.hasTimestamp ? Int64(clamping: update.timestamp) : nil)
            predictions.append((prediction, largest))
        }
        return Decoded(predictions: predictions, status: status)
    }

    /// `8:05:00` → `08:05:00`, as frequency-based trips are named.
    static func normalized(_ time: String) -> String {
        guard let seconds = GTFSFormat.time(time) else { return time }
        return GTFSFormat.formatTime(seconds)
    }
}
