import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import Testing

/// The gateway process killed (`kill -9`) in the middle of continuous ingest loses nothing it
/// acknowledged, and its database passes the integrity check.
@Suite("feeds durability", .serialized)
struct FeedsDurabilityTests {
    /// What the writers saw acknowledged.
    actor Acknowledged {
        var times: Set<Int64> = []
        var requests = 0
        func add(_ batch: [Int64]) {
            times.formUnion(batch)
            requests += 1
        }
    }

    static func request(_ method: String, _ url: String, token: String? = nil, body: String? = nil) async throws -> (Int, Data) {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let body {
            request.body = .bytes(ByteBuffer(string: body))
            request.headers.add(name: "Content-Type", value: "application/json")
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 1 << 24)
        return (Int(response.status.code), Data(buffer: bytes))
    }

    @Test("kill -9 during continuous ingest: every acknowledged datapoint is there after a restart, and the database is intact")
    func killDuringIngest() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-kill-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("data"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try """
            storage: sqlite:data/gateway.sqlite
            demo: false
            auth: { bcryptCost: 10 }
            limits: { anonymous: 100000/s, user: 100000/s, key: 100000/s }
            plugins:
              feeds: { enabled: true }
            """.write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)

        var server = try await GatewayProcess(directory: directory)
        let (status, data) = try await Self.request("POST", server.url + "/v1/auth/register", body: #"{"username": "device", "password": "correct horse battery"}"#)
        #expect(status == 201)
        let token = try #require((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["token"] as? String)
        let (created, _) = try await Self.request("POST", server.url + "/v1/feeds", token: token, body: #"{"title": "Durable", "datastreams": [{"id": "x"}]}"#)
        #expect(created == 201)
        let points = server.url + "/v1/feeds/1/datastreams/x/datapoints"

        // Four writers, each sending batches of 50 datapoints at its own times, until the kill.
        let base = (Int64(Date().timeIntervalSince1970) - 86_400) * 1_000_000
        let acknowledged = Acknowledged()
        let url = points
        let writers = (0..<4).map { writer in
            Task {
                var batch = 0
                while !Task.isCancelled {
                    let times = (0..<50).map { base + Int64(writer) * 10_000_000_000 + Int64(batch * 50 + $0) * 1_000 }
                    let body = "[" + times.map { #"{"at": "\#(UTCTimestamp.format(micros: $0))", "value": \#($0 % 1000)}"# }.joined(separator: ",") + "]"
                    guard let (status, _) = try? await Self.request("POST", url, token: token, body: body) else { return }
                    if status == 200 { await acknowledged.add(times) }
                    batch += 1
                }
            }
        }
        // Let ingest run (on a busy machine it may be slow: wait for a number of requests, not a
        // time), then kill the server in the middle of it.
        let deadline = ContinuousClock.now + .seconds(90)
        while await acknowledged.requests < 100, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        server.kill()
        for writer in writers { writer.cancel() }
        for writer in writers { await writer.value }
        let expected = await acknowledged.times
        #expect(expected.count >= 5_000, "the writers got \(expected.count) datapoints acknowledged before the kill")

        // Restart on the same database and read everything back.
        server = try await GatewayProcess(directory: directory)
        var stored: Set<Int64> = []
        for writer in 0..<4 {
            var start = base + Int64(writer) * 10_000_000_000
            while true {
                let (status, data) = try await Self.request("GET", server.url + "/v1/feeds/1/datastreams/x/datapoints?start=\(UTCTimestamp.format(micros: start))&duration=2hours&limit=1000")
                #expect(status == 200)
                let page = ((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["datapoints"] as? [[String: Any]]) ?? []
                let times = page.compactMap { ($0["at"] as? String).flatMap { UTCTimestamp.parse($0) } }
                stored.formUnion(times)
                guard times.count == 1_000, let last = times.last else { break }
                start = last + 1
            }
        }
        let missing = expected.subtracting(stored)
        #expect(missing.isEmpty, "\(missing.count) acknowledged datapoints were lost")
        server.stop()

        let database = try await GatewayDatabase.open(.sqlite(path: directory.appendingPathComponent("data/gateway.sqlite").path),
                                                      baseDirectory: directory, logger: Logger(label: "check"))
        let intact = (try? await database.integrityCheck()) ?? false
        await database.shutdown()
        #expect(intact, "PRAGMA integrity_check failed")
    }
}
