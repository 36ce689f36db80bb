import Foundation
import GatewayCore
import Metrics
import NIOCore
import Synchronization

/// Live updates over WebSockets: a client subscribes to a feed or a datastream and receives its
/// new state after every change, from this instance or (with PostgreSQL) any other.
///
/// Two protocols share this machinery: the native one on `/v1/feeds/live` and the Xively v2 socket
/// protocol. The host admits the socket by its route's access rule and the key's scopes; each
/// subscription is authorized by the host's checks and the plugin's hook, and the feed's visibility
/// is checked again before every push, so a feed made private stops reaching those who may no
/// longer see it.
struct LiveSession: Sendable {
    let service: FeedService
    let connection: any WebSocketConnection
    let context: OperationContext

    static let maximumSubscriptions = 100

    /// What a subscription watches.
    struct Target: Sendable, Hashable {
        var feed: Int64
        var stream: String?

        var topic: String { stream.map { "feeds/\(feed)/datastreams/\($0)" } ?? "feeds/\(feed)" }
        /// The target as the path parameters of a GET of it, which the host's checks and the
        /// plugin's authorize hook read (``OperationContext/authorizeSocketRequest(_:as:)``).
        var parameters: [String: String] {
            var parameters = ["feed": String(feed)]
            if let stream { parameters["stream"] = stream }
            return parameters
        }
    }

    /// The subscriptions of one connection.
    final class Subscriptions: Sendable {
        /// The task of each subscription, by its key; all cancelled when the connection ends.
        private let tasks = Mutex<[String: Task<Void, Never>]>([:])

        var count: Int { tasks.withLock { $0.count } }

        /// Keeps `task` as the subscription `key`, cancelling the one it replaces.
        func set(_ key: String, _ task: Task<Void, Never>) {
            tasks.withLock { $0.updateValue(task, forKey: key) }?.cancel()
        }

        /// Ends the subscription `key`, if there is one.
        func cancel(_ key: String) {
            tasks.withLock { $0.removeValue(forKey: key) }?.cancel()
        }

        func cancelAll() {
            let all = tasks.withLock { tasks in
                defer { tasks = [:] }
                return tasks
            }
            for task in all.values { task.cancel() }
        }
    }

    /// Checks that `principal` may watch `target` (404 otherwise) and returns the principal's view of it.
    func check(_ target: Target, _ principal: Principal) async throws -> (FeedRecord, DatastreamRecord?) {
        let feed = try await service.visibleFeed(String(target.feed), principal)
        guard let stream = target.stream else {
            guard service.mayReach(feed: feed.id, principal) else { throw GatewayError.notFound("No feed \(target.feed).") }
            return (feed, nil)
        }
        return (feed, try await service.stream(feed, stream, principal))
    }

