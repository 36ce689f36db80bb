import Foundation
import Glibc
import Metrics
import NIOConcurrencyHelpers
import Prometheus
import Synchronization

/// The gateway's Prometheus metrics: a request counter and a latency histogram per endpoint
/// (operation name, dialect route or gateway endpoint) and status, plus whatever plugins record
/// through ``factory``.
public final class GatewayMetrics: Sendable {
    /// The registry `/metrics` renders.
    public let registry: PrometheusCollectorRegistry
    /// The swift-metrics factory handed to plugins, writing into ``registry``.
    public let factory: PrometheusMetricsFactory
    /// The last minute of traffic, per second and plugin (the console's live charts).
    public let live = LiveTraffic()

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

    /// Requests refused with 429, by plugin.
    private let rateLimited = NIOLockedValueBox<[String: Prometheus.Counter]>([:])
    /// Credentials presented that did not resolve (401s and guests served in their stead).
    private let authenticationFailures: Prometheus.Counter

    /// Counts a credential that could not be verified.
    public func recordAuthenticationFailure() { authenticationFailures.increment() }
    /// Run before each rendering, to bring gauges read from elsewhere up to date.
    private let collectors = NIOLockedValueBox<[@Sendable () -> Void]>([])

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        self.factory = PrometheusMetricsFactory(registry: registry)
        authenticationFailures = registry.makeCounter(
            descriptor: .init(namespace: "gateway", metricName: "authentication_failures", unitName: "total",
                              helpText: "Credentials that could not be verified (a bad key, token or Authorization)."))
        ProcessCollector(registry: registry).map { process in addCollector { process.collect() } }
    }

    /// Counts a request refused by a rate limit.
    public func recordRateLimited(plugin: String) {
        let counter = rateLimited.withLockedValue { table in
            if let existing = table[plugin] { return existing }
            let created = registry.makeCounter(
                descriptor: .init(namespace: "gateway", metricName: "rate_limited_requests", unitName: "total",
                                  helpText: "Requests refused with 429 by a rate limit, by plugin."),
                labels: [("plugin", plugin)])
            table[plugin] = created
            return created
        }
        counter.increment()
    }

    /// Adds a closure run before each rendering of `/metrics`.
    public func addCollector(_ collect: @escaping @Sendable () -> Void) {
        collectors.withLockedValue { $0.append(collect) }
    }

    /// Reports the response cache: entries and bytes as gauges; hits, misses and evictions as
    /// counters (advanced by what changed since the last rendering).
    func observe(_ cache: MemoryResponseCache) {
        let entries = registry.makeGauge(descriptor: .init(namespace: "gateway", metricName: "cache_entries", unitName: "", helpText: "Replies held in the response cache."))
        let bytes = registry.makeGauge(descriptor: .init(namespace: "gateway", metricName: "cache", unitName: "bytes", helpText: "Bytes held in the response cache."))
        func counter(_ name: String, _ help: String) -> Prometheus.Counter {
            registry.makeCounter(descriptor: .init(namespace: "gateway", metricName: "cache_\(name)", unitName: "total", helpText: help))
        }
        let hits = counter("hits", "Response cache lookups answered from the cache.")
        let misses = counter("misses", "Response cache lookups that found nothing usable.")
        let evictions = counter("evictions", "Replies dropped from the response cache to make room.")
        let seen = NIOLockedValueBox((hits: 0, misses: 0, evictions: 0))
        addCollector {
            let now = cache.statistics
            entries.set(Int64(now.entries))
            bytes.set(Int64(now.bytes))
            seen.withLockedValue { last in
                if now.hits > last.hits { hits.increment(by: Int64(now.hits - last.hits)) }
                if now.misses > last.misses { misses.increment(by: Int64(now.misses - last.misses)) }
                if now.evictions > last.evictions { evictions.increment(by: Int64(now.evictions - last.evictions)) }
                last = (now.hits, now.misses, now.evictions)
            }
        }
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

    /// The database's statement durations and failures, the connections it holds and may hold.
    func observe(_ database: GatewayDatabase) {
        let meter = database.meter
        let duration = registry.makeDurationHistogram(
            descriptor: .init(namespace: "gateway", metricName: "db_query_duration", unitName: "seconds",
                              helpText: "Time each database statement took (inside a transaction too)."),
            buckets: Self.buckets)
        meter.attach { duration.record($0) }
        let inUse = registry.makeGauge(descriptor: .init(namespace: "gateway", metricName: "db_connections_in_use", unitName: "",
                                                         helpText: "Connections taken from the pool now (by a statement, a session or a transaction)."))
        let capacity = registry.makeGauge(descriptor: .init(namespace: "gateway", metricName: "db_connections_max", unitName: "",
                                                            helpText: "Connections the pool may open."))
        capacity.set(Int64(meter.capacity))
        let failures = registry.makeCounter(descriptor: .init(namespace: "gateway", metricName: "db_query_failures", unitName: "total",
                                                              helpText: "Database statements that failed."))
        let counted = NIOLockedValueBox(0)
        addCollector {
            inUse.set(Int64(meter.connectionsInUse.load(ordering: .relaxed)))
            let now = meter.failures.load(ordering: .relaxed)
            counted.withLockedValue { seen in
                if now > seen { failures.increment(by: Int64(now - seen)) }
                seen = max(seen, now)
            }
        }
    }

    /// The Prometheus text exposition.
    public func render() -> [UInt8] {
        for collect in collectors.withLockedValue({ $0 }) { collect() }
        return registry.emitToBuffer()
    }
}

