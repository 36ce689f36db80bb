import Foundation
import GatewayCore
import Metrics
import NIOCore

/// The feeds plugin's logic, shared by the native API, the Xively v2 dialect and the live
/// sockets: who may see and change what, input rules, and change notifications.
///
/// Visibility: a public feed is readable by anyone; a private one only by its creator, an
/// administrator or a master key — to everyone else it does not exist (404). Changes need the
/// creator or an administrator (403 for a visible feed). A key restricted to resources of this
/// plugin reaches only those feeds (`504`) or datastreams (`504/temp`).
struct FeedService: Sendable {
    let store: FeedStore
    let settings: FeedsPlugin.Configuration
    let context: PluginContext
    let triggers: TriggerEngine
    let keys: LegacyKeys
    /// `feeds_live_subscriptions`: the WebSocket subscriptions this instance is pushing to.
    let liveSubscriptions: Meter

    init(store: FeedStore, settings: FeedsPlugin.Configuration, context: PluginContext) {
        self.store = store
        self.settings = settings
        self.context = context
        liveSubscriptions = Meter(label: "feeds_live_subscriptions", factory: context.metrics)
        triggers = TriggerEngine(store: store, context: context, settings: settings)
        keys = LegacyKeys(store: store, context: context, secret: settings.keySecret)
    }

    /// The tag of the routes whose v2 key permissions the authorize hook checks: those that name
    /// the feed collection, a feed, a datastream or a datapoint in their path. (Trigger and key
    /// routes name their feed in the body or in the stored record; their service calls check it.)
    static let keyPermissions = "v2-key-permissions"

    /// The plugin's authorize hook: a request made with a v2 key, on a route tagged
    /// ``keyPermissions``, must match one of the key's permissions (nothing for other callers).
    func authorize(_ request: AuthorizationRequest) async throws {
        if request.has(tag: LegacyKeys.managesKeys) { try await keys.authorizeManager(request.principal) }
        guard request.has(tag: Self.keyPermissions) else { return }
        let method = request.method == .head ? "get" : request.method.rawValue
        try await keys.authorize(request.principal, method: method,
                                 feed: request.pathParameters["feed"].flatMap { FeedRules.feedID(XivelyDialect.strip($0)) },
                                 stream: request.pathParameters["stream"].map { XivelyDialect.strip($0) },
                                 referer: request.headers[.referer])
    }

    var frozenAfterMicros: Int64 { Int64(settings.frozenAfterSeconds) * 1_000_000 }

    func status(of feed: FeedRecord) -> String {
        store.now() - feed.updated > frozenAfterMicros ? "frozen" : "live"
    }

    // MARK: Access

    /// The resource ids a key is restricted to in this plugin, or nil when unrestricted.
    func restriction(_ principal: Principal) -> Set<String>? { principal.resources[context.pluginID] }

    func mayReach(feed id: Int64, _ principal: Principal) -> Bool {
        guard let allowed = restriction(principal) else { return true }
        let name = String(id)
        return allowed.contains(name) || allowed.contains { $0.hasPrefix(name + "/") }
    }

    func mayReach(stream: String, of feed: Int64, _ principal: Principal) -> Bool {
        guard let allowed = restriction(principal) else { return true }
        return allowed.contains(String(feed)) || allowed.contains("\(feed)/\(stream)")
    }

    func owns(_ feed: FeedRecord, _ principal: Principal) -> Bool {
        principal.isAdmin || (principal.userID != nil && principal.userID == feed.creatorID)
    }

    func canSee(_ feed: FeedRecord, _ principal: Principal) -> Bool {
        mayReach(feed: feed.id, principal) && (!feed.isPrivate || owns(feed, principal))
    }

    /// The feed if the caller may see it; 404 otherwise.
    func visibleFeed(_ idText: String, _ principal: Principal) async throws -> FeedRecord {
        guard let id = FeedRules.feedID(idText), let feed = try await store.feed(id) else {
            throw GatewayError.notFound("No feed '\(idText.prefix(40))'.")
        }
        return try await visible(feed, idText, principal)
    }

