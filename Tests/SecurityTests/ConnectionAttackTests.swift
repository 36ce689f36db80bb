import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import Hummingbird
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import Testing

/// Connections as a resource: a client that sends its head slowly, keeps a connection open doing
/// nothing, or opens many, must not hold the gateway's descriptors without bound.
@Suite("security: slowloris, idle connections, connection floods, WebSocket upgrades", .serialized)
struct ConnectionAttackTests {
    /// Short deadlines and small caps, so that an attack reaches them in a second or two.
    static func bounded(head: String = "1s", idle: String = "1s", body: String = "1s", send: String = "60s", total: Int = 40, perAddress: Int = 10,
                        tls: URL? = nil, service: Int? = nil) -> @Sendable (String) -> String {
        ShippedGateway.repositoryFiles { yaml in
            let tlsLine = tls.map { "\n  tls: { certificate: \($0.path)/cert.pem, key: \($0.path)/key.pem }" } ?? ""
            let serviceEntry = service.map { EndlessService.entry(port: $0) } ?? ""
            return yaml.replacingOccurrences(of: "  maxBodySize: 1MB", with: """
                  maxBodySize: 1MB\(tlsLine)
                  timeouts: { head: \(head), idle: \(idle), body: \(body), send: \(send) }
                  maxConnections: \(total)
                  maxConnectionsPerAddress: \(perAddress)
                """) + serviceEntry
        }
    }

