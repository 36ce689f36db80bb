import Foundation
import GatewayCore
import GatewaySupport

/// The COIMOTION twCtBus API of the old app (legacy-apis.md §1, seed 000), over the same network
/// as the native API: the stops near a point, the routes of a stop, a route's stops with their next
/// arrivals.
///
/// Shapes the public record leaves open, chosen as the old app would read them (*unverified*):
/// `tsID` and `brID` are the native API's stop and route ids (the app only sends back what it was
/// given); `latitude` and `longitude` are numbers; `arvTime` is the next arrival's local time
/// `HH:mm`, predicted when realtime data says so, and `""` when no vehicle comes in the next four
/// hours (the app shows the time "if there is one"); `isInBd` is 1 for the route's inbound
/// direction (GTFS `direction_id` 1) and 0 otherwise; `descTx` is the route's long name.
enum TwCtBusDialect {
    struct StopRow: Encodable, Sendable {
        var tsID: String
        var stName: String
        var stCode: String
        var latitude: Double
        var longitude: Double
    }

    struct RouteRow: Encodable, Sendable {
        var rtName: String
        var descTx: String
        var brID: String
    }

    struct NextRow: Encodable, Sendable {
        var stName: String
        var arvTime: String
        var isInBd: Int
    }

    struct List<Row: Encodable & Sendable>: Encodable, Sendable {
        var list: [Row]
    }

    /// How many stops `busStop/search` answers.
    static let nearestStops = 20

    static func make(runtime: TransitRuntime, settings: TransitPlugin.Configuration) -> Dialect {
        let live = CachePolicy.shared(ttl: .seconds(10), tags: ["transit"])
        return Coimotion.dialect(name: "coimotion-twctbus", routes: [
            Route.define(.post, "/coimotion/twCtBus/busStop/search", summary: "twCtBus: the stops nearest a point (lat, lng)")
                .cache(live)
                .handle(Coimotion.call { call, _ in
                    guard let lat = try call.double("lat") else { throw GatewayError.invalid(field: "lat", "is required") }
                    guard let lng = try call.double("lng") else { throw GatewayError.invalid(field: "lng", "is required") }
                    if let problem = TransitInput.point(lat: lat, lon: lng).first {
                        throw GatewayError.invalid(field: problem.pointer == "lon" ? "lng" : problem.pointer, problem.detail)
                    }
                    let view = runtime.view()
                    let stops = view.nearestStops(lat: lat, lon: lng, radius: settings.maxRadius, limit: nearestStops)
                    return .ok(List(list: stops.map { found in
                        let stop = view.network.stops[Int(found.stop)]
                        return StopRow(tsID: stop.id, stName: stop.name, stCode: stop.code ?? "", latitude: stop.lat, longitude: stop.lon)
                    }))
                }),
            Route.define(.post, "/coimotion/twCtBus/busStop/routes/{tsID}", summary: "twCtBus: the routes that serve a stop")
                .cache(.shared(ttl: .seconds(300), tags: ["transit"]))
                .handle(Coimotion.call { call, _ in
                    let view = runtime.view()
                    guard let id = call.pathParameters["tsID"], let stop = view.network.stop(id) else { throw GatewayError.notFound("No such stop.") }
                    return .ok(List(list: view.network.stops[Int(stop)].routes.map { index in
                        let route = view.network.routes[Int(index)]
                        return RouteRow(rtName: route.displayName, descTx: route.longName ?? route.description ?? "", brID: route.id)
                    }))
                }),
            Route.define(.post, "/coimotion/twCtBus/busRoute/next/{brID}", summary: "twCtBus: each stop of a route with its next arrival")
                .cache(live)
                .handle(Coimotion.call { call, _ in
                    let view = runtime.view()
                    guard let id = call.pathParameters["brID"], let route = view.network.route(id) else { throw GatewayError.notFound("No such route.") }
                    let zone = view.network.feeds[Int(view.network.routes[Int(route)].feed)].zone
                    let rows = view.nextOfRoute(route, time: runtime.now()).map { entry in
                        NextRow(stName: view.network.stops[Int(entry.stop)].name,
                                arvTime: entry.next.map { clock($0.predicted.arrival ?? $0.scheduledArrival, zone: zone) } ?? "",
                                isInBd: entry.direction.id == 1 ? 1 : 0)
                    }
                    return .ok(List(list: rows))
                }),
        ])
    }

    /// `HH:mm` local time.
    static func clock(_ instant: Int64, zone: TimeZone) -> String {
        let local = instant + Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(instant))))
        let minutes = Int(local.floorMod(86_400) / 60)
        return String(format: "%02d:%02d", minutes / 60, minutes % 60)
    }
}
