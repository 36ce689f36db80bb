import Foundation
import GatewayCore
import HTTPTypes

/// The OneBusAway REST API (`/api/where/*.json?key=`), version 2, over the same network as the
/// native API, so that an unmodified OneBusAway app works against the gateway. Shapes follow the
/// reference server (onebusaway-application-modules): see `OneBusAwayModel.swift`.
///
/// `key=` is a gateway API key (or `Authorization: Bearer`); plugins.yaml's `oneBusAwayPublic`
/// lets anyone in. Errors are OneBusAway's: 401 `permission denied`, 404 `resource not found`,
/// 400 `validation error` with the failing fields, the HTTP status equal to `code`.
///
/// Without vehicle positions, a trip's status is its scheduled position (or its predicted one, from
/// GTFS-realtime TripUpdates) between its stops; distances are along straight lines between stops.
/// A trip is its own block (`blockId` is its block_id, or its id without one; `blockTripSequence` 0).
enum OneBusAwayDialect {
    static func make(runtime: TransitRuntime, settings: TransitPlugin.Configuration) -> Dialect {
        let access: AccessRule = settings.oneBusAwayPublic ? .public : .scope("transit:read")
        let live = CachePolicy.shared(ttl: .seconds(10), tags: ["transit"])
        let reference = CachePolicy.shared(ttl: .seconds(60), tags: ["transit"])
        func route(_ path: String, _ summary: String, cache: CachePolicy,
                   _ handler: @escaping @Sendable (OBARequest) throws -> RouteReply) -> Route {
            Route.define(.get, "/api/where/" + path, summary: "OneBusAway: " + summary)
                .access(access)
                .cache(cache)
                .handle { request, _ in
                    try handler(OBARequest(request: request, view: runtime.view(), now: runtime.now()))
                }
        }
        return Dialect(
            name: "onebusaway",
            routes: [
                route("agencies-with-coverage.json", "agencies and the areas they cover", cache: reference) { try $0.agenciesWithCoverage() },
                route("stops-for-location.json", "stops near a point (lat, lon, radius or latSpan/lonSpan, query)", cache: live) { try $0.stopsForLocation() },
                route("stop/{id}", "a stop", cache: reference) { try $0.stop() },
                route("stops-for-route/{id}", "a route's stops per direction, with polylines", cache: reference) { try $0.stopsForRoute() },
                route("routes-for-location.json", "routes near a point", cache: live) { try $0.routesForLocation() },
                route("route/{id}", "a route", cache: reference) { try $0.route() },
                route("arrivals-and-departures-for-stop/{id}", "arrivals and departures at a stop", cache: live) { try $0.arrivalsAndDepartures() },
                route("arrival-and-departure-for-stop/{id}", "one trip's arrival at a stop", cache: live) { try $0.arrivalAndDeparture() },
                route("schedule-for-stop/{id}", "a stop's schedule for a date", cache: reference) { try $0.scheduleForStop() },
                route("trip/{id}", "a trip", cache: reference) { try $0.trip() },
                route("trip-details/{id}", "a trip's schedule and status", cache: live) { try $0.tripDetails() },
                route("search/stop.json", "stops by name", cache: reference) { try $0.searchStop() },
                route("search/route.json", "routes by name", cache: reference) { try $0.searchRoute() },
                route("current-time.json", "the server's time", cache: .none) { try $0.currentTime() },
            ],
            credentials: .firstOf(.apiKeyQuery("key"), .bearer),
            renderError: renderError)
    }

    static func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }

    static func renderError(_ error: GatewayError) -> RouteReply {
        let status: HTTPResponse.Status = error.status == 422 ? .badRequest : error.status
        let body: any Encodable & Sendable
        switch status.code {
        case 400:
            var fields: [String: [String]] = [:]
            for problem in error.errors { fields[problem.pointer.replacingOccurrences(of: "query.", with: ""), default: []].append(problem.detail) }
            body = OBAValidationError(code: 400, currentTime: now(), data: .init(actionErrors: fields.isEmpty ? [error.detail] : [], fieldErrors: fields),
                                      text: "validation error", version: 2)
        case 401: body = OBAError(code: 401, currentTime: now(), text: "permission denied", version: 1)
        case 403: body = OBAError(code: 403, currentTime: now(), text: "permission denied", version: 1)
        case 404: body = OBAError(code: 404, currentTime: now(), text: "resource not found", version: 2)
        case 429: body = OBAError(code: 429, currentTime: now(), text: "rate limit exceeded", version: 1)
        case 500...: body = OBAError(code: status.code, currentTime: now(), text: "internal error", version: 2)
        default: body = OBAError(code: status.code, currentTime: now(), text: error.detail, version: 2)
        }
        return (try? RouteReply.json(body, status: status)) ?? RouteReply(status: status)
    }
}

/// One OneBusAway request: its parameters, the network it reads and the references it collects.
struct OBARequest {
    let request: RouteRequest
    let view: TransitView
    let now: Int64
    var network: TransitNetwork { view.network }
    var references = ReferenceCollector()

    init(request: RouteRequest, view: TransitView, now: Int64) {
        self.request = request
        self.view = view
        self.now = now
        references.enabled = request.query("includeReferences").map { $0 != "false" } ?? true
    }

