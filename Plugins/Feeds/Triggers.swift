import Foundation
import GatewayCore
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle
import SQLKit

/// What makes a trigger fire.
enum TriggerType: String, Sendable, CaseIterable {
    case gt, gte, lt, lte, eq, change, frozen, live

    /// Whether the type compares the value with a threshold.
    var needsThreshold: Bool { [.gt, .gte, .lt, .lte, .eq].contains(self) }

    func holds(_ value: Double, threshold: Double) -> Bool {
        switch self {
        case .gt: value > threshold
        case .gte: value >= threshold
        case .lt: value < threshold
        case .lte: value <= threshold
        case .eq: value == threshold
        case .change, .frozen, .live: false
        }
    }
}

/// A trigger: a condition on a datastream and the URL told when it fires.
struct TriggerRecord: Sendable, Equatable {
    var id: Int64
    var feedID: Int64
    var streamID: String
    var url: String
    var type: TriggerType
    var threshold: Double?
    var userID: String?
    var userName: String?
    /// When it last fired (microseconds).
    var notifiedAt: Int64?
    /// Whether the condition held at the last evaluation (fires on the change to true).
    var armedState: Bool
    var created: Int64
}

/// One POST of a fired trigger, with its attempts.
struct TriggerDelivery: Sendable, Equatable {
    var id: Int64
    var triggerID: Int64
    var firedAt: Int64
    var payload: String
    var attempts: Int
    /// pending, delivered or failed.
    var status: String
    var responseStatus: Int?
    var error: String?
    var nextAttempt: Int64
    var updated: Int64
}

/// Triggers: stored, evaluated on every change of a datastream, delivered by a background service.
///
/// Threshold triggers (gt, gte, lt, lte, eq) fire when the datastream's current value comes to
/// meet the condition (not again while it keeps meeting it); `change` fires whenever the current
/// value changes; `frozen` fires when the feed has had no update for `frozenAfter`, `live` on the
/// first update after that. Each firing records `notified_at`, queues a delivery (a JSON POST to
/// the trigger's URL, with a timeout and retries with exponential backoff, every attempt logged)
/// and posts a notification to the trigger owner's inbox.
final class TriggerEngine: Sendable {
    let store: FeedStore
    let context: PluginContext
    let settings: FeedsPlugin.Configuration
    /// Triggers by datastream key, remembered briefly so that ingest without triggers costs no query.
    private let cache = NIOLockedValueBox<[String: (expires: ContinuousClock.Instant, triggers: [TriggerRecord])]>([:])
    /// Set when a trigger fires, so that the delivery service does not wait out its pause.
    let hasNewDeliveries = NIOLockedValueBox(false)

    static let cacheTTL = Duration.seconds(5)

    init(store: FeedStore, context: PluginContext, settings: FeedsPlugin.Configuration) {
        self.store = store
        self.context = context
        self.settings = settings
    }

    // MARK: Storage

    static let columns = "id, feed_id, stream_id, url, trigger_type, threshold_value, user_id, user_name, notified_at, armed_state, created"

    static func decode(_ row: any SQLRow) throws -> TriggerRecord {
        TriggerRecord(
            id: try row.decode(column: "id", as: Int64.self), feedID: try row.decode(column: "feed_id", as: Int64.self),
            streamID: try row.decode(column: "stream_id", as: String.self), url: try row.decode(column: "url", as: String.self),
            type: TriggerType(rawValue: try row.decode(column: "trigger_type", as: String.self)) ?? .change,
            threshold: try row.decode(column: "threshold_value", as: Double?.self), userID: try row.decode(column: "user_id", as: String?.self),
            userName: try row.decode(column: "user_name", as: String?.self), notifiedAt: try row.decode(column: "notified_at", as: Int64?.self),
            armedState: try row.decode(column: "armed_state", as: Int.self) != 0, created: try row.decode(column: "created", as: Int64.self))
    }