    /// Starts pushing `target`'s changes under `key` (replacing an earlier subscription with that key).
    /// `render` builds the message for the new state, or for nil when the target is gone.
    /// `credential` is what identified `principal`, checked again before each push so that a
    /// revoked key or an ended session stops receiving (within the authenticator's few seconds).
    func subscribe(_ target: Target, key: String, principal: Principal, credential: Credential?, in subscriptions: Subscriptions,
                   render: @escaping @Sendable (FeedRecord?, DatastreamRecord?) async throws -> String) throws {
        subscriptions.cancel(key)
        guard subscriptions.count < Self.maximumSubscriptions else {
            throw GatewayError.quotaExceeded(policy: "subscriptions", retryAfter: 1, detail: "At most \(Self.maximumSubscriptions) subscriptions per connection.")
        }
        let events = service.context.events.subscribe(to: target.topic)
        let connection = self.connection
        let accounts = service.context.accounts
        let live = service.liveSubscriptions
        subscriptions.set(key, Task {
            live.increment()
            defer { live.decrement() }
            for await event in events {
                if Task.isCancelled { break }
                if let credential {
                    guard (try? await accounts.principal(for: credential, address: principal.address)) != nil else { break }
                }
                let deleted = String(buffer: event.payload).contains(#""event":"deleted""#)
                let message: String
                if deleted, event.topic == target.topic {
                    guard let rendered = try? await render(nil, nil) else { continue }
                    message = rendered
                } else if let (feed, stream) = try? await check(target, principal), let rendered = try? await render(feed, stream) {
                    message = rendered
                } else {
                    continue
                }
                do {
                    try await connection.send(.text(message))
                } catch {
                    break
                }
            }
        })
    }

    /// Parses a resource path: `/feeds/504` or `/feeds/504/datastreams/temp` (a format suffix and
    /// a trailing slash are allowed).
    static func target(resource: String) -> Target? {
        var path = resource
        if let query = path.firstIndex(of: "?") { path = String(path[..<query]) }
        for suffix in [".json", ".csv"] where path.hasSuffix(suffix) { path.removeLast(suffix.count) }
        var parts = path.split(separator: "/", omittingEmptySubsequences: true)
        if parts.first == "v2" { parts.removeFirst() }
        guard parts.count == 2 || parts.count == 4, parts[0] == "feeds", let feed = FeedRules.feedID(parts[1]) else { return nil }
        if parts.count == 2 { return Target(feed: feed) }
        guard parts[2] == "datastreams", FeedRules.isDatastreamID(parts[3]) else { return nil }
        return Target(feed: feed, stream: String(parts[3]))
    }
}

/// The native live protocol on `/v1/feeds/live`. The client sends
/// `{"action": "subscribe" | "unsubscribe", "feed": 504, "datastream": "temp", "id": "any"}`; the
/// server answers `{"type": "subscribed" | "unsubscribed", "id", "feed", "datastream"}` or
/// `{"type": "error", "id", "status", "detail"}`, then pushes `{"type": "change", "feed",
/// "datastream", "data": {...}}` (the native feed or datastream) or `{"type": "deleted", ...}`.
struct NativeLiveProtocol: Sendable {
    let service: FeedService
    let plugin: FeedsPlugin

    /// Opening the socket is a read (a key needs feeds:read); each subscription is authorized as a
    /// GET of its feed or datastream (the key's resources, a v2 key's permissions).
    var route: Route {
        Route.define(.get, "/live", summary: "Live updates of feeds and datastreams (subscribe with {\"action\": \"subscribe\", \"feed\": 504})")
            .resource("feed").tags(FeedService.keyPermissions)
            .socket { _, connection, context in try await serve(connection, context) }
    }

    func serve(_ connection: any WebSocketConnection, _ context: OperationContext) async throws {
        let session = LiveSession(service: service, connection: connection, context: context)
        let subscriptions = LiveSession.Subscriptions()
        defer { subscriptions.cancelAll() }
        for await message in connection.inbound {
            guard case .text(let text) = message else {
                try await connection.send(.text(Self.error(nil, GatewayError.badRequest("Send JSON text messages."))))
                continue
            }
            var id: JSONValue = .null
            do {
                try await context.charge(1)
                let request = try JSONValue.parse(text, maximumDepth: 4)
                id = request[path: ["id"]] ?? .null
                guard let action = request[path: ["action"]]?.stringValue else { throw GatewayError.invalid(field: "/action", "is required: subscribe or unsubscribe") }
                guard let number = request[path: ["feed"]]?.numberValue ?? request[path: ["feed"]]?.stringValue.flatMap(Double.init),
                      number >= 1, number < 1e15, number == number.rounded() else {
                    throw GatewayError.invalid(field: "/feed", "is required: a feed id")
                }
                let stream = request[path: ["datastream"]]?.stringValue
                let target = LiveSession.Target(feed: Int64(number), stream: stream)
                var reply: [String: JSONValue] = ["id": id, "feed": .number(number)]
                if let stream { reply["datastream"] = .string(stream) }
                switch action {
                case "subscribe":
                    let principal = try await Self.currentPrincipal(context, service: service)
                    try await context.authorizeSocketRequest(target.parameters, as: principal)
                    _ = try await session.check(target, principal)
                    let plugin = self.plugin
                    try session.subscribe(target, key: target.topic, principal: principal, credential: context.credential,
                                          in: subscriptions) { feed, datastream in
                        var push: [String: JSONValue] = ["feed": .number(number)]
                        if let stream { push["datastream"] = .string(stream) }
                        if let feed {
                            push["type"] = .string("change")
                            if let datastream {
                                push["data"] = try JSONValue(encoding: FeedsPlugin.render(datastream, points: nil))
                            } else {
                                push["data"] = try JSONValue(encoding: plugin.render(feed, streams: try await plugin.service.streams(of: feed, only: nil, principal)))
                            }
                        } else {
                            push["type"] = .string("deleted")
                        }
                        return String(buffer: JSONValue.object(push).serialized())
                    }
                    reply["type"] = .string("subscribed")
                case "unsubscribe":
                    subscriptions.cancel(target.topic)
                    reply["type"] = .string("unsubscribed")
                default:
                    throw GatewayError.invalid(field: "/action", "must be subscribe or unsubscribe")
                }
                try await connection.send(.text(String(buffer: JSONValue.object(reply).serialized())))
            } catch {
                let problem = error as? GatewayError ?? GatewayError.internalError()
                try await connection.send(.text(Self.error(id, problem)))
            }
        }
    }