    // MARK: - Parameters

    /// Every parameter that does not parse, as the reference server names them.
    func invalid(_ name: String, _ message: String? = nil) -> GatewayError {
        GatewayError.invalid("validation error", errors: [.init(pointer: name, detail: message ?? "Invalid field value for field \"\(name)\".")])
    }

    func double(_ name: String) throws -> Double? {
        guard let text = request.query(name), !text.isEmpty else { return nil }
        guard let value = Double(text), value.isFinite else { throw invalid(name) }
        return value
    }

    func int(_ name: String) throws -> Int? {
        guard let text = request.query(name), !text.isEmpty else { return nil }
        guard let value = Int(text) ?? Double(text).flatMap({ $0.isFinite ? Int(exactly: $0.rounded(.towardZero)) : nil }) else { throw invalid(name) }
        return value
    }

    func bool(_ name: String, default value: Bool) throws -> Bool {
        guard let text = request.query(name), !text.isEmpty else { return value }
        switch text.lowercased() {
        case "true", "1": return true
        case "false", "0": return false
        default: throw invalid(name)
        }
    }

    /// An instant: milliseconds since 1970, or `yyyy-MM-dd_HH-mm-ss` in `zone`. UTC seconds.
    func time(_ name: String, zone: TimeZone) throws -> Int64? {
        guard let text = request.query(name), !text.isEmpty else { return nil }
        if let millis = Int64(text) { return millis.floorDiv(1000) }
        let parts = text.split(whereSeparator: { $0 == "-" || $0 == "_" }).compactMap { Int($0) }
        guard parts.count == 6, let day = ServiceDay.parse(String(format: "%04d-%02d-%02d", parts[0], parts[1], parts[2])),
              (0..<24).contains(parts[3]), (0..<60).contains(parts[4]), (0..<60).contains(parts[5]) else { throw invalid(name) }
        let local = Int64(day) * 86_400 + Int64(parts[3] * 3600 + parts[4] * 60 + parts[5])
        return local - Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(local))))
    }

    /// A date: `yyyy-MM-dd`, or milliseconds since 1970 (the date of that instant in `zone`).
    func date(_ name: String, zone: TimeZone) throws -> Int32? {
        guard let text = request.query(name), !text.isEmpty else { return nil }
        if let millis = Int64(text) { return ServiceDay.day(of: millis.floorDiv(1000), in: zone) }
        guard let day = ServiceDay.parse(text) else { throw invalid(name) }
        return day
    }

    /// `maxCount`: the default, capped; 0 or less is a 400.
    func maxCount(default value: Int, cap: Int) throws -> Int {
        guard let given = try int("maxCount") else { return value }
        guard given > 0 else { throw invalid("maxCount", "must be greater than zero") }
        return min(given, cap)
    }

    /// The path's id, percent-decoded, without `.json`.
    var pathID: String {
        let raw = request.pathParameters["id"] ?? ""
        return raw.hasSuffix(".json") ? String(raw.dropLast(5)) : raw
    }

    func stopID() throws -> Int32 {
        guard let stop = network.stop(pathID) else { throw GatewayError.notFound("resource not found") }
        return stop
    }

    // MARK: - Replies

    func reply(_ data: some Encodable & Sendable) throws -> RouteReply {
        try RouteReply.json(OBAEnvelope(code: 200, currentTime: now * 1000 + Int64(Date().timeIntervalSince1970 * 1000) % 1000,
                                             data: data, text: "OK", version: 2), contentType: "application/json; charset=utf-8")
    }

    func entry(_ value: some Encodable & Sendable) throws -> RouteReply {
        try reply(OBAEntry(entry: value, references: references.result(network: network, mapper: mapper)))
    }

    func list<Item: Encodable & Sendable>(_ items: [Item], limitExceeded: Bool, outOfRange: Bool?) throws -> RouteReply {
        try reply(OBAList(limitExceeded: limitExceeded, list: items, outOfRange: outOfRange, references: references.result(network: network, mapper: mapper)))
    }

    var mapper: OBAMapper { OBAMapper(network: network) }

    // MARK: - Endpoints

    func agenciesWithCoverage() throws -> RouteReply {
        var request = self
        let limit = try maxCount(default: Int.max, cap: Int.max)
        var boxes: [String: (minLat: Double, maxLat: Double, minLon: Double, maxLon: Double)] = [:]
        for stop in network.stops where stop.locationType <= 1 && !stop.routes.isEmpty {
            for route in stop.routes {
                let agency = network.routes[Int(route)].agency
                var box = boxes[agency] ?? (stop.lat, stop.lat, stop.lon, stop.lon)
                box = (min(box.minLat, stop.lat), max(box.maxLat, stop.lat), min(box.minLon, stop.lon), max(box.maxLon, stop.lon))
                boxes[agency] = box
            }
        }
        var items: [OBACoverage] = []
        for agency in network.agencies {
            let box = boxes[agency.id] ?? (0, 0, 0, 0)
            items.append(OBACoverage(agencyId: agency.id, lat: (box.minLat + box.maxLat) / 2, latSpan: box.maxLat - box.minLat,
                                     lon: (box.minLon + box.maxLon) / 2, lonSpan: box.maxLon - box.minLon))
            request.references.agency(agency.id)
        }
        return try request.list(Array(items.prefix(limit)), limitExceeded: items.count > limit, outOfRange: nil)
    }

    /// The search area: a radius (metres) or a box of `latSpan` × `lonSpan` degrees around the point.
    func area(defaultRadius: Double) throws -> (lat: Double, lon: Double, latDelta: Double, lonDelta: Double, radius: Double) {
        let lat = try double("lat") ?? 0, lon = try double("lon") ?? 0
        guard (-90...90).contains(lat) else { throw invalid("lat") }
        guard (-180...180).contains(lon) else { throw invalid("lon") }
        var radius = try double("radius") ?? 0
        if let latSpan = try double("latSpan"), let lonSpan = try double("lonSpan"), latSpan > 0, lonSpan > 0, radius <= 0 {
            let latDelta = min(latSpan, 2) / 2, lonDelta = min(lonSpan, 2) / 2
            let diagonal = SpatialIndex.distance(lat, lon, lat + latDelta, lon + lonDelta)
            return (lat, lon, latDelta, lonDelta, diagonal)
        }
        if radius <= 0 { radius = defaultRadius }
        radius = min(radius, 100_000)
        let latDelta = radius / SpatialIndex.earthRadius * 180 / .pi
        let lonDelta = radius / (SpatialIndex.earthRadius * max(cos(lat * .pi / 180), 0.01)) * 180 / .pi
        return (lat, lon, latDelta, lonDelta, (radius * radius * 2).squareRoot())
    }

    func stopsForLocation() throws -> RouteReply {
        var request = self
        let query = request.request.query("query")
        let area = try area(defaultRadius: query == nil ? 500 : 10_000)
        let limit = try maxCount(default: 100, cap: 250)
        let inside = view.nearestStops(lat: area.lat, lon: area.lon, radius: area.radius, limit: 10_000).filter { found in
            let stop = network.stops[Int(found.stop)]
            return abs(stop.lat - area.lat) <= area.latDelta && abs(stop.lon - area.lon) <= area.lonDelta && !stop.routes.isEmpty
        }
        var chosen: [Int32]
        if let query, !query.isEmpty {
            let folded = NameIndex.fold(query)
            let matches = network.stops.indices.filter { index in
                let stop = network.stops[index]
                return !stop.routes.isEmpty && NameIndex.fold(stop.code ?? stop.gtfsID) == folded
            }.map { Int32($0) }
            let insideSet = Set(inside.map(\.stop))
            chosen = Array(matches.filter(insideSet.contains).prefix(10))
            if chosen.isEmpty, let closest = matches.min(by: { a, b in
                SpatialIndex.distance(area.lat, area.lon, network.stops[Int(a)].lat, network.stops[Int(a)].lon)
                    < SpatialIndex.distance(area.lat, area.lon, network.stops[Int(b)].lat, network.stops[Int(b)].lon)
            }) { chosen = [closest] }
        } else {
            chosen = inside.map(\.stop)
        }
        let exceeded = chosen.count > limit
        chosen = Array(chosen.prefix(limit)).sorted { network.stops[Int($0)].id < network.stops[Int($1)].id }
        let outOfRange = chosen.isEmpty && !mapper.covers(lat: area.lat, lon: area.lon, latDelta: area.latDelta, lonDelta: area.lonDelta)
        let stops = chosen.map { stop in
            request.references.routesOf(stop: stop, network: network)
            request.references.parentOf(stop: stop, network: network)
            return mapper.stop(stop)
        }
        return try request.list(stops, limitExceeded: exceeded, outOfRange: outOfRange)
    }

    func stop() throws -> RouteReply {
        var request = self
        let stop = try stopID()
        request.references.routesOf(stop: stop, network: network)
        request.references.parentOf(stop: stop, network: network)
        return try request.entry(mapper.stop(stop))
    }

    func routesForLocation() throws -> RouteReply {
        var request = self
        let query = request.request.query("query").map(NameIndex.fold)
        let area = try area(defaultRadius: query == nil ? 500 : 10_000)
        let limit = try maxCount(default: 10, cap: 50)
        var routes = Set<Int32>()
        for found in view.nearestStops(lat: area.lat, lon: area.lon, radius: area.radius, limit: 10_000) {
            let stop = network.stops[Int(found.stop)]
            guard abs(stop.lat - area.lat) <= area.latDelta && abs(stop.lon - area.lon) <= area.lonDelta else { continue }
            routes.formUnion(stop.routes)
        }
        if let query, !query.isEmpty {
            routes = routes.filter { index in
                let route = network.routes[Int(index)]
                return [route.shortName, route.longName].compactMap { $0 }.contains { name in
                    let folded = NameIndex.fold(name)
                    return folded == query || folded.hasPrefix(query) || folded.split(separator: " ").contains { $0.hasPrefix(query) }
                }
            }
        }
        var sorted = routes.sorted { network.routes[Int($0)].id < network.routes[Int($1)].id }
        let exceeded = sorted.count > limit
        sorted = Array(sorted.prefix(limit))
        for route in sorted { request.references.agency(network.routes[Int(route)].agency) }
        let outOfRange = sorted.isEmpty && !mapper.covers(lat: area.lat, lon: area.lon, latDelta: area.latDelta, lonDelta: area.lonDelta)
        return try request.list(sorted.map(mapper.route), limitExceeded: exceeded, outOfRange: outOfRange)
    }

    func route() throws -> RouteReply {
        var request = self
        guard let route = network.route(pathID) else { throw GatewayError.notFound("resource not found") }
        request.references.agency(network.routes[Int(route)].agency)
        return try request.entry(mapper.route(route))
    }

    func stopsForRoute() throws -> RouteReply {
        var request = self
        guard let route = network.route(pathID) else { throw GatewayError.notFound("resource not found") }
        let polylines = try bool("includePolylines", default: true)
        let value = network.routes[Int(route)]
        let shapes = polylines ? value.shapes.map { mapper.polyline($0) } : []
        var all = Set<Int32>()
        var groups: [OBAStopGroup] = []
        for direction in value.directions {
            all.formUnion(direction.stops)
            let directionShapes = polylines ? Set(network.trips.lazy.filter { $0.route == route && $0.direction == direction.id && $0.shape >= 0 }.map(\.shape))
                .sorted().map { mapper.polyline($0) } : []
            let name = direction.headsign ?? value.longName ?? value.displayName
            groups.append(OBAStopGroup(id: String(direction.id ?? 0), name: OBAName(name: name, names: [name], type: "destination"),
                                       polylines: directionShapes, stopIds: direction.stops.map { network.stops[Int($0)].id }, subGroups: []))
        }
        groups.sort { $0.name.name < $1.name.name }
        request.references.route(route, network: network)
        let stops = all.sorted { network.stops[Int($0)].id < network.stops[Int($1)].id }
        for stop in stops {
            request.references.stop(stop)
            request.references.routesOf(stop: stop, network: network)
        }
        return try request.entry(OBAStopsForRoute(polylines: shapes, routeId: value.id,
                                                  stopGroupings: [OBAStopGrouping(ordered: true, stopGroups: groups, type: "direction")],
                                                  stopIds: stops.map { network.stops[Int($0)].id }))
    }

    func arrivalsAndDepartures() throws -> RouteReply {
        var request = self
        let stop = try stopID()
        let zone = network.zone(ofStop: stop)
        let time = try self.time("time", zone: zone) ?? now
        let before = try int("minutesBefore") ?? 5, after = try int("minutesAfter") ?? 35
        guard (0...1440).contains(before) else { throw invalid("minutesBefore") }
        guard (0...1440).contains(after) else { throw invalid("minutesAfter") }
        var items = view.arrivals(at: stop, time: time, from: time - Int64(before) * 60, to: time + Int64(after) * 60, anyTime: true)
        items.sort { a, b in
            let x = a.predicted.arrival ?? a.scheduledArrival, y = b.predicted.arrival ?? b.scheduledArrival
            return x != y ? x < y : a.stopTime < b.stopTime
        }
        let arrivals = items.map { request.arrival($0, time: time) }
        request.references.stop(stop)
        request.references.routesOf(stop: stop, network: network)
        let value = network.stops[Int(stop)]
        let nearby = view.nearestStops(lat: value.lat, lon: value.lon, radius: 100, limit: 50).map(\.stop).filter { $0 != stop }
        for other in nearby {
            request.references.stop(other)
            request.references.routesOf(stop: other, network: network)
        }
        return try request.entry(OBAStopArrivals(arrivalsAndDepartures: arrivals, nearbyStopIds: nearby.map { network.stops[Int($0)].id },
                                                 situationIds: [], stopId: value.id))
    }

    func arrivalAndDeparture() throws -> RouteReply {
        var request = self
        let stop = try stopID()
        let zone = network.zone(ofStop: stop)
        var errors: [GatewayError.FieldError] = []
        let tripText = request.request.query("tripId")
        if tripText?.isEmpty ?? true { errors.append(.init(pointer: "tripId", detail: "missingRequiredField")) }
        let day = try date("serviceDate", zone: zone)
        if day == nil { errors.append(.init(pointer: "serviceDate", detail: "missingRequiredField")) }
        guard errors.isEmpty, let tripText, let day else { throw GatewayError.invalid("validation error", errors: errors) }
        guard let trip = network.trip(tripText) else { throw GatewayError.notFound("resource not found") }
        let time = try self.time("time", zone: zone) ?? now
        let sequence = try int("stopSequence") ?? -1
        let range = network.stopTimes(of: trip)
        let served = Set(view.servedStops(stop))
        let position = sequence >= 0 ? (range.contains(range.lowerBound + sequence) && served.contains(network.stStop[range.lowerBound + sequence])
                                        ? range.lowerBound + sequence : nil)
            : range.first { served.contains(network.stStop[$0]) }
        guard let position, network.services[Int(network.trips[Int(trip)].service)].runs(on: day) else {
            throw GatewayError.notFound("resource not found")
        }
        let base = ServiceDay.start(of: day, in: network.zone(ofTrip: trip))
        let item = view.tripStop(Int32(position), trip: trip, day: day, base: base, time: time)
        let arrival = request.arrival(item, time: time)
        request.references.stop(stop)
        request.references.routesOf(stop: stop, network: network)
        return try request.entry(arrival)
    }

    func scheduleForStop() throws -> RouteReply {
        var request = self
        let stop = try stopID()
        let zone = network.zone(ofStop: stop)
        let given = try date("date", zone: zone)
        let day = given ?? ServiceDay.day(of: now, in: zone)
        var byRoute: [Int32: [Int: [TripStop]]] = [:]
        for item in view.schedule(at: stop, day: day) {
            let trip = network.trips[Int(item.trip)]
            byRoute[trip.route, default: [:]][trip.direction ?? 0, default: []].append(item)
        }
        let schedules = byRoute.keys.sorted { network.routes[Int($0)].id < network.routes[Int($1)].id }.map { route in
            OBAStopRouteSchedule(routeId: network.routes[Int(route)].id, stopRouteDirectionSchedules: byRoute[route]!.keys.sorted().map { direction in
                let items = byRoute[route]![direction]!
                var headsigns: [String: Int] = [:]
                for item in items { headsigns[network.trips[Int(item.trip)].headsign ?? "", default: 0] += 1 }
                let headsign = headsigns.max { $0.value != $1.value ? $0.value < $1.value : $0.key > $1.key }?.key ?? ""
                return OBAStopRouteDirectionSchedule(scheduleFrequencies: [], scheduleStopTimes: items.map { item in
                    OBAScheduleStopTime(arrivalEnabled: item.index > 0, arrivalTime: item.scheduledArrival * 1000,
                                        departureEnabled: item.index + 1 < item.totalStops, departureTime: item.scheduledDeparture * 1000,
                                        serviceId: mapper.serviceID(of: item.trip), stopHeadsign: "", tripId: network.trips[Int(item.trip)].id)
                }, tripHeadsign: headsign)
            })
        }
        request.references.stop(stop)
        request.references.routesOf(stop: stop, network: network)
        for route in byRoute.keys { request.references.route(route, network: network) }
        let date = given.map { Int64($0) * 86_400 - Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(Int64($0) * 86_400)))) } ?? now
        return try request.entry(OBAStopSchedule(date: date * 1000, stopId: network.stops[Int(stop)].id, stopRouteSchedules: schedules))
    }

    func trip() throws -> RouteReply {
        var request = self
        guard let trip = network.trip(pathID) else { throw GatewayError.notFound("resource not found") }
        request.references.route(network.trips[Int(trip)].route, network: network)
        return try request.entry(mapper.trip(trip))
    }

    func tripDetails() throws -> RouteReply {
        var request = self
        guard let trip = network.trip(pathID) else { throw GatewayError.notFound("resource not found") }
        let zone = network.zone(ofTrip: trip)
        let time = try self.time("time", zone: zone) ?? now
        let includeTrip = try bool("includeTrip", default: true)
        let includeSchedule = try bool("includeSchedule", default: true)
        let includeStatus = try bool("includeStatus", default: true)
        let day: Int32
        if let given = try date("serviceDate", zone: zone) {
            guard network.services[Int(network.trips[Int(trip)].service)].runs(on: given) else { throw GatewayError.notFound("resource not found") }
            day = given
        } else {
            guard let nearest = view.serviceDay(of: trip, near: time) else { throw GatewayError.notFound("resource not found") }
            day = nearest
        }
        let stops = view.tripStops(trip, day: day, time: time)
        let distances = mapper.distances(of: trip)
        if includeTrip { request.references.trip(trip, network: network) }
        var schedule: OBATripSchedule?
        if includeSchedule {
            schedule = OBATripSchedule(frequency: OBANull(), nextTripId: "", previousTripId: "", stopTimes: stops.enumerated().map { offset, item in
                let stop = network.stStop[Int(item.stopTime)]
                request.references.stop(stop)
                request.references.routesOf(stop: stop, network: network)
                return OBATripStopTime(arrivalTime: Int(item.scheduledArrival - item.base), departureTime: Int(item.scheduledDeparture - item.base),
                                       distanceAlongTrip: distances[offset], historicalOccupancy: "",
                                       stopHeadsign: network.stHeadsign[Int(item.stopTime)] ?? "", stopId: network.stops[Int(stop)].id)
            }, timeZone: zone.identifier)
        }
        let status = includeStatus ? request.status(of: stops, time: time) : nil
        let base = ServiceDay.start(of: day, in: zone)
        return try request.entry(OBATripDetails(frequency: OBANull(), schedule: schedule, serviceDate: base * 1000, situationIds: [], status: status,
                                                tripId: network.trips[Int(trip)].id))
    }

    func searchStop() throws -> RouteReply {
        var request = self
        guard let input = request.request.query("input"), !input.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw invalid("input", "missing input")
        }
        let limit = try maxCount(default: 20, cap: 250)
        var found = view.searchStops(input, limit: limit + 1)
        if found.isEmpty {
            let folded = NameIndex.fold(input)
            found = network.stops.indices.filter { NameIndex.fold(network.stops[$0].code ?? "") == folded }.prefix(limit + 1).map { Int32($0) }
        }
        found = found.filter { !network.stops[Int($0)].routes.isEmpty }
        guard !found.isEmpty else { throw GatewayError.notFound("resource not found") }
        let chosen = Array(found.prefix(limit))
        for stop in chosen {
            request.references.routesOf(stop: stop, network: network)
            request.references.parentOf(stop: stop, network: network)
        }
        return try request.list(chosen.map(mapper.stop), limitExceeded: found.count > limit, outOfRange: false)
    }

    func searchRoute() throws -> RouteReply {
        var request = self
        guard let input = request.request.query("input"), !input.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw invalid("input", "missing input")
        }
        let limit = try maxCount(default: 20, cap: 250)
        let folded = NameIndex.fold(input).trimmingCharacters(in: .whitespaces)
        let found = network.routes.indices.filter { index in
            let route = network.routes[index]
            if let short = route.shortName, NameIndex.fold(short).hasPrefix(folded) { return true }
            let long = NameIndex.fold(route.longName ?? route.gtfsID)
            return long.hasPrefix(folded) || long.split(whereSeparator: { !$0.isLetter && !$0.isNumber }).contains { $0.hasPrefix(folded) }
        }.map { Int32($0) }.sorted { a, b in
            let x = network.routes[Int(a)].shortName ?? "", y = network.routes[Int(b)].shortName ?? ""
            return x.compare(y, options: .numeric) == .orderedAscending || (x == y && network.routes[Int(a)].id < network.routes[Int(b)].id)
        }
        guard !found.isEmpty else { throw GatewayError.notFound("resource not found") }
        let chosen = Array(found.prefix(limit))
        for route in chosen { request.references.agency(network.routes[Int(route)].agency) }
        return try request.list(chosen.map(mapper.route), limitExceeded: found.count > limit, outOfRange: false)
    }

    func currentTime() throws -> RouteReply {
        let millis = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        let seconds = now
        let offset = TimeZone.current.secondsFromGMT(for: Date(timeIntervalSince1970: Double(seconds)))
        let local = seconds + Int64(offset)
        let clock = String(format: "%02d:%02d:%02d", Int(local.floorMod(86_400) / 3600), Int(local.floorMod(3600) / 60), Int(local.floorMod(60)))
        let sign = offset < 0 ? "-" : "+"
        let readable = ServiceDay.format(Int32(local.floorDiv(86_400))) + "T" + clock + sign
            + String(format: "%02d:%02d", abs(offset) / 3600, abs(offset) / 60 % 60)
        return try entry(OBACurrentTime(readableTime: readable, time: seconds * 1000 + millis % 1000))
    }

    // MARK: - Arrivals and trip status

    mutating func arrival(_ item: TripStop, time: Int64) -> OBAArrival {
        let trip = network.trips[Int(item.trip)]
        let route = network.routes[Int(trip.route)]
        let stops = view.tripStops(item.trip, day: item.serviceDay, time: time)
        let status = self.status(of: stops, time: time)
        let distances = mapper.distances(of: item.trip)
        var distanceFromStop = 0.0, stopsAway = 0
        if let status {
            distanceFromStop = distances[item.index] - status.scheduledDistanceAlongTrip
            stopsAway = item.stopsAway
        }
        references.trip(item.trip, network: network)
        let predicted = item.predicted.status == .predicted
        return OBAArrival(
            actualTrack: "", arrivalEnabled: item.index > 0, blockTripSequence: 0, departureEnabled: item.index + 1 < item.totalStops,
            distanceFromStop: distanceFromStop, frequency: OBANull(), historicalOccupancy: "",
            lastUpdateTime: predicted ? (view.realtime.prediction(trip: item.trip, day: item.serviceDay)?.timestamp ?? now) * 1000 : 0,
            numberOfStopsAway: stopsAway, occupancyStatus: "", predicted: predicted, predictedArrivalInterval: OBANull(),
            predictedArrivalTime: predicted ? (item.predicted.arrival ?? 0) * 1000 : 0, predictedDepartureInterval: OBANull(),
            predictedDepartureTime: predicted ? (item.predicted.departure ?? 0) * 1000 : 0, predictedOccupancy: "", routeId: route.id,
            routeLongName: route.longName ?? "", routeShortName: route.shortName ?? "", scheduledArrivalInterval: OBANull(),
            scheduledArrivalTime: item.scheduledArrival * 1000, scheduledDepartureInterval: OBANull(), scheduledDepartureTime: item.scheduledDeparture * 1000,
            scheduledTrack: "", serviceDate: item.base * 1000, situationIds: [], status: item.predicted.status == .cancelled ? "CANCELED" : "default",
            stopId: network.stops[Int(network.stStop[Int(item.stopTime)])].id, stopSequence: item.index, totalStopsInTrip: item.totalStops,
            tripHeadsign: network.stHeadsign[Int(item.stopTime)] ?? trip.headsign ?? "", tripId: trip.id, tripStatus: status,
            vehicleId: view.realtime.prediction(trip: item.trip, day: item.serviceDay)?.vehicle ?? "")
    }

    /// Where a trip instance is at `time` (its scheduled or predicted position between stops), or
    /// nil when it is not running then.
    mutating func status(of stops: [TripStop], time: Int64) -> OBATripStatus? {
        guard let first = stops.first, let last = stops.last else { return nil }
        func arrival(_ item: TripStop) -> Int64 { item.predicted.arrival ?? item.scheduledArrival }
        func departure(_ item: TripStop) -> Int64 { item.predicted.departure ?? item.scheduledDeparture }
        guard time >= departure(first) - 600, time <= arrival(last) else { return nil }
        let distances = mapper.distances(of: first.trip)
        // The next stop not yet left, and how far along the way to it the vehicle is.
        let next = stops.firstIndex { departure($0) >= time } ?? (stops.count - 1)
        var along = distances[next]
        var position = network.stops[Int(network.stStop[Int(stops[next].stopTime)])]
        var fraction = 1.0
        if next > 0, time < arrival(stops[next]) {
            let leave = departure(stops[next - 1]), reach = arrival(stops[next])
            fraction = reach > leave ? Double(time - leave) / Double(reach - leave) : 1
            fraction = min(max(fraction, 0), 1)
            along = distances[next - 1] + (distances[next] - distances[next - 1]) * fraction
            let from = network.stops[Int(network.stStop[Int(stops[next - 1].stopTime)])]
            position.lat = from.lat + (position.lat - from.lat) * fraction
            position.lon = from.lon + (position.lon - from.lon) * fraction
        }
        let closest = next > 0 && fraction < 0.5 ? next - 1 : next
        let nextStop = network.stStop[Int(stops[next].stopTime)], closestStop = network.stStop[Int(stops[closest].stopTime)]
        references.stop(nextStop)
        references.routesOf(stop: nextStop, network: network)
        references.stop(closestStop)
        references.routesOf(stop: closestStop, network: network)
        references.trip(first.trip, network: network)
        let predicted = stops.contains { $0.predicted.status == .predicted }
        let deviation = stops[next].predicted.arrival.map { Int($0 - stops[next].scheduledArrival) } ?? 0
        let orientation: Double = {
            let a = network.stops[Int(network.stStop[Int(stops[max(0, next - 1)].stopTime)])]
            let b = network.stops[Int(network.stStop[Int(stops[max(1, next)].stopTime)])]
            let dx = (b.lon - a.lon) * cos(a.lat * .pi / 180), dy = b.lat - a.lat
            guard dx != 0 || dy != 0 else { return 0 }
            let degrees = atan2(dy, dx) * 180 / .pi
            return degrees < 0 ? degrees + 360 : degrees
        }()
        let cancelled = first.predicted.status == .cancelled
        return OBATripStatus(
            activeTripId: network.trips[Int(first.trip)].id, blockTripSequence: 0, closestStop: network.stops[Int(closestStop)].id,
            closestStopTimeOffset: Int(arrival(stops[closest]) - time), distanceAlongTrip: predicted ? along : 0, frequency: OBANull(),
            lastKnownDistanceAlongTrip: 0, lastKnownOrientation: 0, lastLocationUpdateTime: 0,
            lastUpdateTime: predicted ? (view.realtime.prediction(trip: first.trip, day: first.serviceDay)?.timestamp ?? now) * 1000 : 0,
            nextStop: network.stops[Int(nextStop)].id, nextStopTimeOffset: Int(arrival(stops[next]) - time), occupancyCapacity: 0, occupancyCount: 0,
            occupancyStatus: "", orientation: orientation, phase: "", position: OBAPosition(lat: position.lat, lon: position.lon), predicted: predicted,
            scheduleDeviation: deviation, scheduledDistanceAlongTrip: along, serviceDate: first.base * 1000, situationIds: [],
            status: cancelled ? "CANCELED" : (predicted ? "SCHEDULED" : "default"), totalDistanceAlongTrip: distances.last ?? 0, vehicleFeatures: [],
            vehicleId: view.realtime.prediction(trip: first.trip, day: first.serviceDay)?.vehicle ?? "")
    }
}

