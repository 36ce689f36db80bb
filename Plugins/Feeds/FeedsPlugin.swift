import Foundation
import GatewayCore
import NIOCore
import ServiceLifecycle

/// IoT feeds (seed 004): devices push datapoints into datastreams of feeds; apps list feeds, read
/// current values and history, and watch values change live. Serves the native API under
/// `/v1/feeds`, live updates on `/v1/feeds/live`, and the Xively (COSM) v2 dialect under `/v2`.
public struct FeedsPlugin: AuthorizingPlugin {
    public static let id = "feeds"
    public static let summary = "IoT feeds, datastreams and datapoints with history and live updates, with the Xively v2 dialect"
    public static let migrations = FeedsMigrations.all

    public struct Configuration: PluginConfiguration {
        /// A feed with no update for this long is `frozen`.
        var frozenAfter = ConfigDuration.minutes(15)
        /// Datapoints may be at most this far in the future.
        var maxFutureSkew = ConfigDuration.minutes(5)
        /// The most datapoints one request may carry (more: 413).
        var maxDatapointsPerRequest = 10_000
        /// How often the retention service removes expired datapoints.
        var retentionEvery = ConfigDuration.hours(1)
        /// The demo series loaded on a first start with `demo: true` (`at,value` or a CSV with a header).
        var demo: String?
        /// The base URL in the links of trigger notifications (`https://iot.example.com`); default none (paths only).
        var publicURL: String?
        /// How long a trigger's POST may take.
        var triggerTimeout = ConfigDuration(seconds: 5)
        /// How many times a failed trigger POST is tried in all (waits 1s, 2s, 4s, ... between).
        var triggerAttempts = 5
        /// Whether trigger URLs may name loopback, private or link-local addresses.
        var triggerPrivateTargets = false
        /// The secret that seals the readable copies of v2 key secrets (`${FEEDS_KEY_SECRET}`, at
        /// least 32 characters); without it they are sealed with a key kept in the database. See
        /// ``LegacyKeys``.
        var keySecret: String?

        public static let defaults = Configuration()

        public func validate() throws {
            guard (1...100_000).contains(maxDatapointsPerRequest) else {
                throw ConfigurationError(key: "maxDatapointsPerRequest", "must be between 1 and 100000")
            }
            guard (1...60).contains(triggerTimeout.seconds) else { throw ConfigurationError(key: "triggerTimeout", "must be from 1s to 60s") }
            guard (1...20).contains(triggerAttempts) else { throw ConfigurationError(key: "triggerAttempts", "must be from 1 to 20") }
            guard frozenAfter.seconds >= 1 else { throw ConfigurationError(key: "frozenAfter", "must be at least 1s") }
            guard retentionEvery.seconds >= 1 else { throw ConfigurationError(key: "retentionEvery", "must be at least 1s") }
            if let keySecret, keySecret.count < 32 { throw ConfigurationError(key: "keySecret", "must be at least 32 characters") }
            if let url = publicURL, !(url.hasPrefix("http://") || url.hasPrefix("https://")) {
                throw ConfigurationError(key: "publicURL", "must be an http or https URL")
            }
        }

