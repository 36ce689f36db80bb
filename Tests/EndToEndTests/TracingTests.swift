import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GatewayTesting
import Hummingbird
import NIOCore
import Synchronization
import Testing

/// `server.tracing`: a `gateway serve` process sends its spans to an OTLP/HTTP collector (a loopback
/// server here that keeps what it receives).
@Suite("tracing")
struct TracingTests {
    /// What the collector received, as text.
    final class Collected: Sendable {
        let bodies = Mutex<[String]>([])
        var all: String { bodies.withLock { $0.joined(separator: "\n") } }
    }

    /// Runs `body` with a `gateway serve` process of `plugins` (a YAML mapping) that sends its
    /// spans to a collector on loopback, and what the collector receives.
    static func withTracedGateway(plugins: String, _ body: @Sendable (GatewayProcess, Collected) async throws -> Void) async throws {
        let collected = Collected()
        let router = Router()
        router.post("/v1/traces") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 16 << 20)
            collected.bodies.withLock { $0.append(String(buffer: body)) }
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{}")))
        }
        try await withLoopbackServer(router) { port in
            let directory = try GatewayBinaryTests().temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            try """
                storage: sqlite:data/gateway.sqlite
                auth: { bcryptCost: 10 }
                server:
                  tracing: { otlp: "http://127.0.0.1:\(port)", protocol: http/json, serviceName: gateway-test, exportDelay: 100ms }
                plugins:
                  \(plugins)
                """.write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)
            let server = try await GatewayProcess(directory: directory, logLevel: "warning")
            try await body(server, collected)
            server.stop()
            #expect(server.process.terminationStatus == 0)
        }
    }

    @Test("a request's spans — the request, its stages, its SQL statements — reach the collector as children of the caller's traceparent")
    func exported() async throws {
        try await Self.withTracedGateway(plugins: "todo: {}") { server, collected in
            let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
            let parentID = "00f067aa0ba902b7"
            var request = URLRequest(url: URL(string: server.url + "/v1/todo/buckets/todos/objects")!)
            request.setValue("00-\(traceID)-\(parentID)-01", forHTTPHeaderField: "traceparent")
            let (_, response) = try await URLSession.shared.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            // OTLP/JSON as the exporter writes it: ids in base64 (protobuf's JSON mapping of bytes).
            func base64(_ hex: String) -> String {
                var bytes: [UInt8] = []
                var index = hex.startIndex
                while index < hex.endIndex {
                    let next = hex.index(index, offsetBy: 2)
                    bytes.append(UInt8(hex[index..<next], radix: 16)!)
                    index = next
                }
                return Data(bytes).base64EncodedString()
            }
            let (traceID64, parentID64) = (base64(traceID), base64(parentID))
            let arrived = try await eventually(within: .seconds(20)) {
                collected.all.contains(traceID64) && collected.all.contains("\"name\":\"GET todo.objects.query\"")
            }
            let text = collected.all
            #expect(arrived, "spans of the trace: \(text.prefix(2000))")
            for name in ["GET todo.objects.query", "principal", "rate limit", "handler todo.objects.query", "SELECT"] {
                #expect(text.contains("\"name\":\"\(name)\""), "span \(name): \(text.prefix(3000))")
            }
            #expect(text.contains("\"traceId\":\"\(traceID64)\""), "the caller's trace")
            #expect(text.contains("\"parentSpanId\":\"\(parentID64)\""), "the request's span is a child of the caller's")
            #expect(text.contains("gateway-test"), "the service name")
            #expect(text.contains("db.query.text"))
        }
    }

    @Test("a secret in a path (a Xively v2 key) reaches no span: the collector gets /v2/keys/*** and never the key")
    func secretsRedacted() async throws {
        try await Self.withTracedGateway(plugins: "feeds: { enabled: true }") { server, collected in
            let (registered, account) = try await FeedsDurabilityTests.request("POST", server.url + "/v1/auth/register",
                                                                              body: #"{"username": "keeper", "password": "correct horse battery"}"#)
            #expect(registered == 201)
            let token = try #require((try JSONSerialization.jsonObject(with: account) as? [String: Any])?["token"] as? String)
            let (created, _) = try await FeedsDurabilityTests.request("POST", server.url + "/v2/keys", token: token,
                                                                     body: #"{"key": {"label": "device", "permissions": [{"access_methods": ["get"]}]}}"#)
            #expect(created == 201)
            let (_, listing) = try await FeedsDurabilityTests.request("GET", server.url + "/v2/keys", token: token)
            let keys = (try JSONSerialization.jsonObject(with: listing) as? [String: Any])?["keys"] as? [[String: Any]]
            let secret = try #require(keys?.first?["api_key"] as? String)
            for method in ["GET", "DELETE"] {
                let (status, _) = try await FeedsDurabilityTests.request(method, server.url + "/v2/keys/\(secret)", token: token)
                #expect(status == 200)
            }
            let arrived = try await eventually(within: .seconds(20)) {
                collected.all.contains("/v2/keys/***") && collected.all.contains("\"DELETE ")
            }
            let text = collected.all
            #expect(arrived, "the key routes' spans: \(text.prefix(2000))")
            #expect(!text.contains(secret), "a span holds the key: \(text.components(separatedBy: secret).first?.suffix(300) ?? "")")
        }
    }
}
