import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOWebSocket
import Synchronization
import HummingbirdWSClient
import JWTKit
import Logging
import Testing
@testable import UpstreamPlugin

let upstream = [PluginRegistration(UpstreamPlugin.self, multipleInstances: true)]

/// A plugins.yaml entry for a service `id` on `urls`, with `extra` lines of its config (indented six spaces).
func upstreamYAML(_ id: String = "weather", _ urls: [String], _ extra: String = "") -> String {
    "plugins:\n  \(id):\n    type: upstream\n    config:\n      upstreams: [\(urls.map { "\"\($0)\"" }.joined(separator: ", "))]\n" + extra
}

extension InProcessResponse {
    var text: String { String(buffer: body) }
    var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any]) ?? [:] }
}

@Suite("upstream services by configuration")
struct UpstreamPluginTests {
    @Test("one type under several ids: each at its mount, forwarding the rest of the path and the query as they came")
    func severalInstances() async throws {
        let a = FakeUpstream("a"), b = FakeUpstream("b")
        try await a.serve { urlA in
            try await b.serve { urlB in
                let yaml = upstreamYAML("weather", [urlA]) + "  news:\n    type: upstream\n    mount: /news\n    config:\n      upstreams: [\"\(urlB)/base\"]\n"
                try await TestGateway.with(upstream, yaml: yaml) { gateway in
                    let weather = try await gateway.gateway.handle(.get, "/v1/weather/forecast/t%C3%A4by/today?days=3&units=metric&q=a%26b")
                    #expect(weather.status == 200)
                    #expect(weather.json["upstream"] as? String == "a")
                    #expect(weather.json["path"] as? String == "/forecast/t%C3%A4by/today")
                    #expect(weather.json["query"] as? String == "days=3&units=metric&q=a%26b")
                    // A request without a body goes on without one: no `Content-Length: 0` on a GET.
                    let sentHeaders = weather.json["headers"] as? [String: String] ?? [:]
                    #expect(sentHeaders["content-length"] == nil && sentHeaders["transfer-encoding"] == nil, "\(sentHeaders)")
                    let news = try await gateway.gateway.handle(.post, "/news/items", headers: .json, body: ByteBuffer(string: #"{"title": "x"}"#))
                    #expect(news.status == 200)
                    #expect(news.json["upstream"] as? String == "b")
                    #expect(news.json["path"] as? String == "/base/items")
                    #expect(news.json["bodyLength"] as? Int == 14)
                    let names = Set(gateway.gateway.routes.map(\.name))
                    #expect(names.contains("weather.get-path") && names.contains("news.post-path"))
                    // A path that climbs out of the service's base is refused, encoded or not.
                    let climbing = try await gateway.gateway.handle(.get, "/news/a/%2e%2e/%2E%2E/admin")
                    #expect(climbing.status == 400)
                }
            }
        }
    }

    @Test("routes rewrite paths; query and header transforms; a credential from the environment or a file; the gateway's credentials never leave")
    func transforms() async throws {
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            let extra = """
                  access: user
                  userHeader: X-User-Id
                  credential: { header: X-Service-Key, env: UPSTREAM_TEST_SECRET, prefix: "Key " }
                  requestHeaders: { set: { X-Source: gateway }, remove: [X-Debug] }
                  responseHeaders: { remove: [X-Internal], set: { X-Served-By: gateway } }
                  query: { set: { units: metric }, remove: [debug] }
                  routes:
                    - { path: "/forecast/{city}", methods: [GET], upstreamPath: "/api/v2/cities/{city}/forecast", name: forecast }
                    - { path: "/public/{rest...}", upstreamPath: "/open/{rest...}", access: public }

            """
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url], extra),
                                       configure: { $0.environment["UPSTREAM_TEST_SECRET"] = "s3cret" }) { gateway in
                let (token, userID) = try await gateway.register("reader")
                let guest = try await gateway.gateway.handle(.get, "/v1/weather/forecast/paris")
                #expect(guest.status == 401)
                let reply = try await gateway.gateway.handle(.get, "/v1/weather/forecast/s%C3%A3o%20paulo?debug=1&units=imperial&days=2",
                                                             headers: [.authorization: "Bearer \(token)", HTTPField.Name("X-Debug")!: "1",
                                                                       HTTPField.Name("X-User-Id")!: "someone-else"])
                #expect(reply.status == 200)
                #expect(reply.json["path"] as? String == "/api/v2/cities/s%C3%A3o%20paulo/forecast")
                #expect(reply.json["query"] as? String == "days=2&units=metric")
                let headers = reply.json["headers"] as? [String: String] ?? [:]
                #expect(headers["authorization"] == nil, "the gateway's session token is not the service's business")
                #expect(headers["x-service-key"] == "Key s3cret")
                #expect(headers["x-source"] == "gateway" && headers["x-debug"] == nil)
                #expect(headers["x-user-id"] == userID, "the caller cannot choose the user the service is told of")
                #expect(headers["x-forwarded-for"] == "local")
                #expect(headers["x-request-id"] == reply.headers[HTTPField.Name("X-Request-Id")!])
                #expect(reply.headers[HTTPField.Name("X-Internal")!] == nil && reply.headers[HTTPField.Name("X-Served-By")!] == "gateway")
                #expect(reply.headers[HTTPField.Name("X-Upstream")!] == "a" && reply.headers[.connection] == nil)
                #expect(gateway.gateway.routes.contains { $0.name == "weather.forecast" })
                let open = try await gateway.gateway.handle(.get, "/v1/weather/public/maps/tile.png")
                #expect(open.status == 200 && open.json["path"] as? String == "/open/maps/tile.png")
                let unrouted = try await gateway.gateway.handle(.get, "/v1/weather/elsewhere")
                #expect(unrouted.status == 404)
            }
        }
        // A credential read from a file.
        try await fake.serve { url in
            let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("upstream-\(UUID().uuidString).key")
            try "t0ken\n".write(to: secretFile, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: secretFile) }
            let extra = "      credential: { file: \"\(secretFile.path)\", prefix: \"Bearer \" }\n"
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url], extra),
                                       configure: { $0.environment["UPSTREAM_TEST_SECRET"] = "s3cret" }) { gateway in
                let reply = try await gateway.gateway.handle(.get, "/v1/weather/x", headers: [.authorization: "Bearer not-for-the-service"])
                // A bearer token the gateway cannot verify is refused before anything is forwarded.
                #expect(reply.status == 401)
                let plain = try await gateway.gateway.handle(.get, "/v1/weather/x")
                #expect((plain.json["headers"] as? [String: String])?["authorization"] == "Bearer t0ken")
            }
        }
    }

    @Test("identityHeaders tell the service the caller's account, scopes, kind of credential and role; a client's own are dropped")
    func identityHeaders() async throws {
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            let extra = """
                  identityHeaders: { user: X-User-Id, scopes: X-User-Scopes, credential: X-Credential, admin: X-Admin }

            """
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url], extra)) { gateway in
                let (token, userID) = try await gateway.register("teller")
                let key = try await gateway.createKey(token: token, grant: #"{"label": "k", "scopes": ["weather:read"]}"#)
                let spoofed: HTTPFields = [HTTPField.Name("X-User-Id")!: "root", HTTPField.Name("X-User-Scopes")!: "*",
                                           HTTPField.Name("X-Credential")!: "session", HTTPField.Name("X-Admin")!: "true"]
                var withKey = spoofed
                withKey[HTTPField.Name("X-Api-Key")!] = key.secret
                let byKey = try await gateway.gateway.handle(.get, "/v1/weather/x", headers: withKey)
                let keyHeaders = byKey.json["headers"] as? [String: String] ?? [:]
                #expect(keyHeaders["x-user-id"] == userID && keyHeaders["x-user-scopes"] == "weather:read")
                #expect(keyHeaders["x-credential"] == "key" && keyHeaders["x-admin"] == nil)
                var withSession = spoofed
                withSession[.authorization] = "Bearer \(token)"
                let bySession = try await gateway.gateway.handle(.get, "/v1/weather/x", headers: withSession)
                let sessionHeaders = bySession.json["headers"] as? [String: String] ?? [:]
                #expect(sessionHeaders["x-user-id"] == userID && sessionHeaders["x-user-scopes"] == nil)
                #expect(sessionHeaders["x-credential"] == "session" && sessionHeaders["x-admin"] == nil)
                let guest = try await gateway.gateway.handle(.get, "/v1/weather/x", headers: spoofed)
                #expect(guest.status == 200 && byKey.status == 200 && bySession.status == 200)
                let guestHeaders = guest.json["headers"] as? [String: String] ?? [:]
                #expect(guestHeaders["x-user-id"] == nil && guestHeaders["x-user-scopes"] == nil && guestHeaders["x-credential"] == nil)
                #expect(guestHeaders["x-admin"] == nil)
            }
        }
    }

    @Test("accept on an upstream service: it takes only the credential kinds it lists")
    func acceptList() async throws {
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url]) + "    accept: [session]\n") { gateway in
                let (token, _) = try await gateway.register("picky")
                let key = try await gateway.createKey(token: token, grant: #"{"label": "k", "scopes": ["*"]}"#)
                let byKey = try await gateway.gateway.handle(.get, "/v1/weather/x", headers: [HTTPField.Name("X-Api-Key")!: key.secret])
                #expect(byKey.status == 401 && byKey.text.contains("it takes session"), "\(byKey.text)")
                #expect(try await gateway.gateway.handle(.get, "/v1/weather/x", headers: [.authorization: "Bearer \(token)"]).status == 200)
            }
        }
    }

    @Test("keys are bounded by their scopes; cached routes are served from the cache; rate-limit costs apply")
    func gatewayPolicies() async throws {
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            let extra = """
                  routes:
                    - { path: "/cached/{rest...}", methods: [GET], cache: 60s, cacheScope: shared }
                    - { path: "/{rest...}" }

            """
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url], extra),
                                       configure: { $0.environment["UPSTREAM_TEST_SECRET"] = "s3cret" }) { gateway in
                let (token, _) = try await gateway.register("owner")
                let key = try await gateway.createKey(token: token, grant: #"{"label": "read", "scopes": ["weather:read"]}"#)
                let read = try await gateway.gateway.handle(.get, "/v1/weather/items", headers: [HTTPField.Name("X-Api-Key")!: key.secret])
                let write = try await gateway.gateway.handle(.post, "/v1/weather/items", headers: [HTTPField.Name("X-Api-Key")!: key.secret])
                #expect(read.status == 200 && write.status == 403)
                #expect((read.json["headers"] as? [String: String])?["x-api-key"] == nil)

                let before = fake.requests.load(ordering: .relaxed)
                let first = try await gateway.gateway.handle(.get, "/v1/weather/cached/a?x=1")
                let second = try await gateway.gateway.handle(.get, "/v1/weather/cached/a?x=1")
                #expect(first.status == 200 && second.status == 200)
                #expect(first.headers[HTTPField.Name("X-Cache")!] == "MISS" && second.headers[HTTPField.Name("X-Cache")!] == "HIT")
                #expect(fake.requests.load(ordering: .relaxed) - before == 1)
                #expect(first.body == second.body && first.headers[.contentType] == "application/json")
                let uncached = try await gateway.gateway.handle(.get, "/v1/weather/a")
                #expect(uncached.headers[HTTPField.Name("X-Cache")!] == nil || uncached.headers[HTTPField.Name("X-Cache")!] == "BYPASS")
            }
        }
        try await fake.serve { url in
            let yaml = "limits: { anonymous: 2/min }\n" + upstreamYAML("weather", [url])
            try await TestGateway.with(upstream, yaml: yaml, limits: true) { gateway in
                var statuses: [Int] = []
                for _ in 0..<3 { statuses.append(try await gateway.gateway.handle(.get, "/v1/weather/x").status) }
                #expect(statuses == [200, 200, 429])
            }
        }
    }

    @Test("round robin alternates; least-outstanding avoids the busy instance")
    func balancing() async throws {
        let a = FakeUpstream("a"), b = FakeUpstream("b")
        try await a.serve { urlA in
            try await b.serve { urlB in
                try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [urlA, urlB])) { gateway in
                    var seen: [String] = []
                    for _ in 0..<4 { seen.append(try await gateway.gateway.handle(.get, "/v1/svc/hold?ms=1").text) }
                    // Alternating (a first attempt that fails on a busy machine is retried on the other, so either may start).
                    #expect(Set(seen.prefix(2)) == ["a", "b"] && seen[2] == seen[0] && seen[3] == seen[1], "\(seen)")
                }
                try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [urlA, urlB], "      balance: least-outstanding\n")) { gateway in
                    // Three long requests in flight: round robin would put two on one instance.
                    try await withThrowingTaskGroup(of: String.self) { group in
                        group.addTask { try await gateway.gateway.handle(.get, "/v1/svc/hold?ms=1500").text }
                        try await Task.sleep(for: .milliseconds(200))
                        group.addTask { try await gateway.gateway.handle(.get, "/v1/svc/hold?ms=1500").text }
                        try await Task.sleep(for: .milliseconds(200))
                        // Both busy with one each; finish one short request on each to show the choice.
                        let quick = try await gateway.gateway.handle(.get, "/v1/svc/hold?ms=1").text
                        #expect(["a", "b"].contains(quick))
                        var long: [String] = []
                        for try await name in group { long.append(name) }
                        #expect(Set(long) == ["a", "b"], "the second long request went to the idle instance")
                    }
                }
            }
        }
    }

    @Test("maxConnections: at most so many requests at an instance at once, the rest waiting their turn within the timeout")
    func connectionCap() async throws {
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], "      maxConnections: 2\n      timeout: 60s\n")) { gateway in
                let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                    for _ in 0..<6 { group.addTask { try await gateway.gateway.handle(.get, "/v1/svc/hold?ms=200").status } }
                    return try await group.reduce(into: [Int]()) { $0.append($1) }
                }
                #expect(statuses == Array(repeating: 200, count: 6))
                #expect(fake.mostInFlight.load(ordering: .relaxed) <= 2, "six calls, two at a time at most")
            }
            // Without the setting, the six are at the service at once.
            fake.mostInFlight.store(0, ordering: .relaxed)
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], "      timeout: 60s\n")) { gateway in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<6 { group.addTask { _ = try await gateway.gateway.handle(.get, "/v1/svc/hold?ms=2000") } }
                    try await group.waitForAll()
                }
                // All six at once, unless a loaded machine started them seconds apart: more than two anyway.
                #expect(fake.mostInFlight.load(ordering: .relaxed) > 2)
            }
        }
    }

    @Test("failures: unreachable 502, too slow 504, connection reset 502, truncated body cut; retries for idempotent calls only")
    func failures() async throws {
        try await withRefusingPort { port in
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", ["http://127.0.0.1:\(port)"], "      retries: 0\n")) { gateway in
                let down = try await gateway.gateway.handle(.get, "/v1/svc/x")
                #expect(down.status == 502)
                #expect(down.headers[.contentType] == "application/problem+json")
                #expect(!down.text.contains("127.0.0.1"), "the service's address is not shown to callers")
            }
        }
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], "      timeout: 300ms\n      retries: 0\n")) { gateway in
                let start = ContinuousClock.now
                let slow = try await gateway.gateway.handle(.get, "/v1/svc/slow")
                #expect(slow.status == 504)
                #expect(ContinuousClock.now - start < .seconds(10))
                #expect(slow.json["detail"] as? String == "The upstream service 'svc' did not answer within 300ms.")
            }
        }
    }

    @Test("a connection reset is a 502; a body cut short reaches the caller cut short")
    func brokenConnections() async throws {
        try await BrokenServer.serve(.reset) { url in
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], "      retries: 0\n")) { gateway in
                let reset = try await gateway.gateway.handle(.get, "/v1/svc/x")
                #expect(reset.status == 502)
            }
        }
        try await BrokenServer.serve(.truncate) { url in
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], "      retries: 0\n")) { gateway in
                try await listening(gateway.gateway) { port in
                    // Read over a raw socket: the head promises 100000 bytes, the connection ends after 14.
                    let start = ContinuousClock.now
                    let received = try await RawClient.exchange(port: port, request: "GET /v1/svc/x HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    #expect(ContinuousClock.now - start < .seconds(10), "the connection is closed at once, not left to time out")
                    #expect(received.hasPrefix("HTTP/1.1 200"))
                    #expect(received.contains("content-length: 100000") || received.contains("Content-Length: 100000"))
                    #expect(received.hasSuffix("only the start"), "the body is cut where the service cut it")
                    // And the gateway goes on serving.
                    let health = try await HTTPClient.shared.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/healthz"), timeout: .seconds(10))
                    #expect(health.status.code == 200)
                }
            }
        }
    }

    @Test("retries: a GET failing with 503 on one instance is answered by the other; a POST is not retried")
    func retries() async throws {
        let bad = FakeUpstream("bad"), good = FakeUpstream("good")
        bad.failWith.withLock { $0 = 503 }
        try await bad.serve { urlBad in
            try await good.serve { urlGood in
                try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [urlBad, urlGood], "      ejection: { failures: 0 }\n      breaker: { failures: 0 }\n")) { gateway in
                    for _ in 0..<4 {
                        let reply = try await gateway.gateway.handle(.get, "/v1/svc/x")
                        #expect(reply.status == 200 && reply.json["upstream"] as? String == "good")
                    }
                    var posts: [Int] = []
                    for _ in 0..<4 { posts.append(try await gateway.gateway.handle(.post, "/v1/svc/x").status) }
                    #expect(posts.contains(503) && posts.contains(200), "a POST is sent once: the failing instance's answer reaches the caller")
                }
            }
        }
    }

    @Test("the circuit breaker opens after failures in a row (503 with Retry-After), then lets one request try")
    func breaker() async throws {
        let fake = FakeUpstream("a")
        fake.failWith.withLock { $0 = 500 }
        try await fake.serve { url in
            let extra = "      retries: 0\n      breaker: { failures: 3, openFor: 1s }\n      ejection: { failures: 0 }\n"
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], extra),
                                       configure: { $0.environment["UPSTREAM_TEST_WS_SECRET"] = "ws-secret" }) { gateway in
                for _ in 0..<3 { #expect(try await gateway.gateway.handle(.get, "/v1/svc/x").status == 500) }
                let calls = fake.requests.load(ordering: .relaxed)
                let open = try await gateway.gateway.handle(.get, "/v1/svc/x")
                #expect(open.status == 503)
                #expect(open.headers[.retryAfter] == "1")
                #expect(fake.requests.load(ordering: .relaxed) == calls, "an open breaker sends nothing")
                let health = await gateway.gateway.health()
                #expect(health.first { $0.id == "svc" }?.health.status == .failing)
                try await Task.sleep(for: .milliseconds(1100))
                fake.failWith.withLock { $0 = nil }
                #expect(try await gateway.gateway.handle(.get, "/v1/svc/x").status == 200)
                #expect(try await gateway.gateway.handle(.get, "/v1/svc/x").status == 200)
            }
        }
    }

    @Test("an instance failing in a row is ejected for a while; active health checks take a down instance out and bring it back")
    func ejectionAndHealthChecks() async throws {
        let a = FakeUpstream("a"), b = FakeUpstream("b")
        try await a.serve { urlA in
            try await b.serve { urlB in
                a.failWith.withLock { $0 = 500 }
                let extra = "      retries: 0\n      ejection: { failures: 2, duration: 30s }\n      breaker: { failures: 0 }\n"
                try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [urlA, urlB], extra)) { gateway in
                    var seen: [String] = []
                    for _ in 0..<8 {
                        let reply = try await gateway.gateway.handle(.get, "/v1/svc/x")
                        seen.append(reply.status == 200 ? "b" : "a")
                    }
                    #expect(seen.filter { $0 == "a" }.count == 2, "two failures, then a is left alone: \(seen)")
                    #expect(seen.suffix(4) == ["b", "b", "b", "b"])
                }
                a.failWith.withLock { $0 = nil }
                a.healthy.withLock { $0 = false }
                // A generous timeout: under a loaded test run a check may wait seconds for a thread.
                let checks = "      healthCheck: { path: /health, interval: 1h, timeout: 60s, unhealthyAfter: 1, healthyAfter: 1 }\n"
                try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [urlA, urlB], checks)) { gateway in
                    let plugin = try #require(gateway.gateway.plugins.first { $0.id == "svc" }?.instance as? UpstreamPlugin)
                    let checker = try #require(plugin.services.first as? HealthChecker)
                    await checker.checkAll()
                    var seen = Set<String>()
                    for _ in 0..<4 { seen.insert(try await gateway.gateway.handle(.get, "/v1/svc/x").json["upstream"] as? String ?? "") }
                    #expect(seen == ["b"])
                    #expect(await plugin.health().status == .degraded)
                    a.healthy.withLock { $0 = true }
                    await checker.checkAll()
                    for _ in 0..<4 { seen.insert(try await gateway.gateway.handle(.get, "/v1/svc/x").json["upstream"] as? String ?? "") }
                    #expect(seen == ["a", "b"])
                }
            }
        }
    }

    @Test("bodies stream both ways: a download paced by its reader, an upload far past server.maxBodySize, and the route's own limit")
    func streaming() async throws {
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], "      maxBodySize: 64MB\n")) { gateway in
                try await listening(gateway.gateway) { port in
                    // A gigabyte whose reader stops after a megabyte: the service is held back with it (what is
                    // sent stops growing, far short of the whole), so the gateway never holds the body.
                    let size = 1 << 30
                    let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/svc/big?size=\(size)"),
                                                                       timeout: .seconds(90))
                    #expect(response.status.code == 200)
                    #expect(response.headers.first(name: "content-length") == String(size))
                    var iterator = response.body.makeAsyncIterator()
                    var read = 0
                    while read < 1 << 20, let piece = try await iterator.next() { read += piece.readableBytes }
                    try await Task.sleep(for: .milliseconds(1500))
                    let settled = fake.sent.load(ordering: .relaxed)
                    try await Task.sleep(for: .seconds(1))
                    let later = fake.sent.load(ordering: .relaxed)
                    #expect(later - settled < 4 << 20, "the service went on sending while the reader waited: \(settled) then \(later) bytes")
                    #expect(later < size / 2, "sent \(later) of \(size) bytes while the reader had taken \(read)")
                    _ = iterator

                    // A smaller download read whole: every byte arrives.
                    let whole = try await HTTPClient.shared.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/svc/big?size=\(16 << 20)"),
                                                                    timeout: .seconds(90))
                    var total = 0
                    for try await piece in whole.body { total += piece.readableBytes }
                    #expect(total == 16 << 20)

                    // An upload of 32 MB (server.maxBodySize is 1 MB) streams to the service.
                    var upload = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/svc/upload")
                    upload.method = .POST
                    upload.headers.add(name: "content-type", value: "application/octet-stream")
                    upload.body = .bytes(ByteBuffer(repeating: 0x62, count: 32 << 20))
                    let uploaded = try await HTTPClient.shared.execute(upload, timeout: .seconds(90))
                    let echo = try await uploaded.body.collect(upTo: 1 << 20)
                    #expect(uploaded.status.code == 200)
                    let object = try JSONSerialization.jsonObject(with: Data(echo.readableBytesView)) as? [String: Any]
                    #expect(object?["bodyLength"] as? Int == 32 << 20)

                    // Past the route's own limit: 413 before anything is sent on.
                    var tooLarge = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/svc/upload")
                    tooLarge.method = .PUT
                    tooLarge.body = .bytes(ByteBuffer(repeating: 0x62, count: (64 << 20) + 1))
                    let refused = try await HTTPClient.shared.execute(tooLarge, timeout: .seconds(90))
                    #expect(refused.status.code == 413)
                    _ = try? await refused.body.collect(upTo: 1 << 20)
                }
            }
        }
    }

    @Test("WebSockets pass through: opened at the service with the route's path and query and the credential, messages both ways; the access rule holds")
    func webSockets() async throws {
        try await withWebSocketEcho { url in
            let extra = """
                  credential: { header: X-Service-Key, env: UPSTREAM_TEST_WS_SECRET }
                  routes:
                    - { path: "/rooms/{rest...}", upstreamPath: "/chat/{rest...}", methods: [GET], websocket: true, access: user }

            """
            try await TestGateway.with(upstream, yaml: upstreamYAML("svc", [url], extra),
                                       configure: { $0.environment["UPSTREAM_TEST_WS_SECRET"] = "ws-secret" }) { gateway in
                let (token, _) = try await gateway.register("talker")
                #expect(gateway.gateway.routes.contains { $0.method == "WS" && $0.path == "/v1/svc/rooms/{rest...}" })
                try await listening(gateway.gateway) { port in
                    let heard = Mutex<[String]>([])
                    try await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)/v1/svc/rooms/lobby/1?lang=en",
                                                      configuration: .init(additionalHeaders: [.authorization: "Bearer \(token)"]),
                                                      logger: Logger(label: "ws")) { inbound, outbound, _ in
                        var iterator = inbound.messages(maxSize: 1 << 16).makeAsyncIterator()
                        if case .text(let text) = try await iterator.next() { heard.withLock { $0.append(text) } }
                        try await outbound.write(.text("hi"))
                        if case .text(let text) = try await iterator.next() { heard.withLock { $0.append(text) } }
                        try await outbound.close(.normalClosure, reason: nil)
                    }
                    let messages = heard.withLock { $0 }
                    #expect(messages == ["opened /chat/lobby/1?lang=en key=ws-secret version=13", "echo hi"], "\(messages)")

                    // A guest may not: the socket closes without a word from the service.
                    let guestHeard = Mutex<[String]>([])
                    _ = try? await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)/v1/svc/rooms/lobby", logger: Logger(label: "ws")) { inbound, _, _ in
                        for try await message in inbound.messages(maxSize: 1 << 16) {
                            if case .text(let text) = message { guestHeard.withLock { $0.append(text) } }
                        }
                    }
                    #expect(guestHeard.withLock { $0 }.isEmpty)
                }
            }
        }
    }

    @Test("the service's OpenAPI document appears in /openapi.json under the mount")
    func openAPIImport() async throws {
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            let document = """
            openapi: 3.1.0
            info: { title: Weather, version: "1" }
            paths:
              /cities/{city}/forecast:
                get:
                  operationId: forecast
                  parameters:
                    - { $ref: "#/components/parameters/City" }
                  responses:
                    "200":
                      description: The forecast
                      content:
                        application/json:
                          schema: { $ref: "#/components/schemas/Forecast" }
                  security: [{ upstreamKey: [] }]
              /unrouted:
                get:
                  responses: { "200": { description: ok } }
            components:
              parameters:
                City: { name: city, in: path, required: true, schema: { type: string } }
              schemas:
                Forecast:
                  type: object
                  properties: { high: { type: number }, low: { type: number } }
            """
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("upstream-\(UUID().uuidString).yaml")
            try document.write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            let extra = """
                  openapi: "\(file.path)"
                  routes:
                    - { path: "/forecast/{city}", upstreamPath: "/cities/{city}/forecast", methods: [GET] }

            """
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url], extra),
                                       configure: { $0.environment["UPSTREAM_TEST_SECRET"] = "s3cret" }) { gateway in
                let openAPI = try await gateway.openAPIDocument()
                let paths = openAPI["paths"] as? [String: Any] ?? [:]
                let item = paths["/v1/weather/forecast/{city}"] as? [String: Any]
                let get = item?["get"] as? [String: Any]
                #expect(get?["operationId"] as? String == "weather.get-forecast-city", "the gateway's name for the call it serves")
                #expect(get?["summary"] == nil && (get?["responses"] as? [String: Any])?["200"] != nil)
                let described = ((get?["responses"] as? [String: Any])?["200"] as? [String: Any])?["description"] as? String
                #expect(described == "The forecast", "the service's own description")
                #expect(get?["tags"] as? [String] == ["weather"])
                #expect(get?["security"] == nil)
                let schemas = (openAPI["components"] as? [String: Any])?["schemas"] as? [String: Any]
                #expect(schemas?["weather_Forecast"] != nil)
                #expect(paths["/v1/weather/unrouted"] == nil, "a path no route leads to is left out")
            }
        }
    }

    @Test("plugins.yaml: located errors for a bad type, a bad id, a bad URL, a missing secret; types that serve one id refuse others")
    func configurationErrors() async throws {
        func problem(_ yaml: String) -> String {
            do {
                let configuration = try GatewayConfiguration.parse(Data(yaml.utf8), file: "plugins.yaml", knownPlugins: ["upstream", "todo"],
                                                                   instanceTypes: ["upstream"], environment: [:])
                for instance in PluginInstance.enabled(upstream, in: configuration) { try instance.registration.validate(instance.settings.config) }
                return "no error"
            } catch {
                return "\(error)"
            }
        }
        #expect(problem("plugins:\n  weather:\n    type: uptream\n").contains("plugins.yaml:3"))
        #expect(problem("plugins:\n  weather:\n    type: uptream\n").contains("unknown plugin type 'uptream'"))
        #expect(problem("plugins:\n  mytodo:\n    type: todo\n").contains("serves only the id 'todo'"))
        #expect(problem("plugins:\n  todo:\n    type: upstream\n").contains("is the id of a plugin of this gateway"))
        #expect(problem("plugins:\n  Weather:\n    type: upstream\n").contains("is not a plugin id"))
        #expect(problem("plugins:\n  auth:\n    type: upstream\n").contains("is not a plugin id"))
        #expect(problem("plugins:\n  weather: {}\n").contains("unknown plugin 'weather'"))
        let badURL = problem("plugins:\n  weather:\n    type: upstream\n    config:\n      upstreams: [\"ftp://x\"]\n")
        #expect(badURL.contains("plugins.weather.config.upstreams[0]") && badURL.contains("not an http(s) base URL"), "\(badURL)")
        let badRoute = problem("plugins:\n  weather:\n    type: upstream\n    config:\n      upstreams: [\"http://x\"]\n      routes:\n        - { path: \"/a/{id}\", upstreamPath: \"/b/{other}\" }\n")
        #expect(badRoute.contains("routes[0].upstreamPath") && badRoute.contains("{other} is not a parameter"), "\(badRoute)")
        let badRest = problem("plugins:\n  weather:\n    type: upstream\n    config:\n      upstreams: [\"http://x\"]\n      routes:\n        - { path: \"/{rest...}/more\" }\n")
        #expect(badRest.contains("must come last"), "\(badRest)")
        #expect(problem("plugins:\n  weather:\n    type: upstream\n    config:\n      upstreams: [\"http://x\"]\n      balance: random\n").contains("not a balancing rule"))
        #expect(problem("plugins:\n  weather:\n    type: upstream\n    config:\n      upstreams: [\"http://x\"]\n") == "no error")
        for bad in ["0", "70000"] {
            let capped = problem("plugins:\n  weather:\n    type: upstream\n    config:\n      upstreams: [\"http://x\"]\n      maxConnections: \(bad)\n")
            #expect(capped.contains("plugins.weather.config.maxConnections") && capped.contains("between 1 and 65535"), "\(capped)")
        }
        // At start, a secret that is not there stops it with the key's place.
        await #expect(throws: (any Error).self) {
            try await TestGateway.with(upstream, yaml: upstreamYAML("weather", ["http://127.0.0.1:9"], "      credential: { env: UPSTREAM_TEST_NOT_SET }\n")) { _ in }
        }
    }
}