    func trigger(_ id: Int64) async throws -> TriggerRecord? {
        try await store.database.raw("SELECT \(unsafeRaw: Self.columns) FROM feeds_triggers WHERE id = \(bind: id)").first().map(Self.decode)
    }

    /// The triggers of `userID` (nil: every trigger, for administrators), optionally of one feed.
    func triggers(of userID: String?, feed: Int64?) async throws -> [TriggerRecord] {
        var conditions: [SQLQueryString] = []
        if let userID { conditions.append("user_id = \(bind: userID)") }
        if let feed { conditions.append("feed_id = \(bind: feed)") }
        let whereClause: SQLQueryString = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        return try await store.database.raw("SELECT \(unsafeRaw: Self.columns) FROM feeds_triggers" + whereClause + " ORDER BY id LIMIT 10000").all().map(Self.decode)
    }

    func create(feedID: Int64, streamID: String, url: String, type: TriggerType, threshold: Double?, userID: String?, userName: String?) async throws -> TriggerRecord {
        let now = store.now()
        let row = try await store.database.raw("""
            INSERT INTO feeds_triggers (feed_id, stream_id, url, trigger_type, threshold_value, user_id, user_name, armed_state, created)
            VALUES (\(bind: feedID), \(bind: streamID), \(bind: url), \(bind: type.rawValue), \(bind: threshold), \(bind: userID), \(bind: userName), 0, \(bind: now))
            RETURNING id
            """).first()
        guard let id = try row?.decode(column: "id", as: Int64.self) else { throw GatewayError.internalError("The trigger was not created.") }
        forget()
        return TriggerRecord(id: id, feedID: feedID, streamID: streamID, url: url, type: type, threshold: threshold, userID: userID,
                             userName: userName, notifiedAt: nil, armedState: false, created: now)
    }

    func update(_ trigger: TriggerRecord) async throws {
        try await store.database.raw("""
            UPDATE feeds_triggers SET feed_id = \(bind: trigger.feedID), stream_id = \(bind: trigger.streamID), url = \(bind: trigger.url),
              trigger_type = \(bind: trigger.type.rawValue), threshold_value = \(bind: trigger.threshold), armed_state = 0
            WHERE id = \(bind: trigger.id)
            """).run()
        forget()
    }

    func delete(_ id: Int64) async throws {
        try await store.database.transaction { db in
            try await db.raw("DELETE FROM feeds_trigger_deliveries WHERE trigger_id = \(bind: id)").run()
            try await db.raw("DELETE FROM feeds_triggers WHERE id = \(bind: id)").run()
        }
        forget()
    }

    /// Removes the triggers of a deleted feed.
    func deleteAll(feed: Int64) async throws {
        try await store.database.transaction { db in
            try await db.raw("DELETE FROM feeds_trigger_deliveries WHERE trigger_id IN (SELECT id FROM feeds_triggers WHERE feed_id = \(bind: feed))").run()
            try await db.raw("DELETE FROM feeds_triggers WHERE feed_id = \(bind: feed)").run()
        }
        forget()
    }

    func deliveries(of trigger: Int64, limit: Int = 100) async throws -> [TriggerDelivery] {
        try await store.database.raw("""
            SELECT id, trigger_id, fired_at, payload, attempts, status, response_status, error, next_attempt, updated
            FROM feeds_trigger_deliveries WHERE trigger_id = \(bind: trigger) ORDER BY id DESC LIMIT \(literal: limit)
            """).all().map(Self.decodeDelivery)
    }

    static func decodeDelivery(_ row: any SQLRow) throws -> TriggerDelivery {
        TriggerDelivery(
            id: try row.decode(column: "id", as: Int64.self), triggerID: try row.decode(column: "trigger_id", as: Int64.self),
            firedAt: try row.decode(column: "fired_at", as: Int64.self), payload: try row.decode(column: "payload", as: String.self),
            attempts: try row.decode(column: "attempts", as: Int.self), status: try row.decode(column: "status", as: String.self),
            responseStatus: try row.decode(column: "response_status", as: Int?.self), error: try row.decode(column: "error", as: String?.self),
            nextAttempt: try row.decode(column: "next_attempt", as: Int64.self), updated: try row.decode(column: "updated", as: Int64.self))
    }