    @Test("a reply the client stops reading is cut off at the send deadline", arguments: securityStorages)
    func slowReader(storage: TestStorage) async throws {
        try await EndlessService.serve { service in
            try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "10s", idle: "10s", body: "10s", send: "1s", service: service)) { gateway in
                let connection = try await RawConnection.open(port: gateway.port, reading: false)
                try await connection.send("GET /v1/endless/stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
                // Nothing read for 10 s: the gateway's buffers (about 3 MB with the kernel's) fill and
                // stay full past the deadline. (4 s were not always enough on a loaded machine: the
                // buffers were still filling when reading began, and the endless reply then flowed.)
                try await Task.sleep(for: .seconds(10))
                connection.startReading()
                let held = await connection.closed(within: .seconds(30))
                print("slow reader: open for \(held.map { "\($0)" } ?? "more than 40 s"), \(connection.receivedCount) bytes taken")
                #expect(held != nil, "an endless reply nobody read held the connection")
            }
        }
    }

    @Test("on the HTTP/2 listener a TLS handshake trickled a byte at a time is closed at the head deadline", arguments: securityStorages)
    func slowHandshake(storage: TestStorage) async throws {
        let folder = try Self.certificates()
        defer { try? FileManager.default.removeItem(at: folder.directory) }
        try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "1s", idle: "10s", body: "10s", tls: folder.directory)) { gateway in
            let connection = try await RawConnection.open(port: gateway.port)
            let start = ContinuousClock.now
            // A ClientHello's record header and the start of its body, a byte every 250 ms.
            let hello: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03] + [UInt8](repeating: 0x42, count: 40)
            var sent = 0
            while connection.isOpen, ContinuousClock.now - start < .seconds(8), sent < hello.count {
                try? await connection.send(bytes: [hello[sent]])
                sent += 1
                try? await Task.sleep(for: .milliseconds(250))
            }
            let held = ContinuousClock.now - start
            print("slow TLS handshake: closed after \(held) and \(sent) bytes")
            #expect(!connection.isOpen, "a trickled handshake held the connection for \(held)")
            #expect(held < .seconds(4))
        }
    }

    @Test("on HTTP/2 a stream whose reply the client stops taking is reset at the send deadline, and the connection serves on", arguments: securityStorages)
    func slowStreamReader(storage: TestStorage) async throws {
        let folder = try Self.certificates()
        defer { try? FileManager.default.removeItem(at: folder.directory) }
        try await EndlessService.serve { service in
            try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "10s", idle: "30s", body: "10s", send: "1s", tls: folder.directory, service: service)) { gateway in
                var configuration = HTTPClient.Configuration(tlsConfiguration: try folder.certificates.clientConfiguration())
                configuration.httpVersion = .automatic
                let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
                let base = "https://127.0.0.1:\(gateway.port)"
                let outcome: Result<Int, any Error>
                do {
                    let response = try await client.execute(HTTPClientRequest(url: base + "/v1/endless/stream"), timeout: .seconds(60))
                    #expect(response.version == .http2)
                    // The body is not read for 4 s: the stream's flow-control window closes.
                    try await Task.sleep(for: .seconds(4))
                    var taken = 0
                    do {
                        for try await part in response.body {
                            taken += part.readableBytes
                            if taken > 512 << 20 { break }
                        }
                        outcome = .success(taken)
                    } catch {
                        outcome = .failure(error)
                    }
                }
                print("slow HTTP/2 reader: \(outcome)")
                #expect(throws: (any Error).self, "an endless stream nobody read was not reset") { try outcome.get() }
                let health = try await client.execute(HTTPClientRequest(url: base + "/healthz"), timeout: .seconds(10))
                #expect(health.status == .ok)
                #expect(health.version == .http2)
                try await client.shutdown()
            }
        }
    }

    /// A certificate pair for 127.0.0.1 in a new folder.
    static func certificates() throws -> (directory: URL, certificates: TestCertificates) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let certificates = try TestCertificates.make("slow-clients")
        try certificates.write(to: directory)
        return (directory, certificates)
    }

    @Test("a request head trickled a line at a time is answered 408 and closed at the head deadline", arguments: securityStorages)
    func slowloris(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "1s", idle: "10s", body: "10s")) { gateway in
            let connection = try await RawConnection.open(port: gateway.port)
            let start = ContinuousClock.now
            try await connection.send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
            // One header line every 250 ms, for up to 8 s: each line is activity, none completes the head.
            var line = 0
            while connection.isOpen, ContinuousClock.now - start < .seconds(8) {
                try? await Task.sleep(for: .milliseconds(250))
                try? await connection.send("X-Slow-\(line): \(line)\r\n")
                line += 1
            }
            let held = ContinuousClock.now - start
            print("slowloris: closed after \(held) and \(line) header lines")
            #expect(!connection.isOpen, "a trickled head held the connection for \(held)")
            #expect(held < .seconds(3))
            #expect(connection.received.hasPrefix("HTTP/1.1 408"), "\(connection.received)")
        }
    }

    @Test("a request body that stops arriving is cut off at the body deadline", arguments: securityStorages)
    func slowBody(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "10s", idle: "10s", body: "1s")) { gateway in
            let connection = try await RawConnection.open(port: gateway.port)
            try await connection.send("POST /v1/auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"username\":")
            let held = await connection.closed(within: .seconds(6))
            print("slow body: open for \(held.map { "\($0)" } ?? "more than 6 s")")
            #expect(held != nil && held! < .seconds(3), "a stalled body held the connection")
        }
    }

    @Test("an idle kept-alive connection, and one that never sends a byte, are closed after the idle timeout", arguments: securityStorages)
    func idleConnections(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "10s", idle: "1s", body: "10s")) { gateway in
            let keptAlive = try await RawConnection.open(port: gateway.port)
            try await keptAlive.send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let silent = try await RawConnection.open(port: gateway.port)
            // The reply comes, the connection stays open for the next request...
            #expect(await keptAlive.waitForReply(within: .seconds(5)))
            #expect(keptAlive.received.hasPrefix("HTTP/1.1 200"), "\(keptAlive.received)")
            #expect(keptAlive.isOpen)
            // ...until it has been idle for the timeout.
            let keptAliveHeld = await keptAlive.closed(within: .seconds(6))
            let silentHeld = await silent.closed(within: .seconds(6))
            print("idle: kept-alive open for \(keptAliveHeld.map { "\($0)" } ?? "-"), silent for \(silentHeld.map { "\($0)" } ?? "-")")
            #expect(keptAliveHeld != nil && keptAliveHeld! < .seconds(3), "an idle kept-alive connection stayed open")
            #expect(silentHeld != nil && silentHeld! < .seconds(3), "a connection that sent nothing stayed open")
        }
    }

    @Test("a flood from one address holds at most maxConnectionsPerAddress descriptors, and /healthz answers throughout", arguments: securityStorages)
    func floodFromOneAddress(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "5s", idle: "5s", body: "5s", total: 40, perAddress: 10)) { gateway in
            let before = Descriptors.count()
            var attackers: [RawConnection] = []
            for _ in 0..<150 {
                guard let connection = try? await RawConnection.open(port: gateway.port, from: "127.0.0.2") else { continue }
                try? await connection.send("GET /healthz HTTP/1.1\r\n")
                attackers.append(connection)
            }
            try await Task.sleep(for: .milliseconds(300))
            let held = Descriptors.gatewaySockets(port: gateway.port, peers: ["127.0.0.2"])
            let during = Descriptors.count()
            var answers: [Int] = []
            for _ in 0..<3 {
                answers.append(try await gateway.send(.GET, "/healthz", timeout: .seconds(5)).status)
            }
            let refused = attackers.filter { !$0.isOpen }.count
            for attacker in attackers { await attacker.close() }
            try await Task.sleep(for: .milliseconds(300))
            let after = Descriptors.count()
            let heldAfter = Descriptors.gatewaySockets(port: gateway.port, peers: ["127.0.0.2"])
            print("flood from one address: \(attackers.count) opened, \(refused) closed by the gateway; gateway-held sockets \(held) during, \(heldAfter) after; "
                + "process descriptors \(before) before, \(during) during (\(attackers.count - refused) of them the attacker's open ones), \(after) after")
            #expect(held <= 10, "the gateway held \(held) connections from one address")
            #expect(refused >= 130)
            #expect(answers == [200, 200, 200])
            #expect(heldAfter == 0)
        }
    }

    @Test("a flood from many addresses holds at most maxConnections descriptors, which the head deadline then frees", arguments: securityStorages)
    func floodFromManyAddresses(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "1s", idle: "1s", body: "1s", total: 40, perAddress: 10)) { gateway in
            let peers = (2...9).map { "127.0.0.\($0)" }
            let before = Descriptors.count()
            var attackers: [RawConnection] = []
            for peer in peers {
                for _ in 0..<15 {
                    guard let connection = try? await RawConnection.open(port: gateway.port, from: peer) else { continue }
                    try? await connection.send("GET /healthz HTTP/1.1\r\n")
                    attackers.append(connection)
                }
            }
            try await Task.sleep(for: .milliseconds(200))
            let held = Descriptors.gatewaySockets(port: gateway.port, peers: Set(peers))
            let during = Descriptors.count()
            // The head deadline closes what the caps let in; then a legitimate client is served.
            try await Task.sleep(for: .milliseconds(2500))
            let heldLater = Descriptors.gatewaySockets(port: gateway.port, peers: Set(peers))
            let answer = try await gateway.send(.GET, "/healthz", timeout: .seconds(5)).status
            for attacker in attackers { await attacker.close() }
            try await Task.sleep(for: .milliseconds(300))
            let after = Descriptors.count()
            print("flood from \(peers.count) addresses: \(attackers.count) opened; gateway-held sockets \(held) during, \(heldLater) after the deadline; "
                + "process descriptors \(before) before, \(during) during, \(after) after")
            #expect(held <= 40, "the gateway held \(held) connections")
            #expect(heldLater == 0)
            #expect(answer == 200)
        }
    }

    @Test("a WebSocket upgrade is charged to the caller's rate limit", arguments: securityStorages)
    func upgradesAreCharged(storage: TestStorage) async throws {
        let edit = ShippedGateway.repositoryFiles { $0.replacingOccurrences(of: "  user: 600/min", with: "  user: 3/min") }
        try await ShippedGateway.with(storage: storage, edit: edit) { gateway in
            let user = try await gateway.register("socket-opener")
            var statuses: [String] = []
            var sockets: [RawConnection] = []
            for _ in 0..<5 {
                let connection = try await RawConnection.open(port: gateway.port)
                try await connection.send(RawConnection.upgrade("/v1/feeds/live", token: user.token))
                _ = await connection.waitForReply(within: .seconds(5))
                statuses.append(String(connection.received.prefix(12)))
                sockets.append(connection)
            }
            for socket in sockets { await socket.close() }
            print("upgrades with user: 3/min: \(statuses)")
            #expect(statuses.prefix(3).allSatisfy { $0 == "HTTP/1.1 101" }, "\(statuses)")
            #expect(statuses.dropFirst(3).allSatisfy { $0 != "HTTP/1.1 101" }, "\(statuses)")
        }
    }

    @Test("open WebSockets count against the per-address cap", arguments: securityStorages)
    func upgradesCountAgainstTheCap(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.bounded(head: "1s", idle: "1s", body: "1s", total: 40, perAddress: 3)) { gateway in
            let user = try await gateway.register("socket-hoarder")
            var sockets: [RawConnection] = []
            for _ in 0..<3 {
                let connection = try await RawConnection.open(port: gateway.port, from: "127.0.0.3")
                try await connection.send(RawConnection.upgrade("/v1/feeds/live", token: user.token))
                #expect(await connection.waitForReply(within: .seconds(5)))
                #expect(connection.received.hasPrefix("HTTP/1.1 101"), "\(connection.received)")
                sockets.append(connection)
            }
            let fourth = try await RawConnection.open(port: gateway.port, from: "127.0.0.3")
            try? await fourth.send(RawConnection.upgrade("/v1/feeds/live", token: user.token))
            let closed = await fourth.closed(within: .seconds(3))
            #expect(closed != nil, "a fourth connection from the address was served")
            #expect(!fourth.received.hasPrefix("HTTP/1.1 101"))
            // A WebSocket is kept by its pings, not closed by the HTTP deadlines: it keeps its slot.
            try await Task.sleep(for: .milliseconds(1500))
            #expect(sockets.allSatisfy { $0.isOpen })
            for socket in sockets { await socket.close() }
            // Their slots return: the address is served again.
            try await Task.sleep(for: .milliseconds(300))
            let again = try await RawConnection.open(port: gateway.port, from: "127.0.0.3")
            try await again.send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(await again.waitForReply(within: .seconds(5)))
            #expect(again.received.hasPrefix("HTTP/1.1 200"), "\(again.received)")
            await again.close()
        }
    }
}

