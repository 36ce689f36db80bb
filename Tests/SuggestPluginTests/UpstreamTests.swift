import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import Hummingbird
import NIOCore
@testable import SuggestPlugin
import Synchronization
import Testing

/// A KKBOX-format suggestion service on loopback whose behaviour the test switches.
final class FakeKKBOX: Sendable {
    enum Mode: Sendable { case answer(String), fail, slow }

    let mode = Mutex(Mode.answer(""))
    let requests = Atomic<Int>(0)
    let queries = Mutex<[String]>([])
    /// The `traceparent` and `tracestate` of each request.
    let traces = Mutex<[(parent: String?, state: String?)]>([])

    /// Serves until `body` returns; `body` gets the service's URL.
    func serve<R: Sendable>(_ body: @Sendable (String) async throws -> R) async throws -> R {
        let router = Router()
        router.get("/ajax/ac_search.php") { request, _ -> Response in
            self.requests.add(1, ordering: .relaxed)
            self.queries.withLock { $0.append(request.uri.queryParameters["query"].map(String.init) ?? "") }
            self.traces.withLock { $0.append((request.headers[HTTPField.Name("traceparent")!], request.headers[HTTPField.Name("tracestate")!])) }
            switch self.mode.withLock({ $0 }) {
            case .answer(let text):
                return Response(status: .ok, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
            case .fail:
                return Response(status: .internalServerError)
            case .slow:
                try await Task.sleep(for: .seconds(20))
                return Response(status: .ok)
            }
        }
        return try await withLoopbackServer(router) { port in try await body("http://127.0.0.1:\(port)/ajax/ac_search.php") }
    }
}

@Suite("suggest upstream mode")
struct UpstreamTests {
    @Test("W3C trace context: an upstream call continues the request's trace with a span of its own; without one (or a malformed one) it starts a new trace")
    func traceContext() async throws {
        let fake = FakeKKBOX()
        fake.mode.withLock { $0 = .answer("Michelle\tMichelle Obama\n") }
        try await fake.serve { url in
            let yaml = "plugins:\n  suggest:\n    cache: { enabled: false }\n    config: { upstream: \"\(url)\", upstreamTimeout: 3s }\n"
            try await TestGateway.with(suggest, yaml: yaml) { gateway in
                let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                let traced = try await gateway.gateway.handle(.get, "/v1/suggest?q=mic", headers: [HTTPField.Name("traceparent")!: parent,
                                                                                                  HTTPField.Name("tracestate")!: "congo=t61rcWkgMzE"])
                #expect(traced.status == 200)
                _ = try await gateway.gateway.handle(.get, "/v1/suggest?q=mich")
                _ = try await gateway.gateway.handle(.get, "/v1/suggest?q=miche", headers: [HTTPField.Name("traceparent")!: "00-not-a-trace-01"])
                let seen = fake.traces.withLock { $0 }
                try #require(seen.count == 3)
                let continued = try #require(seen[0].parent?.split(separator: "-").map(String.init))
                #expect(continued.count == 4)
                #expect(continued[0] == "00" && continued[1] == "4bf92f3577b34da6a3ce929d0e0e4736" && continued[3] == "01", "same trace, same sampling")
                #expect(continued[2] != "00f067aa0ba902b7" && continued[2].count == 16, "a span of the upstream call's own")
                #expect(seen[0].state == "congo=t61rcWkgMzE")
                for fresh in [seen[1], seen[2]] {
                    let parts = try #require(fresh.parent?.split(separator: "-").map(String.init))
                    #expect(parts.count == 4 && parts[1].count == 32 && parts[1] != "4bf92f3577b34da6a3ce929d0e0e4736")
                }
                #expect(seen[1].parent?.split(separator: "-")[1] != seen[2].parent?.split(separator: "-")[1], "each new trace its own id")
            }
        }
    }

