import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import Synchronization
import Testing
@testable import UpstreamPlugin

/// plugins.yaml text parsed as `gateway serve` reads it (with the upstream type), on the test
/// gateway's database and with its bcrypt cost, as its own file would say.
func parsed(_ yaml: String, for gateway: TestGateway) throws -> GatewayConfiguration {
    var configuration = try GatewayConfiguration.parse(Data(yaml.utf8), file: "plugins.yaml", knownPlugins: upstream.map(\.id), instanceTypes: ["upstream"])
    configuration.storage = gateway.gateway.configuration.storage
    configuration.auth.bcryptCost = gateway.gateway.configuration.auth.bcryptCost
    return configuration
}

/// A configuration file a test rewrites, read as `gateway serve` reads its own on a reload.
final class ConfigurationFile: Sendable {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("reload-\(UUID().uuidString).yaml")

    init(_ yaml: String) throws { try write(yaml) }

    func write(_ yaml: String) throws { try yaml.write(to: url, atomically: true, encoding: .utf8) }

    var source: @Sendable () throws -> GatewayConfiguration {
        let url = self.url
        return { try GatewayConfiguration.load(contentsOf: url, knownPlugins: upstream.map(\.id), instanceTypes: ["upstream"]) }
    }

    deinit { try? FileManager.default.removeItem(at: url) }
}

@Suite("reloading plugins.yaml while serving")
struct ReloadTests {
    @Test("a reload adds, replaces and removes upstream services and composites; settings that need a restart are reported and keep their running value")
    func swaps() async throws {
        let a = FakeUpstream("a"), b = FakeUpstream("b")
        try await a.serve { urlA in
            try await b.serve { urlB in
                let first = upstreamYAML("weather", [urlA])
                try await TestGateway.with(upstream, yaml: first) { gateway in
                    let gw = gateway.gateway
                    #expect(try await gw.handle(.get, "/v1/weather/x").json["upstream"] as? String == "a")
                    #expect(try await gw.handle(.get, "/v1/news/x").status == 404)
                    let port = gw.configuration.server.port

                    // The weather service moves to b, a news service appears on a, with a composite over both.
                    let second = "server: { port: \(port + 1) }\n" + upstreamYAML("weather", [urlB])
                        + "  news:\n    type: upstream\n    mount: /news\n    config:\n      upstreams: [\"\(urlA)\"]\n"
                        + "composites:\n  both:\n    path: /v1/both\n    steps:\n      w: { method: GET, path: /v1/weather/now }\n      n: { method: GET, path: /news/now }\n"
                    var report = await gw.reload(to: try parsed(second, for: gateway))
                    #expect(report.status == .applied)
                    #expect(report.changes == ["plugins.news (added)", "plugins.weather (changed)", "composites.both (added)"])
                    #expect(report.restartNeeded == ["server.port"])
                    #expect(gw.configuration.server.port == port, "the listener keeps its port until a restart")
                    #expect(try await gw.handle(.get, "/v1/weather/x").json["upstream"] as? String == "b")
                    #expect(try await gw.handle(.get, "/news/x").json["upstream"] as? String == "a")
                    let both = try await gw.handle(.get, "/v1/both")
                    #expect(both.status == 200)
                    #expect((both.json["w"] as? [String: Any])?["upstream"] as? String == "b")
                    #expect((both.json["n"] as? [String: Any])?["upstream"] as? String == "a")
                    #expect(gw.routes.contains { $0.path == "/v1/both" } && gw.plugins.contains { $0.id == "news" })
                    let document = try await gateway.openAPIDocument()
                    #expect((document["paths"] as? [String: Any])?["/v1/both"] != nil)

                    // The same file again: nothing changes live; the port still waits for a restart.
                    report = await gw.reload(to: try parsed(second, for: gateway))
                    #expect(report == ReloadReport(status: .unchanged, changes: [], restartNeeded: ["server.port"]))

                    // A file that cannot be assembled is refused whole: the running routes stay.
                    let conflicting = second.replacingOccurrences(of: "path: /v1/both", with: "method: POST\n    path: /v1/batch")
                    report = await gw.reload(to: try parsed(conflicting, for: gateway))
                    #expect(report.status == .refused)
                    #expect(report.error?.contains("route conflict") == true, "\(report.error ?? "")")
                    let unknown = second.replacingOccurrences(of: "w: { method: GET, path: /v1/weather/now }", with: "w: { operation: weather.nothing }")
                    report = await gw.reload(to: try parsed(unknown, for: gateway))
                    #expect(report.status == .refused && report.error?.contains("no operation is named 'weather.nothing'") == true)
                    #expect(try await gw.handle(.get, "/v1/both").status == 200)
                    #expect(try await gw.handle(.get, "/news/x").json["upstream"] as? String == "a")

                    // Removed: the service and the composite are gone.
                    report = await gw.reload(to: try parsed(first, for: gateway))
                    #expect(report.changes == ["plugins.news (removed)", "plugins.weather (changed)", "composites.both (removed)"])
                    #expect(report.restartNeeded.isEmpty)
                    #expect(try await gw.handle(.get, "/news/x").status == 404)
                    #expect(try await gw.handle(.get, "/v1/both").status == 404)
                    #expect(try await gw.handle(.get, "/v1/weather/x").json["upstream"] as? String == "a")
                    #expect(!gw.plugins.contains { $0.id == "news" })
                }
            }
        }
    }