/// A TCP connection driven byte by byte, as an attacker drives one, from a chosen loopback address;
/// everything the gateway sends back is kept.
final class RawConnection: Sendable {
    let channel: any Channel
    let openedAt = ContinuousClock.now
    private let collector: Collector

    private init(channel: any Channel, collector: Collector) {
        self.channel = channel
        self.collector = collector
    }

    /// Connects to the gateway on `port` from `source` (any 127.0.0.0/8 address is this machine).
    /// With `reading` false nothing is read (and the receive buffer is small) until ``startReading()``.
    static func open(port: Int, from source: String = "127.0.0.1", reading: Bool = true) async throws -> RawConnection {
        let collector = Collector()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(ChannelOptions.autoRead, value: reading)
            .channelOption(ChannelOptions.socketOption(.so_rcvbuf), value: reading ? 1 << 16 : 4096)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(collector) }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return RawConnection(channel: channel, collector: collector)
    }

    /// A WebSocket upgrade request for `path` with a session token.
    static func upgrade(_ path: String, token: String) -> String {
        "GET \(path) HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer \(token)\r\n\r\n"
    }

    func send(_ text: String) async throws {
        try await channel.writeAndFlush(channel.allocator.buffer(string: text)).get()
    }

    func send(bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(channel.allocator.buffer(bytes: bytes)).get()
    }

    /// Reads from now on (a connection opened with `reading: false`).
    func startReading() {
        channel.setOption(ChannelOptions.autoRead, value: true).whenSuccess { [channel] in channel.read() }
    }

    /// How many bytes the gateway has sent so far.
    var receivedCount: Int { collector.count }

    var isOpen: Bool { channel.isActive }

    /// What the gateway has sent so far.
    var received: String { collector.text }

    /// Waits for a reply head (up to its blank line); false when none came within `limit`.
    func waitForReply(within limit: Duration) async -> Bool {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < limit {
            if received.contains("\r\n\r\n") { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// How long the connection lived, from its opening until the gateway closed it (waiting for
    /// that at most `limit` from this call); nil when it was still open.
    func closed(within limit: Duration) async -> Duration? {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < limit {
            if !channel.isActive { return ContinuousClock.now - openedAt }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }

    func close() async {
        try? await channel.close()
    }

    /// Keeps the bytes that arrive.
    private final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        private let bytes = Mutex(Data())

        var text: String { bytes.withLock { String(decoding: $0, as: UTF8.self) } }
        var count: Int { bytes.withLock { $0.count } }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            bytes.withLock { $0.append(contentsOf: buffer.readableBytesView) }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}

/// A service behind the gateway, on loopback, whose `/stream` never ends; mounted as `endless`.
enum EndlessService {
    static func serve<R: Sendable>(_ body: @Sendable (Int) async throws -> R) async throws -> R {
        let router = Router()
        router.get("/stream") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: ResponseBody { writer in
                let chunk = ByteBuffer(repeating: UInt8(ascii: "x"), count: 1 << 16)
                while !Task.isCancelled { try await writer.write(chunk) }
                try await writer.finish(nil)
            })
        }
        return try await withLoopbackServer(router) { port in try await body(port) }
    }

    static func entry(port: Int) -> String {
        """

          endless:
            type: upstream
            config:
              upstreams: ["http://127.0.0.1:\(port)"]
              routes:
                - { path: "/{rest...}", methods: [GET], access: public }

        """
    }
}

/// This process's descriptors, as /proc shows them (the gateway under test runs in it).
enum Descriptors {
    /// Descriptors open now.
    static func count() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }

    /// The sockets this process holds on the gateway's side of connections from `peers` to `port`:
    /// the descriptors an attacker at those addresses makes the gateway keep.
    static func gatewaySockets(port: Int, peers: Set<String>) -> Int {
        var inodes = Set<Substring>()
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + entry),
                  target.hasPrefix("socket:[") else { continue }
            inodes.insert(Substring(target.dropFirst(8).dropLast()))
        }
        let localPort = String(format: "%04X", port)
        let peerHex = Set(peers.map { address in
            address.split(separator: ".").compactMap { UInt8($0) }.reversed().map { String(format: "%02X", $0) }.joined()
        })
        // Read to the end: /proc files have no size, and a sized read would stop at the first page.
        guard let data = try? FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/net/tcp")).readToEnd() else { return -1 }
        let table = String(decoding: data, as: UTF8.self)
        return table.split(separator: "\n").dropFirst().filter { line in
            let columns = line.split(separator: " ", omittingEmptySubsequences: true)
            guard columns.count > 9 else { return false }
            let local = columns[1].split(separator: ":"), remote = columns[2].split(separator: ":")
            return local.count == 2 && remote.count == 2 && local[1] == localPort && peerHex.contains(String(remote[0])) && inodes.contains(columns[9])
        }.count
    }
}

extension ShippedGateway {
    /// The shipped file with its demo files named by absolute path, so that they are found from
    /// the test's own base directory, then changed by `edit`.
    static func repositoryFiles(_ edit: @escaping @Sendable (String) -> String) -> @Sendable (String) -> String {
        let demo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("data/demo/").path
        return { yaml in edit(yaml.replacingOccurrences(of: " data/demo/", with: " \(demo)/").replacingOccurrences(of: "[data/demo/", with: "[\(demo)/")) }
    }
}
