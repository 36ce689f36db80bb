import Foundation

/// The configuration of a plugin whose defaults are a value: plugins.yaml gives only the keys that
/// differ, and no `init(from:)` is written by hand.
///
/// ```swift
/// public struct Configuration: PluginConfiguration {
///     var greeting = "Hello"
///     var timeout = ConfigDuration(seconds: 5)
///     public static let defaults = Configuration()
/// }
/// ```
///
/// The host decodes the `config:` block strictly (an unknown key or a wrong type is an error at
/// its line) and takes every key the block leaves out from ``defaults``. A key the block gives
/// replaces the default's value of that key whole (a list or a mapping is not merged).
public protocol PluginConfiguration: Codable, Sendable {
    /// The configuration when plugins.yaml says nothing.
    static var defaults: Self { get }

    /// Checks values that decode but cannot be used together or at all. Throw
    /// ``ConfigurationError`` naming the key (relative to the `config:` block); the host adds the
    /// file, line and key path. `gateway check` runs it, as `serve` does before creating the plugin.
    func validate() throws
}

extension PluginConfiguration {
    public func validate() throws {}
}

/// A value in a configuration file that does not parse (a duration, a size, a rate); the host's
/// decoder adds the file, line and key path to ``message``.
package struct ConfigurationValueError: Error, Sendable {
    package let message: String

    package init(message: String) {
        self.message = message
    }
}

/// A configuration value written as text — a duration, a size, a rate. Every such value decodes
/// from its text the same way, with one error text naming examples of its kind, and encodes back
/// to its shortest spelling (its `description`), so plugins' defaults round-trip through plugins.yaml.
package protocol ConfigurationText: Codable, CustomStringConvertible {
    /// Parses `text`; nil when it is not a value of this kind.
    init?(parsing text: String)
    /// What the value is, for the error text: `duration`.
    static var kind: String { get }
    /// Spellings the error text suggests: `500ms, 30s, 5m, 1h, 7d`.
    static var examples: String { get }
}

extension ConfigurationText {
    /// What the decoder says of text that is not a value of this kind.
    package static func problem(_ text: String) -> String {
        "\"\(text.prefix(60))\" is not a \(kind) (use \(examples))"
    }

    package init(textFrom decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = Self(parsing: text) else { throw ConfigurationValueError(message: Self.problem(text)) }
        self = value
    }

    package func encodeText(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// A span of time in a configuration file: a number and a unit, `500ms`, `30s`, `5m`, `1h`, `7d`,
/// `2w`, or the unit spelled out (`30seconds`, `10minutes`, `6hours`, `30days`, `1week`). Decoded
/// the same way, with the same error text, everywhere in plugins.yaml.
public struct ConfigDuration: ConfigurationText, Sendable, Hashable {
    public init(from decoder: any Decoder) throws { try self.init(textFrom: decoder) }
    public func encode(to encoder: any Encoder) throws { try encodeText(to: encoder) }

    public var seconds: Double

    public init(seconds: Double) { self.seconds = seconds }

    /// `duration`, to the millisecond (its ``description`` is its shortest spelling: `300ms`, `5s`).
    public init(_ duration: Duration) {
        seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds / 1_000_000_000_000_000) / 1000
    }

    /// `milliseconds` thousandths of a second.
    public static func milliseconds(_ milliseconds: Int) -> ConfigDuration { ConfigDuration(seconds: Double(milliseconds) / 1000) }
    /// `minutes` minutes.
    public static func minutes(_ minutes: Int) -> ConfigDuration { ConfigDuration(seconds: Double(minutes) * 60) }
    /// `hours` hours.
    public static func hours(_ hours: Int) -> ConfigDuration { ConfigDuration(seconds: Double(hours) * 3600) }

    /// The span as a `Duration`, to the millisecond.
    public var duration: Duration { .milliseconds(Int64((seconds * 1000).rounded())) }

    public static let kind = "duration"
    public static let examples = "500ms, 30s, 5m, 1h, 7d"

    /// The units, longest spellings first so that `ms` is not read as `m`.
    private static let units: [(String, Double)] = [
        ("milliseconds", 0.001), ("millisecond", 0.001), ("ms", 0.001),
        ("seconds", 1), ("second", 1), ("secs", 1), ("sec", 1), ("s", 1),
        ("minutes", 60), ("minute", 60), ("mins", 60), ("min", 60), ("m", 60),
        ("hours", 3600), ("hour", 3600), ("h", 3600),
        ("days", 86_400), ("day", 86_400), ("d", 86_400),
        ("weeks", 604_800), ("week", 604_800), ("w", 604_800),
    ]

    /// Parses `text`; nil when it is not a duration of at most ten years.
    public init?(parsing text: String) {
        for (suffix, factor) in Self.units where text.hasSuffix(suffix) {
            let number = text.dropLast(suffix.count)
            guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
                  let value = Double(number), value.isFinite, value * factor <= 10 * 365 * 86_400 else { continue }
            self.seconds = value * factor
            return
        }
        return nil
    }

    /// The shortest spelling: `500ms`, `30s`, `5m`, `1h`, `7d`.
    public var description: String {
        for (unit, factor) in [("d", 86_400.0), ("h", 3600), ("m", 60), ("s", 1)] where seconds >= factor && seconds.truncatingRemainder(dividingBy: factor) == 0 {
            return "\(Int(seconds / factor))\(unit)"
        }
        let milliseconds = seconds * 1000
        return milliseconds == milliseconds.rounded() ? "\(Int(milliseconds))ms" : "\(seconds)s"
    }
}

/// An amount of bytes in a configuration file: `1048576`, `512KB`, `64MB` or `1GB` (powers of 1024).
public struct ByteSize: ConfigurationText, Sendable, Hashable {
    public init(from decoder: any Decoder) throws { try self.init(textFrom: decoder) }
    public func encode(to encoder: any Encoder) throws { try encodeText(to: encoder) }

    public var bytes: Int

    public init(bytes: Int) { self.bytes = bytes }

    public static let kind = "size"
    public static let examples = "1048576, 512KB, 64MB, 1GB"

    public init?(parsing raw: String) {
        let text = raw.uppercased().replacingOccurrences(of: " ", with: "")
        let units: [(String, Int)] = [("KIB", 1 << 10), ("MIB", 1 << 20), ("GIB", 1 << 30), ("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("B", 1), ("", 1)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            guard let number = Int(text.dropLast(suffix.count)), number >= 0 else { continue }
            let (product, overflow) = number.multipliedReportingOverflow(by: factor)
            guard !overflow, product <= 1 << 40 else { return nil }
            self.bytes = product
            return
        }
        return nil
    }

    /// The shortest exact spelling: `64MB`, `512KB`, `1000`.
    public var description: String {
        for (unit, factor) in [("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)] where bytes >= factor && bytes % factor == 0 {
            return "\(bytes / factor)\(unit)"
        }
        return String(bytes)
    }
}
