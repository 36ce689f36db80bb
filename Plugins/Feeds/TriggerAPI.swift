import Foundation
import GatewayCore

/// Trigger management, shared by the native API (`/v1/feeds/triggers`) and the v2 dialect
/// (`/v2/triggers`). A trigger belongs to the user who made it: only they (and administrators)
/// see, change or delete it; making one needs a feed the caller can see.
extension FeedService {
    /// A trigger body read from either API's names.
    struct TriggerDraft: Sendable {
        var feedID: Int64?
        var streamID: String?
        var url: String?
        var type: TriggerType?
        var threshold: Double??
    }

    func triggerDraft(_ body: JSONValue, naming: Naming) throws -> TriggerDraft {
        guard case .object(var members) = body else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
        if naming == .legacy, case .object(let inner)? = members["trigger"] { members = inner }
        let names = naming == .native
            ? (feed: "feed", stream: "datastream", type: "type", threshold: "threshold")
            : (feed: "environment_id", stream: "stream_id", type: "trigger_type", threshold: "threshold_value")
        var problems: [GatewayError.FieldError] = []
        var draft = TriggerDraft()
        if naming == .native {
            let known: Set<String> = ["feed", "datastream", "url", "type", "threshold", "id", "notifiedAt", "user", "created"]
            for key in members.keys.sorted() where !known.contains(key) {
                problems.append(.init(pointer: "/\(key)", detail: "is not a trigger member (feed, datastream, url, type, threshold)"))
            }
        }
        if let value = members[names.feed] {
            var text = value.stringValue ?? value.numberValue.map { FeedRules.text($0) } ?? ""
            // A number past the exact integers of JSON numbers names no feed for certain.
            if naming == .native, let number = value.numberValue, number > Double(FeedRules.largestFeedNumber) { text = "" }
            if let id = FeedRules.feedID(text) { draft.feedID = id } else { problems.append(.init(pointer: "/\(names.feed)", detail: "must be a feed id")) }
        }
        if let value = members[names.stream] {
            if let id = value.stringValue, FeedRules.isDatastreamID(id) { draft.streamID = id } else {
                problems.append(.init(pointer: "/\(names.stream)", detail: "must be a datastream id"))
            }
        }
        if let value = members["url"] {
            if let url = value.stringValue, url.unicodeScalars.count <= Self.longestTriggerURL, url.hasPrefix("http://") || url.hasPrefix("https://"), let host = URL(string: url)?.host, !host.isEmpty {
                if !settings.triggerPrivateTargets, let refusal = EgressPolicy.textRefusal(of: url) {
                    problems.append(.init(pointer: "/url", detail: "\(refusal): only public addresses may be notified (set triggerPrivateTargets: true to allow others)"))
                } else {
                    draft.url = url
                }
            } else {
                problems.append(.init(pointer: "/url", detail: "must be an http or https URL"))
            }
        }
        if let value = members[names.type] {
            if let type = value.stringValue.flatMap(TriggerType.init(rawValue:)) { draft.type = type } else {
                problems.append(.init(pointer: "/\(names.type)", detail: "must be one of \(TriggerType.allCases.map(\.rawValue).joined(separator: ", "))"))
            }
        }
        if let value = members[names.threshold] {
            if value == .null || value == .string("") {
                draft.threshold = .some(nil)
            } else if let number = FeedRules.value(value) {
                draft.threshold = .some(number)
            } else {
                problems.append(.init(pointer: "/\(names.threshold)", detail: "must be a number"))
            }
        }
        guard problems.isEmpty else { throw Self.invalid(problems) }
        return draft
    }

    /// The longest trigger URL.
    static let longestTriggerURL = 2_000

    /// A trigger URL as the document states it: http or https with a host name (and, unless
    /// `triggerPrivateTargets` allows them, not one of ``EgressPolicy/isInternalName(_:)``'s names), then
    /// a path of URL characters. (Literal addresses are left out of the document.)
    var triggerURLRule: FieldRule {
        let label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
        let local = ["local", "localhost", "internal"].map { name in name.map { "[\($0)\($0.uppercased())]" }.joined() }.joined(separator: "|")
        let publicOnly = settings.triggerPrivateTargets ? "" : "(?![^/]*\\.(?:\(local))(?:/|$))"
        return FieldRule.pattern("^https?://\(publicOnly)(?:\(label)\\.)+[A-Za-z]{2,63}(?:/[A-Za-z0-9._~!$&'()*+,;=:@/-]*)?$")
            .and(.text(maxLength: Self.longestTriggerURL)).described("An http or https URL the notification is posted to.")
    }

