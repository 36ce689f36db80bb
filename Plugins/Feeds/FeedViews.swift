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
struct FeedInput: Codable, Sendable {
    var title: String?
    var description: String?
    var website: String?
    var tags: [String]?
    var `private`: Bool?
    var location: LocationView?
    /// How long datapoints are kept (`30d`, `1y`); null: for ever.
    var retention: String?
    var datastreams: [DatastreamInput]?
}

/// A datastream's members, to create or change it.
struct DatastreamInput: Codable, Sendable {
    var id: String?
    var tags: [String]?
    var unit: UnitView?
    /// Records a datapoint at `at` (default now).
    var currentValue: Double?
    var at: String?
}

/// Datastreams to create.
struct DatastreamsInput: Codable, Sendable {
    var datastreams: [DatastreamInput]
}

/// Datapoints to record (a CSV body of `at,value` lines works too).
struct DatapointsInput: Codable, Sendable {
    var datapoints: [DatapointInput]
}

/// One datapoint to record; `at` defaults to now.
struct DatapointInput: Codable, Sendable {
    var at: String?
    var value: Double
}

/// A trigger's members, to create or change it.
struct TriggerInput: Codable, Sendable {
    var feed: Int64
    var datastream: String
    var url: String
    /// `gt`, `gte`, `lt`, `lte`, `eq`, `change`, `frozen` or `live`.
    var type: String
    var threshold: Double?
}