/// `forwardToken`: the gateway's signed statement of who the caller is.
@Suite("identity tokens for upstream services")
struct ForwardTokenTests {
    /// The claims an upstream service reads.
    struct Claims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var aud: AudienceClaim
        var iat: IssuedAtClaim
        var exp: ExpirationClaim
        var scope: String?
        var credential: String?
        var admin: Bool?
        var groups: [String]?
        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp.verifyNotExpired()
            try aud.verifyIntendedAudience(includes: "weather-service")
        }
    }

    /// Two signing keys in PEM files: the signer (P-256, kid `current`) and a second one (P-384, its kid derived).
    static func keyFiles() throws -> (directory: URL, yaml: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("signing-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try ES256PrivateKey().pemRepresentation.write(to: directory.appendingPathComponent("current.pem"), atomically: true, encoding: .utf8)
        try ES384PrivateKey().pemRepresentation.write(to: directory.appendingPathComponent("next.pem"), atomically: true, encoding: .utf8)
        let yaml = """
            auth:
              signingKeys:
                - { file: \(directory.path)/current.pem, kid: current }
                - { file: \(directory.path)/next.pem }

            """
        return (directory, yaml)
    }

    @Test("a short-lived JWT naming the caller, verifiable with /.well-known/jwks.json; none for a guest; a client's own is dropped")
    func signedIdentity() async throws {
        let (directory, keysYAML) = try Self.keyFiles()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fake = FakeUpstream("a")
        try await fake.serve { url in
            let extra = """
                  forwardToken: { audience: weather-service, ttl: 90s }
              news:
                type: upstream
                mount: /news
                config:
                  upstreams: ["\(url)"]
                  forwardToken: { audience: news, header: X-Gateway-Identity }

            """
            try await TestGateway.with(upstream, yaml: keysYAML + upstreamYAML("weather", [url], extra)) { gateway in
                let jwksReply = try await gateway.gateway.handle(.get, "/.well-known/jwks.json")
                #expect(jwksReply.status == 200 && jwksReply.headers[.contentType] == "application/jwk-set+json")
                let jwks = try JSONDecoder().decode(JWKS.self, from: Data(jwksReply.body.readableBytesView))
                #expect(jwks.keys.count == 2)
                #expect(jwks.keys.first?.keyIdentifier?.string == "current")
                let verifier = JWTKeyCollection()
                try await verifier.add(jwks: jwks)

                let (token, userID) = try await gateway.register("teller")
                let key = try await gateway.createKey(token: token, grant: #"{"label": "k", "scopes": ["weather:read", "news:read"]}"#)
                let byKey = try await gateway.gateway.handle(.get, "/v1/weather/x", headers: [HTTPField.Name("X-Api-Key")!: key.secret])
                let headers = byKey.json["headers"] as? [String: String] ?? [:]
                let bearer = try #require(headers["authorization"], "\(headers)")
                #expect(bearer.hasPrefix("Bearer "))
                let signed = String(bearer.dropFirst("Bearer ".count))
                let claims = try await verifier.verify(signed, as: Claims.self)
                #expect(claims.sub.value == userID && claims.iss.value == "gateway")
                #expect(claims.scope == "news:read weather:read" && claims.credential == "key" && claims.admin == nil)
                #expect(claims.exp.value.timeIntervalSince(claims.iat.value) == 90)
                let header = try JSONSerialization.jsonObject(with: try #require(Data(base64URL: String(signed.split(separator: ".")[0])))) as? [String: Any]
                #expect(header?["kid"] as? String == "current" && header?["alg"] as? String == "ES256")
                // A signature of anything else does not verify.
                var parts = signed.split(separator: ".").map(String.init)
                let payloadBytes = try #require(Data(base64URL: parts[1]))
                var forged = try #require(try JSONSerialization.jsonObject(with: payloadBytes) as? [String: Any])
                forged["sub"] = "someone-else"
                parts[1] = try JSONSerialization.data(withJSONObject: forged).base64EncodedString()
                    .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
                await #expect(throws: (any Error).self) { _ = try await verifier.verify(parts.joined(separator: "."), as: Claims.self) }

                // A session: the account, no scope; the bare token in another field for the other service.
                let bySession = try await gateway.gateway.handle(.get, "/news/x", headers: [.authorization: "Bearer \(token)", HTTPField.Name("X-Gateway-Identity")!: "forged"])
                let newsHeaders = bySession.json["headers"] as? [String: String] ?? [:]
                #expect(newsHeaders["authorization"] == nil)
                let newsToken = try #require(newsHeaders["x-gateway-identity"], "\(bySession.status) \(bySession.text)")
                #expect(newsToken != "forged")
                let payload = try JSONSerialization.jsonObject(with: try #require(Data(base64URL: String(newsToken.split(separator: ".")[1])))) as? [String: Any]
                #expect(payload?["sub"] as? String == userID)
                #expect(payload?["aud"] as? [String] == ["news"] || payload?["aud"] as? String == "news")
                #expect(payload?["credential"] as? String == "session" && payload?["scope"] == nil)

                // A guest: no token, and a forged one is dropped.
                let guest = try await gateway.gateway.handle(.get, "/news/x", headers: [HTTPField.Name("X-Gateway-Identity")!: "forged"])
                #expect(guest.status == 200)
                #expect((guest.json["headers"] as? [String: String])?["x-gateway-identity"] == nil)
            }
        }
    }

    @Test("forwardToken needs auth.signingKeys; its field may not be the service's credential; bad keys are located errors")
    func configurationErrors() async throws {
        let (directory, keysYAML) = try Self.keyFiles()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = "http://127.0.0.1:9"
        await #expect { try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url], "      forwardToken: { audience: w }\n")) { _ in } } throws: { error in
            "\(error)".contains("forwardToken") && "\(error)".contains("auth.signingKeys")
        }
        let conflicting = keysYAML + upstreamYAML("weather", [url], "      forwardToken: { audience: w }\n      credential: { env: UPSTREAM_SECRET }\n")
        await #expect { try await TestGateway.with(upstream, yaml: conflicting, configure: { $0.environment["UPSTREAM_SECRET"] = "s" }) { _ in } } throws: { error in
            "\(error)".contains("already carries credential")
        }
        try "not a key".write(to: directory.appendingPathComponent("bad.pem"), atomically: true, encoding: .utf8)
        let bad = "auth:\n  signingKeys: [{ file: \(directory.path)/bad.pem }]\n" + upstreamYAML("weather", [url])
        await #expect { try await TestGateway.with(upstream, yaml: bad) { _ in } } throws: { error in
            "\(error)".contains("auth.signingKeys[0]") && "\(error)".contains("not a PEM private key")
        }
        let missing = "auth:\n  signingKeys: [{ file: \(directory.path)/absent.pem }]\n" + upstreamYAML("weather", [url])
        await #expect { try await TestGateway.with(upstream, yaml: missing) { _ in } } throws: { error in
            "\(error)".contains("cannot be read")
        }
        // Without keys, there is no key set to publish.
        try await TestGateway.with(upstream, yaml: upstreamYAML("weather", [url])) { gateway async throws in
            #expect(try await gateway.gateway.handle(.get, "/.well-known/jwks.json").status == 404)
        }
    }
}

extension Data {
    /// Base64url, padding optional.
    init?(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }
}