    private func forget() {
        cache.withLockedValue { $0.removeAll() }
    }

    /// The triggers on one datastream (cached for ``cacheTTL``).
    private func triggers(feed: Int64, stream: String) async throws -> [TriggerRecord] {
        let key = "\(feed)/\(stream)"
        let now = ContinuousClock.now
        if let hit = cache.withLockedValue({ $0[key] }), hit.expires > now { return hit.triggers }
        let found = try await store.database.raw("""
            SELECT \(unsafeRaw: Self.columns) FROM feeds_triggers WHERE feed_id = \(bind: feed) AND (stream_id = \(bind: stream) OR trigger_type IN ('live', 'frozen'))
            """).all().map(Self.decode)
        cache.withLockedValue { table in
            if table.count > 10_000 { table.removeAll() }
            table[key] = (now + Self.cacheTTL, found)
        }
        return found
    }

    // MARK: Evaluation

    /// Whether any trigger watches a datastream (or its feed going live).
    func watches(feed: Int64, stream: String) async -> Bool {
        (try? await triggers(feed: feed, stream: stream).isEmpty == false) ?? false
    }

    /// Evaluates the triggers of a datastream after a change: `previous` is its current value
    /// before, `stream` its state after; `wasFrozen` tells whether the feed was frozen before.
    func evaluate(feed: FeedRecord, stream: DatastreamRecord, previous: Double?, wasFrozen: Bool, feedLevel: Bool = true) async {
        do {
            let triggers = try await triggers(feed: feed.id, stream: stream.id)
            guard !triggers.isEmpty else { return }
            for trigger in triggers {
                // A trigger whose owner can no longer see the feed (made private since) stays silent.
                if feed.isPrivate, let owner = trigger.userID, owner != feed.creatorID { continue }
                switch trigger.type {
                case .live:
                    if wasFrozen, feedLevel { try await fire(trigger, feed: feed, stream: stream, armedState: false) }
                case .frozen:
                    if trigger.armedState, feedLevel { try await rearm(trigger) }
                case .change:
                    guard trigger.streamID == stream.id, let value = stream.currentValue, value != previous else { continue }
                    try await fire(trigger, feed: feed, stream: stream, armedState: false)
                default:
                    guard trigger.streamID == stream.id, let value = stream.currentValue, let threshold = trigger.threshold else { continue }
                    let holds = trigger.type.holds(value, threshold: threshold)
                    if holds, !trigger.armedState {
                        try await fire(trigger, feed: feed, stream: stream, armedState: true)
                    } else if !holds, trigger.armedState {
                        try await rearm(trigger)
                    }
                }
            }
        } catch {
            context.logger.warning("feeds triggers could not be evaluated", metadata: ["feed": "\(feed.id)", "error": "\(error)"])
        }
    }

    private func rearm(_ trigger: TriggerRecord) async throws {
        try await store.database.raw("UPDATE feeds_triggers SET armed_state = 0 WHERE id = \(bind: trigger.id)").run()
        forget()
    }

