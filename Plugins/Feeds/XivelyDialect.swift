import Foundation
import GatewayCore
import NIOCore

/// The Xively (COSM) API v2 under `/v2`, exact enough that an unmodified old client works:
/// `.json` / `.csv` suffixes (the suffix wins over `Accept`), the key in `X-ApiKey` or `?key=`,
/// 201 + `Location` on creates, values as strings, timestamps with microseconds and `Z`, only the
/// legacy keys in feed, datastream, datapoint, location and unit objects, read-only members of a
/// PUT ignored, and `{"title", "errors"}` error bodies with the v2 status codes.
struct XivelyDialect: Sendable {
    let service: FeedService

    enum Format: Sendable { case json, csv }

    typealias Handler = @Sendable (RouteRequest, OperationContext, Format) async throws -> RouteReply

    /// The routes as they are declared: each also answers with the format suffixes when its last
    /// segment is literal (`/v2/feeds.json`).
    final class Routes {
        private(set) var routes: [Route] = []

        /// Adds a route. Its v2 key permissions are checked by the plugin's authorize hook unless
        /// `tags` leaves out ``FeedService/keyPermissions`` (triggers and keys name their feed elsewhere).
        /// `secret` names a path parameter that logs and traces must not show (``RouteBuilder/secret(_:)``).
        func add(_ method: HTTPRequest.Method, _ path: String, _ summary: String, access: AccessRule = .public,
                 tags: [String] = [FeedService.keyPermissions], secret: String? = nil, _ handler: @escaping Handler) {
            func route(_ path: String) -> Route {
                var builder = Route.define(method, path, summary: summary).access(access).tags(tags)
                if let secret { builder = builder.secret(secret) }
                return builder.handle { request, context in
                    try await handler(request, context, try XivelyDialect.format(request))
                }
            }
            routes.append(route(path))
            if let last = path.split(separator: "/").last, !last.hasPrefix("{") {
                for suffix in [".json", ".csv", ".xml"] { routes.append(route(path + suffix)) }
            }
        }
    }

    /// Writes need a user's session, or a key that may write (`feeds:write`).
    static let writer = AccessRule.scope("feeds:write")

