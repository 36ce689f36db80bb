import Foundation
import GatewayCore
import GatewayServer
import Logging
import NIOCore
import NotesFixturePlugin
import SuggestPlugin
import TodoPlugin
import UpstreamPlugin

// The gateway with the notes fixture plugin on a fresh SQLite database, for the benchmark.
//   --port N          where to listen
//   --unprotected     auth, response cache and rate limits switched off (the reference for issue 3)
//   --key-file PATH   create a user with an API key (notes:read) and write the key's secret there
//   --in-process N    instead of serving, send N requests to each benchmark target through the
//                     pipeline in process (no socket) and print the time per request: the
//                     pipeline's own cost, without HTTP parsing and the kernel, for profiling
//   --target PATH     with --in-process: only this target; several paths separated by spaces are
//                     sent in turn (a realistic mix, whose data does not all stay in the CPU's caches)
//   --parallel K      with --in-process: K loops at once, also printing the CPU time per request
//                     (shared state touched from several threads costs more than from one)
//   --suggest DIR     also host the suggest plugin (uncached) on DIR's jieba_dict.txt and movies.tsv,
//                     so that --in-process --target '/v1/suggest?q=...' times a suggest request
//   --todo            also host the todo plugin (its default `todos` bucket), so that
//                     --in-process --target /v1/todo/buckets/todos/objects --body '{...}' times a create
//   --body JSON       with --in-process: POST this body (as application/json) instead of a GET
//   --seed N          with --todo: first create N todos (half of them done), so that queries
//                     (--target /v1/todo/buckets/todos/query --body '{"where":...}') run over them
//   --upstream URL    also host an upstream service plugin `weather` forwarding to URL (public), so
//                     that --in-process --target /v1/weather/forecast.json times a forwarded call
//                     without the incoming socket
//   --forward-only URL with --in-process N: N GETs of URL through the forwarding client alone (no
//                     gateway around it), with the CPU time per call
// Quotas are set far above what the load generator can reach, so rate limiting is measured as
// work done, not as rejections. Logging is at warning level, as a production gateway would run.
func argument(_ name: String) -> String? {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count else { return nil }
    return CommandLine.arguments[index + 1]
}
// Logs as `gateway serve` does.
LoggingSystem.bootstrap { label in GatewayLogHandler(label: label) }
let port = argument("--port").flatMap(Int.init) ?? 8080
let unprotected = CommandLine.arguments.contains("--unprotected")

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-bench-\(ProcessInfo.processInfo.processIdentifier)")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
// `--postgres URL`: the gateway's tables on that PostgreSQL database instead of a new SQLite file.
var configuration = GatewayConfiguration(storage: argument("--postgres").map { .postgres(url: $0) }
                                         ?? .sqlite(path: directory.appendingPathComponent("bench.sqlite").path))
configuration.plugins = ["notes": PluginSettings()]
// Absolute: the configuration resolves relative paths against the server's own temporary folder.
let suggestData = argument("--suggest").map { URL(fileURLWithPath: $0).standardizedFileURL.path }
if let suggestData {
    let yaml = """
    plugins:
      suggest:
        cache: { enabled: false }
        config: { dictionaries: ["\(suggestData)/jieba_dict.txt", "\(suggestData)/movies.tsv"] }
    """
    configuration.plugins["suggest"] = try GatewayConfiguration.parse(Data(yaml.utf8), file: "suggest.yaml", knownPlugins: ["suggest"]).plugins["suggest"]
}
let upstream = argument("--upstream")
if let upstream {
    let yaml = """
    plugins:
      weather:
        type: upstream
        config: { upstreams: ["\(upstream)"], access: public }
    """
    configuration.plugins["weather"] = try GatewayConfiguration.parse(Data(yaml.utf8), file: "upstream.yaml", knownPlugins: [], instanceTypes: ["upstream"]).plugins["weather"]
}
let todo = CommandLine.arguments.contains("--todo")
if todo { configuration.plugins["todo"] = PluginSettings() }
let body = argument("--body")
let unlimited = RateSpec(count: 1_000_000_000, period: 1)
configuration.limits.anonymous = unlimited
configuration.limits.user = unlimited
configuration.limits.key = unlimited
var options = Gateway.Options(baseDirectory: directory)
options.logger.logLevel = .warning
// The suggest plugin loads its dictionaries as demo data.
if suggestData != nil { options.loadDemoData = true }
if unprotected {
    options.authenticator = GuestOnlyAuthenticator()
    options.rateLimiter = UnlimitedRateLimiter()
    options.cache = DisabledResponseCache()
}
let gateway = try await Gateway.start(configuration: configuration, registrations: [PluginRegistration(NotesPlugin.self)] + (suggestData == nil ? [] : [PluginRegistration(SuggestPlugin.self)])
                                     + (todo ? [PluginRegistration(TodoPlugin.self)] : [])
                                     + (upstream == nil ? [] : [PluginRegistration(UpstreamPlugin.self, multipleInstances: true)]), options: options)