    /// Fires `trigger`: records it, queues the delivery and tells the owner.
    func fire(_ trigger: TriggerRecord, feed: FeedRecord, stream: DatastreamRecord?, armedState: Bool) async throws {
        let now = store.now()
        let payload = String(buffer: Self.payload(trigger, feed: feed, stream: stream, at: now, base: settings.linkBase ?? "").serialized())
        let fired = try await store.database.transaction { db -> Bool in
            // Arming is claimed in the database, so that one crossing fires once even when
            // several instances (or concurrent requests) evaluate it.
            if armedState {
                let claimed = try await db.raw("""
                    UPDATE feeds_triggers SET notified_at = \(bind: now), armed_state = 1 WHERE id = \(bind: trigger.id) AND armed_state = 0 RETURNING id
                    """).first()
                guard claimed != nil else { return false }
            } else {
                try await db.raw("UPDATE feeds_triggers SET notified_at = \(bind: now), armed_state = 0 WHERE id = \(bind: trigger.id)").run()
            }
            try await db.raw("""
                INSERT INTO feeds_trigger_deliveries (trigger_id, fired_at, payload, attempts, status, next_attempt, updated)
                VALUES (\(bind: trigger.id), \(bind: now), \(bind: payload), 0, 'pending', \(bind: now), \(bind: now))
                """).run()
            return true
        }
        forget()
        guard fired else { return }
        hasNewDeliveries.withLockedValue { $0 = true }
        if let owner = trigger.userID {
            let value = stream?.currentValue.map(FeedRules.text) ?? ""
            let condition = trigger.threshold.map { "\(trigger.type.rawValue) \(FeedRules.text($0))" } ?? trigger.type.rawValue
            try? await context.notify(
                userID: owner, title: "Trigger \(trigger.id) fired: \(feed.title) / \(trigger.streamID) \(condition)",
                body: stream == nil ? "The feed is \(trigger.type == .frozen ? "frozen" : "live")." : "The value is \(value).",
                link: "/v1/feeds/\(feed.id)/datastreams/\(trigger.streamID)")
        }
    }

    /// The JSON a fired trigger POSTs (the legacy service's notification).
    static func payload(_ trigger: TriggerRecord, feed: FeedRecord, stream: DatastreamRecord?, at: Int64, base: String) -> JSONValue {
        var environment: [String: JSONValue] = [
            "id": .number(Double(feed.id)), "title": .string(feed.title), "feed": .string("\(base)/v2/feeds/\(feed.id)"),
            "private": .string(feed.isPrivate ? "true" : "false"), "updated": .string(UTCTimestamp.format(micros: feed.updated)),
        ]
        if let description = feed.description { environment["description"] = .string(description) }
        if let creator = feed.creatorName { environment["creator"] = .string("\(base)/users/\(creator)") }
        var datastream: [String: JSONValue] = ["id": .string(trigger.streamID), "url": .string("\(base)/v2/feeds/\(feed.id)/datastreams/\(trigger.streamID)")]
        if let stream {
            var value: [String: JSONValue] = [:]
            if let current = stream.currentValue { value["value"] = .string(FeedRules.text(current)) }
            if let high = stream.maxValue { value["max_value"] = .string(FeedRules.text(high)) }
            if let low = stream.minValue { value["min_value"] = .string(FeedRules.text(low)) }
            datastream["value"] = .object(value)
            if let when = stream.at { datastream["at"] = .string(UTCTimestamp.format(micros: when)) }
            if !stream.unit.isEmpty { datastream["units"] = stream.unit.json }
        }
        var members: [String: JSONValue] = [
            "id": .number(Double(trigger.id)), "url": .string("\(base)/v2/triggers/\(trigger.id)"), "type": .string(trigger.type.rawValue),
            "timestamp": .string(UTCTimestamp.format(micros: at)), "environment": .object(environment),
            "triggering_datastream": .object(datastream), "debug": .bool(false),
        ]
        if let threshold = trigger.threshold { members["threshold_value"] = .string(FeedRules.text(threshold)) }
        return .object(members)
    }

    /// Fires `frozen` triggers of feeds that have gone quiet.
    func checkFrozen() async throws {
        let threshold = store.now() - Int64(settings.frozenAfterSeconds) * 1_000_000
        let rows = try await store.database.raw("""
            SELECT \(unsafeRaw: Self.columns.split(separator: ",").map { "t." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", "))
            FROM feeds_triggers t JOIN feeds_feeds f ON f.id = t.feed_id
            WHERE t.trigger_type = 'frozen' AND t.armed_state = 0 AND f.updated < \(bind: threshold)
            """).all()
        for trigger in try rows.map(Self.decode) {
            guard let feed = try await store.feed(trigger.feedID) else { continue }
            if feed.isPrivate, let owner = trigger.userID, owner != feed.creatorID { continue }
            try await fire(trigger, feed: feed, stream: try await store.datastream(feedID: feed.id, id: trigger.streamID), armedState: true)
        }
    }