/// Gathers the entities a reply mentions, closed as the reference server closes them: a route
/// brings its agency, a trip its route, a stop its routes.
struct ReferenceCollector {
    var enabled = true
    private var agencies: [String] = []
    private var routes: [Int32] = []
    private var stops: [Int32] = []
    private var trips: [Int32] = []
    private var seenAgencies = Set<String>(), seenRoutes = Set<Int32>(), seenStops = Set<Int32>(), seenTrips = Set<Int32>()

    mutating func agency(_ id: String) {
        if seenAgencies.insert(id).inserted { agencies.append(id) }
    }

    mutating func route(_ index: Int32, network: TransitNetwork) {
        if seenRoutes.insert(index).inserted { routes.append(index) }
        agency(network.routes[Int(index)].agency)
    }

    mutating func stop(_ index: Int32) {
        if seenStops.insert(index).inserted { stops.append(index) }
    }

    mutating func routesOf(stop index: Int32, network: TransitNetwork) {
        for route in network.stops[Int(index)].routes { self.route(route, network: network) }
    }

    mutating func parentOf(stop index: Int32, network: TransitNetwork) {
        let parent = network.stops[Int(index)].parent
        if parent >= 0 {
            stop(parent)
            routesOf(stop: parent, network: network)
        }
    }