    /// Whether a URL's host is a name or literal address (in any spelling a resolver reads) that is
    /// not public: `localhost`, loopback, private, link-local, unique-local, metadata, ... Names are
    /// not resolved here: a delivery checks the address it connects to (``EgressPolicy``).
    static func isPrivateHost(_ host: String) -> Bool { EgressPolicy.isPrivateHost(host) }

    /// Creates a trigger from a complete draft.
    func createTrigger(_ draft: TriggerDraft, _ principal: Principal, naming: Naming, referer: String?) async throws -> TriggerRecord {
        guard principal.userID != nil || principal.isAdmin else { throw GatewayError.unauthorized("Sign in or use an API key to create triggers.") }
        var problems: [GatewayError.FieldError] = []
        let names = naming == .native ? ["feed", "datastream", "type", "threshold"] : ["environment_id", "stream_id", "trigger_type", "threshold_value"]
        if draft.feedID == nil { problems.append(.init(pointer: "/\(names[0])", detail: "is required")) }
        if draft.streamID == nil { problems.append(.init(pointer: "/\(names[1])", detail: "is required")) }
        if draft.url == nil { problems.append(.init(pointer: "/url", detail: "is required")) }
        if draft.type == nil { problems.append(.init(pointer: "/\(names[2])", detail: "is required")) }
        if let type = draft.type, type.needsThreshold, (draft.threshold ?? nil) == nil {
            problems.append(.init(pointer: "/\(names[3])", detail: "is required for \(type.rawValue)"))
        }
        guard problems.isEmpty, let feedID = draft.feedID, let streamID = draft.streamID, let url = draft.url, let type = draft.type else {
            throw Self.invalid(problems)
        }
        try await keys.authorize(principal, method: "post", feed: feedID, stream: streamID, referer: referer)
        let feed = try await visibleFeed(String(feedID), principal)
        _ = try await stream(feed, streamID, principal)
        var name: String?
        if let userID = principal.userID { name = try await context.accounts.account(id: userID)?.username }
        return try await triggers.create(feedID: feed.id, streamID: streamID, url: url, type: type,
                                         threshold: type.needsThreshold ? (draft.threshold ?? nil) : nil, userID: principal.userID, userName: name)
    }

    /// A trigger the caller owns; 404 otherwise.
    func ownedTrigger(_ idText: String, _ principal: Principal, method: String = "get", referer: String? = nil) async throws -> TriggerRecord {
        guard let id = FeedRules.feedID(idText), let trigger = try await triggers.trigger(id), mayReach(feed: trigger.feedID, principal),
              principal.isAdmin || (principal.userID != nil && principal.userID == trigger.userID) else {
            throw GatewayError.notFound("No trigger '\(idText.prefix(40))'.")
        }
        try await keys.authorize(principal, method: method, feed: trigger.feedID, stream: trigger.streamID, referer: referer)
        return trigger
    }

    /// Applies the members a draft carries.
    func updateTrigger(_ trigger: TriggerRecord, _ draft: TriggerDraft, _ principal: Principal) async throws -> TriggerRecord {
        var changed = trigger
        if let feedID = draft.feedID { changed.feedID = feedID }
        if let streamID = draft.streamID { changed.streamID = streamID }
        if let url = draft.url { changed.url = url }
        if let type = draft.type { changed.type = type }
        if let threshold = draft.threshold { changed.threshold = threshold }
        if changed.type.needsThreshold, changed.threshold == nil { throw GatewayError.invalid(field: "/threshold", "is required for \(changed.type.rawValue)") }
        if !changed.type.needsThreshold { changed.threshold = nil }
        if changed.feedID != trigger.feedID || changed.streamID != trigger.streamID {
            let feed = try await visibleFeed(String(changed.feedID), principal)
            _ = try await stream(feed, changed.streamID, principal)
        }
        changed.armedState = false
        try await triggers.update(changed)
        return changed
    }

