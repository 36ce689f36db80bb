import HTTPTypes
import Synchronization
import W3CTraceContext

/// W3C Trace Context (`traceparent`, `tracestate`): the trace a request belongs to, kept for the
/// time the gateway handles it, so that every call it makes upstream (``AsyncUpstreamClient``)
/// carries the same trace id with a span id of its own, and its access-log line names the trace.
/// A request without a valid `traceparent` starts no trace; its upstream calls start a new one.
public enum RequestTrace {
    @TaskLocal public static var current: TraceContext?

    static let traceparent = HTTPField.Name("traceparent")!
    static let tracestate = HTTPField.Name("tracestate")!

    /// The trace a request names, or nil (absent or malformed: a new trace then, as W3C says).
    static func context(of headers: HTTPFields) -> TraceContext? {
        guard let parent = headers[traceparent] else { return nil }
        return try? TraceContext(traceParentHeaderValue: parent, traceStateHeaderValue: headers[tracestate])
    }

    /// The fields an outgoing call carries: the current trace (or a new one) with a new span id
    /// for the call itself.
    static func outgoingFields() -> (traceparent: String, tracestate: String?) {
        var generator = IdentifierGenerator()
        let context = current.map { TraceContext(traceID: $0.traceID, spanID: .random(using: &generator), flags: $0.flags, state: $0.state) }
            ?? TraceContext(traceID: .random(using: &generator), spanID: .random(using: &generator), flags: [], state: TraceState())
        return (context.traceParentHeaderValue, context.traceStateHeaderValue)
    }
}

/// Random trace and span ids without a system call each: SplitMix64 over a process-wide counter
/// started at a random seed. Ids must be unique and unpredictable enough to spread (W3C asks for
/// random bits), not secret; the system generator (a `getrandom` call for every id) cost a
/// forwarded call three system calls.
struct IdentifierGenerator: RandomNumberGenerator {
    private static let state = Atomic<UInt64>(UInt64.random(in: .min ... .max))

    mutating func next() -> UInt64 {
        var z = Self.state.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
