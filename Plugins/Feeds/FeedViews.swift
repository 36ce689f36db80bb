import GatewayCore

// The native API's shapes, as types: the OpenAPI document describes every member, and a reply is
// encoded straight from them. Optional members are left out when absent, except where the shape
// says null.

/// A feed.
struct FeedView: Codable, Sendable, Equatable {
    var id: Int64
    var title: String
    var description: String?
    var website: String?
    var tags: [String]
    var `private`: Bool
    /// The creator's user name.
    var creator: String?
    /// How long datapoints are kept (`30d`); absent: for ever.
    var retention: String?
    var location: LocationView?
    /// `live`, or `frozen` after `frozenAfter` without an update.
    var status: String
    var created: String
    var updated: String
    var datastreams: [DatastreamView]?
}

/// Where a feed is.
struct LocationView: Codable, Sendable, Equatable {
    var name: String?
    var domain: String?
    var exposure: String?
    var disposition: String?
    var ele: String?
    var lat: Double?
    var lon: Double?

    init(_ location: FeedLocation) {
        name = location.name
        domain = location.domain
        exposure = location.exposure
        disposition = location.disposition
        ele = location.ele
        lat = location.lat
        lon = location.lon
    }
}

/// The unit of a datastream's values.
struct UnitView: Codable, Sendable, Equatable {
    var label: String?
    var symbol: String?
    var type: String?
}

/// A datastream of a feed.
struct DatastreamView: Codable, Sendable, Equatable {
    var id: String
    var tags: [String]
    var unit: UnitView?
    var currentValue: Double?
    var at: String?
    var minValue: Double?
    var maxValue: Double?
    var datapoints: [DatapointView]?
}

/// One value at one time.
struct DatapointView: Codable, Sendable, Equatable {
    var at: String
    var value: Double
}

/// A list of datastreams.
struct DatastreamList: Codable, Sendable {
    var items: [DatastreamView]
}

/// A trigger: a URL posted to when a datastream's value meets a condition.
struct TriggerView: Codable, Sendable, Equatable {
    var id: Int64
    var feed: Int64
    var datastream: String
    var url: String
    var type: String
    var threshold: Double?
    var notifiedAt: String?
    var user: String?
    var created: String

    private enum Key: String, CodingKey { case id, feed, datastream, url, type, threshold, notifiedAt, user, created }

    init(id: Int64, feed: Int64, datastream: String, url: String, type: String, threshold: Double?, notifiedAt: String?, user: String?, created: String) {
        self.id = id
        self.feed = feed
        self.datastream = datastream
        self.url = url
        self.type = type
        self.threshold = threshold
        self.notifiedAt = notifiedAt
        self.user = user
        self.created = created
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        id = try container.decode(Int64.self, forKey: .id)
        feed = try container.decode(Int64.self, forKey: .feed)
        datastream = try container.decode(String.self, forKey: .datastream)
        url = try container.decode(String.self, forKey: .url)
        type = try container.decode(String.self, forKey: .type)
        threshold = try container.decode(Double?.self, forKey: .threshold)
        notifiedAt = try container.decode(String?.self, forKey: .notifiedAt)
        user = try container.decodeIfPresent(String.self, forKey: .user)
        created = try container.decode(String.self, forKey: .created)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(id, forKey: .id)
        try container.encode(feed, forKey: .feed)
        try container.encode(datastream, forKey: .datastream)
        try container.encode(url, forKey: .url)
        try container.encode(type, forKey: .type)
        try container.encode(threshold, forKey: .threshold)
        try container.encode(notifiedAt, forKey: .notifiedAt)
        try container.encodeIfPresent(user, forKey: .user)
        try container.encode(created, forKey: .created)
    }
}

/// One attempt log of a trigger's POST.
struct DeliveryView: Codable, Sendable, Equatable {
    var id: Int64
    var firedAt: String
    /// `pending`, `delivered` or `failed`.
    var status: String
    var attempts: Int
    var responseStatus: Int?
    var error: String?
    var updated: String
    /// When a pending delivery is tried next; null otherwise.
    var nextAttempt: String?

    private enum Key: String, CodingKey { case id, firedAt, status, attempts, responseStatus, error, updated, nextAttempt }

