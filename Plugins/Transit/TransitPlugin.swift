import Foundation
import GatewayCore
import ServiceLifecycle
import SQLKit

/// Bus stops near a point, the routes that serve them and next arrivals, from GTFS schedules and
/// GTFS-realtime predictions; with the COIMOTION twCtBus dialect of the old app (seed 000) and the
/// OneBusAway REST API.
public struct TransitPlugin: ServicePlugin {
    public static let id = "transit"
    public static let summary = "Transit: GTFS stops near a point, routes, next arrivals with GTFS-realtime predictions"
    public static let migrations = TransitMigrations.all

    /// A feed the plugin keeps imported.
    public struct FeedSource: Codable, Sendable, Equatable {
        /// The feed's id (lowercase letters, digits and `-`).
        public var id: String
        /// A GTFS zip: a path (relative to plugins.yaml) or an http(s) URL.
        public var source: String
        /// How often the source is read again (a changed file is imported, an unchanged one skipped); none: once.
        public var refresh: ConfigDuration?
        /// GTFS-realtime TripUpdates polled for the feed.
        public var realtime: RealtimeSource?
    }

    /// Where a feed's GTFS-realtime TripUpdates come from.
    public struct RealtimeSource: Codable, Sendable, Equatable {
        /// The URL of the TripUpdates FeedMessage.
        public var tripUpdates: String
        /// How often it is polled (default 30s).
        public var interval: ConfigDuration?
        /// Each fetch at most this long (default 10s).
        public var timeout: ConfigDuration?
        /// Health is degraded when the last good message is older (default three intervals).
        public var staleAfter: ConfigDuration?
    }

    public struct Configuration: PluginConfiguration {
        /// Feeds imported on start (when not yet imported) and refreshed on their schedule.
        public var feeds: [FeedSource] = []
        /// Feeds imported on the first start with `demo: true`.
        public var demoFeeds: [String] = []
        /// The radius of "near" queries that give none, in metres.
        public var defaultRadius: Double = 500
        /// Larger radii are capped to this, in metres.
        public var maxRadius: Double = 10_000
        /// The most bytes a feed's files may hold once uncompressed.
        public var maxFeedSize = ByteSize(bytes: 2 << 30)
        /// How often the served feeds are compared with the database (imports by other instances or the CLI).
        public var watchInterval = ConfigDuration(seconds: 10)
        /// The OneBusAway API answers without `key=` (otherwise a gateway API key or session with `transit:read`).
        public var oneBusAwayPublic = false

        public init() {}
        public static let defaults = Configuration()

        public func validate() throws {
            var ids = Set<String>()
            for (index, feed) in feeds.enumerated() {
                guard GTFSFeedImport.validFeedID(feed.id) else {
                    throw ConfigurationError(key: "feeds[\(index)].id", "'\(feed.id)' is not a feed id (lowercase letters, digits and '-', at most 64)")
                }
                guard ids.insert(feed.id).inserted else { throw ConfigurationError(key: "feeds[\(index)].id", "names feed \(feed.id) twice") }
                guard !feed.source.isEmpty else { throw ConfigurationError(key: "feeds[\(index)].source", "must name a GTFS zip (a path or a URL)") }
                if let refresh = feed.refresh, refresh.seconds < 60 {
                    throw ConfigurationError(key: "feeds[\(index)].refresh", "must be at least 1m")
                }
                if let realtime = feed.realtime {
                    guard realtime.tripUpdates.hasPrefix("http://") || realtime.tripUpdates.hasPrefix("https://") else {
                        throw ConfigurationError(key: "feeds[\(index)].realtime.tripUpdates", "must be an http(s) URL")
                    }
                    if let interval = realtime.interval, interval.seconds < 1 {
                        throw ConfigurationError(key: "feeds[\(index)].realtime.interval", "must be at least 1s")
                    }
                    if let timeout = realtime.timeout, !(0.1...120).contains(timeout.seconds) {
                        throw ConfigurationError(key: "feeds[\(index)].realtime.timeout", "must be between 100ms and 2m")
                    }
                }
            }
            guard defaultRadius > 0, maxRadius >= defaultRadius, maxRadius <= 100_000 else {
                throw ConfigurationError(key: "maxRadius", "must be at least defaultRadius (more than 0) and at most 100000 metres")
            }
            guard maxFeedSize.bytes >= 1 << 20 else { throw ConfigurationError(key: "maxFeedSize", "must be at least 1MB") }
            guard watchInterval.seconds >= 1 else { throw ConfigurationError(key: "watchInterval", "must be at least 1s") }
        }
    }