    var dialect: Dialect {
        let list = Routes()
        func add(_ method: HTTPRequest.Method, _ path: String, _ summary: String, access: AccessRule = .public, _ handler: @escaping Handler) {
            list.add(method, path, summary, access: access, handler)
        }
        add(.get, "/v2/feeds", "List feeds (q, tag, user, units, status, lat/lon/distance, order, page, per_page, content)") { request, context, format in
            try await listFeeds(request, context, format)
        }
        add(.post, "/v2/feeds", "Create a feed (201 + Location)", access: Self.writer) { request, context, format in
            let draft = try service.feedDraft(try Self.json(request), creating: true, naming: .legacy)
            let feed = try await service.createFeed(draft, context.principal)
            return RouteReply(status: .created, headers: [.location: "\(Self.base(request))/v2/feeds/\(feed.id)"])
        }
        add(.get, "/v2/feeds/{feed}", "Read a feed (datastreams=a,b and the history parameters)") { request, context, format in
            let feed = try await service.visibleFeed(Self.strip(request.pathParameters["feed"]), context.principal)
            let names = request.query("datastreams").map { $0.split(separator: ",").map(String.init) }
            let streams = try await service.streams(of: feed, only: names, context.principal)
            let parameters = Self.parameters(request)
            var points: [String: [Datapoint]] = [:]
            if HistoryQuery.isRequested(parameters) {
                let query = try HistoryQuery(parameters: parameters, now: service.store.now(), legacy: true)
                for stream in streams { points[stream.id] = try await service.store.history(stream, query) }
            }
            switch format {
            case .json:
                return Self.json(render(feed, streams: streams, points: HistoryQuery.isRequested(parameters) ? points : nil, base: Self.base(request)))
            case .csv:
                return Self.csv(streams.map { stream in
                    "\(stream.id),\(stream.at.map { UTCTimestamp.format(micros: $0) } ?? ""),\(stream.currentValue.map(FeedRules.text) ?? "")"
                })
            }
        }
        add(.put, "/v2/feeds/{feed}", "Update a feed's metadata and datastreams (read-only members ignored)", access: Self.writer) { request, context, format in
            let feed = try await service.changeableFeed(Self.strip(request.pathParameters["feed"]), context.principal)
            let draft: FeedDraft
            switch format {
            case .json: draft = try service.feedDraft(try Self.json(request), creating: false, naming: .legacy)
            case .csv: draft = FeedDraft(datastreams: try csvStreams(request))
            }
            _ = try await service.updateFeed(feed, draft, context.principal)
            return RouteReply(status: .ok)
        }
        add(.delete, "/v2/feeds/{feed}", "Delete a feed", access: Self.writer) { request, context, _ in
            try await service.deleteFeed(try await service.changeableFeed(Self.strip(request.pathParameters["feed"]), context.principal))
            return RouteReply(status: .ok)
        }
        add(.post, "/v2/feeds/{feed}/datastreams", "Create datastreams ({\"version\", \"datastreams\": [...]})", access: Self.writer) { request, context, format in
            let feed = try await service.changeableFeed(Self.strip(request.pathParameters["feed"]), context.principal)
            var problems: [GatewayError.FieldError] = []
            let drafts: [DatastreamDraft]
            switch format {
            case .json:
                let body = try Self.json(request)
                drafts = service.datastreamDrafts(body[path: ["datastreams"]] ?? .null, pointer: "/datastreams", naming: .legacy, problems: &problems)
            case .csv:
                drafts = try csvStreams(request)
            }
            guard problems.isEmpty else { throw FeedService.invalid(problems) }
            guard !drafts.isEmpty else { throw GatewayError.invalid(field: "/datastreams", "must hold at least one datastream") }
            try await service.createDatastreams(feed, drafts, context.principal)
            var headers: HTTPFields = [:]
            if drafts.count == 1 { headers[.location] = "\(Self.base(request))/v2/feeds/\(feed.id)/datastreams/\(drafts[0].id)" }
            return RouteReply(status: .created, headers: headers)
        }
        add(.get, "/v2/feeds/{feed}/datastreams/{stream}", "Read a datastream (with the history parameters: its datapoints)") { request, context, format in
            let (_, stream) = try await locate(request, context)
            let parameters = Self.parameters(request)
            var points: [Datapoint]?
            if HistoryQuery.isRequested(parameters) {
                points = try await service.store.history(stream, try HistoryQuery(parameters: parameters, now: service.store.now(), legacy: true))
            }
            switch format {
            case .json:
                return Self.json(Self.render(stream, points: points))
            case .csv:
                if let points { return Self.csv(points.map { "\(UTCTimestamp.format(micros: $0.at)),\(FeedRules.text($0.value))" }) }
                return Self.csv(["\(stream.at.map { UTCTimestamp.format(micros: $0) } ?? ""),\(stream.currentValue.map(FeedRules.text) ?? "")"])
            }
        }
        add(.put, "/v2/feeds/{feed}/datastreams/{stream}", "Update a datastream (current_value records a datapoint)", access: Self.writer) { request, context, format in
            let (feed, stream) = try await locate(request, context, writing: true)
            var draft = DatastreamDraft(id: stream.id)
            switch format {
            case .json:
                var problems: [GatewayError.FieldError] = []
                var body = try Self.json(request)
                if let first = body[path: ["datastreams"]]?.arrayValue?.first { body = first }
                guard let parsed = service.datastreamDraft(body, id: stream.id, pointer: "", naming: .legacy, problems: &problems), problems.isEmpty else {
                    throw FeedService.invalid(problems)
                }
                draft = parsed
            case .csv:
                let points = try service.datapoints(request.body, contentType: "text/csv")
                guard let latest = points.max(by: { $0.at < $1.at }) else { throw GatewayError.invalid("The body holds no value.") }
                draft.currentValue = latest.value
                draft.at = latest.at
            }
            try await service.updateDatastream(feed, draft)
            return RouteReply(status: .ok)
        }
        add(.delete, "/v2/feeds/{feed}/datastreams/{stream}", "Delete a datastream", access: Self.writer) { request, context, _ in
            let (_, stream) = try await locate(request, context, writing: true)
            try await service.deleteDatastream(stream)
            return RouteReply(status: .ok)
        }
        add(.post, "/v2/feeds/{feed}/datastreams/{stream}/datapoints", "Record datapoints ({\"datapoints\": [{at, value}]} or CSV at,value)", access: Self.writer) { request, context, format in
            let (_, stream) = try await locate(request, context, writing: true)
            let points = try service.datapoints(request.body, contentType: format == .csv ? "text/csv" : "application/json")
            try await service.ingest(points, into: stream)
            return RouteReply(status: .ok)
        }
        add(.delete, "/v2/feeds/{feed}/datastreams/{stream}/datapoints", "Delete the datapoints of a range (start, end, duration)", access: Self.writer) { request, context, _ in
            let (_, stream) = try await locate(request, context, writing: true)
            let range = FeedsPlugin.RangeParameters(start: request.query("start"), end: request.query("end"), duration: request.query("duration"))
            let (start, end) = try FeedsPlugin.range(range, now: service.store.now())
            _ = try await service.deleteDatapoints(stream, from: start, through: end)
            return RouteReply(status: .ok)
        }
        add(.get, "/v2/feeds/{feed}/datastreams/{stream}/datapoints/{at}", "Read one datapoint") { request, context, format in
            let (_, stream) = try await locate(request, context)
            let at = try FeedsPlugin.time(Self.strip(request.pathParameters["at"]))
            guard let point = try await service.store.datapoint(stream, at: at) else { throw GatewayError.notFound("There is no datapoint at this time.") }
            switch format {
            case .json: return Self.json(Self.render(point))
            case .csv: return Self.csv(["\(UTCTimestamp.format(micros: point.at)),\(FeedRules.text(point.value))"])
            }
        }
        add(.put, "/v2/feeds/{feed}/datastreams/{stream}/datapoints/{at}", "Change one datapoint's value", access: Self.writer) { request, context, format in
            let (_, stream) = try await locate(request, context, writing: true)
            let at = try FeedsPlugin.time(Self.strip(request.pathParameters["at"]))
            let value: Double?
            switch format {
            case .json: value = try Self.json(request)[path: ["value"]].flatMap(FeedRules.value)
            case .csv: value = FeedRules.value(String(buffer: request.body).trimmingCharacters(in: .whitespacesAndNewlines))
            }
            guard let value else { throw GatewayError.invalid(field: "/value", "must be a number") }
            try await service.updateDatapoint(stream, at: at, value: value)
            return RouteReply(status: .ok)
        }
        add(.delete, "/v2/feeds/{feed}/datastreams/{stream}/datapoints/{at}", "Delete one datapoint", access: Self.writer) { request, context, _ in
            let (_, stream) = try await locate(request, context, writing: true)
            let at = try FeedsPlugin.time(Self.strip(request.pathParameters["at"]))
            guard try await service.deleteDatapoints(stream, from: at, through: at) == 1 else { throw GatewayError.notFound("There is no datapoint at this time.") }
            return RouteReply(status: .ok)
        }
        triggerRoutes(list)
        keyRoutes(list)
        let routes = list.routes
        let socket = XivelySocketProtocol(service: service, dialect: self, routes: routes)
        // Opening the socket is a read (a key needs feeds:read); each subscription is authorized as
        // a GET of the feed (the key's resources, a v2 key's permissions), each other request as
        // its own route.
        let live = Route.define(.get, "/v2/socket", summary: "The v2 socket protocol: subscribe, unsubscribe, get, put, post, delete (also at / of a server.socketListeners entry)")
            .resource("feed").tags(FeedService.keyPermissions)
            .socket { _, connection, context in try await socket.serve(connection, context) }
        return Dialect(name: "xively-v2", routes: routes + [live], credentials: Self.credentials, renderError: Self.renderError)
    }

