import Glibc
import Logging

/// The gateway's log lines: the same text as swift-log's `StreamLogHandler` on standard error
/// (`<time> <level> <label>: <metadata> [<source>] <message>`), but the metadata is formatted when
/// a line is written, not each time a key is set.
///
/// The HTTP server sets a request id on a copy of the logger for every request; `StreamLogHandler`
/// formats all of its metadata into a string at each such change, a few microseconds per request
/// spent on lines that are almost never written at the usual level.
public struct GatewayLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    let label: String
    let write: @Sendable (String) -> Void

    /// A handler writing to standard error.
    public init(label: String, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.init(label: label, metadataProvider: metadataProvider) { line in
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
    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable (String) -> Void) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata, !explicit.isEmpty { merged.merge(explicit) { _, new in new } }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        let pretty = merged.isEmpty ? "" : " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        write("\(Self.timestamp()) \(event.level)\(label.isEmpty ? "" : " ")\(label):\(pretty) [\(event.source)] \(event.message)\n")
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