    private func visible(_ feed: FeedRecord, _ idText: String, _ principal: Principal) async throws -> FeedRecord {
        guard canSee(feed, principal) else { throw GatewayError.notFound("No feed '\(idText.prefix(40))'.") }
        if feed.isPrivate, try await keys.hidesPrivate(principal) { throw GatewayError.notFound("No feed '\(idText.prefix(40))'.") }
        return feed
    }

    /// A datastream of a feed the caller may see, or with `changing` change, looked up with its
    /// feed in one statement; the answers of ``visibleFeed(_:_:)`` or ``changeableFeed(_:_:)`` and
    /// then ``stream(_:_:_:)``, in that order.
    func feedAndStream(_ feedText: String, _ streamID: String, _ principal: Principal, changing: Bool) async throws -> (FeedRecord, DatastreamRecord) {
        guard let id = FeedRules.feedID(feedText), let found = try await store.feed(id, datastream: streamID) else {
            throw GatewayError.notFound("No feed '\(feedText.prefix(40))'.")
        }
        let feed = try await visible(found.feed, feedText, principal)
        if changing, !owns(feed, principal) { throw GatewayError.forbidden("Only the feed's creator may change feed \(feed.id).") }
        guard FeedRules.isDatastreamID(streamID), mayReach(stream: streamID, of: feed.id, principal), let stream = found.stream else {
            throw GatewayError.notFound("Feed \(feed.id) has no datastream '\(streamID.prefix(64))'.")
        }
        return (feed, stream)
    }

    /// The feed if the caller may change it; 404 when they cannot see it, 403 when they only can.
    func changeableFeed(_ idText: String, _ principal: Principal) async throws -> FeedRecord {
        let feed = try await visibleFeed(idText, principal)
        guard owns(feed, principal) else { throw GatewayError.forbidden("Only the feed's creator may change feed \(feed.id).") }
        return feed
    }

    /// A datastream of a feed the caller may see; 404 when there is none or the key may not reach it.
    func stream(_ feed: FeedRecord, _ id: String, _ principal: Principal) async throws -> DatastreamRecord {
        guard FeedRules.isDatastreamID(id), mayReach(stream: id, of: feed.id, principal),
              let stream = try await store.datastream(feedID: feed.id, id: id) else {
            throw GatewayError.notFound("Feed \(feed.id) has no datastream '\(id.prefix(64))'.")
        }
        return stream
    }

    /// The datastreams of a feed the caller may reach, optionally only those named.
    func streams(of feed: FeedRecord, only names: [String]?, _ principal: Principal) async throws -> [DatastreamRecord] {
        try await store.datastreams(of: feed.id).filter { stream in
            mayReach(stream: stream.id, of: feed.id, principal) && (names.map { $0.contains(stream.id) } ?? true)
        }
    }

    // MARK: Changes

    func createFeed(_ draft: FeedDraft, _ principal: Principal) async throws -> FeedRecord {
        guard principal.userID != nil || principal.isAdmin else { throw GatewayError.unauthorized("Sign in or use an API key to create feeds.") }
        guard restriction(principal) == nil else { throw GatewayError.forbidden("This key is restricted to some feeds and cannot create feeds.") }
        var name: String?
        if let userID = principal.userID { name = try await context.accounts.account(id: userID)?.username }
        let feed = try await store.createFeed(draft, creatorID: principal.userID, creatorName: name)
        await changed(feed: feed.id, streams: draft.datastreams.map(\.id))
        return feed
    }

    func updateFeed(_ feed: FeedRecord, _ draft: FeedDraft, _ principal: Principal) async throws -> FeedRecord {
        for stream in draft.datastreams where !mayReach(stream: stream.id, of: feed.id, principal) {
            throw GatewayError.forbidden("This key may not change datastream '\(stream.id)'.")
        }
        let valued = draft.datastreams.filter { $0.currentValue != nil }.map(\.id)
        let updated = try await watching(feed.id, valued) { try await store.updateFeed(feed, with: draft) }
        await changed(feed: feed.id, streams: draft.datastreams.map(\.id))
        return updated
    }