    // MARK: Requests

    /// `X-ApiKey`, or `?key=` (the Objective-C library appends it to every URL), or a gateway
    /// session (not an old client's: to create a user's first master key, say).
    static let credentials = CredentialExtractor.firstOf(.apiKeyHeader("X-ApiKey"), .apiKeyQuery("key"), .bearer)

    /// The reply format: the path's suffix, else `Accept`; `.xml` is refused.
    static func format(_ request: RouteRequest) throws -> Format {
        let last = request.path.split(separator: "?").first?.split(separator: "/").last ?? ""
        if last.hasSuffix(".csv") { return .csv }
        if last.hasSuffix(".json") { return .json }
        if last.hasSuffix(".xml") { throw GatewayError.notAcceptable("XML is not served: use .json or .csv.") }
        let accept = request.headers[.accept] ?? ""
        if accept.contains("text/csv") { return .csv }
        if accept.contains("xml"), !accept.contains("json"), !accept.contains("*/*") { throw GatewayError.notAcceptable("XML is not served: use .json or .csv.") }
        return .json
    }

    /// A path parameter without its format suffix.
    static func strip(_ value: String?) -> String {
        guard let value else { return "" }
        for suffix in [".json", ".csv", ".xml"] where value.hasSuffix(suffix) {
            return String(value.dropLast(suffix.count))
        }
        return value
    }

    static func parameters(_ request: RouteRequest) -> [String: String] {
        var result: [String: String] = [:]
        for (name, value) in request.queryParameters { result[name] = value }
        return result
    }