    init(id: Int64, firedAt: String, status: String, attempts: Int, responseStatus: Int?, error: String?, updated: String, nextAttempt: String?) {
        self.id = id
        self.firedAt = firedAt
        self.status = status
        self.attempts = attempts
        self.responseStatus = responseStatus
        self.error = error
        self.updated = updated
        self.nextAttempt = nextAttempt
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        id = try container.decode(Int64.self, forKey: .id)
        firedAt = try container.decode(String.self, forKey: .firedAt)
        status = try container.decode(String.self, forKey: .status)
        attempts = try container.decode(Int.self, forKey: .attempts)
        responseStatus = try container.decode(Int?.self, forKey: .responseStatus)
        error = try container.decode(String?.self, forKey: .error)
        updated = try container.decode(String.self, forKey: .updated)
        nextAttempt = try container.decode(String?.self, forKey: .nextAttempt)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(id, forKey: .id)
        try container.encode(firedAt, forKey: .firedAt)
        try container.encode(status, forKey: .status)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(responseStatus, forKey: .responseStatus)
        try container.encode(error, forKey: .error)
        try container.encode(updated, forKey: .updated)
        try container.encode(nextAttempt, forKey: .nextAttempt)
    }
}

// The native API's bodies, as the OpenAPI document shows them. The plugin reads bodies member by
// member (the native and the legacy namings share the reading, and every problem is reported at
// once), so these types only document them; a test holds them to the members the reading accepts.

/// A feed's members, to create or change it (on a create `title` is required; `null` clears a member).
struct FeedInput: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "title": FieldRule.nonBlank(maxLength: FeedRules.maxTitle).described("Required on a create."),
        "description": .text(maxLength: FeedRules.maxText),
        "website": FeedRules.websiteRule,
        "tags": FeedRules.tagsRule,
        "retention": HistoryDuration.rule.described("How long datapoints are kept (`30days`, `1year`); null: for ever."),
        "datastreams": .list(maxCount: FeedRules.maxDatastreams),
    ]

    var title: String?
    var description: String?
    var website: String?
    var tags: [String]?
    var `private`: Bool?
    var location: LocationInput?
    var retention: String?
    var datastreams: [DatastreamInput]?

    private enum Key: String, CodingKey { case title, description, website, tags, `private`, location, retention, datastreams }

    init(from decoder: any Decoder) throws {
        try self.init(from: decoder, requiringTitle: false)
    }

    init(from decoder: any Decoder, requiringTitle: Bool) throws {
        // Members that null clears are nullable; the others are not.
        let container = try decoder.container(keyedBy: Key.self)
        title = requiringTitle ? try container.decode(String.self, forKey: .title) : try container.decodeIfGiven(String.self, forKey: .title)
        description = try container.decodeIfPresent(String?.self, forKey: .description) ?? nil
        website = try container.decodeIfPresent(String?.self, forKey: .website) ?? nil
        tags = try container.decodeIfPresent([String]?.self, forKey: .tags) ?? nil
        `private` = try container.decodeIfGiven(Bool.self, forKey: .private)
        location = try container.decodeIfPresent(LocationInput?.self, forKey: .location) ?? nil
        retention = try container.decodeIfPresent(String?.self, forKey: .retention) ?? nil
        datastreams = try container.decodeIfGiven([DatastreamInput].self, forKey: .datastreams)
    }
}

/// A feed's members, to create it: ``FeedInput`` with its `title`.
struct NewFeedInput: Decodable, Sendable, ValidatableInput {
    static let fieldRules = FeedInput.fieldRules

    var feed: FeedInput

    init(from decoder: any Decoder) throws {
        feed = try FeedInput(from: decoder, requiringTitle: true)
    }
}