        var frozenAfterSeconds: Int { Int(frozenAfter.seconds) }
        var maxFutureSkewSeconds: Int { Int(maxFutureSkew.seconds) }
        var retentionEverySeconds: Int { Int(retentionEvery.seconds) }
        var triggerTimeoutSeconds: Int { Int(triggerTimeout.seconds) }
        /// ``publicURL`` without a trailing slash.
        var linkBase: String? { publicURL.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } }
    }

    let configuration: Configuration
    let context: PluginContext
    let service: FeedService

    public init(configuration: Configuration, context: PluginContext) async throws {
        self.configuration = configuration
        self.context = context
        service = FeedService(store: FeedStore(database: context.database, clock: context.clock), settings: configuration, context: context)
    }

    public var importers: [any Importer] { [DatapointImporter(service: service)] }

    public var services: [any Service] {
        // Retention runs on one instance of a cluster; trigger deliveries are claimed row by row,
        // so every instance delivers (each delivery once).
        [context.leased("feeds.retention",
                        work: RetentionService(store: service.store, every: .seconds(configuration.retentionEverySeconds), logger: context.logger)),
         TriggerService(engine: service.triggers, logger: context.logger)]
    }

    public var dialects: [Dialect] { [XivelyDialect(service: service).dialect] }

    /// A request made with a v2 key must match one of the key's permissions (``FeedService/authorize(_:)``).
    public func authorize(_ request: AuthorizationRequest) async throws {
        try await service.authorize(request)
    }


    /// A v2 key bound to a source address, a `Referer` or a `minimum_interval` is checked on every
    /// request, so its replies never come from the response cache (which knows none of these).
    public func cacheAdmits(_ principal: Principal) async -> Bool {
        guard case .apiKey = principal.kind else { return true }
        do {
            guard let key = try await service.keys.presented(by: principal) else { return true }
            return !key.permissions.contains { $0.sourceIP != nil || $0.referer != nil || ($0.minimumInterval ?? 0) > 0 }
        } catch {
            return false
        }
    }

    public func loadDemoData() async throws {
        guard let demo = configuration.demo else { return }
        let file = context.resolve(path: demo)
        guard FileManager.default.fileExists(atPath: file.path) else {
            context.logger.warning("feeds demo data is missing", metadata: ["file": "\(file.path)"])
            return
        }
        var draft = FeedDraft()
        draft.title = "Continuous glucose monitor (demo)"
        draft.description = "Readings of a continuous glucose sensor every five minutes (bokeh sample data, public domain)."
        draft.tags = ["demo", "health"]
        draft.datastreams = [DatastreamDraft(id: "glucose", tags: ["glucose"], unit: DatastreamUnit(label: "milligrams per decilitre", symbol: "mg/dL", type: "derivedUnits"))]
        var principal = Principal(kind: .apiKey(keyID: "demo"), isAdmin: true, address: "local")
        principal.displayName = "demo"
        let feed = try await service.createFeed(draft, principal)
        _ = try await DatapointImporter(service: service).importFile(file, options: ["feed": String(feed.id), "datastream": "glucose"], progress: { _, _ in })
    }

    // MARK: Native shapes

    struct FeedPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["feed": FeedRules.feedIDRule]
        var feed: String
    }

    struct StreamPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["feed": FeedRules.feedIDRule, "stream": FeedRules.datastreamIDRule]
        var feed: String
        var stream: String
    }

    struct PointPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["feed": FeedRules.feedIDRule, "stream": FeedRules.datastreamIDRule, "at": FeedRules.timeRule]
        var feed: String
        var stream: String
        var at: String
    }

    struct ListParameters: Codable, Sendable {
        var q: String?
        var tag: String?
        var user: String?
        var status: String?
        var units: String?
        var lat: Double?
        var lon: Double?
        var distance: Double?
        var distanceUnits: String?
        var order: String?
        var limit: Int?
        var cursor: String?
        var content: String?
    }

    /// The cursor of the feed list: the offset of the next page, 1 to 9 digits.
    static let cursorDigits = 1...9
    /// The longest `distance` of a search near a point, in its units.
    static let longestDistance = 20_000.0
    /// The units of `distance` and their length in kilometres.
    static let distanceUnits: [String: Double] = ["kms": 1, "km": 1, "miles": 1.609_344]
    /// The `status` filters.
    static let statusFilters = ["live", "frozen", "all"]
    /// The `order`s of the feed list.
    static let orders = ["id", "relevance", "created_at", "created", "retrieved_at", "updated"]

    /// A page of feeds: the native list shape, with the number of feeds the filter matches.
    struct FeedPage: Codable, Sendable, PagedOutput {
        var items: [FeedView]
        var nextCursor: String?
        var total: Int

        private enum Key: String, CodingKey { case items, nextCursor, total }

        init(items: [FeedView], nextCursor: String?, total: Int) {
            self.items = items
            self.nextCursor = nextCursor
            self.total = total
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Key.self)
            items = try container.decode([FeedView].self, forKey: .items)
            nextCursor = try container.decode(String?.self, forKey: .nextCursor)
            total = try container.decode(Int.self, forKey: .total)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(items, forKey: .items)
            try container.encode(nextCursor, forKey: .nextCursor)
            try container.encode(total, forKey: .total)
        }
    }

    struct FeedParameters: Codable, Sendable {
        var datastreams: String?
    }

    /// The history parameters, read by ``HistoryQuery`` (so that each problem names its parameter).
    struct HistoryParameters: Codable, Sendable {
        var start: String?
        var end: String?
        var duration: String?
        var limit: String?
        var interval: String?
        var function: String?
        var find_previous: String?
        var interval_type: String?

        var dictionary: [String: String] {
            var result: [String: String] = [:]
            for (key, value) in [("start", start), ("end", end), ("duration", duration), ("limit", limit), ("interval", interval),
                                 ("function", function), ("find_previous", find_previous), ("interval_type", interval_type)] {
                if let value { result[key] = value }
            }
            return result
        }
    }

    struct RangeParameters: Codable, Sendable {
        var start: String?
        var end: String?
        var duration: String?
    }

    /// A datapoints body: JSON or CSV.
    struct DatapointsBody: RawBodyInput {
        static let acceptedMediaTypes = ["application/json", "text/csv", "text/plain"]
        var bytes: ByteBuffer
        var contentType: String

        init(bytes: ByteBuffer, contentType: String) throws {
            self.bytes = bytes
            self.contentType = contentType
        }
    }

    struct ValueBody: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ["value": FeedRules.valueRule]
        var value: JSONValue
    }

    struct Ingested: Codable, Sendable { var accepted: Int }
    struct Removed: Codable, Sendable { var deleted: Int }

    // MARK: Rendering

    func render(_ feed: FeedRecord, streams: [DatastreamRecord]?) -> FeedView {
        FeedView(
            id: feed.id, title: feed.title, description: feed.description, website: feed.website, tags: feed.tags, private: feed.isPrivate,
            creator: feed.creatorName, retention: feed.retentionSeconds.map { "\($0)s" }, location: feed.location.isEmpty ? nil : LocationView(feed.location),
            status: service.status(of: feed), created: UTCTimestamp.format(micros: feed.created), updated: UTCTimestamp.format(micros: feed.updated),
            datastreams: streams.map { $0.map { Self.render($0, points: nil) } })
    }

    static func render(_ stream: DatastreamRecord, points: [Datapoint]?) -> DatastreamView {
        DatastreamView(
            id: stream.id, tags: stream.tags,
            unit: stream.unit.isEmpty ? nil : UnitView(label: stream.unit.label, symbol: stream.unit.symbol, type: stream.unit.type),
            currentValue: stream.currentValue, at: stream.at.map { UTCTimestamp.format(micros: $0) }, minValue: stream.minValue,
            maxValue: stream.maxValue, datapoints: points.map { $0.map(render) })
    }

    static func render(_ point: Datapoint) -> DatapointView {
        DatapointView(at: UTCTimestamp.format(micros: point.at), value: point.value)
    }

    /// `{"datapoints": [...]}`: its `Codable` shape documents it, and it writes itself straight to
    /// bytes (history replies hold up to 1,000 datapoints). Measured (`Benchmarks/feeds/run`,
    /// SQLite, 300,000 datapoints, history with an interval on one connection, 2-core machine):
    /// p50 4.06 and 4.27 ms, p99 5.58 and 5.51 ms written so (two runs), against p50 4.92 ms and
    /// p99 6.46 ms through `Codable`: 13–18 % of the request.
    struct HistoryReply: Codable, Sendable, JSONWritable {
        let points: [Datapoint]

        init(points: [Datapoint]) {
            self.points = points
        }

        private enum Key: String, CodingKey { case datapoints }

        init(from decoder: any Decoder) throws {
            let views = try decoder.container(keyedBy: Key.self).decode([DatapointView].self, forKey: .datapoints)
            points = views.map { Datapoint(at: UTCTimestamp.parse($0.at) ?? 0, value: $0.value) }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(points.map(FeedsPlugin.render), forKey: .datapoints)
        }

        func writeJSON(into bytes: inout [UInt8]) {
            FeedsPlugin.writeHistory(points, into: &bytes)
        }
    }

    static func writeHistory(_ points: [Datapoint], into bytes: inout [UInt8]) {
        bytes.reserveCapacity(bytes.count + 16 + points.count * 56)
        bytes.append(contentsOf: #"{"datapoints":["#.utf8)
        for (index, point) in points.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: #"{"at":""#.utf8)
            UTCTimestamp.write(micros: point.at, into: &bytes)
            bytes.append(contentsOf: #"","value":"#.utf8)
            JSONValue.write(number: point.value, into: &bytes)
            bytes.append(UInt8(ascii: "}"))
        }
        bytes.append(contentsOf: "]}".utf8)
    }

    /// The feed list filter from the native or the legacy parameters.
    static func filter(q: String?, tag: String?, user: String?, status: String?, units: String?, lat: Double?, lon: Double?, distance: Double?,
                       distanceUnits: String?, order: String?, page: Int?, perPage: Int?, principal: Principal,
                       seesPrivate: Bool) throws -> FeedStore.FeedFilter {
        func fail(_ name: String, _ detail: String) -> GatewayError {
            GatewayError.badRequest("\(name): \(detail)", errors: [.init(pointer: "query.\(name)", detail: detail)])
        }
        var filter = FeedStore.FeedFilter()
        filter.query = q.flatMap { $0.trimmingCharacters(in: .whitespaces).isEmpty ? nil : String($0.prefix(200)) }
        filter.tag = tag.flatMap { $0.isEmpty ? nil : $0 }
        filter.user = user.flatMap { $0.isEmpty ? nil : $0 }
        switch status ?? "all" {
        case "all": break
        case "live", "frozen": filter.status = status
        default: throw fail("status", "must be \(statusFilters.joined(separator: ", "))")
        }
        filter.units = (units ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        switch (lat, lon) {
        case (nil, nil): break
        case (let lat?, let lon?):
            guard (-90...90).contains(lat) else { throw fail("lat", "must be from -90 to 90") }
            guard (-180...180).contains(lon) else { throw fail("lon", "must be from -180 to 180") }
            let (radius, factor) = try nearness(distance: distance, distanceUnits: distanceUnits, unitsName: "distance_units")
            filter.near = (lat, lon, radius * factor)
        default:
            throw fail(lat == nil ? "lat" : "lon", "lat and lon go together")
        }
        switch order ?? "id" {
        case "id", "relevance": filter.order = .id
        case "created_at", "created": filter.order = .created
        case "retrieved_at", "updated": filter.order = .updated
        default: throw fail("order", "must be created_at, retrieved_at or relevance")
        }
        let page = page ?? 1
        let perPage = perPage ?? 50
        guard page >= 1, page <= 1_000_000 else { throw fail("page", "must be at least 1") }
        guard (1...1_000).contains(perPage) else { throw fail("per_page", "must be from 1 to 1000") }
        filter.offset = (page - 1) * perPage
        filter.limit = perPage
        filter.viewer = principal.userID
        filter.seesPrivate = seesPrivate
        return filter
    }

    /// The radius of a search near a point and the kilometres of its unit: `distance` (default 5)
    /// more than 0 and at most ``longestDistance``, in ``distanceUnits`` (default kms).
    static func nearness(distance: Double?, distanceUnits: String?, unitsName: String) throws -> (radius: Double, factor: Double) {
        func fail(_ name: String, _ detail: String) -> GatewayError {
            GatewayError.badRequest("\(name): \(detail)", errors: [.init(pointer: "query.\(name)", detail: detail)])
        }
        guard let factor = Self.distanceUnits[distanceUnits ?? "kms"] else { throw fail(unitsName, "must be kms or miles") }
        let radius = distance ?? 5
        guard radius > 0, radius <= longestDistance else { throw fail("distance", "must be more than 0 and at most 20000") }
        return (radius, factor)
    }

    /// The range of a range delete: start and end, or one of them with a duration.
    static func range(_ parameters: RangeParameters, now: Int64) throws -> (Int64, Int64) {
        var dictionary: [String: String] = [:]
        if let start = parameters.start { dictionary["start"] = start }
        if let end = parameters.end { dictionary["end"] = end }
        if let duration = parameters.duration { dictionary["duration"] = duration }
        guard !dictionary.isEmpty else {
            throw GatewayError.badRequest("Give start and end, or a duration, of the datapoints to delete.", errors: [.init(pointer: "query.start", detail: "is required")])
        }
        let query = try HistoryQuery(parameters: dictionary, now: now, legacy: false)
        return (query.newest ? Int64.min / 2 : query.start, query.end)
    }

    // MARK: Operations

    public var routes: [Route] {
        let service = self.service
        let plugin = self
        let feedTag = "feeds:{feed}"
        return [
            Route.define("feeds.list", .get, "", summary: "Find feeds")
                .example("?status=all&limit=5")
                .details("Filters: `q` (words in title, description or tags), `tag`, `user`, `status` (live, frozen, all), `units`, and `lat`/`lon`/`distance` (`distanceUnits` kms or miles). Pages with `limit` (1–1000, default 50) and `cursor` (a page's `nextCursor`); `content=summary` leaves out datastreams.")
                .query(ListParameters.self)
                .tags(FeedService.keyPermissions)
                .returns(FeedPage.self) { input, context in
                    let p = input.query
                    let size = p.limit ?? 50
                    guard PageQuery.limits.contains(size) else { throw GatewayError.invalid(field: "query.limit", "must be from 1 to 1000") }
                    let cursor = p.cursor ?? "0"
                    guard Self.cursorDigits.contains(cursor.utf8.count), cursor.utf8.allSatisfy({ (48...57).contains($0) }), let offset = Int(cursor) else {
                        throw GatewayError.invalid(field: "query.cursor", "is not a cursor this list gave")
                    }
                    // Checked whether or not lat and lon are given, as the document states them.
                    _ = try Self.nearness(distance: p.distance, distanceUnits: p.distanceUnits, unitsName: "distanceUnits")
                    var filter = try Self.filter(q: p.q, tag: p.tag, user: p.user, status: p.status, units: p.units, lat: p.lat, lon: p.lon, distance: p.distance,
                                                 distanceUnits: p.distanceUnits, order: p.order, page: 1, perPage: size, principal: context.principal,
                                                 seesPrivate: context.principal.isAdmin)
                    filter.offset = offset
                    let (total, feeds) = try await service.store.listFeeds(filter, frozenAfter: service.frozenAfterMicros)
                    let hidesPrivate = try await service.keys.hidesPrivate(context.principal)
                    let visible = feeds.filter { service.canSee($0, context.principal) && !($0.isPrivate && hidesPrivate) }
                    let streams = p.content == "summary" ? [:] : try await service.store.datastreams(of: visible.map(\.id))
                    return FeedPage(
                        items: visible.map { feed in
                            plugin.render(feed, streams: p.content == "summary" ? nil : (streams[feed.id] ?? []).filter { service.mayReach(stream: $0.id, of: feed.id, context.principal) })
                        },
                        nextCursor: offset + size < total ? String(offset + size) : nil, total: total)
                },
            Route.define("feeds.create", .post, "", summary: "Create a feed (and its datastreams)")
                .details("The body is {title, description, website, tags, private, location {name, domain, exposure, disposition, lat, lon, ele}, retention, datastreams: [{id, tags, unit, currentValue}]}.")
                .access(.scope("feeds:write"))
                .body(JSONValue.self)
                .documentBody(as: NewFeedInput.self)
                .tags(FeedService.keyPermissions)
                .replies(FeedView.self) { input, context in
                    let draft = try service.feedDraft(input.body, creating: true, naming: .native)
                    let feed = try await service.createFeed(draft, context.principal)
                    let streams = try await service.store.datastreams(of: feed.id)
                    return Reply(plugin.render(feed, streams: streams), status: 201, headers: [.location: "/v1/feeds/\(feed.id)"])
                },
            Route.define("feeds.get", .get, "/{feed}", summary: "Read a feed with its datastreams")
                .details("`datastreams=a,b` keeps only those datastreams.")
                .path(FeedPath.self)
                .query(FeedParameters.self)
                .resource("feed")
                .cache(.perPrincipal(ttl: .seconds(5), tags: [feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(FeedView.self) { input, context in
                    let feed = try await service.visibleFeed(input.path.feed, context.principal)
                    let names = input.query.datastreams.map { $0.split(separator: ",").map(String.init) }
                    return plugin.render(feed, streams: try await service.streams(of: feed, only: names, context.principal))
                },
            Route.define("feeds.update", .put, "/{feed}", summary: "Change a feed's metadata and create or change datastreams")
                .details("Members left out stay as they are; read-only members (id, status, creator, created, updated) are ignored.")
                .access(.scope("feeds:write"))
                .path(FeedPath.self)
                .resource("feed")
                .body(JSONValue.self)
                .documentBody(as: FeedInput.self)
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(FeedView.self) { input, context in
                    let feed = try await service.changeableFeed(input.path.feed, context.principal)
                    let draft = try service.feedDraft(input.body, creating: false, naming: .native)
                    let updated = try await service.updateFeed(feed, draft, context.principal)
                    return plugin.render(updated, streams: try await service.streams(of: updated, only: nil, context.principal))
                },
            Route.define("feeds.delete", .delete, "/{feed}", summary: "Delete a feed with its datastreams and datapoints")
                .access(.scope("feeds:write"))
                .path(FeedPath.self)
                .resource("feed")
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(NoContent.self) { input, context in
                    try await service.deleteFeed(try await service.changeableFeed(input.path.feed, context.principal))
                    return NoContent()
                },
            Route.define("feeds.datastreams.list", .get, "/{feed}/datastreams", summary: "A feed's datastreams")
                .path(FeedPath.self)
                .resource("feed")
                .cache(.perPrincipal(ttl: .seconds(5), tags: [feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(DatastreamList.self) { input, context in
                    let feed = try await service.visibleFeed(input.path.feed, context.principal)
                    let streams = try await service.streams(of: feed, only: nil, context.principal)
                    return DatastreamList(items: streams.map { Self.render($0, points: nil) })
                },
            Route.define("feeds.datastreams.create", .post, "/{feed}/datastreams", summary: "Create datastreams")
                .details("The body is one datastream {id, tags, unit, currentValue} or {\"datastreams\": [...]}; 409 when one exists.")
                .access(.scope("feeds:write"))
                .path(FeedPath.self)
                .resource("feed")
                .body(JSONValue.self)
                .documentBody(as: DatastreamsInput.self)
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .replies(DatastreamList.self) { input, context in
                    let feed = try await service.changeableFeed(input.path.feed, context.principal)
                    var problems: [GatewayError.FieldError] = []
                    let drafts: [DatastreamDraft]
                    if case .object(let members) = input.body, let list = members["datastreams"] {
                        drafts = service.datastreamDrafts(list, pointer: "/datastreams", naming: .native, problems: &problems)
                    } else {
                        drafts = service.datastreamDraft(input.body, id: nil, pointer: "", naming: .native, problems: &problems).map { [$0] } ?? []
                    }
                    guard problems.isEmpty else { throw FeedService.invalid(problems) }
                    guard !drafts.isEmpty else { throw GatewayError.invalid(field: "/datastreams", "must hold at least one datastream") }
                    try await service.createDatastreams(feed, drafts, context.principal)
                    let created = try await service.store.datastreams(of: feed.id).filter { stream in drafts.contains { $0.id == stream.id } }
                    return Reply(DatastreamList(items: created.map { Self.render($0, points: nil) }), status: 201,
                                 headers: drafts.count == 1 ? [.location: "/v1/feeds/\(feed.id)/datastreams/\(drafts[0].id)"] : [:])
                },
            Route.define("feeds.datastreams.get", .get, "/{feed}/datastreams/{stream}", summary: "Read a datastream")
                .path(StreamPath.self)
                .resource("feed")
                .cache(.perPrincipal(ttl: .seconds(5), tags: [feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(DatastreamView.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: false)
                    return Self.render(stream, points: nil)
                },
            Route.define("feeds.datastreams.update", .put, "/{feed}/datastreams/{stream}", summary: "Change a datastream (a currentValue records a datapoint)")
                .access(.scope("feeds:write"))
                .path(StreamPath.self)
                .resource("feed")
                .body(JSONValue.self)
                .documentBody(as: DatastreamChange.self)
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(DatastreamView.self) { input, context in
                    let (feed, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: true)
                    var problems: [GatewayError.FieldError] = []
                    guard let draft = service.datastreamDraft(input.body, id: stream.id, pointer: "", naming: .native, problems: &problems), problems.isEmpty else {
                        throw FeedService.invalid(problems)
                    }
                    try await service.updateDatastream(feed, draft)
                    return Self.render(try await service.stream(feed, stream.id, context.principal), points: nil)
                },
            Route.define("feeds.datastreams.delete", .delete, "/{feed}/datastreams/{stream}", summary: "Delete a datastream and its datapoints")
                .access(.scope("feeds:write"))
                .path(StreamPath.self)
                .resource("feed")
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(NoContent.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: true)
                    try await service.deleteDatastream(stream)
                    return NoContent()
                },
            Route.define("feeds.datapoints.ingest", .post, "/{feed}/datastreams/{stream}/datapoints", summary: "Record datapoints (JSON or CSV)")
                .details("JSON {\"datapoints\": [{\"at\", \"value\"}]} (or a bare array), or text/csv lines `at,value` (or `value`, at now). All or nothing; re-sending a datapoint at the same `at` replaces its value. At most `maxDatapointsPerRequest` (default 10,000) per request: more is a 413.")
                .access(.scope("feeds:write"))
                .path(StreamPath.self)
                .resource("feed")
                .body(DatapointsBody.self)
                .documentBody(as: DatapointsInput.self)
                .rules(["body.datapoints": .list(1...configuration.maxDatapointsPerRequest)])
                .cache(.invalidating([feedTag]))
                .status(200)
                .tags(FeedService.keyPermissions)
                .returns(Ingested.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: true)
                    let points = try service.datapoints(input.body.bytes, contentType: input.body.contentType)
                    try await service.ingest(points, into: stream)
                    return Ingested(accepted: points.count)
                },
            Route.define("feeds.datapoints.history", .get, "/{feed}/datastreams/{stream}/datapoints", summary: "A datastream's history")
                .details("`start`, `end`, `duration` (6hours, 2days, 1week), `limit` (1–1000, default 100), `find_previous`; `interval` (seconds) samples the value in force at each interval point (`interval_type=discrete` reports every point at its time); `function` = avg, min, max, sum, count, first or last aggregates each interval instead.")
                .path(StreamPath.self)
                .query(HistoryParameters.self)
                .resource("feed")
                .cache(.perPrincipal(ttl: .seconds(5), tags: [feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(HistoryReply.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: false)
                    let query = try HistoryQuery(parameters: input.query.dictionary, now: service.store.now(), legacy: false)
                    return HistoryReply(points: query.isEmpty ? [] : try await service.store.history(stream, query))
                },
            Route.define("feeds.datapoints.deleteRange", .delete, "/{feed}/datastreams/{stream}/datapoints", summary: "Delete the datapoints of a time range")
                .access(.scope("feeds:write"))
                .path(StreamPath.self)
                .query(RangeParameters.self)
                .resource("feed")
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(Removed.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: true)
                    let (start, end) = try Self.range(input.query, now: service.store.now())
                    return Removed(deleted: start > end ? 0 : try await service.deleteDatapoints(stream, from: start, through: end))
                },
            Route.define("feeds.datapoints.get", .get, "/{feed}/datastreams/{stream}/datapoints/{at}", summary: "Read one datapoint")
                .path(PointPath.self)
                .resource("feed")
                .tags(FeedService.keyPermissions)
                .returns(DatapointView.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: false)
                    let at = try Self.time(input.path.at)
                    guard let point = try await service.store.datapoint(stream, at: at) else {
                        throw GatewayError.notFound("No datapoint at \(UTCTimestamp.format(micros: at)).")
                    }
                    return Self.render(point)
                },
            Route.define("feeds.datapoints.update", .put, "/{feed}/datastreams/{stream}/datapoints/{at}", summary: "Change one datapoint's value")
                .access(.scope("feeds:write"))
                .path(PointPath.self)
                .resource("feed")
                .body(ValueBody.self)
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(DatapointView.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: true)
                    let at = try Self.time(input.path.at)
                    guard let value = FeedRules.value(input.body.value) else { throw GatewayError.invalid(field: "/value", "must be a number") }
                    try await service.updateDatapoint(stream, at: at, value: value)
                    return Self.render(Datapoint(at: at, value: value))
                },
            Route.define("feeds.datapoints.delete", .delete, "/{feed}/datastreams/{stream}/datapoints/{at}", summary: "Delete one datapoint")
                .access(.scope("feeds:write"))
                .path(PointPath.self)
                .resource("feed")
                .cache(.invalidating([feedTag]))
                .tags(FeedService.keyPermissions)
                .returns(NoContent.self) { input, context in
                    let (_, stream) = try await service.feedAndStream(input.path.feed, input.path.stream, context.principal, changing: true)
                    let at = try Self.time(input.path.at)
                    guard try await service.deleteDatapoints(stream, from: at, through: at) == 1 else {
                        throw GatewayError.notFound("No datapoint at \(UTCTimestamp.format(micros: at)).")
                    }
                    return NoContent()
                },
        ] + triggerOperations + [NativeLiveProtocol(service: service, plugin: plugin).route]
    }

    /// A datapoint time from a path segment.
    static func time(_ text: String) throws -> Int64 {
        guard let micros = UTCTimestamp.parse(text) else {
            throw GatewayError.badRequest("'\(text.prefix(40))' is not an ISO 8601 time such as 2013-01-01T14:14:55.118845Z.",
                                          errors: [.init(pointer: "path.at", detail: "is not an ISO 8601 time")])
        }
        return micros
    }
}

/// Removes datapoints past each feed's retention, periodically.
struct RetentionService: Service {
    let store: FeedStore
    let every: Duration
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let removed = try await store.applyRetention()
                if removed > 0 { logger.info("feeds retention removed datapoints", metadata: ["count": "\(removed)"]) }
            } catch {
                logger.warning("feeds retention failed", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: every) }
        }
    }
}
