import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdWSClient
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOWebSocket
import SQLKit
import Synchronization
import Testing

/// Three `gateway serve` processes on one PostgreSQL database behind nginx, under a mixed load,
/// one of them killed with SIGKILL in the middle and restarted. It loads the whole machine, so it
/// runs on its own: with `GATEWAY_CLUSTER_TEST=1` (`.ci/run` runs it after the rest of the suite),
/// and `Benchmarks/cluster/run` runs it for longer (`CLUSTER_SECONDS`).
@Suite("a cluster: three instances behind nginx on one PostgreSQL", .serialized,
       .enabled(if: ProcessInfo.processInfo.environment["GATEWAY_CLUSTER_TEST"] == "1" && TestStorage.available.contains(.postgres)
                && ClusterHarness.nginx != nil))
struct ClusterTests {
    @Test("mixed load, one instance killed and restarted: no acknowledged write lost, every change pushed in order, the cluster's rate limit kept, no stale cache, leased work moved")
    func killedInstance() async throws {
        let seconds = ProcessInfo.processInfo.environment["CLUSTER_SECONDS"].flatMap(Double.init) ?? 12
        try await TestStorage.postgres.withFreshLocation { location, directory in
            let report = try await ClusterHarness(location: location, directory: directory, seconds: seconds).run()
            print(report.lines.joined(separator: "\n"))
            #expect(report.todoWrites > 10 && report.datapoints > 5, "the load ran: \(report.lines)")
            #expect(report.lostWrites.isEmpty, "acknowledged todo writes missing: \(report.lostWrites.prefix(10))")
            #expect(report.subscriberProblems.isEmpty, "\(report.subscriberProblems)")
            #expect(report.limitAllowed <= report.limitCeiling, "allowed \(report.limitAllowed) > \(report.limitCeiling)")
            #expect(report.limitRefused > 0, "the limit client reached its limit")
            #expect(report.staleReads == 0 && report.freshnessChecks >= 3, "\(report.staleReads) stale of \(report.freshnessChecks)")
            // The lease lasts 15 s unrenewed and the others try for it every 5 s: 20 s, and some slack.
            let moved = try #require(report.leaseMovedAfter, "the killed instance's lease never moved")
            #expect(moved < .seconds(35))
        }
    }
}

/// The cluster, its load and what the load saw.
struct ClusterHarness {
    let location: StorageLocation
    let directory: URL
    let seconds: Double

    /// nginx from Debian's packages, if installed.
    static let nginx: String? = ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// The anonymous rate every instance shares (`limits.policy: cluster`): low enough that the
    /// limit client exceeds it even on a machine busy with the rest of the test suite.
    static let anonymousLimit = (count: 20, seconds: 60.0)

    struct Report: Sendable {
        var todoWrites = 0
        var lostWrites: [String] = []
        var datapoints = 0
        var subscriberProblems: [String] = []
        var limitAllowed = 0
        var limitRefused = 0
        var limitCeiling = 0
        var freshnessChecks = 0
        var staleReads = 0
        var leaseMovedAfter: Duration?
        var lines: [String] = []
    }

    /// What the clients saw, shared by their tasks.
    final class Observations: Sendable {
        let stop = Atomic<Bool>(false)
        let subscribed = Atomic<Int>(0)
        let todoIDs = Mutex<[String]>([])
        let datapoints = Mutex<[Int]>([])
        let limit = Mutex<(allowed: Int, refused: Int)>((0, 0))
        let freshness = Mutex<(checks: Int, stale: Int)>((0, 0))
        let errors = Mutex<[String]>([])
        var stopped: Bool { stop.load(ordering: .relaxed) }
    }

    /// A request (as the durability test sends them) and its JSON object reply.
    static func request(_ method: HTTPMethod, _ url: String, token: String? = nil, body: String? = nil) async throws -> (status: Int, json: [String: Any]) {
        let (status, data) = try await FeedsDurabilityTests.request(method.rawValue, url, token: token, body: body)
        return (status, ((try? JSONSerialization.jsonObject(with: data)) as? [String: Any]) ?? [:])
    }