for index in 0..<20 {
    _ = try await gateway.handle(.post, "/v1/notes/notes", headers: [.contentType: "application/json"],
                                 body: ByteBuffer(string: #"{"title": "note \#(index)", "body": "benchmark data"}"#))
}
if todo, let seed = argument("--seed").flatMap(Int.init) {
    let headers: HTTPFields = [.contentType: "application/json"]
    try await withThrowingTaskGroup(of: Void.self) { group in
        for loop in 0..<8 {
            group.addTask {
                for index in stride(from: loop, to: seed, by: 8) {
                    let body = #"{"description":"benchmark todo \#(index)","done":\#(index % 2 == 0),"tags":["bench","t\#(index % 10)"]}"#
                    _ = try await gateway.handle(.post, "/v1/todo/buckets/todos/objects", headers: headers, body: ByteBuffer(string: body))
                }
            }
        }
        try await group.waitForAll()
    }
}
if let keyFile = argument("--key-file"), !unprotected {
    let user = try await gateway.accounts.register(username: "bench", secret: .plain("benchmark-password"))
    let (secret, _) = try await gateway.accounts.createKey(userID: user.id, grant: .init(label: "bench", scopes: ["notes:read"]))
    try secret.write(toFile: keyFile, atomically: true, encoding: .utf8)
}
/// Time per request through the pipeline in process, on the global executor (top-level code
/// runs on the main actor, and hopping there and back would be measured too).
@concurrent func inProcess(_ gateway: Gateway, target: String, count: Int) async throws -> Double {
    let probe = body.map { ByteBuffer(string: $0) }
    let targets = target.split(separator: " ").map(String.init)
    for target in targets {
        let first = try await gateway.handle(probe == nil ? .get : .post, target, headers: probe == nil ? [:] : [.contentType: "application/json"], body: probe)
        guard (200..<300).contains(first.status) else {
            FileHandle.standardError.write(Data("\(target) answered \(first.status): \(String(buffer: first.body))\n".utf8))
            exit(1)
        }
    }
    let start = ContinuousClock.now
    if let body {
        let headers: HTTPFields = [.contentType: "application/json"]
        for index in 0..<count { _ = try await gateway.handle(.post, targets[index % targets.count], headers: headers, body: ByteBuffer(string: body)) }
    } else {
        for index in 0..<count { _ = try await gateway.handle(.get, targets[index % targets.count]) }
    }
    let elapsed = ContinuousClock.now - start
    return (Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(count)
}
/// With `--parallel K`: K loops at once, and the process's CPU time per request (what the server
/// spends when K requests are in flight on different threads, as over HTTP).
func inParallel(_ gateway: Gateway, target: String, count: Int, loops: Int) async throws -> (wall: Double, cpu: Double) {
    var usage = rusage()
    func cpuSeconds() -> Double {
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }
    let cpuStart = cpuSeconds()
    let start = ContinuousClock.now
    try await withThrowingTaskGroup(of: Double.self) { group in
        for _ in 0..<loops { group.addTask { try await inProcess(gateway, target: target, count: count / loops) } }
        try await group.waitForAll()
    }
    let elapsed = ContinuousClock.now - start
    let wall = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    return (wall * 1e6 / Double(count), (cpuSeconds() - cpuStart) * 1e6 / Double(count))
}
if let url = argument("--forward-only"), let count = argument("--in-process").flatMap(Int.init) {
    // The client of forwarded calls alone (no gateway around it): 16 loops of GETs to `url`.
    let client = AsyncUpstreamClient()
    @concurrent func forward(_ calls: Int) async throws {
        for _ in 0..<calls {
            let response = try await client.open(UpstreamRequest(url: url, headers: [.accept: "*/*"]), body: nil)
            _ = try await response.body.collect(upTo: 1 << 20)
        }
    }
    try await forward(count / 10)
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let cpuStart = usage.ru_utime.tv_sec * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_sec * 1_000_000 + usage.ru_stime.tv_usec
    let start = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<16 { group.addTask { try await forward(count / 16) } }
        try await group.waitForAll()
    }
    let elapsed = ContinuousClock.now - start
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let cpu = usage.ru_utime.tv_sec * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_sec * 1_000_000 + usage.ru_stime.tv_usec - cpuStart
    let wall = Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12
    print(String(format: "forwarded call alone: %.2f µs per call, %.2f µs of CPU per call (16 loops)", wall / Double(count), Double(cpu) / Double(count)))
    exit(0)
}
if let count = argument("--in-process").flatMap(Int.init) {
    let loops = argument("--parallel").flatMap(Int.init) ?? 1
    for target in argument("--target").map({ [$0] }) ?? ["/healthz", "/v1/notes/echo?name=bench", "/v1/notes/notes"] {
        _ = try await inProcess(gateway, target: target, count: count / 10)
        if loops > 1 {
            let (wall, cpu) = try await inParallel(gateway, target: target, count: count, loops: loops)
            print(String(format: "%@: %.2f µs per request, %.2f µs of CPU per request (%d loops)", target, wall, cpu, loops))
        } else {
            print(String(format: "%@: %.2f µs per request", target, try await inProcess(gateway, target: target, count: count)))
        }
    }
    exit(0)
}
try await gateway.run(host: "127.0.0.1", port: port) { port in
    print("gateway-bench-server listening on http://127.0.0.1:\(port)\(unprotected ? " (unprotected)" : "")")
}
try? FileManager.default.removeItem(at: directory)