    static func json(_ request: RouteRequest) throws -> JSONValue {
        guard request.body.readableBytes > 0 else { throw GatewayError.badRequest("The body is empty: send JSON.") }
        return try JSONValue.parse(request.body, maximumDepth: 16)
    }

    /// Where the gateway is, for `feed`, `creator` and `Location` URLs.
    static func base(_ request: RouteRequest) -> String {
        base(authority: request.authority, headers: request.headers)
    }

    static func base(authority: String?, headers: HTTPFields) -> String {
        if let host = headers[HTTPField.Name("X-Forwarded-Host")!] ?? authority, !host.isEmpty,
           host.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != UInt8(ascii: "/") }) {
            let scheme = headers[HTTPField.Name("X-Forwarded-Proto")!] == "https" ? "https" : "http"
            return "\(scheme)://\(host)"
        }
        return "http://localhost"
    }

    func locate(_ request: RouteRequest, _ context: OperationContext, writing: Bool = false) async throws -> (FeedRecord, DatastreamRecord) {
        let feedID = request.pathParameters["feed"] ?? ""
        return try await service.feedAndStream(feedID, Self.strip(request.pathParameters["stream"]), context.principal, changing: writing)
    }

    /// CSV datastream updates: `id,value` or `id,at,value` lines.
    func csvStreams(_ request: RouteRequest) throws -> [DatastreamDraft] {
        var drafts: [DatastreamDraft] = []
        var problems: [GatewayError.FieldError] = []
        for (index, line) in String(buffer: request.body).split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let fields = line.trimmingCharacters(in: CharacterSet(charactersIn: " \r\t")).split(separator: ",", omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: .whitespaces) }
            if fields == [""] { continue }
            guard (2...3).contains(fields.count), FeedRules.isDatastreamID(fields[0]), let value = FeedRules.value(fields[fields.count - 1]) else {
                problems.append(.init(pointer: "line \(index + 1)", detail: "must be `id,value` or `id,at,value`"))
                continue
            }
            var draft = DatastreamDraft(id: fields[0], currentValue: value)
            if fields.count == 3 {
                guard let at = UTCTimestamp.parse(fields[1]) else {
                    problems.append(.init(pointer: "line \(index + 1)", detail: "'\(fields[1].prefix(40))' is not an ISO 8601 time"))
                    continue
                }
                if let problem = service.timeProblem(at) { problems.append(.init(pointer: "line \(index + 1)", detail: "the time \(problem)")) }
                draft.at = at
            }
            drafts.append(draft)
        }
        guard problems.isEmpty else { throw FeedService.invalid(problems) }
        return drafts
    }

    func listFeeds(_ request: RouteRequest, _ context: OperationContext, _ format: Format) async throws -> RouteReply {
        func number(_ name: String) throws -> Double? {
            guard let text = request.query(name) else { return nil }
            guard let value = FeedRules.value(text) else { throw GatewayError.badRequest("\(name) must be a number.") }
            return value
        }
        func integer(_ name: String) throws -> Int? {
            guard let text = request.query(name) else { return nil }
            guard let value = Int(text) else { throw GatewayError.badRequest("\(name) must be an integer.") }
            return value
        }
        let filter = try FeedsPlugin.filter(q: request.query("q"), tag: request.query("tag"), user: request.query("user"), status: request.query("status"),
                                            units: request.query("units"), lat: try number("lat"), lon: try number("lon"), distance: try number("distance"),
                                            distanceUnits: request.query("distance_units"), order: request.query("order"), page: try integer("page"),
                                            perPage: try integer("per_page"), principal: context.principal, seesPrivate: context.principal.isAdmin)
        let (total, feeds) = try await service.store.listFeeds(filter, frozenAfter: service.frozenAfterMicros)
        let hidesPrivate = try await service.keys.hidesPrivate(context.principal)
        let visible = feeds.filter { service.canSee($0, context.principal) && !($0.isPrivate && hidesPrivate) }
        let summary = request.query("content") == "summary"
        let streams = summary ? [:] : try await service.store.datastreams(of: visible.map(\.id))
        let base = Self.base(request)
        switch format {
        case .json:
            return Self.json(.object([
                "totalResults": .number(Double(total)), "itemsPerPage": .number(Double(filter.limit)), "startIndex": .number(Double(filter.offset)),
                "results": .array(visible.map { feed in
                    render(feed, streams: summary ? nil : (streams[feed.id] ?? []).filter { service.mayReach(stream: $0.id, of: feed.id, context.principal) },
                           points: nil, base: base)
                }),
            ]))
        case .csv:
            var lines: [String] = []
            for feed in visible {
                for stream in streams[feed.id] ?? [] where service.mayReach(stream: stream.id, of: feed.id, context.principal) {
                    lines.append("\(feed.id),\(stream.id),\(stream.at.map { UTCTimestamp.format(micros: $0) } ?? ""),\(stream.currentValue.map(FeedRules.text) ?? "")")
                }
            }
            return Self.csv(lines)
        }
    }

    // MARK: Replies

    /// A feed with exactly the legacy members.
    func render(_ feed: FeedRecord, streams: [DatastreamRecord]?, points: [String: [Datapoint]]?, base: String) -> JSONValue {
        var members: [String: JSONValue] = [
            "id": .number(Double(feed.id)),
            "title": .string(feed.title),
            "private": .string(feed.isPrivate ? "true" : "false"),
            "feed": .string("\(base)/v2/feeds/\(feed.id).json"),
            "status": .string(service.status(of: feed)),
            "updated": .string(UTCTimestamp.format(micros: feed.updated)),
            "created": .string(UTCTimestamp.format(micros: feed.created)),
            "version": .string("1.0.0"),
            "tags": .array(feed.tags.map(JSONValue.string)),
        ]
        if let creator = feed.creatorName { members["creator"] = .string("\(base)/users/\(creator)") }
        if let description = feed.description { members["description"] = .string(description) }
        if let website = feed.website { members["website"] = .string(website) }
        if !feed.location.isEmpty { members["location"] = Self.render(feed.location) }
        if let streams { members["datastreams"] = .array(streams.map { Self.render($0, points: points?[$0.id]) }) }
        return .object(members)
    }

    /// A location with the legacy members (the v2 names are the native ones).
    static func render(_ location: FeedLocation) -> JSONValue {
        var members: [String: JSONValue] = [:]
        for (key, value) in [("name", location.name), ("domain", location.domain), ("exposure", location.exposure),
                             ("disposition", location.disposition), ("ele", location.ele)] {
            if let value { members[key] = .string(value) }
        }
        if let lat = location.lat { members["lat"] = .number(lat) }
        if let lon = location.lon { members["lon"] = .number(lon) }
        return .object(members)
    }

    /// A datastream with exactly the legacy members; values as strings.
    static func render(_ stream: DatastreamRecord, points: [Datapoint]?) -> JSONValue {
        var members: [String: JSONValue] = ["id": .string(stream.id)]
        if let value = stream.currentValue { members["current_value"] = .string(FeedRules.text(value)) }
        if let at = stream.at { members["at"] = .string(UTCTimestamp.format(micros: at)) }
        if let value = stream.maxValue { members["max_value"] = .string(FeedRules.text(value)) }
        if let value = stream.minValue { members["min_value"] = .string(FeedRules.text(value)) }
        if !stream.tags.isEmpty { members["tags"] = .array(stream.tags.map(JSONValue.string)) }
        if !stream.unit.isEmpty { members["unit"] = stream.unit.json }
        if let points { members["datapoints"] = .array(points.map(render)) }
        return .object(members)
    }

    static func render(_ point: Datapoint) -> JSONValue {
        .object(["at": .string(UTCTimestamp.format(micros: point.at)), "value": .string(FeedRules.text(point.value))])
    }

    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> RouteReply {
        .json(value, status: status, contentType: "application/json; charset=utf-8")
    }

    static func csv(_ lines: [String]) -> RouteReply {
        RouteReply.text(lines.joined(separator: "\n"), contentType: "text/csv; charset=utf-8")
    }

    /// `{"title", "errors"}` with the v2 codes: conflicts are 422 (v2 has no 409) and rate limits 403.
    static func renderError(_ error: GatewayError) -> RouteReply {
        let status: Int
        let title: String
        switch Int(error.status.code) {
        case 400:
            status = 400
            title = error.detail.contains("not valid JSON") || error.detail.contains("JSON") ? "JSON Parser Error" : "Bad Request"
        case 401: (status, title) = (401, "You do not have permission to access this resource")
        case 403: (status, title) = (403, "Forbidden")
        case 404: (status, title) = (404, "Not found")
        case 409, 422: (status, title) = (422, "Unprocessable Entity")
        case 429: (status, title) = (403, "Forbidden")
        case 503: (status, title) = (503, "Service Unavailable")
        case 500...: (status, title) = (Int(error.status.code), "Oops, something's broken")
        default: (status, title) = (Int(error.status.code), error.title)
        }
        return json(.object(["title": .string(title), "errors": .string(error.detail)]), status: HTTPResponse.Status(code: status))
    }
}