    let configuration: Configuration
    let context: PluginContext
    let runtime: TransitRuntime
    let feeds: FeedManager

    public init(configuration: Configuration, context: PluginContext) async throws {
        self.configuration = configuration
        self.context = context
        let store = TransitStore(database: context.database, clock: context.clock)
        runtime = TransitRuntime(store: store, clock: context.clock)
        feeds = FeedManager(runtime: runtime, context: context, limits: GTFSLimits(maxUncompressedBytes: Int64(configuration.maxFeedSize.bytes)))
        try await store.removeAbandonedVersions(olderThan: 3600)
        try await runtime.reload()
    }

    public func loadDemoData() async throws {
        for path in configuration.demoFeeds {
            let url = context.resolve(path: path)
            let result = try await feeds.importFile(url, feed: GTFSFeedImport.feedID(from: url), source: path, strict: false, progress: { _, _ in })
            context.logger.info("Demo feed loaded", metadata: ["feed": "\(result.feed)", "stops": "\(result.summary.stops)",
                                                              "stopTimes": "\(result.summary.stopTimes)"])
        }
    }

    public var importers: [any Importer] { [GTFSImporter(feeds: feeds)] }

    public var services: [any Service] {
        var services: [any Service] = [FeedWatcher(runtime: runtime, every: configuration.watchInterval.duration, purgeCache: context.purgeCache(tags:), logger: context.logger)]
        // Configured feeds are fetched and imported by one instance of a cluster; the others pick
        // the new version up through their watcher.
        if !configuration.feeds.isEmpty {
            services.append(context.leased("transit.feeds",
                                           work: FeedRefresher(feeds: feeds, sources: configuration.feeds, logger: context.logger)))
        }
        // Each feed's realtime source is polled by one instance of a cluster; the others read the
        // messages it stores through their watcher.
        for feed in configuration.feeds {
            if let realtime = feed.realtime {
                services.append(context.leased("transit.realtime.\(feed.id)",
                                               work: RealtimePoller(feed: feed.id, source: realtime, runtime: runtime, http: context.http,
                                                                    purgeCache: context.purgeCache(tags:), logger: context.logger)))
            }
        }
        return services
    }

    public func health() async -> PluginHealth {
        var problems: [String] = []
        let network = runtime.network
        let now = runtime.now()
        for feed in configuration.feeds {
            if !network.feeds.contains(where: { $0.id == feed.id }) { problems.append("feed \(feed.id) is not imported yet") }
            guard let realtime = feed.realtime else { continue }
            let interval = realtime.interval?.seconds ?? 30
            let stale = Int64(realtime.staleAfter?.seconds ?? interval * 3)
            if let received = runtime.realtimeReceivedAt(feed.id) {
                if now - received > stale { problems.append("realtime of feed \(feed.id) is stale: the last good message is \(now - received)s old") }
            } else {
                problems.append("realtime of feed \(feed.id) has no good message yet")
            }
            // A good message clears the error: one that remains is the last attempt's.
            if let error = runtime.realtimeStatus(feed.id)?.lastError {
                problems.append("realtime of feed \(feed.id): \(error)")
            }
        }
        return problems.isEmpty ? .ok : .degraded(problems.joined(separator: "; "))
    }

    public var dialects: [Dialect] {
        [TwCtBusDialect.make(runtime: runtime, settings: configuration),
         OneBusAwayDialect.make(runtime: runtime, settings: configuration)]
    }

