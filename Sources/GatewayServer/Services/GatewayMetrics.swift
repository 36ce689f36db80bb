import Metrics
import NIOConcurrencyHelpers
import Prometheus

/// The gateway's Prometheus metrics: a request counter and a latency histogram per endpoint
/// (operation name, dialect route or gateway endpoint) and status, plus whatever plugins record
/// through ``factory``.
public final class GatewayMetrics: Sendable {
    /// The registry `/metrics` renders.
    public let registry: PrometheusCollectorRegistry
    /// The swift-metrics factory handed to plugins, writing into ``registry``.
    public let factory: PrometheusMetricsFactory

    private struct SeriesKey: Hashable {
        let endpoint: String
        let status: Int
    }

    private final class Series: Sendable {
        let requests: Prometheus.Counter
        let latency: DurationHistogram
        init(requests: Prometheus.Counter, latency: DurationHistogram) {
            self.requests = requests
            self.latency = latency
        }
    }

    // Series are created on first use of an (endpoint, status) pair and then only read:
    // a lock-protected dictionary keeps the hot path to one uncontended lookup.
    private let series = NIOLockedValueBox<[SeriesKey: Series]>([:])
    private static let buckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(5),
    ]

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        self.factory = PrometheusMetricsFactory(registry: registry)
    }

    /// The series of one endpoint, made once at start-up so that the hot path needs no lookup by
    /// name: the common status has its own slot, the others a small table.
    public final class EndpointSeries: Sendable {
        let metrics: GatewayMetrics
        let endpoint: String
        let commonStatus: Int
        private let common: Series

        init(metrics: GatewayMetrics, endpoint: String, commonStatus: Int) {
            self.metrics = metrics
            self.endpoint = endpoint
            self.commonStatus = commonStatus
            self.common = metrics.series(endpoint: endpoint, status: commonStatus)
        }

        public func record(status: Int, duration: Duration) {
            let entry = status == commonStatus ? common : metrics.series(endpoint: endpoint, status: status)
            entry.requests.increment()
            entry.latency.record(duration)
        }
    }

    /// The series holder for `endpoint`, whose usual status is `commonStatus`.
    public func endpointSeries(_ endpoint: String, commonStatus: Int) -> EndpointSeries {
        EndpointSeries(metrics: self, endpoint: endpoint, commonStatus: commonStatus)
    }

    /// Records one finished request.
    public func record(endpoint: String, status: Int, duration: Duration) {
        let entry = series(endpoint: endpoint, status: status)
        entry.requests.increment()
        entry.latency.record(duration)
    }

    private func series(endpoint: String, status: Int) -> Series {
        let key = SeriesKey(endpoint: endpoint, status: status)
        return series.withLockedValue { table in
            if let existing = table[key] { return existing }
            let labels = [("endpoint", endpoint), ("status", String(status))]
            let created = Series(
                requests: registry.makeCounter(
                    descriptor: .init(namespace: "gateway", metricName: "requests", unitName: "total",
                                      helpText: "Requests answered, by endpoint and status."),
                    labels: labels),
                latency: registry.makeDurationHistogram(
                    descriptor: .init(namespace: "gateway", metricName: "request_duration", unitName: "seconds",
                                      helpText: "Time from request to reply, by endpoint and status."),
                    labels: labels, buckets: Self.buckets))
            table[key] = created
            return created
        }
    }

    /// The Prometheus text exposition.
    public func render() -> [UInt8] {
        registry.emitToBuffer()
    }
}