    mutating func trip(_ index: Int32, network: TransitNetwork) {
        if seenTrips.insert(index).inserted { trips.append(index) }
        route(network.trips[Int(index)].route, network: network)
    }

    func result(network: TransitNetwork, mapper: OBAMapper) -> OBAReferences {
        guard enabled else { return OBAReferences() }
        return OBAReferences(agencies: agencies.compactMap { id in network.agencyIndex[id].map { mapper.agency($0) } },
                             routes: routes.map(mapper.route), stops: stops.map(mapper.stop), trips: trips.map(mapper.trip))
    }
}

/// The network's values in OneBusAway's shapes.
struct OBAMapper {
    let network: TransitNetwork

    func agency(_ index: Int32) -> OBAAgency {
        let agency = network.agencies[Int(index)]
        return OBAAgency(disclaimer: "", email: agency.email ?? "", fareUrl: agency.fareURL ?? "", id: agency.id, lang: agency.lang ?? "",
                         name: agency.name, phone: agency.phone ?? "", privateService: false, timezone: agency.timeZone, url: agency.url)
    }

    func route(_ index: Int32) -> OBARoute {
        let route = network.routes[Int(index)]
        return OBARoute(agencyId: route.agency, color: route.color ?? "", description: route.description ?? "", id: route.id,
                        longName: route.longName ?? "", nullSafeShortName: route.shortName ?? route.id, shortName: route.shortName ?? "",
                        textColor: route.textColor ?? "", type: route.type, url: route.url ?? "")
    }