    /// The triggers a caller may see: their own (all, for administrators), optionally of one feed.
    func listTriggers(_ principal: Principal, feed: String?) async throws -> [TriggerRecord] {
        guard principal.userID != nil || principal.isAdmin else { throw GatewayError.unauthorized("Sign in or use an API key to list triggers.") }
        var feedID: Int64?
        if let feed {
            guard let id = FeedRules.feedID(feed) else { throw GatewayError.badRequest("feed_id must be a feed id.", errors: [.init(pointer: "query.feed_id", detail: "is not a feed id")]) }
            feedID = id
        }
        let legacyKey = try await keys.presented(by: principal)
        return try await triggers.triggers(of: principal.isAdmin ? nil : principal.userID, feed: feedID).filter { trigger in
            mayReach(feed: trigger.feedID, principal)
                && (legacyKey.map { LegacyKeys.covers($0, method: "get", feed: trigger.feedID, stream: trigger.streamID) } ?? true)
        }
    }
}

extension FeedsPlugin {
    struct TriggerPath: Codable, Sendable { var trigger: String }
    struct TriggerListParameters: Codable, Sendable { var feed: String? }

    static func render(_ trigger: TriggerRecord) -> TriggerView {
        TriggerView(id: trigger.id, feed: trigger.feedID, datastream: trigger.streamID, url: trigger.url, type: trigger.type.rawValue,
                    threshold: trigger.threshold, notifiedAt: trigger.notifiedAt.map { UTCTimestamp.format(micros: $0) }, user: trigger.userName,
                    created: UTCTimestamp.format(micros: trigger.created))
    }

    static func render(_ delivery: TriggerDelivery) -> DeliveryView {
        DeliveryView(id: delivery.id, firedAt: UTCTimestamp.format(micros: delivery.firedAt), status: delivery.status, attempts: delivery.attempts,
                     responseStatus: delivery.responseStatus, error: delivery.error, updated: UTCTimestamp.format(micros: delivery.updated),
                     nextAttempt: delivery.status == "pending" ? UTCTimestamp.format(micros: delivery.nextAttempt) : nil)
    }

    var triggerOperations: [Route] {
        let service = self.service
        return [
            Route.define("feeds.triggers.list", .get, "/triggers", summary: "Your triggers (feed= filters)")
                .access(.user)
                .query(TriggerListParameters.self)
                .returns(Page<TriggerView>.self) { input, context in
                    // One page: a user's triggers are few.
                    Page(items: try await service.listTriggers(context.principal, feed: input.query.feed).map(Self.render), nextCursor: nil)
                },
            Route.define("feeds.triggers.create", .post, "/triggers", summary: "Create a trigger")
                .details("{feed, datastream, url, type: gt|gte|lt|lte|eq|change|frozen|live, threshold}. When it fires, the gateway POSTs the notification JSON to `url` (timeout `triggerTimeout`, retried with backoff up to `triggerAttempts` times, each attempt in the delivery log) and posts to your inbox.")
                .access(.scope("feeds:write"))
                .body(JSONValue.self)
                .documentBody(as: TriggerInput.self)
                .rules(["body.url": service.triggerURLRule])
                .replies(TriggerView.self) { input, context in
                    let trigger = try await service.createTrigger(try service.triggerDraft(input.body, naming: .native), context.principal, naming: .native,
                                                                  referer: context.headers[.referer])
                    return Reply(Self.render(trigger), status: 201, headers: [.location: "/v1/feeds/triggers/\(trigger.id)"])
                },
            Route.define("feeds.triggers.get", .get, "/triggers/{trigger}", summary: "Read a trigger")
                .access(.user)
                .path(TriggerPath.self)
                .returns(TriggerView.self) { input, context in
                    Self.render(try await service.ownedTrigger(input.path.trigger, context.principal, referer: context.headers[.referer]))
                },
            Route.define("feeds.triggers.update", .put, "/triggers/{trigger}", summary: "Change a trigger")
                .access(.scope("feeds:write"))
                .path(TriggerPath.self)
                .body(JSONValue.self)
                .documentBody(as: TriggerChange.self)
                .rules(["body.url": service.triggerURLRule])
                .returns(TriggerView.self) { input, context in
                    let trigger = try await service.ownedTrigger(input.path.trigger, context.principal, method: "put", referer: context.headers[.referer])
                    return Self.render(try await service.updateTrigger(trigger, try service.triggerDraft(input.body, naming: .native), context.principal))
                },
            Route.define("feeds.triggers.delete", .delete, "/triggers/{trigger}", summary: "Delete a trigger and its delivery log")
                .access(.scope("feeds:write"))
                .path(TriggerPath.self)
                .returns(NoContent.self) { input, context in
                    try await service.triggers.delete(try await service.ownedTrigger(input.path.trigger, context.principal, method: "delete",
                                                                                     referer: context.headers[.referer]).id)
                    return NoContent()
                },
            Route.define("feeds.triggers.deliveries", .get, "/triggers/{trigger}/deliveries", summary: "A trigger's delivery log, newest first")
                .access(.user)
                .path(TriggerPath.self)
                .returns(Page<DeliveryView>.self) { input, context in
                    let trigger = try await service.ownedTrigger(input.path.trigger, context.principal, referer: context.headers[.referer])
                    return Page(items: try await service.triggers.deliveries(of: trigger.id).map(Self.render), nextCursor: nil)
                },
        ]
    }
}

