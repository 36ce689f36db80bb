import Foundation
import GatewayCore

/// The network's values in the native API's shapes.
enum TransitJSON {
    static func date(_ seconds: Int64) -> Date { Date(timeIntervalSince1970: Double(seconds)) }

    static func findStop(_ id: String, in network: TransitNetwork) throws -> Int32 {
        guard let stop = network.stop(id) else { throw GatewayError.notFound("No stop '\(id.prefix(100))'.") }
        return stop
    }

    static func agency(_ agency: TransitNetwork.Agency, network: TransitNetwork) -> AgencyInfo {
        AgencyInfo(id: agency.id, name: agency.name, url: agency.url, timeZone: agency.timeZone, lang: agency.lang, phone: agency.phone,
                   feed: network.feeds[Int(agency.feed)].id)
    }

    static func stop(_ index: Int32, network: TransitNetwork, distance: Double? = nil) -> StopInfo {
        let stop = network.stops[Int(index)]
        return StopInfo(id: stop.id, code: stop.code, name: stop.name, description: stop.description, lat: stop.lat, lon: stop.lon,
                        locationType: stop.locationType, parent: stop.parent >= 0 ? network.stops[Int(stop.parent)].id : nil,
                        wheelchairBoarding: stop.wheelchair, routes: stop.routes.map { network.routes[Int($0)].id },
                        distance: distance.map { ($0 * 10).rounded() / 10 })
    }

    static func route(_ index: Int32, network: TransitNetwork) -> RouteInfo {
        let route = network.routes[Int(index)]
        return RouteInfo(id: route.id, agency: route.agency, shortName: route.shortName, longName: route.longName, description: route.description,
                         type: route.type, url: route.url, color: route.color, textColor: route.textColor)
    }

    static func stopDetail(_ index: Int32, network: TransitNetwork) -> StopDetail {
        let stop = network.stops[Int(index)]
        return StopDetail(stop: self.stop(index, network: network), routes: stop.routes.map { route($0, network: network) },
                          stops: stop.children.map { self.stop($0, network: network) })
    }

    static func routeDetail(_ index: Int32, network: TransitNetwork) -> RouteDetail {
        let route = network.routes[Int(index)]
        return RouteDetail(route: self.route(index, network: network),
                           directions: route.directions.map { direction in
                               RouteDirection(direction: direction.id, headsign: direction.headsign, stops: direction.stops.map { stop($0, network: network) })
                           },
                           polylines: route.shapes.map { Polyline.encode(network.shapes[Int($0)].points) })
    }

    static func arrival(_ item: TripStop, network: TransitNetwork) -> ArrivalInfo {
        let trip = network.trips[Int(item.trip)]
        let route = network.routes[Int(trip.route)]
        return ArrivalInfo(trip: trip.id, route: route.id, routeShortName: route.shortName ?? route.longName,
                           headsign: network.stHeadsign[Int(item.stopTime)] ?? trip.headsign,
                           stop: network.stops[Int(network.stStop[Int(item.stopTime)])].id, serviceDate: ServiceDay.format(item.serviceDay),
                           stopSequence: Int(network.stSequence[Int(item.stopTime)]), totalStops: item.totalStops, stopsAway: item.stopsAway,
                           scheduledArrival: date(item.scheduledArrival), scheduledDeparture: date(item.scheduledDeparture),
                           predictedArrival: item.predicted.arrival.map(date), predictedDeparture: item.predicted.departure.map(date),
                           status: item.predicted.status.rawValue)
    }

    static func tripDetail(_ index: Int32, day: Int32, time: Int64, view: TransitView) -> TripDetail {
        let network = view.network
        let trip = network.trips[Int(index)]
        return TripDetail(id: trip.id, route: route(trip.route, network: network), headsign: trip.headsign, shortName: trip.shortName,
                          direction: trip.direction, block: trip.block, serviceDate: ServiceDay.format(day),
                          stopTimes: view.tripStops(index, day: day, time: time).map { item in
                              let stop = network.stops[Int(network.stStop[Int(item.stopTime)])]
                              return TripStopTime(stop: stop.id, stopName: stop.name, stopSequence: Int(network.stSequence[Int(item.stopTime)]),
                                                  scheduledArrival: date(item.scheduledArrival), scheduledDeparture: date(item.scheduledDeparture),
                                                  predictedArrival: item.predicted.arrival.map(date), predictedDeparture: item.predicted.departure.map(date),
                                                  status: item.predicted.status.rawValue)
                          },
                          polyline: trip.shape >= 0 ? Polyline.encode(network.shapes[Int(trip.shape)].points) : nil)
    }
}
