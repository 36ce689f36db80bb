import Foundation
import GatewayCore
import GatewayServer
import JWTKit
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
//   --jwt-file PATH   also accept the tokens of an identity provider `bench` (ES256, static key,
//                     accounts made on first sight) and write a token of it (scope notes:read,
//                     valid a day) there: the same cached GET as --key-file's, with a JWT
//   --verify-cost N   print what the first (uncached) verification of a token costs per algorithm:
//                     N requests each with a new token, against N with one remembered token, in
//                     process (providers with `provision: none`, so no account is looked up);
//                     --rsa-key PATH (a PEM RSA private key) adds RS256 and PS256
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
// Identity providers: `bench` for --jwt-file, one per algorithm for --verify-cost.
let jwtFile = argument("--jwt-file")
let verifyCount = argument("--verify-cost").flatMap(Int.init)
/// A signer per provider, with the algorithm's name.
var signers: [(provider: String, algorithm: String, keys: JWTKeyCollection)] = []
if jwtFile != nil || verifyCount != nil {
    var providers = ""
    func provider(_ name: String, algorithm: String, key: String, provision: String) {
        let pem = key.split(separator: "\n").map { "              " + $0 }.joined(separator: "\n")
        let secret = algorithm.hasPrefix("HS")
        providers += """
              \(name):
                type: jwt
                issuer: https://\(name).bench.example
                audiences: [gateway]
                provision: \(provision)
                keys:
                  - kid: \(name)
                    algorithm: \(algorithm)
                    \(secret ? "secret: \"\(key)\"" : "pem: |\n\(pem)")

            """
    }
    if jwtFile != nil {
        let key = ES256PrivateKey()
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: key, kid: "bench")
        provider("bench", algorithm: "ES256", key: key.publicKey.pemRepresentation, provision: "auto")
        signers.append(("bench", "ES256", keys))
    }
    if verifyCount != nil {
        let es256 = ES256PrivateKey(), es384 = ES384PrivateKey(), eddsa = try EdDSA.PrivateKey(curve: .ed25519)
        let secret = String(repeating: "s", count: 64)
        var made: [(String, String, String, @Sendable (JWTKeyCollection) async -> Void)] = [
            ("v-es256", "ES256", es256.publicKey.pemRepresentation, { await $0.add(ecdsa: es256, kid: "v-es256") }),
            ("v-es384", "ES384", es384.publicKey.pemRepresentation, { await $0.add(ecdsa: es384, kid: "v-es384") }),
            ("v-eddsa", "EdDSA", eddsa.publicKey.pemRepresentation, { await $0.add(eddsa: eddsa, kid: "v-eddsa") }),
            ("v-hs256", "HS256", secret, { await $0.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: "v-hs256") }),
        ]
        if let path = argument("--rsa-key") {
            let rsa = try Insecure.RSA.PrivateKey(pem: try String(contentsOfFile: path, encoding: .utf8))
            let pem = try rsa.publicKey.pemRepresentation
            made.append(("v-rs256", "RS256", pem, { await $0.add(rsa: rsa, digestAlgorithm: .sha256, kid: "v-rs256") }))
            made.append(("v-ps256", "PS256", pem, { await $0.add(pss: rsa, digestAlgorithm: .sha256, kid: "v-ps256") }))
        }
        for (name, algorithm, key, add) in made {
            let keys = JWTKeyCollection()
            await add(keys)
            provider(name, algorithm: algorithm, key: key, provision: "none")
            signers.append((name, algorithm, keys))
        }
    }
    configuration.auth.providers = try GatewayConfiguration.parse(Data("auth:\n providers:\n\(providers)".utf8), file: "providers.yaml", knownPlugins: []).auth.providers
}
/// The claims of a benchmark token.
struct BenchClaims: JWTPayload {
    var iss: IssuerClaim
    var sub: SubjectClaim
    var aud: AudienceClaim
    var exp: ExpirationClaim
    var jti: IDClaim
    var scope: String
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
func token(_ signer: (provider: String, algorithm: String, keys: JWTKeyCollection), subject: String) async throws -> String {
    try await signer.keys.sign(BenchClaims(iss: .init(value: "https://\(signer.provider).bench.example"), sub: .init(value: subject), aud: .init(value: ["gateway"]),
                                           exp: .init(value: Date().addingTimeInterval(86_400)), jti: .init(value: UUID().uuidString), scope: "notes:read"),
                               kid: JWKIdentifier(string: signer.provider))
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
if let jwtFile, !unprotected, let bench = signers.first(where: { $0.provider == "bench" }) {
    try await token(bench, subject: "bench-jwt").write(toFile: jwtFile, atomically: true, encoding: .utf8)
}
if let count = verifyCount {
    // Per algorithm: N requests each with a token never seen (verified), then N with one token the
    // gateway remembers; the difference is the verification (signature, claims, the principal).
    @concurrent func timed(_ tokens: [String]) async throws -> Double {
        let start = ContinuousClock.now
        for token in tokens {
            let reply = try await gateway.handle(.get, "/v1/notes/echo?name=bench", headers: [.authorization: "Bearer " + token])
            guard reply.status == 200 else { fatalError("token refused: \(reply.status) \(String(buffer: reply.body))") }
        }
        let elapsed = ContinuousClock.now - start
        return (Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(tokens.count)
    }
    print("first verification of a token, per algorithm (\(count) requests each; µs per request, in process):")
    for signer in signers where signer.provider != "bench" {
        var fresh: [String] = []
        for index in 0..<count { fresh.append(try await token(signer, subject: "caller-\(index)")) }
        let known = try await token(signer, subject: "known")
        _ = try await timed(Array(repeating: known, count: count / 10 + 1))
        let remembered = try await timed(Array(repeating: known, count: count))
        let verified = try await timed(fresh)
        print(String(format: "  %@: %.1f µs with a new token, %.1f µs remembered: verification %.1f µs", signer.algorithm, verified, remembered, verified - remembered))
    }
    exit(0)
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