    @Test("a request under way when its service is replaced or removed finishes with the service it started with")
    func inFlight() async throws {
        let a = FakeUpstream("a"), b = FakeUpstream("b")
        try await a.serve { urlA in
            try await b.serve { urlB in
                try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [urlA])) { gateway in
                    let gw = gateway.gateway
                    // Held for 3 s: the reloads below come while it is under way, even on a loaded machine
                    // (waiting for the upstream to have it, not for it to be in flight at the moment of a
                    // poll, which a starved poller can miss).
                    async let held = gw.handle(.get, "/v1/weather/hold?ms=3000")
                    #expect(try await eventually(within: .seconds(10)) { a.requests.load(ordering: .relaxed) == 1 })
                    #expect(await gw.reload(to: try parsed(upstreamYAML("weather", [urlB]), for: gateway)).status == .applied)
                    #expect(try await gw.handle(.get, "/v1/weather/x").json["upstream"] as? String == "b")
                    #expect(await gw.reload(to: try parsed("plugins: {}\n", for: gateway)).changes == ["plugins.weather (removed)"])
                    let reply = try await held
                    #expect(reply.status == 200 && reply.text == "a")
                    #expect(try await gw.handle(.get, "/v1/weather/x").status == 404)
                }
            }
        }
    }

    @Test("new rate limits apply at once and start from what callers have used; cache overrides change and old replies are not served")
    func limitsAndCache() async throws {
        let a = FakeUpstream("a")
        try await a.serve { url in
            let routes = "      routes:\n        - { path: \"/{rest...}\", methods: [GET], cache: 60s, cacheScope: shared }\n"
            let yaml = "limits: { anonymous: 3/h }\n" + upstreamYAML("weather", [url], routes)
            try await TestGateway.with(upstream, yaml: yaml, limits: true) { gateway in
                let gw = gateway.gateway
                for _ in 0..<2 { #expect(try await gw.handle(.get, "/v1/weather/x").status == 200) }
                // Two used of three: two thirds of the period are used, and stay used under a limit
                // of 30 an hour (10 more, not 30).
                var report = await gw.reload(to: try parsed(yaml.replacingOccurrences(of: "3/h", with: "30/h"), for: gateway))
                #expect(report.changes == ["limits"])
                var statuses: [Int] = []
                for _ in 0..<14 { statuses.append(try await gw.handle(.get, "/v1/weather/y").status) }
                #expect(statuses.count { $0 == 200 } == 10 && statuses.last == 429, "\(statuses)")
                // A quota used up stays used up under a new rate: here one a millisecond frees quickly.
                report = await gw.reload(to: try parsed(yaml.replacingOccurrences(of: "3/h", with: "60000/min"), for: gateway))
                #expect(report.status == .applied)
                try await Task.sleep(for: .milliseconds(50))
                let next = try await gw.handle(.get, "/v1/weather/y")
                let remaining = next.headers[HTTPField.Name("X-RateLimit-Remaining")!].flatMap { Int($0) } ?? -1
                #expect(next.status == 200 && (0..<30_000).contains(remaining), "a full quota would leave 59999: \(remaining)")
                let before = a.requests.load(ordering: .relaxed)
                #expect(try await gw.handle(.get, "/v1/weather/z").headers[HTTPField.Name("X-Cache")!] == "MISS")
                #expect(try await gw.handle(.get, "/v1/weather/z").headers[HTTPField.Name("X-Cache")!] == "HIT")
                // Caching switched off for the plugin: served by the service again.
                let uncached = yaml.replacingOccurrences(of: "3/h", with: "60000/min")
                    .replacingOccurrences(of: "    type: upstream\n", with: "    type: upstream\n    cache: { enabled: false }\n")
                report = await gw.reload(to: try parsed(uncached, for: gateway))
                #expect(report.changes == ["plugins.weather (changed)"])
                #expect(try await gw.handle(.get, "/v1/weather/z").headers[HTTPField.Name("X-Cache")!] != "HIT")
                #expect(a.requests.load(ordering: .relaxed) - before == 2)
            }
        }
    }

    @Test("a reload under load loses no request")
    func underLoad() async throws {
        let a = FakeUpstream("a"), b = FakeUpstream("b")
        try await a.serve { urlA in
            try await b.serve { urlB in
                try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [urlA])) { gateway in
                    let configurations = [
                        try parsed(upstreamYAML("weather", [urlA]), for: gateway),
                        try parsed("limits: { anonymous: 100000/min }\n" + upstreamYAML("weather", [urlB])
                            + "  news:\n    type: upstream\n    config:\n      upstreams: [\"\(urlA)\"]\n", for: gateway),
                        try parsed(upstreamYAML("weather", [urlA, urlB]) + "composites:\n  c:\n    path: /v1/c\n    steps:\n      w: { method: GET, path: /v1/weather/c }\n", for: gateway),
                    ]
                    let gw = gateway.gateway
                    try await withServing(gw) { port in
                        let load = LoadCounters()
                        var reloads = 0
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            for client in 0..<4 {
                                group.addTask {
                                    var count = 0
                                    while !load.done.load(ordering: .relaxed) {
                                        // Some requests take a while, so that swaps happen while they run.
                                        let path = count % 5 == 0 ? "/v1/weather/hold?ms=50" : "/v1/weather/x\(client)-\(count)"
                                        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
                                        request.method = .GET
                                        do {
                                            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
                                            let body = try await response.body.collect(upTo: 1 << 20)
                                            if response.status != .ok { load.failures.withLock { $0.append("\(path): \(response.status.code) \(String(buffer: body))") } }
                                        } catch {
                                            load.failures.withLock { $0.append("\(path): \(error)") }
                                        }
                                        load.answered.add(1, ordering: .relaxed)
                                        count += 1
                                    }
                                }
                            }
                            // At least 24 reloads, and on until 300 requests have been answered meanwhile
                            // (a busy machine answers fewer in the same time).
                            var reports: [ReloadReport] = []
                            let deadline = ContinuousClock.now + .seconds(120)
                            while reports.count < 24 || load.answered.load(ordering: .relaxed) < 300 && ContinuousClock.now < deadline {
                                try await Task.sleep(for: .milliseconds(40))
                                reports.append(await gw.reload(to: configurations[(reports.count + 1) % configurations.count]))
                            }
                            load.done.store(true, ordering: .relaxed)
                            reloads = reports.count
                            try await group.waitForAll()
                            #expect(reports.allSatisfy { $0.status == .applied }, "\(reports.filter { $0.status != .applied })")
                        }
                        #expect(load.failures.withLock { $0 }.isEmpty, "\(load.failures.withLock { Array($0.prefix(5)) })")
                        // 300 on a machine doing nothing else; far fewer when the whole suite runs beside.
                        #expect(load.answered.load(ordering: .relaxed) >= 100, "answered \(load.answered.load(ordering: .relaxed)) during \(reloads) reloads")
                    }
                }
            }
        }
    }

    @Test("POST /v1/admin/reload reads the file again: administrators only; a bad file is a 422 with its place and the running configuration stays")
    func adminEndpoint() async throws {
        let a = FakeUpstream("a")
        try await a.serve { url in
            let file = try ConfigurationFile(upstreamYAML("weather", [url]))
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url]), configure: { $0.configurationSource = file.source }) { gateway in
                let gw = gateway.gateway
                let (token, rootID) = try await gateway.register("root")
                try await gw.accounts.setAdmin(userID: rootID, true)
                gw.forgetCredentials()
                let (userToken, _) = try await gateway.register("someone")
                #expect(try await gw.handle(.post, "/v1/admin/reload").status == 401)
                #expect(try await gw.handle(.post, "/v1/admin/reload", headers: [.authorization: "Bearer \(userToken)"]).status == 403)

                try file.write(upstreamYAML("weather", [url]) + "  news:\n    type: upstream\n    config:\n      upstreams: [\"\(url)\"]\n")
                var reply = try await gw.handle(.post, "/v1/admin/reload", headers: [.authorization: "Bearer \(token)"])
                #expect(reply.status == 200)
                #expect(reply.json["status"] as? String == "applied")
                #expect(reply.json["changes"] as? [String] == ["plugins.news (added)"])
                // The file names no storage and no bcrypt cost: the test's stay, reported as needing a restart.
                #expect(reply.json["restartNeeded"] as? [String] == ["storage", "auth"])
                #expect(try await gw.handle(.get, "/v1/news/x").status == 200)

                try file.write(upstreamYAML("weather", [url]) + "  news:\n    type: upstream\n    config:\n      upstreams: [\"\(url)\"]\n      retries: lots\n")
                reply = try await gw.handle(.post, "/v1/admin/reload", headers: [.authorization: "Bearer \(token)"])
                #expect(reply.status == 422)
                #expect(reply.headers[.contentType] == "application/problem+json")
                let detail = reply.json["detail"] as? String ?? ""
                #expect(detail.contains("plugins.news.config.retries"), "\(detail)")
                #expect(try await gw.handle(.get, "/v1/news/x").status == 200)
            }
        }
    }

    @Test("the admin listener reloads without a credential; a gateway started without a file refuses")
    func adminListener() async throws {
        let a = FakeUpstream("a")
        try await a.serve { url in
            let file = try ConfigurationFile(upstreamYAML("weather", [url]))
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url]), configure: { $0.configurationSource = file.source }) { gateway in
                try file.write(upstreamYAML("weather", [url]) + "batch: { maxCalls: 3 }\n")
                try await gateway.gateway.makeAdminListener(host: "127.0.0.1", port: 0).test(.live) { client in
                    try await client.execute(uri: "/v1/admin/reload", method: .get) { response in
                        #expect(response.status == .methodNotAllowed)
                    }
                    try await client.execute(uri: "/v1/admin/reload", method: .post) { response in
                        #expect(response.status == .ok)
                        #expect(response.text.contains(#""changes":["batch"]"#), "\(response.text)")
                    }
                }
            }
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url])) { gateway in
                let report = await gateway.gateway.reload()
                #expect(report.status == .refused && report.error?.contains("not started from a configuration file") == true)
            }
        }
    }

    @Test("on PostgreSQL a reload reaches every instance of the database, each reading its own file", .enabled(if: TestStorage.available.contains(.postgres)))
    func cluster() async throws {
        let a = FakeUpstream("a")
        try await a.serve { url in
            let file = try ConfigurationFile(upstreamYAML("weather", [url]))
            try await TestGateway.withTwoListening(upstream, yaml: upstreamYAML("weather", [url]), configure: { $0.configurationSource = file.source }) { first, second in
                try file.write(upstreamYAML("weather", [url]) + "  news:\n    type: upstream\n    config:\n      upstreams: [\"\(url)\"]\n")
                let report = await first.reload()
                #expect(report.changes == ["plugins.news (added)"])
                #expect(try await first.handle(.get, "/v1/news/x").status == 200)
                #expect(try await eventually(within: .seconds(30)) { try await second.handle(.get, "/v1/news/x").status == 200 })
                #expect(second.plugins.contains { $0.id == "news" })
            }
        }
    }
}

/// What the clients of a load test saw.
final class LoadCounters: Sendable {
    let done = Atomic<Bool>(false)
    let failures = Mutex<[String]>([])
    let answered = Atomic<Int>(0)
}
