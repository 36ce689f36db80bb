/// The fuzz targets by name. Each takes one input, the bytes an attacker controls, and runs it
/// through the same entry points a request (or an import) uses. A thrown error is a refusal, as
/// it should be; a crash, a trap, a hang (libFuzzer's -timeout) or runaway memory (-rss_limit_mb)
/// is a finding.
enum FuzzTargets {
    typealias Target = @Sendable (UnsafeBufferPointer<UInt8>) -> Void

    static let all: [String: Target] = [
        "todo-query": TodoFuzz.query,
        "todo-regex": TodoFuzz.regex,
        "nec-aggregate": TodoFuzz.aggregate,
        "icalendar": EventsFuzz.calendar,
        "gtfs-csv": TransitFuzz.csv,
        "gtfs-zip": TransitFuzz.zip,
        "xively-datapoints": FeedsFuzz.datapoints,
        "composite-template": ComposeFuzz.template,
        "http-path": HTTPFuzz.path,
        "identity-token": IdentityFuzz.token,
    ]

    /// The target this process runs (set once, before libFuzzer starts).
    nonisolated(unsafe) static var selected: Target?
}
