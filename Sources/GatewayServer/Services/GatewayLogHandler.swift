import Foundation
import GatewayCore
import Glibc
import Logging

/// How log lines are written: `text` (as swift-log's `StreamLogHandler`) or `json` (one JSON
/// object per line: `time` in UTC with microseconds, `level`, `logger`, `source`, `message`, then
/// the metadata as members — a key that would clash is written as `metadata.<key>`).
public enum LogFormat: String, Decodable, Sendable, CaseIterable {
    case text, json
}

/// The gateway's log lines: the same text as swift-log's `StreamLogHandler` on standard error
/// (`<time> <level> <label>: <metadata> [<source>] <message>`), but the metadata is formatted when
/// a line is written, not each time a key is set.
///
/// The HTTP server sets a request id on a copy of the logger for every request; `StreamLogHandler`
/// formats all of its metadata into a string at each such change, a few microseconds per request
/// spent on lines that are almost never written at the usual level.
public struct GatewayLogHandler: LogHandler {
    /// What every copy of a handler shares: one reference, so that the handler (with its
    /// metadata and level) fits in a `Logger`'s inline storage. Copying a logger and setting a key
    /// then allocate no box and count one reference instead of one per member.
    private final class Output: Sendable {
        let label: String
        let format: LogFormat
        let write: @Sendable (String) -> Void
        let metadataProvider: Logger.MetadataProvider?

        init(label: String, format: LogFormat, write: @escaping @Sendable (String) -> Void, metadataProvider: Logger.MetadataProvider?) {
            self.label = label
            self.format = format
            self.write = write
            self.metadataProvider = metadataProvider
        }
    }

    private var output: Output
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info

    public var metadataProvider: Logger.MetadataProvider? {
        get { output.metadataProvider }
        set { output = Output(label: output.label, format: output.format, write: output.write, metadataProvider: newValue) }
    }

    /// A handler writing to standard error.
    public init(label: String, format: LogFormat = .text, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.init(label: label, format: format, metadataProvider: metadataProvider) { line in
            // One write call per line, so that lines from several threads do not interleave.
            var bytes = Array(line.utf8)[...]
            while !bytes.isEmpty {
                let written = bytes.withUnsafeBytes { raw in Glibc.write(2, raw.baseAddress, raw.count) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                bytes = bytes.dropFirst(written)
            }
        }
    }

    /// A handler passing each whole line (with its newline) to `write`.
    public init(label: String, format: LogFormat = .text, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable (String) -> Void) {
        output = Output(label: label, format: format, write: write, metadataProvider: metadataProvider)
    }

    /// Hummingbird's own per-request id, which it sets on every request's logger. The gateway's
    /// lines carry `request.id` (the `X-Request-Id` the client sees) instead, so this key is not
    /// kept: storing it would cost every request a dictionary of its own.
    static let serverRequestIDKey = "hb.request.id"

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set {
            if key == Self.serverRequestIDKey { return }
            metadata[key] = newValue
        }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = output.metadataProvider?.get(), !provided.isEmpty { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata, !explicit.isEmpty { merged.merge(explicit) { _, new in new } }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        let label = output.label
        if output.format == .json {
            output.write(Self.jsonLine(level: event.level, label: label, source: event.source, message: "\(event.message)", metadata: merged))
            return
        }
        let pretty = merged.isEmpty ? "" : " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        output.write("\(Self.timestamp()) \(event.level)\(label.isEmpty ? "" : " ")\(label):\(pretty) [\(event.source)] \(event.message)\n")
    }

    static let reservedKeys: Set<String> = ["time", "level", "logger", "source", "message"]

    /// One JSON object and a newline. Members keep their order: the fixed ones, then the
    /// metadata sorted by key.
    static func jsonLine(level: Logger.Level, label: String, source: String, message: String, metadata: Logger.Metadata,
                         now: Date = Date()) -> String {
        var members: [(String, JSONValue)] = [
            ("time", .string(UTCTimestamp.format(micros: UTCTimestamp.micros(now)))),
            ("level", .string(level.rawValue)), ("logger", .string(label)), ("source", .string(source)), ("message", .string(message)),
        ]
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            members.append((reservedKeys.contains(key) ? "metadata.\(key)" : key, json(value)))
        }
        var line = "{"
        for (index, (key, value)) in members.enumerated() {
            if index > 0 { line += "," }
            line += JSONValue.string(key).jsonText + ":" + value.jsonText
        }
        return line + "}\n"
    }

    static func json(_ value: Logger.MetadataValue) -> JSONValue {
        switch value {
        case .string(let text): .string(text)
        case .stringConvertible(let convertible): .string(convertible.description)
        case .array(let values): .array(values.map(json))
        case .dictionary(let members): .object(members.mapValues(json))
        }
    }

    /// Local time as `2026-11-21T21:40:00+0000`, as `StreamLogHandler` writes it.
    static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        guard localtime_r(&now, &parts) != nil else { return "<unknown>" }
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