    func stop(_ index: Int32) -> OBAStop {
        let stop = network.stops[Int(index)]
        let routes = stop.routes.sorted { a, b in
            (network.routes[Int(a)].shortName ?? network.routes[Int(a)].id).compare(network.routes[Int(b)].shortName ?? network.routes[Int(b)].id,
                                                                                   options: .numeric) == .orderedAscending
        }.map { network.routes[Int($0)].id }
        return OBAStop(code: stop.code ?? stop.gtfsID, direction: direction(of: index), id: stop.id, lat: stop.lat, locationType: stop.locationType,
                       lon: stop.lon, name: stop.name, parent: stop.parent >= 0 ? network.stops[Int(stop.parent)].id : "", routeIds: routes,
                       staticRouteIds: routes, wheelchairBoarding: ["UNKNOWN", "ACCESSIBLE", "NOT_ACCESSIBLE"][min(max(stop.wheelchair, 0), 2)])
    }

    func trip(_ index: Int32) -> OBATrip {
        let trip = network.trips[Int(index)]
        let prefix = network.routes[Int(trip.route)].agency + "_"
        return OBATrip(blockId: prefix + (trip.block ?? trip.gtfsID), directionId: trip.direction.map(String.init) ?? "", id: trip.id, peakOffpeak: 0,
                       routeId: network.routes[Int(trip.route)].id, routeShortName: "", serviceId: serviceID(of: index),
                       shapeId: trip.shape >= 0 ? network.shapes[Int(trip.shape)].id : "", timeZone: "", tripHeadsign: trip.headsign ?? "",
                       tripShortName: trip.shortName ?? "")
    }

