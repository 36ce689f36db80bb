import Foundation
import GatewayCore
import GatewayServer
import Logging
import NIOCore
import TransitPlugin

// In-process figures for the transit plugin on a database where `gateway import transit` has
// loaded a feed (Benchmarks/transit/run): the time to load the network, the process's resident
// memory, and the latency of each request through the whole pipeline without a socket (routing,
// input decoding, the query, JSON) with the response cache off:
//   - /healthz, the reference;
//   - stops near a point (2,000 seeded random points in the generated network, limit 10, 1 km);
//   - arrivals at a busy stop at seeded random instants of a weekday (the default window, 5 minutes
//     before to 35 after).
//   transit-bench --database FILE.sqlite [--stop BENCH_HUB1] [--date 2026-11-24] [--zone Asia/Taipei] [--rounds 5]
// Prints one JSON object.
func argument(_ name: String) -> String? {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count else { return nil }
    return CommandLine.arguments[index + 1]
}
LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = .warning
    return handler
}
guard let database = argument("--database") else {
    FileHandle.standardError.write(Data("usage: transit-bench --database FILE.sqlite [--stop ID] [--date yyyy-MM-dd] [--zone ZONE] [--rounds N]\n".utf8))
    exit(64)
}
let stop = argument("--stop") ?? "BENCH_HUB1"
let day = argument("--date") ?? "2026-11-24"
let zone = TimeZone(identifier: argument("--zone") ?? "Asia/Taipei")!
let rounds = argument("--rounds").flatMap(Int.init) ?? 5

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("transit-bench-\(ProcessInfo.processInfo.processIdentifier)")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
let yaml = """
    storage: sqlite:\(URL(fileURLWithPath: database).standardizedFileURL.path)
    demo: false
    limits: { anonymous: 1000000000/s, user: 1000000000/s, key: 1000000000/s }
    plugins:
      transit:
        cache: { enabled: false }
    """
let configuration = try GatewayConfiguration.parse(Data(yaml.utf8), file: "transit-bench.yaml", knownPlugins: ["transit"])
var options = Gateway.Options(baseDirectory: directory)
options.loadDemoData = false
let loadStart = ContinuousClock.now
let gateway = try await Gateway.start(configuration: configuration, registrations: [PluginRegistration(TransitPlugin.self)], options: options)
let loadTime = ContinuousClock.now - loadStart

func residentMegabytes() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
          let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "") else { return -1 }
    return kilobytes / 1024
}

/// The 50th and 99th percentiles, in microseconds, of each target's latency.
func measure(_ targets: [String]) async throws -> (p50: Double, p99: Double, rows: Int) {
    var samples: [Double] = []
    samples.reserveCapacity(targets.count)
    var rows = 0
    for target in targets {
        let start = ContinuousClock.now
        let reply = try await gateway.handle(.get, target)
        let elapsed = ContinuousClock.now - start
        guard reply.status == 200 else {
            FileHandle.standardError.write(Data("\(target) answered \(reply.status): \(String(buffer: reply.body))\n".utf8))
            exit(1)
        }
        rows += reply.body.readableBytesView.split(separator: UInt8(ascii: "{")).count - 1
        samples.append(Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12)
    }
    samples.sort()
    return (samples[samples.count / 2], samples[min(samples.count - 1, Int(Double(samples.count) * 0.99))], rows / max(1, targets.count))
}

var random = SeededRandom(seed: 42)
let points = (0..<2000).map { _ in (lat: 25.0 + random.unit() * 0.3, lon: 121.3 + random.unit() * 0.4) }
let near = points.map { String(format: "/v1/transit/stops/near?lat=%.6f&lon=%.6f&radius=1000&limit=10", $0.lat, $0.lon) }
let dayStart: Int64 = {
    let parts = day.split(separator: "-").compactMap { Int($0) }
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = zone
    return Int64(calendar.date(from: DateComponents(year: parts[0], month: parts[1], day: parts[2]))!.timeIntervalSince1970)
}()
let arrivals = (0..<2000).map { _ in "/v1/transit/stops/\(stop)/arrivals?time=\((dayStart + 6 * 3600 + Int64(random.unit() * 17 * 3600)) * 1000)" }
let health = Array(repeating: "/healthz", count: 2000)

struct SeededRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}

// Warm up, then keep the round with the median p99 of each target.
_ = try await measure(near + arrivals + health)
var results: [String: [(p50: Double, p99: Double, rows: Int)]] = [:]
for _ in 0..<rounds {
    results["healthz", default: []].append(try await measure(health))
    results["near", default: []].append(try await measure(near))
    results["arrivals", default: []].append(try await measure(arrivals))
}
func median(_ list: [(p50: Double, p99: Double, rows: Int)]) -> (p50: Double, p99: Double, rows: Int) {
    list.sorted { $0.p99 < $1.p99 }[list.count / 2]
}
let figures = results.mapValues(median)
let output: [String: Any] = [
    "load_seconds": Double(loadTime.components.seconds) + Double(loadTime.components.attoseconds) / 1e18,
    "rss_mb": residentMegabytes(),
    "healthz_p50_us": figures["healthz"]!.p50, "healthz_p99_us": figures["healthz"]!.p99,
    "near_p50_us": figures["near"]!.p50, "near_p99_us": figures["near"]!.p99, "near_rows": figures["near"]!.rows,
    "arrivals_p50_us": figures["arrivals"]!.p50, "arrivals_p99_us": figures["arrivals"]!.p99, "arrivals_rows": figures["arrivals"]!.rows,
]
print(String(decoding: try JSONSerialization.data(withJSONObject: output, options: [.sortedKeys]), as: UTF8.self))
await gateway.shutdown()
try? FileManager.default.removeItem(at: directory)
