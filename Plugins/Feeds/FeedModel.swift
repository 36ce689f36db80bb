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

    static let domains = ["physical", "virtual"]
    static let exposures = ["indoor", "outdoor"]
    static let dispositions = ["fixed", "mobile"]
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
    /// The longest text of a location member (its name, say).
    static let maxLocationText = 255
    /// The longest label, symbol or type of a unit.
    static let maxUnitText = 100

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

    /// Tags: at most ``maxTags`` strings of at most ``maxTag`` characters (Unicode code points, as
    /// the document counts), each with a character that is not white space and without control
    /// characters; kept trimmed and without duplicates.
    static func tags(_ json: JSONValue, pointer: String, problems: inout [GatewayError.FieldError]) -> [String]? {
        if json == .null { return [] }
        guard let array = json.arrayValue else {
            problems.append(.init(pointer: pointer, detail: "must be an array of strings"))
            return nil
        }
        var tags: [String] = []
        for (index, item) in array.enumerated() {
            guard let text = item.stringValue, !isBlank(text), text.unicodeScalars.count <= maxTag,
                  !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                problems.append(.init(pointer: "\(pointer)/\(index)", detail: "must be a non-empty string of at most \(maxTag) characters"))
                continue
            }
            let tag = text.trimmingCharacters(in: .whitespaces)
            if !tags.contains(tag) { tags.append(tag) }
        }
        if array.count > maxTags { problems.append(.init(pointer: pointer, detail: "at most \(maxTags) tags")) }
        return tags
    }

    /// Whether text has no character but white space as JSON Schema's `\s` reads it (ECMA-262:
    /// Unicode spaces, line breaks, tabs and the byte order mark), so that ``FieldRule/nonBlank(maxLength:)``
    /// states what is refused.
    static func isBlank(_ text: some StringProtocol) -> Bool {
        text.unicodeScalars.allSatisfy { scalar in
            (scalar.properties.isWhitespace && scalar.value != 0x85) || scalar.value == 0xFEFF
        }
    }
}

// MARK: What the document states of the inputs (the readings above enforce the same)

extension FeedRules {
    /// A feed id as text: 1 to 18 digits, not all zeros (``feedID(_:)``).
    static let feedIDRule = FieldRule.pattern("^(?=[0-9]*[1-9])[0-9]{1,18}$").described("A feed's id.")
    /// The largest feed id a JSON number may give: larger numbers are not exact.
    static let largestFeedNumber = 9_007_199_254_740_991
    /// A datastream id (``isDatastreamID(_:)``).
    static let datastreamIDRule = FieldRule.pattern("^[A-Za-z0-9_-]{1,64}$").described("1 to 64 letters, digits, _ or -.")
    /// A time ``UTCTimestamp/parse(_:)`` reads: a day, or RFC 3339 with a `T` (or a space), up to
    /// nine fraction digits and `Z` or an offset; only days that exist.
    static let timePattern = "^(?:[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
        + "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
        + "(?:[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]{1,9})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))?$"
    static let timeRule = FieldRule.pattern(timePattern).described("An ISO 8601 time such as 2013-01-01T14:14:55.118845Z, or a day.")
    /// A value written as text (``value(_:)-(StringProtocol)``): a decimal number, with an exponent of at most two digits.
    static let valuePattern = "^[+-]?(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:[eE][+-]?[0-9]{1,2})?$"
    static let valueTextRule = FieldRule.pattern(valuePattern).and(.text(maxLength: 64))
    /// A value: a number, or a decimal number as text.
    static let valueRule = anyOf([FieldRule(keywords: ["type": .string("number")]), FieldRule(keywords: ["type": .string("string")]).and(valueTextRule)])
    /// A value from `-bound` to `bound`: a number, or a decimal number as text (without an exponent).
    static func valueRule(within bound: Int) -> FieldRule {
        let below = "0|" + digitsPattern(upTo: bound - 1)
        let text = "^[+-]?(?:0*(?:\(below))(?:\\.[0-9]*)?|0*\(bound)(?:\\.0*)?|\\.[0-9]+)$"
        return anyOf([FieldRule(keywords: ["type": .string("number")]).and(.number(Double(-bound)...Double(bound))),
                      FieldRule(keywords: ["type": .string("string")]).and(.pattern(text)).and(.text(maxLength: 64))])
    }
    /// A tag (``tags(_:pointer:problems:)``).
    static let tagRule = FieldRule.pattern("^[^\\u0000-\\u001F\\u007F-\\u009F]*[^\\s\\u0000-\\u001F\\u007F-\\u009F][^\\u0000-\\u001F\\u007F-\\u009F]*$")
        .and(.text(1...maxTag))
    /// Tags, or null for none.
    static let tagsRule = FieldRule.list(maxCount: maxTags, of: tagRule)
    /// An http or https address of a feed's website.
    static let websiteRule = FieldRule.pattern("^https?://").and(.text(maxLength: 2_000)).described("An http or https URL.")