    @Test("upstream lines merge after local ones as the old client parsed them; a failing service opens the circuit and its last good answer is served")
    func upstream() async throws {
        let fake = FakeKKBOX()
        fake.mode.withLock { $0 = .answer("Michelle\tMichelle Obama\r\nno tab here\nMichael Jackson\tduplicate of a local keyword\nMichigan\tMichigan\textra\n\n") }
        try await fake.serve { url in
            let clock = TestClock()
            let yaml = """
                plugins:
                  suggest:
                    cache: { enabled: false }
                    config: { upstream: "\(url)", upstreamTimeout: 3s, upstreamFailures: 2, upstreamCooldown: 30s }
                """
            try await TestGateway.with(suggest, yaml: yaml, configure: { $0.clock = clock }) { gateway in
                let plugin = try #require(gateway.gateway.plugins.first { $0.id == "suggest" }?.instance as? SuggestPlugin)
                try await plugin.store.replace(dictionary: "test", with: [Term(dictionary: "test", keyword: "Michael Jackson", text: "Michael Jackson — Thriller", weight: 80)])

                func keywords(_ query: String) async throws -> [String] {
                    let response = try await gateway.gateway.handle(.get, "/v1/suggest?q=\(query)")
                    #expect(response.status == 200)
                    let items = try JSONValue.parse(response.body)[path: ["items"]]?.arrayValue ?? []
                    return items.compactMap { $0[path: ["keyword"]]?.stringValue }
                }
                #expect(try await keywords("mich") == ["Michael Jackson", "Michelle", "Michigan"])
                #expect(fake.queries.withLock { $0.last } == "mich")
                let dialect = try await gateway.gateway.handle(.get, "/ajax/ac_search.php?query=mich")
                #expect(String(buffer: dialect.body) == "Michael Jackson\tMichael Jackson — Thriller\nMichelle\tMichelle Obama\nMichigan\tMichigan")
                #expect(await plugin.health() == .ok)

                // The service fails: the last good answer for the same query, local only for a new one.
                fake.mode.withLock { $0 = .fail }
                #expect(try await keywords("mich") == ["Michael Jackson", "Michelle", "Michigan"])
                #expect(try await keywords("michael") == ["Michael Jackson"])
                #expect(plugin.upstream?.circuit != .closed, "two failures in a row open the circuit")
                if case .degraded = await plugin.health().status {} else { Issue.record("health should be degraded while the circuit is open") }
                let calls = fake.requests.load(ordering: .relaxed)
                _ = try await keywords("mich")
                _ = try await keywords("mic")
                #expect(fake.requests.load(ordering: .relaxed) == calls, "an open circuit leaves the service alone")

                // After the cool-down one trial call goes through; its success closes the circuit.
                fake.mode.withLock { $0 = .answer("Mickey\tMickey Mouse\n") }
                clock.advance(by: 31)
                #expect(try await keywords("mick").contains("Mickey"))
                #expect(plugin.upstream?.circuit == .closed)
                #expect(await plugin.health() == .ok)

                // A slow service costs at most the timeout (3 s here, generous for a loaded machine).
                fake.mode.withLock { $0 = .slow }
                let started = ContinuousClock.now
                #expect(try await keywords("mi") == ["Michael Jackson"])
                #expect(ContinuousClock.now - started < .seconds(10))
            }
        }
    }

    @Test("upstream settings are checked: a URL, durations, a sane failure count")
    func settings() async throws {
        for (config, key) in [("upstream: ftp://x", "upstream"), ("upstream: http://127.0.0.1:1/x, upstreamTimeout: forever", "upstreamTimeout"),
                              ("upstream: http://127.0.0.1:1/x, upstreamFailures: 0", "upstreamFailures"), ("upstreamCooldown: 5s", "upstream")] {
            do {
                try await TestGateway.with(suggest, yaml: "plugins:\n  suggest:\n    config: { \(config) }\n") { _ in }
                Issue.record("\(config) was accepted")
            } catch {
                #expect("\(error)".contains(key), "\(config): \(error)")
            }
        }
    }

    @Test("gateway check refuses what serve refuses: an upstream timeout of an hour is a duration, but too long")
    func checkRunsValidation() throws {
        let yaml = "plugins:\n  suggest:\n    config: { upstream: \"http://127.0.0.1:1/x\", upstreamTimeout: 1h }\n"
        let configuration = try GatewayConfiguration.parse(Data(yaml.utf8), file: "plugins.yaml", knownPlugins: ["suggest"])
        do {
            try PluginRegistration(SuggestPlugin.self).validate(configuration.plugins["suggest"]?.config)
            Issue.record("upstreamTimeout: 1h passed the check")
        } catch let error as ConfigurationFileError {
            #expect(error.keyPath == "plugins.suggest.config.upstreamTimeout")
            #expect(error.message.contains("at most 30s"))
        }
        // The same spellings as every other duration field.
        for spelling in ["2s", "2000ms", "2sec", "2seconds"] {
            let ok = "plugins:\n  suggest:\n    config: { upstream: \"http://127.0.0.1:1/x\", upstreamTimeout: \(spelling), upstreamCooldown: 1minute }\n"
            let parsed = try GatewayConfiguration.parse(Data(ok.utf8), file: "plugins.yaml", knownPlugins: ["suggest"])
            try PluginRegistration(SuggestPlugin.self).validate(parsed.plugins["suggest"]?.config)
        }
    }
}
