import HTTPTypes
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
        var context = current ?? TraceContext(traceID: .random(), spanID: .random(), flags: [], state: TraceState())
        context = TraceContext(traceID: context.traceID, spanID: .random(), flags: context.flags, state: context.state)
        return (context.traceParentHeaderValue, context.traceStateHeaderValue)
    }
}