    /// Any of the rules' schemas (JSON Schema `anyOf`: a member that may be a number or text, or null).
    static func anyOf(_ rules: [FieldRule]) -> FieldRule {
        FieldRule(keywords: ["anyOf": .array(rules.map { .object($0.keywords) })])
    }

    /// The whole numbers from 1 to `maximum` in decimal, without leading zeros, as a regular expression.
    static func digitsPattern(upTo maximum: Int) -> String {
        let digits = Array(String(maximum)).map { Int(String($0))! }
        var parts: [String] = []
        if digits.count > 1 { parts.append(digits.count == 2 ? "[1-9]" : "[1-9][0-9]{0,\(digits.count - 2)}") }
        for index in digits.indices {
            let lowest = index == 0 ? 1 : 0
            guard digits[index] > lowest else { continue }
            let prefix = digits[..<index].map(String.init).joined()
            let rest = digits.count - index - 1
            parts.append(prefix + "[\(lowest)-\(digits[index] - 1)]" + (rest > 0 ? "[0-9]{\(rest)}" : ""))
        }
        parts.append(String(maximum))
        return parts.joined(separator: "|")
    }

    /// `rule`, or null.
    static func orNull(_ rule: FieldRule) -> FieldRule {
        anyOf([rule, FieldRule(keywords: ["type": .string("null")])])
    }
}

/// History durations as the legacy API writes them: `6hours`, `2days`, `1week`, `30seconds`,
/// `10minutes`, `1month` (30 days), `1year` (365 days); singular or plural, or `6h`, `2d`, `1w`.
enum HistoryDuration {
    /// The unit names and their lengths in seconds.
    static let units: [(names: [String], seconds: Int64)] = [
        (["s", "sec", "second", "seconds"], 1), (["m", "min", "minute", "minutes"], 60), (["h", "hour", "hours"], 3_600),
        (["d", "day", "days"], 86_400), (["w", "week", "weeks"], 604_800), (["month", "months"], 2_592_000),
        (["y", "year", "years"], 31_536_000),
    ]
    /// The largest count of units.
    static let largestCount: Int64 = 100_000
    /// The longest duration: 100 years.
    static let longest: Int64 = 100 * 31_536_000

    static func seconds(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        guard let split = trimmed.firstIndex(where: { !$0.isASCII || !$0.isNumber }), split > trimmed.startIndex,
              let count = Int64(trimmed[..<split]), count > 0, count <= largestCount,
              let unit = units.first(where: { $0.names.contains(String(trimmed[split...])) })?.seconds else { return nil }
        let total = count * unit
        return total <= longest ? total : nil
    }

    /// A duration as the document states it: a count (within ``longest`` in all) and a unit in any
    /// case, between spaces or tabs.
    static let rule: FieldRule = {
        let space = "[\\t \\u00A0\\u1680\\u2000-\\u200A\\u202F\\u205F\\u3000]*"
        let choices = units.map { unit in
            let count = FeedRules.digitsPattern(upTo: Int(min(largestCount, longest / unit.seconds)))
            let names = unit.names.map { name in name.map { "[\($0)\($0.uppercased())]" }.joined() }.joined(separator: "|")
            return "0*(?:\(count))(?:\(names))"
        }
        return FieldRule.pattern("^\(space)(?:\(choices.joined(separator: "|")))\(space)$")
            .described("A count and a unit: 30s, 10minutes, 6hours, 2days, 1week, 1month (30 days), 1year (365 days); at most 100 years.")
    }()
}