    public var routes: [Route] {
        let runtime = self.runtime
        let feeds = self.feeds
        let settings = configuration
        let reference = CachePolicy.shared(ttl: .seconds(300), tags: ["transit"])
        let live = CachePolicy.shared(ttl: .seconds(10), tags: ["transit"])
        let changes = CachePolicy.invalidating(["transit"])
        @Sendable func radius(_ given: Double?) -> Double { min(given ?? settings.defaultRadius, settings.maxRadius) }
        return [
            Route.define("transit.agencies", .get, "/agencies", summary: "The agencies of every served feed")
                .cache(reference)
                .returns(Page<AgencyInfo>.self) { _, _ in
                    let network = runtime.network
                    return Page(items: network.agencies.map { TransitJSON.agency($0, network: network) }, nextCursor: nil)
                },
            Route.define("transit.stops.near", .get, "/stops/near", summary: "Stops near a point, nearest first")
                .example("/stops/near?lat=36.915682&lon=-116.751677&radius=1500")
                .details("`radius` in metres (default the plugin's `defaultRadius`, capped at its `maxRadius`); `limit` 1 to 1000 (default 20).")
                .query(NearStopsQuery.self)
                .cache(live)
                .returns(Page<StopInfo>.self) { input, _ in
                    let view = runtime.view()
                    let query = input.query
                    let found = view.nearestStops(lat: query.lat, lon: query.lon, radius: radius(query.radius), limit: query.limit ?? 20)
                    return Page(items: found.map { TransitJSON.stop($0.stop, network: view.network, distance: $0.distance) }, nextCursor: nil)
                },
            Route.define("transit.stops.search", .get, "/stops/search", summary: "Stops whose name has a word starting with `q`")
                .details("Case and accents do not matter; in Chinese, Japanese or Korean names any character may start the match.")
                .query(StopSearchQuery.self)
                .cache(reference)
                .returns(Page<StopInfo>.self) { input, _ in
                    let view = runtime.view()
                    let found = view.searchStops(input.query.q, limit: input.query.limit ?? 20)
                    return Page(items: found.map { TransitJSON.stop($0, network: view.network) }, nextCursor: nil)
                },
            Route.define("transit.stops.get", .get, "/stops/{id}", summary: "A stop with the routes that serve it")
                .path(StopPath.self)
                .cache(reference)
                .returns(StopDetail.self) { input, _ in
                    let view = runtime.view()
                    let stop = try TransitJSON.findStop(input.path.id, in: view.network)
                    return TransitJSON.stopDetail(stop, network: view.network)
                },
            Route.define("transit.stops.arrivals", .get, "/stops/{id}/arrivals", summary: "Arrivals and departures at a stop around a time")
                .details("`time` (RFC 3339 or milliseconds; default now), `minutesBefore` (default 5) and `minutesAfter` (default 35), each 0 to 1440. A station answers for its stops. Predicted times come from GTFS-realtime; `status` says `scheduled`, `predicted`, `skipped`, `noData` or `cancelled`.")
                .path(StopPath.self)
                .query(ArrivalsQuery.self)
                .cache(live)
                .returns(ArrivalsReply.self) { input, _ in
                    let view = runtime.view()
                    let stop = try TransitJSON.findStop(input.path.id, in: view.network)
                    let time = input.query.time.flatMap(TransitInput.instant) ?? runtime.now()
                    let from = time - Int64(input.query.minutesBefore ?? 5) * 60, to = time + Int64(input.query.minutesAfter ?? 35) * 60
                    let items = view.arrivals(at: stop, time: time, from: from, to: to)
                    return ArrivalsReply(stop: TransitJSON.stop(stop, network: view.network), time: TransitJSON.date(time), from: TransitJSON.date(from),
                                         to: TransitJSON.date(to), items: items.map { TransitJSON.arrival($0, network: view.network) })
                },
            Route.define("transit.stops.schedule", .get, "/stops/{id}/schedule", summary: "Every stop time at a stop on a date")
                .details("`date` is `yyyy-MM-dd` in the agency's time zone (default today there).")
                .path(StopPath.self)
                .query(ScheduleQuery.self)
                .cache(reference)
                .returns(ScheduleReply.self) { input, _ in
                    let view = runtime.view()
                    let stop = try TransitJSON.findStop(input.path.id, in: view.network)
                    let day = input.query.date.flatMap(TransitInput.date) ?? ServiceDay.day(of: runtime.now(), in: view.network.zone(ofStop: stop))
                    return ScheduleReply(stop: TransitJSON.stop(stop, network: view.network), date: ServiceDay.format(day),
                                         items: view.schedule(at: stop, day: day).map { TransitJSON.arrival($0, network: view.network) })
                },
            Route.define("transit.routes.near", .get, "/routes/near", summary: "Routes serving the stops near a point, nearest first")
                .query(NearStopsQuery.self)
                .cache(live)
                .returns(Page<RouteInfo>.self) { input, _ in
                    let view = runtime.view()
                    let query = input.query
                    let found = view.routesNear(lat: query.lat, lon: query.lon, radius: radius(query.radius), limit: query.limit ?? 20)
                    return Page(items: found.map { TransitJSON.route($0, network: view.network) }, nextCursor: nil)
                },
            Route.define("transit.routes.get", .get, "/routes/{id}", summary: "A route with its stops in order per direction and its shapes")
                .path(StopPath.self)
                .cache(reference)
                .returns(RouteDetail.self) { input, _ in
                    let view = runtime.view()
                    guard let route = view.network.route(input.path.id) else { throw GatewayError.notFound("No route '\(input.path.id.prefix(100))'.") }
                    return TransitJSON.routeDetail(route, network: view.network)
                },
            Route.define("transit.trips.get", .get, "/trips/{id}", summary: "A trip with every stop time, scheduled and predicted")
                .details("`serviceDate` (`yyyy-MM-dd`) chooses the day; without it, the day the trip runs nearest to `time` (default now).")
                .path(StopPath.self)
                .query(TripQuery.self)
                .cache(live)
                .returns(TripDetail.self) { input, _ in
                    let view = runtime.view()
                    guard let trip = view.network.trip(input.path.id) else { throw GatewayError.notFound("No trip '\(input.path.id.prefix(100))'.") }
                    let time = input.query.time.flatMap(TransitInput.instant) ?? runtime.now()
                    let day = input.query.serviceDate.flatMap(TransitInput.date) ?? view.serviceDay(of: trip, near: time)
                        ?? ServiceDay.day(of: time, in: view.network.zone(ofTrip: trip))
                    return TransitJSON.tripDetail(trip, day: day, time: time, view: view)
                },

            // Feeds
            Route.define("transit.feeds.list", .get, "/feeds", summary: "The served feeds, with their counts and realtime status (administrators, or users granted transit:write)")
                // The feeds are everyone's: those who manage them are administrators and the users they granted transit:write.
                .access(.granted("transit:write"))
                .returns(Page<FeedInfo>.self) { _, _ in
                    let network = runtime.network
                    return Page(items: network.feeds.map { feed in
                        FeedInfo(id: feed.id, agencies: network.agencies.filter { network.feeds[Int($0.feed)].id == feed.id }.map(\.id),
                                 timeZone: feed.zone.identifier, source: feed.source, importedAt: TransitJSON.date(feed.importedAt),
                                 stops: feed.summary.stops, routes: feed.summary.routes, trips: feed.summary.trips, stopTimes: feed.summary.stopTimes,
                                 realtime: runtime.realtimeStatus(feed.id))
                    }, nextCursor: nil)
                },
            Route.define("transit.feeds.import", .put, "/feeds/{feed}", summary: "Import (or replace) a feed from a GTFS zip (administrators, or users granted transit:write)")
                .details("The zip is the body; `strict=true` stops at the first rejected record. Readers see the old feed until the new one is complete.")
                .access(.granted("transit:write"))
                .cache(changes)
                .path(FeedPath.self)
                .query(FeedImportQuery.self)
                .body(FeedArchiveBody.self)
                .returns(ImportReport.self) { input, _ in
                    let file = FileManager.default.temporaryDirectory.appendingPathComponent("gtfs-upload-\(UUID().uuidString).zip")
                    try input.body.bytes.write(to: file)
                    defer { try? FileManager.default.removeItem(at: file) }
                    let result = try await feeds.importFile(file, feed: input.path.feed, source: "upload", strict: input.query.strict ?? false,
                                                            progress: { _, _ in })
                    return ImportReport(imported: result.summary.stopTimes, rejected: result.rejected)
                },
            Route.define("transit.feeds.delete", .delete, "/feeds/{feed}", summary: "Stop serving a feed and delete it (administrators, or users granted transit:write)")
                .access(.granted("transit:write"))
                .cache(changes)
                .path(FeedPath.self)
                .returns(NoContent.self) { input, _ in
                    guard try await feeds.delete(input.path.feed) else { throw GatewayError.notFound("No feed '\(input.path.feed.prefix(100))'.") }
                    return NoContent()
                },
            Route.define("transit.feeds.realtime", .post, "/feeds/{feed}/realtime", summary: "Post a GTFS-realtime TripUpdates message for a feed (administrators, or users granted transit:write)")
                .details("The body is a binary FeedMessage. An unreadable one is a 422 and the last good message stays in use.")
                .access(.granted("transit:write"))
                .cache(changes)
                .status(.ok)
                .path(FeedPath.self)
                .body(RealtimeBody.self)
                .returns(RealtimeStatus.self) { input, _ in
                    try await runtime.receiveRealtime(feed: input.path.feed, message: input.body.bytes)
                },
        ]
    }
}