    func deleteFeed(_ feed: FeedRecord) async throws {
        try await store.deleteFeed(feed.id)
        try await triggers.deleteAll(feed: feed.id)
        await changed(feed: feed.id, streams: [], deleted: true)
    }

    func createDatastreams(_ feed: FeedRecord, _ drafts: [DatastreamDraft], _ principal: Principal) async throws {
        for draft in drafts where !mayReach(stream: draft.id, of: feed.id, principal) {
            throw GatewayError.forbidden("This key may not create datastream '\(draft.id)'.")
        }
        let existing = try await store.datastreams(of: feed.id).count
        guard existing + drafts.count <= FeedRules.maxDatastreams else {
            throw GatewayError.invalid("A feed has at most \(FeedRules.maxDatastreams) datastreams.")
        }
        try await store.createDatastreams(drafts, feedID: feed.id)
        await changed(feed: feed.id, streams: drafts.map(\.id))
    }

    func updateDatastream(_ feed: FeedRecord, _ draft: DatastreamDraft) async throws {
        try await watching(feed.id, draft.currentValue == nil ? [] : [draft.id]) { try await store.updateDatastream(draft, feedID: feed.id) }
        await changed(feed: feed.id, streams: [draft.id])
    }

    func deleteDatastream(_ stream: DatastreamRecord) async throws {
        try await store.deleteDatastream(stream)
        await changed(feed: stream.feedID, streams: [stream.id], deleted: true)
    }

    func ingest(_ points: [Datapoint], into stream: DatastreamRecord) async throws {
        try await watching(stream.feedID, [stream.id]) { try await store.ingest(points, into: stream) }
        await changed(feed: stream.feedID, streams: [stream.id])
    }

    func updateDatapoint(_ stream: DatastreamRecord, at: Int64, value: Double) async throws {
        guard try await watching(stream.feedID, [stream.id], { try await store.updateDatapoint(stream, at: at, value: value) }) else {
            throw GatewayError.notFound("No datapoint at \(UTCTimestamp.format(micros: at)).")
        }
        await changed(feed: stream.feedID, streams: [stream.id])
    }

    func deleteDatapoints(_ stream: DatastreamRecord, from start: Int64, through end: Int64) async throws -> Int {
        let count = try await store.deleteDatapoints(stream, from: start, through: end)
        if count > 0 { await changed(feed: stream.feedID, streams: [stream.id]) }
        return count
    }

    /// Runs `change` and then evaluates the triggers on `streams` of `feedID` (when there are any:
    /// without triggers this costs nothing beyond a cached lookup).
    func watching<R: Sendable>(_ feedID: Int64, _ streams: [String], _ change: () async throws -> R) async throws -> R {
        var watched: [(String, Double?)] = []
        var before: FeedRecord?
        for stream in streams where await triggers.watches(feed: feedID, stream: stream) {
            if before == nil { before = try await store.feed(feedID) }
            watched.append((stream, try await store.datastream(feedID: feedID, id: stream)?.currentValue))
        }
        let result = try await change()
        guard let before, let after = try await store.feed(feedID) else { return result }
        let wasFrozen = store.now() - before.updated > frozenAfterMicros
        for (index, (id, previous)) in watched.enumerated() {
            guard let stream = try await store.datastream(feedID: feedID, id: id) else { continue }
            // Feed-level triggers (live, frozen) once per change, not once per datastream.
            await triggers.evaluate(feed: after, stream: stream, previous: previous, wasFrozen: wasFrozen, feedLevel: index == 0)
        }
        return result
    }