    /// The caller as of now: the connection's credential identified again, so that a key revoked or
    /// a session ended since the upgrade is refused (401) rather than served until the socket closes.
    static func currentPrincipal(_ context: OperationContext, service: FeedService) async throws -> Principal {
        guard let credential = context.credential else { return context.principal }
        return try await service.context.accounts.principal(for: credential, address: context.principal.address)
    }

    static func error(_ id: JSONValue?, _ problem: GatewayError) -> String {
        String(buffer: JSONValue.object(["type": .string("error"), "id": id ?? .null, "status": .number(Double(problem.status.code)),
                                         "detail": .string(problem.detail)]).serialized())
    }
}

/// The Xively v2 socket protocol: requests
/// `{"method": "subscribe" | "unsubscribe" | "get" | "put" | "post" | "delete", "resource": "/feeds/504",
/// "headers": {"X-ApiKey": "..."}, "params": {}, "body": {}, "token": "0x12345"}`, replies
/// `{"token", "status", "resource"[, "body"]}`, and for every change of a subscribed resource
/// `{"token": <the subscribe token>, "resource", "body": <the full feed or datastream>}`.
/// get, put, post and delete run the dialect's own HTTP routes.
struct XivelySocketProtocol: Sendable {
    let service: FeedService
    let dialect: XivelyDialect
    let routes: [Route]

    func serve(_ connection: any WebSocketConnection, _ context: OperationContext) async throws {
        let session = LiveSession(service: service, connection: connection, context: context)
        let subscriptions = LiveSession.Subscriptions()
        defer { subscriptions.cancelAll() }
        for await message in connection.inbound {
            guard case .text(let text) = message else { continue }
            var token: JSONValue = .null
            var resource = ""
            do {
                try await context.charge(1)
                let request = try JSONValue.parse(text, maximumDepth: 16)
                token = request[path: ["token"]] ?? .null
                resource = request[path: ["resource"]]?.stringValue ?? ""
                guard let method = request[path: ["method"]]?.stringValue?.lowercased() else { throw GatewayError.badRequest("A request needs a method.") }
                var principal = context.principal
                var credential = context.credential
                if credential != nil, request[path: ["headers", "X-ApiKey"]] == nil, request[path: ["headers", "x-apikey"]] == nil {
                    principal = try await NativeLiveProtocol.currentPrincipal(context, service: service)
                }
                if let key = request[path: ["headers", "X-ApiKey"]]?.stringValue ?? request[path: ["headers", "x-apikey"]]?.stringValue, !key.isEmpty {
                    principal = try await service.context.accounts.principal(for: .apiKey(key), address: context.principal.address)
                    credential = .apiKey(key)
                }
                switch method {
                case "subscribe":
                    guard let target = LiveSession.Target.parse(resource) else { throw GatewayError.notFound("Only feeds and datastreams can be subscribed to.") }
                    try await context.authorizeSocketRequest(target.parameters, as: principal)
                    _ = try await session.check(target, principal)
                    let dialect = self.dialect
                    let (subscribeToken, subscribed, viewer) = (token, resource, principal)
                    try session.subscribe(target, key: resource, principal: principal, credential: credential, in: subscriptions) { feed, stream in
                        var push: [String: JSONValue] = ["token": subscribeToken, "resource": .string(subscribed)]
                        if let feed {
                            if let stream {
                                push["body"] = XivelyDialect.render(stream, points: nil)
                            } else {
                                let streams = try await dialect.service.streams(of: feed, only: nil, viewer)
                                push["body"] = dialect.render(feed, streams: streams, points: nil, base: XivelyDialect.base(authority: nil, headers: context.headers))
                            }
                        } else {
                            push["body"] = .null
                        }
                        return String(buffer: JSONValue.object(push).serialized())
                    }
                    try await send(connection, token: token, status: 200, resource: resource)
                case "unsubscribe":
                    subscriptions.cancel(resource)
                    try await send(connection, token: token, status: 200, resource: resource)
                case "get", "put", "post", "delete":
                    let response = try await dispatch(method: method, resource: resource, request: request, principal: principal, credential: credential, context: context)
                    let body = response.bytes.readableBytes > 0 ? (try? JSONValue.parse(response.bytes)) : nil
                    try await send(connection, token: token, status: response.status.code, resource: resource, body: body)
                default:
                    throw GatewayError.badRequest("Unknown method '\(method.prefix(20))': use subscribe, unsubscribe, get, put, post or delete.")
                }
            } catch {
                let problem = error as? GatewayError ?? GatewayError.internalError()
                let rendered = XivelyDialect.renderError(problem)
                try await send(connection, token: token, status: rendered.status.code, resource: resource, body: try? JSONValue.parse(rendered.bytes))
            }
        }
    }