    // MARK: Delivery

    /// Delivers due POSTs: claims each (so that another instance does not send it too), sends it
    /// with the timeout, and records the outcome; a failure is retried after 2^attempts seconds
    /// until `triggerAttempts` attempts.
    func deliverDue() async throws -> Int {
        let now = store.now()
        let due = try await store.database.raw("""
            SELECT id, trigger_id, fired_at, payload, attempts, status, response_status, error, next_attempt, updated
            FROM feeds_trigger_deliveries WHERE status = 'pending' AND next_attempt <= \(bind: now) ORDER BY next_attempt LIMIT 20
            """).all().map(Self.decodeDelivery)
        var sent = 0
        for delivery in due {
            let lease = store.now() + Int64(settings.triggerTimeoutSeconds + 5) * 1_000_000
            let claimed = try await store.database.raw("""
                UPDATE feeds_trigger_deliveries SET next_attempt = \(bind: lease) WHERE id = \(bind: delivery.id) AND next_attempt = \(bind: delivery.nextAttempt) AND status = 'pending'
                RETURNING id
                """).first()
            guard claimed != nil, let trigger = try await trigger(delivery.triggerID) else { continue }
            var responseStatus: Int?
            var failure: String?
            do {
                let response = try await context.http.send(UpstreamRequest(
                    method: .post, url: trigger.url, headers: [.contentType: "application/json", .userAgent: "gateway-feeds-trigger"],
                    body: ByteBuffer(string: delivery.payload), timeout: .seconds(settings.triggerTimeoutSeconds),
                    egress: .callerSupplied(allowingInternalAddresses: settings.triggerPrivateTargets)), maxBodySize: 65_536)
                responseStatus = response.status.code
                if response.status.kind != .successful { failure = "the target answered \(response.status.code)" }
            } catch {
                failure = (error as? GatewayError)?.detail ?? "\(error)"
            }
            let attempts = delivery.attempts + 1
            let finished = store.now()
            let status = failure == nil ? "delivered" : (attempts >= settings.triggerAttempts ? "failed" : "pending")
            let next = finished + (Int64(1) << Int64(min(attempts - 1, 16))) * 1_000_000
            try await store.database.raw("""
                UPDATE feeds_trigger_deliveries SET attempts = \(bind: attempts), status = \(bind: status), response_status = \(bind: responseStatus),
                  error = \(bind: failure.map { String($0.prefix(500)) }), next_attempt = \(bind: next), updated = \(bind: finished)
                WHERE id = \(bind: delivery.id)
                """).run()
            sent += 1
        }
        return sent
    }
}

/// Runs trigger deliveries and the frozen check in the background.
struct TriggerService: Service {
    let engine: TriggerEngine
    let logger: Logger

    func run() async throws {
        var lastFrozenCheck = ContinuousClock.now - .seconds(3_600)
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            engine.hasNewDeliveries.withLockedValue { $0 = false }
            do {
                if ContinuousClock.now - lastFrozenCheck > .seconds(15) {
                    try await engine.checkFrozen()
                    lastFrozenCheck = ContinuousClock.now
                }
                while try await engine.deliverDue() > 0 {}
            } catch {
                logger.warning("feeds trigger delivery failed", metadata: ["error": "\(error)"])
            }
            // Pause a second, or less when a trigger fires meanwhile.
            for _ in 0..<20 {
                if engine.hasNewDeliveries.withLockedValue({ $0 }) || Task.isShuttingDownGracefully || Task.isCancelled { break }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
    }
}
