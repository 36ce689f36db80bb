import Foundation
import GatewayCore

/// Where a feed is.
struct FeedLocation: Sendable, Equatable {
    var name: String?
    /// `physical` or `virtual`.
    var domain: String?
    /// `indoor` or `outdoor`.
    var exposure: String?
    /// `fixed` or `mobile`.
    var disposition: String?
    var lat: Double?
    var lon: Double?
    /// Elevation, kept as the client wrote it (the legacy API carried it as a string).
    var ele: String?

    var isEmpty: Bool { self == FeedLocation() }
}

/// What a datastream's values measure.
struct DatastreamUnit: Sendable, Equatable {
    var label: String?
    var symbol: String?
    /// `basicSI`, `derivedSI`, `conversionBasedUnits`, `derivedUnits` or `contextDependentUnits`.
    var type: String?

    var isEmpty: Bool { label == nil && symbol == nil && type == nil }

    /// `{label, symbol, type}` with the members that are set (the same in both APIs).
    var json: JSONValue {
        var members: [String: JSONValue] = [:]
        if let label { members["label"] = .string(label) }
        if let symbol { members["symbol"] = .string(symbol) }
        if let type { members["type"] = .string(type) }
        return .object(members)
    }
}

/// A feed: a device or a place that reports values in datastreams.
struct FeedRecord: Sendable, Equatable {
    var id: Int64
    var title: String
    var description: String?
    var website: String?
    var tags: [String]
    var isPrivate: Bool
    /// The owning user's id (nil: created with a master key; only administrators manage it).
    var creatorID: String?
    /// The owning user's name when the feed was created (the `user` filter and `creator` link).
    var creatorName: String?
    var location: FeedLocation
    /// Microseconds since 1970.
    var created: Int64
    /// The last change of the feed, its datastreams or their values.
    var updated: Int64
    /// Datapoints older than this many seconds are removed (nil: kept for ever).
    var retentionSeconds: Int64?
}

/// A datastream: one measured quantity of a feed, with its latest value and extremes.
struct DatastreamRecord: Sendable, Equatable {
    /// The store's key for the stream (datapoints refer to it).
    var key: Int64
    var feedID: Int64
    var id: String
    var tags: [String]
    var unit: DatastreamUnit
    var currentValue: Double?
    /// When the current value was measured (microseconds).
    var at: Int64?
    var minValue: Double?
    var maxValue: Double?
    var created: Int64
    var updated: Int64
}

/// One measurement.
struct Datapoint: Sendable, Equatable {
    /// Microseconds since 1970.
    var at: Int64
    var value: Double
}

/// What a client sends to create or change a feed; nil members are left as they are on a change.
struct FeedDraft: Sendable {
    var title: String?
    var description: String??
    var website: String??
    var tags: [String]?
    var isPrivate: Bool?
    var location: FeedLocation?
    var retentionSeconds: Int64??
    var datastreams: [DatastreamDraft] = []
}

/// What a client sends to create or change a datastream.
struct DatastreamDraft: Sendable {
    var id: String
    var tags: [String]?
    var unit: DatastreamUnit?
    /// Setting the current value records a datapoint at `at` (default now).
    var currentValue: Double?
    var at: Int64?
}

/// The rules every part of the plugin applies to names and values.
enum FeedRules {
    static let maxTitle = 255
    static let maxText = 10_000
    static let maxTags = 50
    static let maxTag = 100
    static let maxDatastreams = 1_000

    /// Datastream ids: 1–64 of ASCII letters, digits, `_` and `-` (no dots: `.json` is a format suffix).
    static func isDatastreamID(_ id: some StringProtocol) -> Bool {
        !id.isEmpty && id.utf8.count <= 64 && id.utf8.allSatisfy { byte in
            (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || byte == 95 || byte == 45
        }
    }

    /// A feed id: a positive decimal integer.
    static func feedID(_ text: some StringProtocol) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ (48...57).contains($0) }), let id = Int64(text), id > 0 else { return nil }
        return id
    }

    /// A value: a finite decimal number, given as a JSON number or a string holding one.
    static func value(_ json: JSONValue) -> Double? {
        switch json {
        case .number(let number): return number.isFinite ? number : nil
        case .string(let text): return value(text)
        default: return nil
        }
    }

    /// A finite decimal number in text (`23.5`, `-1e3`), nothing else (no `nan`, `inf`, hex, spaces).
    static func value(_ text: some StringProtocol) -> Double? {
        guard !text.isEmpty, text.utf8.count <= 64,
              text.utf8.allSatisfy({ (48...57).contains($0) || $0 == 43 || $0 == 45 || $0 == 46 || $0 == 101 || $0 == 69 }),
              let number = Double(String(text)), number.isFinite else { return nil }
        return number
    }

    /// A value as the APIs write it: integral values without a fraction, others in their shortest form.
    static func text(_ value: Double) -> String {
        var bytes: [UInt8] = []
        JSONValue.write(number: value, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Tags: strings, at most ``maxTags`` of at most ``maxTag`` characters, without duplicates.
    static func tags(_ json: JSONValue, pointer: String, problems: inout [GatewayError.FieldError]) -> [String]? {
        if json == .null { return [] }
        guard let array = json.arrayValue else {
            problems.append(.init(pointer: pointer, detail: "must be an array of strings"))
            return nil
        }
        var tags: [String] = []
        for (index, item) in array.enumerated() {
            guard let tag = item.stringValue?.trimmingCharacters(in: .whitespaces), !tag.isEmpty, tag.count <= maxTag,
                  !tag.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                problems.append(.init(pointer: "\(pointer)/\(index)", detail: "must be a non-empty string of at most \(maxTag) characters"))
                continue
            }
            if !tags.contains(tag) { tags.append(tag) }
        }
        if tags.count > maxTags { problems.append(.init(pointer: pointer, detail: "at most \(maxTags) tags")) }
        return tags
    }
}

/// History durations as the legacy API writes them: `6hours`, `2days`, `1week`, `30seconds`,
/// `10minutes`, `1month` (30 days), `1year` (365 days); singular or plural, or `6h`, `2d`, `1w`.
enum HistoryDuration {
    static func seconds(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        guard let split = trimmed.firstIndex(where: { !$0.isASCII || !$0.isNumber }), split > trimmed.startIndex,
              let count = Int64(trimmed[..<split]), count > 0, count <= 100_000 else { return nil }
        let unit: Int64
        switch trimmed[split...] {
        case "s", "sec", "second", "seconds": unit = 1
        case "m", "min", "minute", "minutes": unit = 60
        case "h", "hour", "hours": unit = 3_600
        case "d", "day", "days": unit = 86_400
        case "w", "week", "weeks": unit = 604_800
        case "month", "months": unit = 2_592_000
        case "y", "year", "years": unit = 31_536_000
        default: return nil
        }
        let total = count * unit
        return total <= 100 * 31_536_000 ? total : nil
    }
}