    func send(_ connection: any WebSocketConnection, token: JSONValue, status: Int, resource: String, body: JSONValue? = nil) async throws {
        var reply: [String: JSONValue] = ["token": token, "status": .number(Double(status)), "resource": .string(resource)]
        if let body { reply["body"] = body }
        try await connection.send(.text(String(buffer: JSONValue.object(reply).serialized())))
    }

    /// Runs the dialect route that serves `method` on `/v2<resource>`.
    func dispatch(method: String, resource: String, request: JSONValue, principal: Principal, credential: Credential?,
                  context: OperationContext) async throws -> RouteReply {
        let httpMethod: HTTPRequest.Method = switch method {
        case "get": .get
        case "put": .put
        case "post": .post
        default: .delete
        }
        var path = resource.hasPrefix("/v2/") ? resource : "/v2" + (resource.hasPrefix("/") ? resource : "/" + resource)
        var query: [(name: String, value: String)] = []
        if let mark = path.firstIndex(of: "?") {
            query = path[path.index(after: mark)...].split(separator: "&").map { pair in
                let parts = pair.split(separator: "=", maxSplits: 1)
                return (String(parts[0]).removingPercentEncoding ?? String(parts[0]), parts.count > 1 ? (String(parts[1]).removingPercentEncoding ?? "") : "")
            }
            path = String(path[..<mark])
        }
        if case .object(let params) = request[path: ["params"]] ?? .null {
            for (name, value) in params.sorted(by: { $0.key < $1.key }) {
                query.append((name, value.stringValue ?? String(buffer: value.serialized())))
            }
        }
        let segments = path.split(separator: "/")
        for route in routes where route.method == httpMethod {
            let template = route.path.split(separator: "/")
            guard template.count == segments.count else { continue }
            var parameters: [String: String] = [:]
            var matches = true
            for (pattern, segment) in zip(template, segments) {
                if pattern.hasPrefix("{") {
                    parameters[String(pattern.dropFirst().dropLast())] = String(segment).removingPercentEncoding ?? String(segment)
                } else if pattern != segment {
                    matches = false
                    break
                }
            }
            guard matches else { continue }
            var body = ByteBuffer()
            if let value = request[path: ["body"]], value != .null { body = value.serialized() }
            let dialectRequest = RouteRequest(method: httpMethod, path: path, pathParameters: parameters, queryParameters: query,
                                                headers: context.headers, body: body)
            // The same authorization the host gives the route over HTTP: its access rule, then the
            // plugin's authorize hook.
            try route.access.enforce(principal: principal, plugin: context.plugin.pluginID, method: httpMethod)
            try await service.authorize(AuthorizationRequest(
                principal: principal, route: "\(context.plugin.pluginID).xively-v2 \(httpMethod.rawValue) \(route.path)", dialect: "xively-v2",
                method: httpMethod, tags: route.tags, pathParameters: parameters, headers: context.headers))
            let scoped = OperationContext(principal: principal, requestID: context.requestID, logger: context.logger, headers: context.headers,
                                          plugin: context.plugin, credential: credential)
            return try await route(dialectRequest, context: scoped)
        }
        throw GatewayError.notFound("No resource \(resource.prefix(100)).")
    }
}

extension LiveSession.Target {
    static func parse(_ resource: String) -> LiveSession.Target? { LiveSession.target(resource: resource) }
}