    static func freePort() throws -> Int {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else { throw GatewayProcessError(description: "no free port") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    func run() async throws -> Report {
        guard case .postgres(let url) = location, let nginxPath = Self.nginx else { throw GatewayProcessError(description: "needs PostgreSQL and nginx") }
        try """
            storage: "\(url)"
            database: { maxConnections: 4 }   # the test suite's other tests share the server's connections
            demo: false
            auth: { bcryptCost: 10 }
            server: { trustedProxies: [127.0.0.1] }
            limits: { policy: cluster, anonymous: \(Self.anonymousLimit.count)/min, user: 100000/s, key: 100000/s }
            plugins:
              todo: {}
              feeds: {}
            """.write(to: directory.appendingPathComponent("plugins.yaml"), atomically: true, encoding: .utf8)
        // Migrated ahead, as a deploy would; then three instances.
        let migrated = try await GatewayBinaryTests().run(["migrate", "--log-level", "error"], in: directory)
        guard migrated.status == 0 else { throw GatewayProcessError(description: "migrate failed: \(migrated.errors)") }
        var instances: [GatewayProcess] = []
        defer { for instance in instances { instance.stop() } }
        for _ in 0..<3 { instances.append(try await GatewayProcess(directory: directory, logLevel: "critical")) }
        let ports = instances.map { Int($0.url.split(separator: ":").last!)! }

        // nginx in front, as docs/operations.md's "Running several instances" shows.
        let front = try Self.freePort()
        let nginxDirectory = directory.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: nginxDirectory, withIntermediateDirectories: true)
        try """
            worker_processes 1;
            user root;
            error_log \(nginxDirectory.path)/error.log error;
            pid \(nginxDirectory.path)/nginx.pid;
            events { worker_connections 1024; }
            http {
                access_log off;
                upstream gateways { \(ports.map { "server 127.0.0.1:\($0) max_fails=1 fail_timeout=2s;" }.joined(separator: " ")) keepalive 32; }
                map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
                server {
                    listen 127.0.0.1:\(front);
                    location / {
                        proxy_pass http://gateways;
                        proxy_http_version 1.1;
                        proxy_set_header Connection $connection_upgrade;
                        proxy_set_header Upgrade $http_upgrade;
                        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
                        proxy_next_upstream error timeout;
                    }
                }
            }
            """.write(to: nginxDirectory.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
        let nginx = Process()
        nginx.executableURL = URL(fileURLWithPath: nginxPath)
        nginx.arguments = ["-p", nginxDirectory.path, "-c", nginxDirectory.appendingPathComponent("nginx.conf").path, "-g", "daemon off;"]
        try nginx.run()
        defer {
            nginx.terminate()
            nginx.waitUntilExit()
        }
        let base = "http://127.0.0.1:\(front)"
        let ready = try await eventually(within: .seconds(10)) { (try? await Self.request(.GET, base + "/healthz").status) == 200 }
        guard ready else { throw GatewayProcessError(description: "nginx did not answer") }

        // The instance holding the feeds' retention lease is the one killed: its leased work must move.
        let database = try await Gateway.openDatabase(location, baseDirectory: directory, logger: Logger(label: "cluster-test"))
        do {
            let report = try await load(base: base, ports: ports, instances: &instances, database: database)
            await database.shutdown()
            return report
        } catch {
            await database.shutdown()
            throw error
        }
    }

    private func load(base: String, ports: [Int], instances: inout [GatewayProcess], database: GatewayDatabase) async throws -> Report {
        struct Lease: Decodable { var holder: String; var expires_at: Int64 }
        func lease() async throws -> Lease? {
            try await database.sql.raw("SELECT holder, expires_at FROM gateway_leases WHERE name = 'feeds.retention'").first(decoding: Lease.self)
        }
        _ = try await eventually(within: .seconds(20)) { try await lease() != nil }
        let held = try await lease()
        let victim = instances.firstIndex { held?.holder.contains(" pid \($0.process.processIdentifier) ") == true } ?? 1

        // An account, a feed with a datastream, an object read through every instance.
        let (_, registered) = try await Self.request(.POST, base + "/v1/auth/register", body: #"{"username": "cluster", "password": "correct horse battery"}"#)
        let token = try #require(registered["token"] as? String)
        let (_, feed) = try await Self.request(.POST, base + "/v1/feeds", token: token, body: #"{"title": "Cluster", "datastreams": [{"id": "seq"}]}"#)
        let feedID = try #require(feed["id"] as? Int)
        let (_, probe) = try await Self.request(.POST, base + "/v1/todo/buckets/todos/objects", token: token, body: #"{"description": "v0"}"#)
        let probeID = try #require(probe["id"] as? String)

        let seen = Observations()
        let startedAt = ContinuousClock.now
        var report = Report()
        let survivors = (0..<3).filter { $0 != victim }

        // Subscribers on every instance; the killed one's loses its connection and is only held to order.
        let subscribers = (0..<3).map { index in
            Task { () -> (values: [Int], error: String?) in
                let values = Mutex<[Int]>([])
                do {
                    _ = try await WebSocketClient.connect(url: "ws://127.0.0.1:\(ports[index])/v1/feeds/live?access_token=\(token)", logger: Logger(label: "ws")) { inbound, outbound, _ in
                        try await outbound.write(.text(#"{"action": "subscribe", "feed": \#(feedID), "datastream": "seq", "id": 1}"#))
                        for try await message in inbound.messages(maxSize: 1 << 20) {
                            guard case .text(let text) = message,
                                  let json = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { continue }
                            if json["type"] as? String == "subscribed" { seen.subscribed.add(1, ordering: .relaxed) }
                            if json["type"] as? String == "change", let value = (json["data"] as? [String: Any])?["currentValue"] as? Double {
                                values.withLock { $0.append(Int(value)) }
                                if value < 0 { break }
                            }
                        }
                        try? await outbound.close(.normalClosure, reason: nil)
                    }
                    return (values.withLock { $0 }, nil)
                } catch {
                    return (values.withLock { $0 }, "\(error)")
                }
            }
        }
        guard try await eventually(within: .seconds(30), { seen.subscribed.load(ordering: .relaxed) == 3 }) else {
            throw GatewayProcessError(description: "the subscribers were not all subscribed within 30 s")
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            // Todo writers through nginx.
            for writer in 0..<3 {
                group.addTask {
                    var count = 0
                    while !seen.stopped {
                        count += 1
                        if let (status, json) = try? await Self.request(.POST, base + "/v1/todo/buckets/todos/objects", token: token,
                                                                        body: #"{"description": "w\#(writer)-\#(count)"}"#),
                           status == 201, let id = json["id"] as? String {
                            seen.todoIDs.withLock { $0.append(id) }
                        }
                    }
                }
            }
            // One datapoint writer, its values in order (one at a time: each acknowledged before the next).
            group.addTask {
                var value = 0
                let origin = Int64(Date().timeIntervalSince1970 - 3600) * 1_000_000
                while !seen.stopped {
                    value += 1
                    let at = UTCTimestamp.format(micros: origin + Int64(value) * 1000)
                    if let (status, _) = try? await Self.request(.POST, base + "/v1/feeds/\(feedID)/datastreams/seq/datapoints", token: token,
                                                                 body: #"[{"at": "\#(at)", "value": \#(value)}]"#), status == 200 {
                        seen.datapoints.withLock { $0.append(value) }
                    }
                    try? await Task.sleep(for: .milliseconds(20))
                }
            }
            // An anonymous client at its limit, through nginx.
            for _ in 0..<2 {
                group.addTask {
                    while !seen.stopped {
                        guard let (status, _) = try? await Self.request(.GET, base + "/v1/feeds/\(feedID)") else { continue }
                        seen.limit.withLock { counts in
                            if status == 200 { counts.allowed += 1 } else if status == 429 { counts.refused += 1 }
                        }
                    }
                }
            }
            // Read after write across instances: written on one, read at once on the others (their caches warmed first).
            group.addTask {
                var round = 0
                while !seen.stopped {
                    round += 1
                    let live = survivors
                    let writer = live[round % live.count], readers = live.filter { $0 != writer }
                    let object = "http://127.0.0.1:\(ports[writer])/v1/todo/buckets/todos/objects/\(probeID)"
                    for reader in readers { _ = try? await Self.request(.GET, "http://127.0.0.1:\(ports[reader])/v1/todo/buckets/todos/objects/\(probeID)", token: token) }
                    guard let (status, _) = try? await Self.request(.PUT, object, token: token, body: #"{"description": "v\#(round)"}"#), status == 200 else { continue }
                    for reader in readers {
                        guard let (status, json) = try? await Self.request(.GET, "http://127.0.0.1:\(ports[reader])/v1/todo/buckets/todos/objects/\(probeID)", token: token),
                              status == 200 else { continue }
                        let description = json["description"] as? String ?? (json["fields"] as? [String: Any])?["description"] as? String
                        seen.freshness.withLock { counts in
                            counts.checks += 1
                            if description != "v\(round)" { counts.stale += 1 }
                        }
                    }
                }
            }
            // The kill in the middle (the restart, on the same port, comes after the load).
            let killed = instances[victim]
            group.addTask {
                try await Task.sleep(for: .seconds(seconds / 2))
                killed.kill()
            }
            try await Task.sleep(for: .seconds(seconds))
            seen.stop.store(true, ordering: .relaxed)
            try await group.waitForAll()
        }
        let loadTime = ContinuousClock.now - startedAt
        let killedAt = startedAt + .seconds(seconds / 2)
        instances[victim] = try await GatewayProcess(directory: directory, logLevel: "critical", port: ports[victim])

        // The leased work: held again, by another holder, within the lease's time.
        var movedAt: ContinuousClock.Instant?
        let deadline = ContinuousClock.now + .seconds(45)
        while ContinuousClock.now < deadline {
            if let now = try await lease(), now.holder != held?.holder, now.expires_at > Int64(Date().timeIntervalSince1970 * 1000) {
                movedAt = ContinuousClock.now
                break
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        report.leaseMovedAfter = movedAt.map { $0 - killedAt }

        // The subscribers end with a last change (-1) and report what they got.
        _ = try await Self.request(.POST, base + "/v1/feeds/\(feedID)/datastreams/seq/datapoints", token: token,
                                   body: #"[{"at": "\#(UTCTimestamp.format(micros: Int64(Date().timeIntervalSince1970 - 60) * 1_000_000))", "value": -1}]"#)
        let acknowledged = seen.datapoints.withLock { $0 }
        for (index, subscriber) in subscribers.enumerated() {
            let timeout = Task {
                try await Task.sleep(for: .seconds(15))
                subscriber.cancel()
            }
            let (values, error) = await subscriber.value
            timeout.cancel()
            let received = values.filter { $0 >= 0 }
            if zip(received, received.dropFirst()).contains(where: { $0 >= $1 }) {
                report.subscriberProblems.append("instance \(index): changes out of order")
            }
            if index != victim {
                let missing = Set(acknowledged).subtracting(received)
                if !missing.isEmpty { report.subscriberProblems.append("instance \(index): \(missing.count) of \(acknowledged.count) changes never pushed (\(error ?? ""))") }
            }
        }

        // Every acknowledged object is there.
        let ids = seen.todoIDs.withLock { $0 }
        for id in ids {
            let (status, _) = try await Self.request(.GET, base + "/v1/todo/buckets/todos/objects/\(id)", token: token)
            if status != 200 { report.lostWrites.append(id) }
        }
        let elapsed = Double(loadTime.components.seconds) + Double(loadTime.components.attoseconds) / 1e18
        let limit = seen.limit.withLock { $0 }
        let freshness = seen.freshness.withLock { $0 }
        report.todoWrites = ids.count
        report.datapoints = acknowledged.count
        report.limitAllowed = limit.allowed
        report.limitRefused = limit.refused
        // GCRA: a full burst, then the rate, over the time the load ran.
        report.limitCeiling = Self.anonymousLimit.count + Int(Double(Self.anonymousLimit.count) * elapsed / Self.anonymousLimit.seconds)
        report.freshnessChecks = freshness.checks
        report.staleReads = freshness.stale
        report.lines = [
            "cluster: 3 instances behind nginx, \(seconds)s of load, instance \(victim) (the feeds.retention lease holder) killed at \(seconds / 2)s, restarted after the load",
            "todo writes acknowledged: \(ids.count), missing afterwards: \(report.lostWrites.count)",
            "datapoints acknowledged: \(acknowledged.count); subscribers: \(report.subscriberProblems.isEmpty ? "every change in order" : report.subscriberProblems.joined(separator: "; "))",
            "anonymous limit \(Self.anonymousLimit.count)/min across the cluster: \(limit.allowed) allowed (ceiling \(report.limitCeiling)), \(limit.refused) refused",
            "read after write on another instance: \(freshness.checks) reads, \(freshness.stale) stale",
            "feeds.retention lease moved \(report.leaseMovedAfter.map { "\($0)" } ?? "never") after the kill",
        ]
        return report
    }
}