    func serviceID(of trip: Int32) -> String {
        let value = network.trips[Int(trip)]
        return network.routes[Int(value.route)].agency + "_" + network.serviceNames[Int(value.service)]
    }

    func polyline(_ shape: Int32) -> OBAPolyline {
        let points = network.shapes[Int(shape)].points
        return OBAPolyline(length: points.count, levels: "", points: Polyline.encode(points))
    }

    /// Metres along the trip at each of its stops (straight lines between stops).
    func distances(of trip: Int32) -> [Double] {
        var result: [Double] = []
        var total = 0.0
        var previous: TransitNetwork.Stop?
        for position in network.stopTimes(of: trip) {
            let stop = network.stops[Int(network.stStop[position])]
            if let previous { total += SpatialIndex.distance(previous.lat, previous.lon, stop.lat, stop.lon) }
            result.append(total)
            previous = stop
        }
        return result
    }

    /// The compass direction a stop's first trip leaves it in (`N`, `NE`, ...), or "".
    func direction(of stop: Int32) -> String {
        let lower = Int(network.stopTimesStart[Int(stop)]), upper = Int(network.stopTimesStart[Int(stop) + 1])
        guard lower < upper else { return "" }
        let stopTime = Int(network.stopTimes[lower])
        let trip = network.stTrip[stopTime]
        let range = network.stopTimes(of: trip)
        let (from, to) = stopTime + 1 < range.upperBound ? (stopTime, stopTime + 1) : (stopTime - 1, stopTime)
        guard from >= range.lowerBound else { return "" }
        let a = network.stops[Int(network.stStop[from])], b = network.stops[Int(network.stStop[to])]
        let dx = (b.lon - a.lon) * cos(a.lat * .pi / 180), dy = b.lat - a.lat
        guard dx != 0 || dy != 0 else { return "" }
        let bearing = (90 - atan2(dy, dx) * 180 / .pi + 360).truncatingRemainder(dividingBy: 360)
        return ["N", "NE", "E", "SE", "S", "SW", "W", "NW"][Int((bearing + 22.5) / 45) % 8]
    }

    /// Whether a search area meets any agency's stops.
    func covers(lat: Double, lon: Double, latDelta: Double, lonDelta: Double) -> Bool {
        guard let box = network.bounds else { return false }
        return lat + latDelta >= box.minLat && lat - latDelta <= box.maxLat && lon + lonDelta >= box.minLon && lon - lonDelta <= box.maxLon
    }
}