extension XivelyDialect {
    /// A trigger with exactly the legacy members.
    static func render(_ trigger: TriggerRecord) -> JSONValue {
        var members: [String: JSONValue] = [
            "id": .number(Double(trigger.id)), "environment_id": .number(Double(trigger.feedID)), "stream_id": .string(trigger.streamID),
            "url": .string(trigger.url), "trigger_type": .string(trigger.type.rawValue),
        ]
        if let threshold = trigger.threshold { members["threshold_value"] = .string(FeedRules.text(threshold)) }
        if let notified = trigger.notifiedAt { members["notified_at"] = .string(UTCTimestamp.format(micros: notified)) }
        if let user = trigger.userName { members["user"] = .string(user) }
        return .object(members)
    }

    /// `/v2/triggers`. A trigger names its feed in its body or its record: the service checks the
    /// caller's v2 key against that feed, so these routes are not tagged for the authorize hook.
    func triggerRoutes(_ list: Routes) {
        let service = self.service
        list.add(.get, "/v2/triggers", "List your triggers (a JSON array; feed_id filters)", tags: []) { request, context, _ in
            Self.json(.array(try await service.listTriggers(context.principal, feed: request.query("feed_id")).map(Self.render)))
        }
        list.add(.post, "/v2/triggers", "Create a trigger (201 + Location)", access: Self.writer, tags: []) { request, context, _ in
            let trigger = try await service.createTrigger(try service.triggerDraft(try Self.json(request), naming: .legacy), context.principal, naming: .legacy,
                                                          referer: request.headers[.referer])
            return RouteReply(status: .created, headers: [.location: "\(Self.base(request))/v2/triggers/\(trigger.id)"])
        }
        list.add(.get, "/v2/triggers/{trigger}", "Read a trigger", access: .user, tags: []) { request, context, _ in
            Self.json(Self.render(try await service.ownedTrigger(Self.strip(request.pathParameters["trigger"]), context.principal,
                                                                        referer: request.headers[.referer])))
        }
        list.add(.put, "/v2/triggers/{trigger}", "Change a trigger", access: Self.writer, tags: []) { request, context, _ in
            let trigger = try await service.ownedTrigger(Self.strip(request.pathParameters["trigger"]), context.principal, method: "put",
                                                         referer: request.headers[.referer])
            _ = try await service.updateTrigger(trigger, try service.triggerDraft(try Self.json(request), naming: .legacy), context.principal)
            return RouteReply(status: .ok)
        }
        list.add(.delete, "/v2/triggers/{trigger}", "Delete a trigger", access: Self.writer, tags: []) { request, context, _ in
            try await service.triggers.delete(try await service.ownedTrigger(Self.strip(request.pathParameters["trigger"]), context.principal, method: "delete",
                                                                             referer: request.headers[.referer]).id)
            return RouteReply(status: .ok)
        }
    }
}
