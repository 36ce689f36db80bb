import Foundation
import GatewayCore
import HTTPTypes
import Logging
import OTel
import ServiceLifecycle
import Synchronization
import Tracing

/// `server.tracing`: OpenTelemetry spans — one per request, one per pipeline stage (principal,
/// rate limit, cache lookup, handler) and one per SQL statement — sent by OTLP/HTTP to a collector.
/// The request's `traceparent` is continued (the gateway's spans are its children) and passed on to
/// upstream services. Absent, nothing is traced and the pipeline does no tracing work.
public struct TracingSettings: Decodable, Sendable, Equatable {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to `/v1/traces` under it.
    public var otlp: String
    /// `http/protobuf` (default) or `http/json`.
    public var `protocol` = "http/protobuf"
    /// The `service.name` of the spans.
    public var serviceName = "gateway"
    /// The share of new traces recorded, 0 to 1 (a request whose caller's trace is sampled is
    /// always recorded).
    public var sampleRatio = 1.0
    /// How long finished spans wait to be sent together (default 5s).
    public var exportDelay = ConfigDuration(seconds: 5)

    enum CodingKeys: String, CodingKey { case otlp, `protocol`, serviceName, sampleRatio, exportDelay }

    public init(otlp: String) {
        self.otlp = otlp
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        otlp = try container.decode(String.self, forKey: .otlp)
        guard let url = URL(string: otlp), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
            throw DecodingError.dataCorruptedError(forKey: .otlp, in: container, debugDescription: "'\(otlp)' is not an http(s) URL of an OTLP collector")
        }
        `protocol` = try container.decodeIfPresent(String.self, forKey: .protocol) ?? `protocol`
        guard ["http/protobuf", "http/json"].contains(`protocol`) else {
            throw DecodingError.dataCorruptedError(forKey: .protocol, in: container, debugDescription: "'\(`protocol`)' is not http/protobuf or http/json")
        }
        serviceName = try container.decodeIfPresent(String.self, forKey: .serviceName) ?? serviceName
        sampleRatio = try container.decodeIfPresent(Double.self, forKey: .sampleRatio) ?? sampleRatio
        guard (0...1).contains(sampleRatio) else {
            throw DecodingError.dataCorruptedError(forKey: .sampleRatio, in: container, debugDescription: "must be between 0 and 1")
        }
        exportDelay = try container.decodeIfPresent(ConfigDuration.self, forKey: .exportDelay) ?? exportDelay
        guard exportDelay.seconds > 0 else {
            throw DecodingError.dataCorruptedError(forKey: .exportDelay, in: container, debugDescription: "must be more than 0")
        }
    }
}

/// Whether this process traces: set once, when `server.tracing` bootstraps the tracer. Read on
/// every request and statement, so that without tracing they do no tracing work at all.
public enum GatewayTracing {
    private static let active = Atomic<Bool>(false)

    static var isEnabled: Bool { active.load(ordering: .relaxed) }

    /// Installs the OTLP exporter of `settings` as the process's tracer, once; returns the service
    /// that sends the spans (run it with the gateway), or nil when tracing was set up already.
    static func bootstrap(_ settings: TracingSettings, logger: Logger) throws -> (any Service)? {
        guard !active.load(ordering: .relaxed) else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = settings.serviceName
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.diagnosticLogger = .custom(logger)
        configuration.traces.sampler = .parentBasedTraceIDRatio(ratio: settings.sampleRatio) ?? .parentBasedAlwaysOn
        configuration.traces.batchSpanProcessor.scheduleDelay = settings.exportDelay.duration
        configuration.traces.otlpExporter.endpoint = settings.otlp.hasSuffix("/") ? settings.otlp + "v1/traces" : settings.otlp + "/v1/traces"
        configuration.traces.otlpExporter.protocol = settings.protocol == "http/json" ? .httpJSON : .httpProtobuf
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(backend.factory)
        active.store(true, ordering: .relaxed)
        return backend.service
    }

    /// Runs `body` in a child span of the current one when tracing is on; else just runs it (and
    /// the span's name, often made from the route's, is never made).
    static func span<T>(_ name: @autoclosure () -> String, kind: SpanKind = .internal, _ body: () async throws -> T) async rethrows -> T {
        guard isEnabled else { return try await body() }
        return try await withSpan(name(), ofKind: kind) { _ in try await body() }
    }
}

/// Reads a request's `traceparent` and `tracestate` for the tracer.
struct HTTPFieldsExtractor: Extractor {
    func extract(key: String, from carrier: HTTPFields) -> String? {
        HTTPField.Name(key).flatMap { carrier[$0] }
    }
}

/// Writes the current span's `traceparent` and `tracestate` into an outgoing request's fields.
struct HTTPFieldsInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout HTTPFields) {
        if let name = HTTPField.Name(key) { carrier[name] = value }
    }
}