/// Where a feed is, to set it; null clears a member.
struct LocationInput: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "name": .text(maxLength: FeedRules.maxLocationText),
        "domain": FeedRules.orNull(FieldRule(keywords: ["type": .string("string")]).and(.oneOf(FeedLocation.domains))),
        "exposure": FeedRules.orNull(FieldRule(keywords: ["type": .string("string")]).and(.oneOf(FeedLocation.exposures))),
        "disposition": FeedRules.orNull(FieldRule(keywords: ["type": .string("string")]).and(.oneOf(FeedLocation.dispositions))),
        "lat": FeedRules.orNull(FeedRules.valueRule(within: 90)),
        "lon": FeedRules.orNull(FeedRules.valueRule(within: 180)),
        "ele": FeedRules.orNull(FeedRules.valueRule).described("Elevation: a number, or a number as text."),
    ]

    var name: String?
    var domain: String?
    var exposure: String?
    var disposition: String?
    var ele: String?
    var lat: Double?
    var lon: Double?

    private enum Key: String, CodingKey { case name, domain, exposure, disposition, ele, lat, lon }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        name = try container.decodeIfPresent(String?.self, forKey: .name) ?? nil
        domain = try container.decodeIfGiven(String.self, forKey: .domain)
        exposure = try container.decodeIfGiven(String.self, forKey: .exposure)
        disposition = try container.decodeIfGiven(String.self, forKey: .disposition)
        ele = try container.decodeIfGiven(String.self, forKey: .ele)
        lat = try container.decodeIfGiven(Double.self, forKey: .lat)
        lon = try container.decodeIfGiven(Double.self, forKey: .lon)
    }
}

/// A datastream's members, to create it (in a feed's `datastreams` or on its own).
struct DatastreamInput: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = DatastreamChange.fieldRules.merging(["id": FeedRules.datastreamIDRule]) { $1 }

    var id: String
    var tags: [String]?
    var unit: UnitInput?
    /// Records a datapoint at `at` (default now).
    var currentValue: Double?
    var at: String?

    private enum Key: String, CodingKey { case id, tags, unit, currentValue, at }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        id = try container.decode(String.self, forKey: .id)
        tags = try container.decodeIfPresent([String]?.self, forKey: .tags) ?? nil
        unit = try container.decodeIfPresent(UnitInput?.self, forKey: .unit) ?? nil
        currentValue = try container.decodeIfGiven(Double.self, forKey: .currentValue)
        at = try container.decodeIfPresent(String?.self, forKey: .at) ?? nil
    }
}

/// A datastream's members, to change it (the path names it: a body's `id` is ignored).
struct DatastreamChange: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "tags": FeedRules.tagsRule,
        "currentValue": FeedRules.orNull(FeedRules.valueRule).described("Records a datapoint at `at` (default now)."),
        "at": FeedRules.timeRule.described("When currentValue was measured: at most `maxFutureSkew` (default 5 minutes) ahead."),
    ]

    var tags: [String]?
    var unit: UnitInput?
    var currentValue: Double?
    var at: String?

    private enum Key: String, CodingKey { case tags, unit, currentValue, at }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        tags = try container.decodeIfPresent([String]?.self, forKey: .tags) ?? nil
        unit = try container.decodeIfPresent(UnitInput?.self, forKey: .unit) ?? nil
        currentValue = try container.decodeIfGiven(Double.self, forKey: .currentValue)
        at = try container.decodeIfPresent(String?.self, forKey: .at) ?? nil
    }
}

/// The unit of a datastream's values, to set it; null clears a member.
struct UnitInput: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "label": .text(maxLength: FeedRules.maxUnitText), "symbol": .text(maxLength: FeedRules.maxUnitText), "type": .text(maxLength: FeedRules.maxUnitText),
    ]

    var label: String?
    var symbol: String?
    var type: String?

    private enum Key: String, CodingKey { case label, symbol, type }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        label = try container.decodeIfPresent(String?.self, forKey: .label) ?? nil
        symbol = try container.decodeIfPresent(String?.self, forKey: .symbol) ?? nil
        type = try container.decodeIfPresent(String?.self, forKey: .type) ?? nil
    }
}

/// Datastreams to create.
struct DatastreamsInput: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = ["datastreams": .list(1...FeedRules.maxDatastreams)]

    var datastreams: [DatastreamInput]
}

/// Datapoints to record (a CSV body of `at,value` lines works too).
struct DatapointsInput: Codable, Sendable {
    var datapoints: [DatapointInput]
}

/// One datapoint to record; `at` defaults to now.
struct DatapointInput: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "at": FeedRules.timeRule.described("At most `maxFutureSkew` (default 5 minutes) ahead; default now."),
        "value": FeedRules.valueRule,
    ]

    var at: String?
    var value: Double

    private enum Key: String, CodingKey { case at, value }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        at = try container.decodeIfPresent(String?.self, forKey: .at) ?? nil
        value = try container.decode(Double.self, forKey: .value)
    }
}

