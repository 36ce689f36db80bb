import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import Tracing
import W3CTraceContext

/// What the pipeline records of every request, in one place: its trace (a server span when
/// tracing is on, else the caller's W3C `traceparent` kept for upstream calls), then, once the
/// reply is made, its metric series and its access-log line (`server.accessLog` at info, else
/// debug).
struct Observation {
    let metrics: GatewayMetrics
    let logger: Logger
    let accessLog: Bool

    /// Runs `serve` inside the request's trace and records its reply.
    func observe(_ exchange: Exchange, _ target: Target, serve: () async -> Response) async -> Response {
        if GatewayTracing.isEnabled { return await inSpan(exchange, target, serve: serve) }
        // A request of a trace is handled inside it: upstream calls continue it.
        if let trace = RequestTrace.context(of: exchange.request.headers) {
            return await RequestTrace.$current.withValue(trace) { await recorded(exchange, target, serve: serve) }
        }
        return await recorded(exchange, target, serve: serve)
    }

    private func recorded(_ exchange: Exchange, _ target: Target, serve: () async -> Response) async -> Response {
        let response = await serve()
        record(exchange, target, response: response)
        return response
    }

    /// The request in a server span of its own, a child of the caller's `traceparent` when it sends
    /// one; its stages, statements and upstream calls are the span's children.
    private func inSpan(_ exchange: Exchange, _ target: Target, serve: () async -> Response) async -> Response {
        var parent = ServiceContext.topLevel
        InstrumentationSystem.instrument.extract(exchange.request.headers, into: &parent, using: HTTPFieldsExtractor())
        return await withSpan("\(exchange.method.rawValue) \(target.name)", context: parent, ofKind: .server) { span in
            // Upstream calls and the access log name the span's trace.
            var fields = HTTPFields()
            InstrumentationSystem.instrument.inject(span.context, into: &fields, using: HTTPFieldsInjector())
            let response = await RequestTrace.$current.withValue(RequestTrace.context(of: fields)) { await recorded(exchange, target, serve: serve) }
            span.attributes["http.request.method"] = exchange.method.rawValue
            span.attributes["url.path"] = target.loggedPath(exchange.path)
            span.attributes["http.response.status_code"] = response.status.code
            span.attributes["gateway.request_id"] = exchange.requestID
            if response.status.code >= 500 { span.setStatus(SpanStatus(code: .error)) }
            return response
        }
    }

    private func record(_ exchange: Exchange, _ target: Target, response: Response) {
        let status = response.status
        let now = ContinuousClock.now
        let elapsed = now - exchange.start
        if let series = target.metrics { series.record(status: status.code, duration: elapsed) } else {
            metrics.record(endpoint: target.name, status: status.code, duration: elapsed)
        }
        let cache: LiveTraffic.CacheOutcome? = switch response.headers[CacheLookupStage.cacheField] {
        case "HIT": .hit
        case "MISS": .miss
        default: nil
        }
        metrics.live.record(plugin: target.pluginID, status: status.code, duration: elapsed, cache: cache, at: now)
        let level: Logger.Level = accessLog ? .info : .debug
        guard logger.logLevel <= level else { return }
        var metadata: Logger.Metadata = [
            "request.id": .string(exchange.requestID), "endpoint": .string(target.name), "client": .string(exchange.client),
            "micros": .stringConvertible(elapsed.components.attoseconds / 1_000_000_000_000 + elapsed.components.seconds * 1_000_000),
        ]
        if let trace = RequestTrace.current { metadata["trace.id"] = .string(trace.traceID.description) }
        logger.log(level: level, "\(exchange.method.rawValue) \(target.loggedPath(exchange.path)) \(status.code)", metadata: metadata)
    }
}