    /// Tells live subscribers and the cache that a feed (and some of its datastreams) changed.
    func changed(feed: Int64, streams: [String], deleted: Bool = false) async {
        await context.purgeCache(tags: [Self.cacheTag(feed)])
        let kind = deleted ? "deleted" : "changed"
        if streams.isEmpty {
            await context.events.publish(GatewayEvent(topic: "feeds/\(feed)", payload: ByteBuffer(string: #"{"feed":\#(feed),"event":"\#(kind)"}"#)))
        }
        for stream in streams {
            await context.events.publish(GatewayEvent(topic: "feeds/\(feed)/datastreams/\(stream)",
                                                      payload: ByteBuffer(string: #"{"feed":\#(feed),"datastream":"\#(stream)","event":"\#(kind)"}"#)))
        }
    }

    static func cacheTag(_ feed: Int64) -> String { "feeds:\(feed)" }

    // MARK: Input

    /// The naming of one API: the native API's camelCase or the legacy snake_case.
    enum Naming: Sendable {
        case native, legacy

        var currentValue: String { self == .native ? "currentValue" : "current_value" }
    }

    /// The members a feed body may set (``FeedInput`` documents them).
    static let feedMembers: Set<String> = ["title", "description", "website", "tags", "private", "location", "datastreams", "retention"]

    /// Reads a feed body. On a create the title is required. Read-only members (id, status,
    /// creator, created, updated, feed, version) are ignored; the legacy API also ignores unknown
    /// members, the native one refuses them. Every problem is reported at once (422).
    func feedDraft(_ body: JSONValue, creating: Bool, naming: Naming) throws -> FeedDraft {
        guard case .object(let members) = body else { throw GatewayError.invalid(field: "/", "must be a JSON object") }
        var problems: [GatewayError.FieldError] = []
        var draft = FeedDraft()
        let readOnly: Set<String> = ["id", "status", "creator", "created", "updated", "feed", "version"]
        let known = Self.feedMembers
        for key in members.keys.sorted() where !known.contains(key) && !readOnly.contains(key) && naming == .native {
            problems.append(.init(pointer: "/\(key)", detail: "is not a feed member (\(known.sorted().joined(separator: ", ")))"))
        }
        func text(_ key: String, max: Int) -> String?? {
            guard let value = members[key] else { return nil }
            if value == .null { return .some(nil) }
            guard let string = value.stringValue, string.unicodeScalars.count <= max else {
                problems.append(.init(pointer: "/\(key)", detail: "must be a string of at most \(max) characters"))
                return nil
            }
            return .some(string)
        }
        if let title = text("title", max: FeedRules.maxTitle) {
            if let title, !FeedRules.isBlank(title) {
                draft.title = title
            } else {
                problems.append(.init(pointer: "/title", detail: "must not be empty"))
            }
        } else if creating, members["title"] == nil {
            problems.append(.init(pointer: "/title", detail: "is required"))
        }
        draft.description = text("description", max: FeedRules.maxText)
        draft.website = text("website", max: 2_000)
        if let website = draft.website ?? nil, !(website.hasPrefix("http://") || website.hasPrefix("https://")) {
            problems.append(.init(pointer: "/website", detail: "must be an http or https URL"))
        }
        if let tags = members["tags"] { draft.tags = FeedRules.tags(tags, pointer: "/tags", problems: &problems) }
        if let value = members["private"] {
            switch value {
            case .bool(let flag): draft.isPrivate = flag
            case .string("true"): draft.isPrivate = true
            case .string("false"): draft.isPrivate = false
            default: problems.append(.init(pointer: "/private", detail: "must be true or false"))
            }
        }
        if let value = members["location"], value != .null {
            draft.location = location(value, problems: &problems)
        } else if members["location"] == .null {
            draft.location = FeedLocation()
        }
        if let value = members["retention"] {
            switch value {
            case .null: draft.retentionSeconds = .some(nil)
            case .string(let text):
                if let seconds = HistoryDuration.seconds(text) { draft.retentionSeconds = .some(seconds) } else {
                    problems.append(.init(pointer: "/retention", detail: "must be a duration such as 30days or 1year, or null"))
                }
            default: problems.append(.init(pointer: "/retention", detail: "must be a duration such as 30days or 1year, or null"))
            }
        }
        if let value = members["datastreams"] {
            draft.datastreams = datastreamDrafts(value, pointer: "/datastreams", naming: naming, problems: &problems)
        }
        guard problems.isEmpty else { throw Self.invalid(problems) }
        return draft
    }

    static func invalid(_ problems: [GatewayError.FieldError]) -> GatewayError {
        GatewayError.invalid(problems.map { "\($0.pointer) \($0.detail)" }.joined(separator: "; "), errors: problems)
    }

    private func location(_ value: JSONValue, problems: inout [GatewayError.FieldError]) -> FeedLocation? {
        guard case .object(let members) = value else {
            problems.append(.init(pointer: "/location", detail: "must be an object"))
            return nil
        }
        var location = FeedLocation()
        func text(_ key: String, allowed: Set<String>? = nil) -> String? {
            guard let value = members[key], value != .null else { return nil }
            guard let string = value.stringValue, string.unicodeScalars.count <= FeedRules.maxLocationText, allowed.map({ $0.contains(string) }) ?? true else {
                let choice = allowed.map { " (\($0.sorted().joined(separator: ", ")))" } ?? ""
                problems.append(.init(pointer: "/location/\(key)", detail: "must be a string\(choice)"))
                return nil
            }
            return string
        }
        func number(_ key: String, range: ClosedRange<Double>) -> Double? {
            guard let value = members[key], value != .null else { return nil }
            guard let number = FeedRules.value(value), range.contains(number) else {
                problems.append(.init(pointer: "/location/\(key)", detail: "must be a number from \(Int(range.lowerBound)) to \(Int(range.upperBound))"))
                return nil
            }
            return number
        }
        location.name = text("name")
        location.domain = text("domain", allowed: Set(FeedLocation.domains))
        location.exposure = text("exposure", allowed: Set(FeedLocation.exposures))
        location.disposition = text("disposition", allowed: Set(FeedLocation.dispositions))
        location.lat = number("lat", range: -90...90)
        location.lon = number("lon", range: -180...180)
        if let ele = members["ele"], ele != .null {
            if let value = FeedRules.value(ele) { location.ele = ele.stringValue ?? FeedRules.text(value) } else {
                problems.append(.init(pointer: "/location/ele", detail: "must be a number"))
            }
        }
        return location
    }

    /// Reads datastream bodies (an array of objects with an `id`).
    func datastreamDrafts(_ value: JSONValue, pointer: String, naming: Naming, problems: inout [GatewayError.FieldError]) -> [DatastreamDraft] {
        guard let array = value.arrayValue else {
            problems.append(.init(pointer: pointer, detail: "must be an array of datastreams"))
            return []
        }
        guard array.count <= FeedRules.maxDatastreams else {
            problems.append(.init(pointer: pointer, detail: "at most \(FeedRules.maxDatastreams) datastreams"))
            return []
        }
        var drafts: [DatastreamDraft] = []
        var seen: Set<String> = []
        for (index, item) in array.enumerated() {
            if let draft = datastreamDraft(item, id: nil, pointer: "\(pointer)/\(index)", naming: naming, problems: &problems) {
                if !seen.insert(draft.id).inserted {
                    problems.append(.init(pointer: "\(pointer)/\(index)/id", detail: "'\(draft.id)' appears twice"))
                }
                drafts.append(draft)
            }
        }
        return drafts
    }

    /// Reads one datastream body; `id` is the id from the path (a body's id must then match or be absent).
    func datastreamDraft(_ value: JSONValue, id pathID: String?, pointer: String, naming: Naming, problems: inout [GatewayError.FieldError]) -> DatastreamDraft? {
        guard case .object(let members) = value else {
            problems.append(.init(pointer: pointer.isEmpty ? "/" : pointer, detail: "must be a JSON object"))
            return nil
        }
        let known: Set<String> = ["id", "tags", "unit", naming.currentValue, "at"]
        let readOnly: Set<String> = ["min_value", "max_value", "minValue", "maxValue", "datapoints", "version"]
        for key in members.keys.sorted() where !known.contains(key) && !readOnly.contains(key) && naming == .native {
            problems.append(.init(pointer: "\(pointer)/\(key)", detail: "is not a datastream member (\(known.sorted().joined(separator: ", ")))"))
        }
        var id = pathID ?? ""
        if pathID == nil {
            guard let text = members["id"]?.stringValue, FeedRules.isDatastreamID(text) else {
                problems.append(.init(pointer: "\(pointer)/id", detail: "is required: 1 to 64 letters, digits, _ or -"))
                return nil
            }
            id = text
        }
        var draft = DatastreamDraft(id: id)
        if let tags = members["tags"] { draft.tags = FeedRules.tags(tags, pointer: "\(pointer)/tags", problems: &problems) }
        if let unit = members["unit"], unit != .null {
            if case .object(let fields) = unit {
                var parsed = DatastreamUnit()
                for (key, path) in [("label", \DatastreamUnit.label), ("symbol", \.symbol), ("type", \.type)] {
                    guard let field = fields[key], field != .null else { continue }
                    if let text = field.stringValue, text.unicodeScalars.count <= FeedRules.maxUnitText { parsed[keyPath: path] = text } else {
                        problems.append(.init(pointer: "\(pointer)/unit/\(key)", detail: "must be a string of at most \(FeedRules.maxUnitText) characters"))
                    }
                }
                draft.unit = parsed
            } else {
                problems.append(.init(pointer: "\(pointer)/unit", detail: "must be an object {label, symbol, type}"))
            }
        } else if members["unit"] == .null {
            draft.unit = DatastreamUnit()
        }
        if let value = members[naming.currentValue], value != .null {
            if let number = FeedRules.value(value) { draft.currentValue = number } else {
                problems.append(.init(pointer: "\(pointer)/\(naming.currentValue)", detail: "must be a number"))
            }
        }
        // The native API checks a time given without a value too (the document states one rule for `at`).
        if let value = members["at"], value != .null, draft.currentValue != nil || naming == .native {
            if let text = value.stringValue, let micros = UTCTimestamp.parse(text) {
                if draft.currentValue != nil {
                    if let problem = timeProblem(micros) { problems.append(.init(pointer: "\(pointer)/at", detail: problem)) }
                    draft.at = micros
                }
            } else {
                problems.append(.init(pointer: "\(pointer)/at", detail: "must be an ISO 8601 time such as 2013-01-01T14:14:55.118845Z"))
            }
        }
        return draft
    }

    /// Why a datapoint time cannot be accepted (too far in the future), or nil.
    func timeProblem(_ micros: Int64) -> String? {
        let limit = store.now() + Int64(settings.maxFutureSkewSeconds) * 1_000_000
        return micros > limit ? "is more than \(settings.maxFutureSkewSeconds) seconds in the future" : nil
    }

    /// Reads datapoints from a JSON body (`{"datapoints": [{"at", "value"}]}`, or a bare array in the
    /// native API) or CSV (`at,value` or `value` lines). All or nothing: every bad datapoint is
    /// reported (422, with its pointer or line), and two datapoints at one time are refused.
    func datapoints(_ bytes: ByteBuffer, contentType: String) throws -> [Datapoint] {
        let now = store.now()
        if contentType != "text/csv", contentType != "text/plain", let points = DatapointScanner.scan(bytes, now: now) {
            guard points.count <= settings.maxDatapointsPerRequest else { throw tooMany() }
            if !points.isEmpty, Self.distinct(points), timeProblem(points.lazy.map(\.at).max()!) == nil { return points }
            // Otherwise the general reading below reports the problems.
        }
        var points: [Datapoint] = []
        var problems: [GatewayError.FieldError] = []
        var seen: Set<Int64> = []
        func add(_ at: Int64, _ value: Double, pointer: @autoclosure () -> String) {
            if let problem = timeProblem(at) {
                problems.append(.init(pointer: pointer(), detail: problem))
            } else if !seen.insert(at).inserted {
                problems.append(.init(pointer: pointer(), detail: "a second datapoint at \(UTCTimestamp.format(micros: at))"))
            } else {
                points.append(Datapoint(at: at, value: value))
            }
        }
        if contentType == "text/csv" || contentType == "text/plain" {
            let lines = String(buffer: bytes).split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
                .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " \r\t")) }
            guard lines.count(where: { !$0.isEmpty }) <= settings.maxDatapointsPerRequest else { throw tooMany() }
            var lineNumber = 0
            for trimmed in lines {
                lineNumber += 1
                if trimmed.isEmpty { continue }
                let fields = trimmed.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
                let pointer = "line \(lineNumber)"
                switch fields.count {
                case 1:
                    if let value = FeedRules.value(fields[0]) { add(now, value, pointer: pointer) } else {
                        problems.append(.init(pointer: pointer, detail: "'\(fields[0].prefix(40))' is not a number"))
                    }
                case 2:
                    guard let at = UTCTimestamp.parse(fields[0]) else {
                        problems.append(.init(pointer: pointer, detail: "'\(fields[0].prefix(40))' is not an ISO 8601 time"))
                        continue
                    }
                    guard let value = FeedRules.value(fields[1]) else {
                        problems.append(.init(pointer: pointer, detail: "'\(fields[1].prefix(40))' is not a number"))
                        continue
                    }
                    add(at, value, pointer: pointer)
                default:
                    problems.append(.init(pointer: pointer, detail: "must be `at,value` or `value`"))
                }
                if problems.count >= 100 { break }
            }
        } else {
            let body = try JSONValue.parse(bytes, maximumDepth: 8)
            let list: [JSONValue]
            let base: String
            switch body {
            case .array(let items):
                list = items
                base = ""
            case .object(let members):
                guard let items = members["datapoints"]?.arrayValue else { throw GatewayError.invalid(field: "/datapoints", "is required: an array of {at, value}") }
                list = items
                base = "/datapoints"
            default:
                throw GatewayError.invalid(field: "/", "must be {\"datapoints\": [...]}")
            }
            guard list.count <= settings.maxDatapointsPerRequest else {
                throw tooMany()
            }
            for (index, item) in list.enumerated() {
                guard case .object(let members) = item else {
                    problems.append(.init(pointer: "\(base)/\(index)", detail: "must be {\"at\", \"value\"}"))
                    continue
                }
                guard let value = members["value"].flatMap(FeedRules.value) else {
                    problems.append(.init(pointer: "\(base)/\(index)/value", detail: "must be a number"))
                    continue
                }
                var at = now
                if let time = members["at"], time != .null {
                    guard let text = time.stringValue, let micros = UTCTimestamp.parse(text) else {
                        problems.append(.init(pointer: "\(base)/\(index)/at", detail: "must be an ISO 8601 time such as 2013-01-01T14:14:55.118845Z"))
                        continue
                    }
                    at = micros
                }
                add(at, value, pointer: "\(base)/\(index)/at")
                if problems.count >= 100 { break }
            }
        }
        guard problems.isEmpty else { throw Self.invalid(problems) }
        guard !points.isEmpty else { throw GatewayError.invalid("There are no datapoints in the body.") }
        return points
    }

    /// Whether no two datapoints share a time (a linear check for the usual ascending order).
    static func distinct(_ points: [Datapoint]) -> Bool {
        var ascending = true
        for index in points.indices.dropFirst() where points[index].at <= points[index - 1].at {
            ascending = false
            break
        }
        if ascending { return true }
        let times = points.map(\.at).sorted()
        for index in times.indices.dropFirst() where times[index] == times[index - 1] { return false }
        return true
    }

    private func tooMany() -> GatewayError {
        GatewayError.tooLarge("At most \(settings.maxDatapointsPerRequest) datapoints per request: send larger sets in several requests.")
    }
}