/// A trigger's members, to create it.
struct TriggerInput: Codable, Sendable, ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "feed": FeedRules.anyOf([
            FieldRule(keywords: ["type": .string("integer")]).and(.integer(1...FeedRules.largestFeedNumber)),
            FieldRule(keywords: ["type": .string("string")]).and(FeedRules.feedIDRule),
        ]).described("The feed's id."),
        "datastream": FeedRules.datastreamIDRule,
        "type": FieldRule.oneOf(TriggerType.allCases.map(\.rawValue)),
        "threshold": FeedRules.anyOf([
            FieldRule(keywords: ["type": .string("number")]),
            FieldRule(keywords: ["type": .string("string")]).and(.pattern("^$|" + FeedRules.valuePattern)).and(.text(maxLength: 64)),
            FieldRule(keywords: ["enum": .array([.null])]),
        ]).described("Required for gt, gte, lt, lte and eq; null or empty clears it."),
    ]

    var feed: Int64
    var datastream: String
    var url: String
    /// `gt`, `gte`, `lt`, `lte`, `eq`, `change`, `frozen` or `live`.
    var type: String
    var threshold: Double?
}

/// A trigger's members, to change it: those left out stay as they are.
struct TriggerChange: Codable, Sendable, ValidatableInput {
    static let fieldRules = TriggerInput.fieldRules

    var feed: Int64?
    var datastream: String?
    var url: String?
    var type: String?
    var threshold: Double?
}

// MARK: What the document states of the inputs (the readings enforce the same)

extension FeedsPlugin.ListParameters: ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "status": FieldRule.oneOf(FeedsPlugin.statusFilters).described("live, frozen or all (default all)."),
        "lat": FieldRule.number(-90...90).described("Given with lon."),
        "lon": FieldRule.number(-180...180).described("Given with lat."),
        "distance": FieldRule.number(above: 0, atMost: FeedsPlugin.longestDistance).described("The radius around lat/lon (default 5)."),
        "distanceUnits": FieldRule.oneOf(FeedsPlugin.distanceUnits.keys.sorted()).described("The unit of distance (default kms)."),
        "order": FieldRule.oneOf(FeedsPlugin.orders),
        "limit": PageQuery.limitRule,
        "cursor": FieldRule.pattern("^[0-9]{\(FeedsPlugin.cursorDigits.lowerBound),\(FeedsPlugin.cursorDigits.upperBound)}$")
            .described("The `nextCursor` of the page before."),
        "content": FieldRule(keywords: [:]).described("`summary` leaves out the datastreams; anything else includes them."),
    ]
}

extension FeedsPlugin.HistoryParameters: ValidatableInput {
    static let fieldRules: [String: FieldRule] = [
        "start": FeedRules.timeRule, "end": FeedRules.timeRule, "duration": HistoryDuration.rule,
        "limit": FieldRule(keywords: ["type": .string("integer")]).and(.integer(HistoryQuery.limits)).described("1 to 1000 (default 100)."),
        "interval": FieldRule(keywords: ["type": .string("integer")]).and(.integer(0...Int(HistoryQuery.longestInterval)))
            .described("Seconds between samples (0: every datapoint)."),
        "function": FieldRule.oneOf(HistoryFunction.allCases.map(\.rawValue)),
        "find_previous": FieldRule.pattern("^(?:[tT][rR][uU][eE]|[fF][aA][lL][sS][eE]|[01])?$").described("true (or empty) or false."),
        "interval_type": FieldRule.oneOf(["discrete"]),
    ]
}

extension FeedsPlugin.RangeParameters: ValidatableInput {
    static let fieldRules: [String: FieldRule] = ["start": FeedRules.timeRule, "end": FeedRules.timeRule, "duration": HistoryDuration.rule]
}

extension FeedsPlugin.TriggerPath: ValidatableInput {
    static let fieldRules: [String: FieldRule] = ["trigger": FeedRules.feedIDRule.described("A trigger's id.")]
}

extension FeedsPlugin.TriggerListParameters: ValidatableInput {
    static let fieldRules: [String: FieldRule] = ["feed": FeedRules.feedIDRule.described("Only the triggers of this feed.")]
}