/// The process's resident and virtual memory, open and allowed file descriptors, CPU time and
/// start time, under Prometheus's usual `process_*` names, read from /proc at each rendering.
struct ProcessCollector: Sendable {
    let resident: Prometheus.Gauge
    let virtual: Prometheus.Gauge
    let openFiles: Prometheus.Gauge
    let maxFiles: Prometheus.Gauge
    let cpu: Prometheus.Gauge
    let pageSize: Int

    init?(registry: PrometheusCollectorRegistry) {
        guard FileManager.default.fileExists(atPath: "/proc/self/statm") else { return nil }
        resident = registry.makeGauge(descriptor: .init(namespace: "process", metricName: "resident_memory", unitName: "bytes", helpText: "Resident memory size."))
        virtual = registry.makeGauge(descriptor: .init(namespace: "process", metricName: "virtual_memory", unitName: "bytes", helpText: "Virtual memory size."))
        openFiles = registry.makeGauge(descriptor: .init(namespace: "process", metricName: "open_fds", unitName: "", helpText: "Open file descriptors."))
        maxFiles = registry.makeGauge(descriptor: .init(namespace: "process", metricName: "max_fds", unitName: "", helpText: "The limit of open file descriptors."))
        cpu = registry.makeGauge(descriptor: .init(namespace: "process", metricName: "cpu", unitName: "seconds", helpText: "User and system CPU time spent."))
        let start = registry.makeGauge(descriptor: .init(namespace: "process", metricName: "start_time", unitName: "seconds", helpText: "Start time since 1970."))
        start.set(Date().timeIntervalSince1970)
        pageSize = max(sysconf(Int32(_SC_PAGESIZE)), 1)
    }

    func collect() {
        if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) {
            let pages = statm.split(separator: " ").prefix(2).compactMap { Int($0) }
            if pages.count == 2 {
                virtual.set(Int64(pages[0] * pageSize))
                resident.set(Int64(pages[1] * pageSize))
            }
        }
        if let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            openFiles.set(Int64(max(descriptors.count - 1, 0)))   // less the one this listing opened
        }
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 { maxFiles.set(Int64(clamping: limit.rlim_cur)) }
        var usage = rusage()
        if getrusage(RUSAGE_SELF.rawValue, &usage) == 0 {
            let seconds = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
            cpu.set(seconds)
        }
    }
}
