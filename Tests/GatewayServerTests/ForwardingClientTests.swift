#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import Testing

/// A service on loopback that counts its connections and answers by path: `/ok` "hello",
/// `/close` "bye" and `Connection: close`, `/big?size=N` N bytes in 64 KiB pieces, `/stall` a
/// head and a few bytes of a longer body and then nothing, `/silent` nothing at all, `/once` an
/// answer to a connection's first request only (it closes at the second), `/short` an answer
/// saying `Keep-Alive: timeout=1`, `/slow` an answer after 100 ms, `/echo` the request's method, body
/// length and `host` field.
private final class ScriptedService: Sendable {
    let connections = Atomic<Int>(0)
    let requests = Atomic<Int>(0)

    func serve<R: Sendable>(_ body: @Sendable (String) async throws -> R) async throws -> R {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                self.connections.add(1, ordering: .relaxed)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(service: self))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let result: Result<R, any Error>
        do { result = .success(try await body("http://127.0.0.1:\(channel.localAddress!.port!)")) } catch { result = .failure(error) }
        try? await channel.close()
        return try result.get()
    }

    final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let service: ScriptedService
        var head: HTTPRequestHead?
        var length = 0
        /// Requests this connection has carried.
        var served = 0

        init(service: ScriptedService) { self.service = service }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                length = 0
            case .body(let buffer):
                length += buffer.readableBytes
            case .end:
                guard let head else { return }
                service.requests.add(1, ordering: .relaxed)
                served += 1
                respond(to: head, context: context)
            }
        }

        private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
            let path = head.uri.split(separator: "?").first.map(String.init) ?? head.uri
            switch path {
            case "/ok":
                send(context, body: "hello", head: head)
            case "/close":
                send(context, body: "bye", head: head, fields: [("connection", "close")], close: true)
            case "/echo":
                send(context, body: "\(head.method.rawValue) \(length) \(head.headers["host"].first ?? "-")", head: head)
            case "/big":
                let size = head.uri.split(separator: "=").last.flatMap { Int($0) } ?? 0
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: ["content-length": String(size)]))), promise: nil)
                var left = size
                let piece = ByteBuffer(repeating: 0x61, count: 64 << 10)
                while left > 0 {
                    let count = min(left, piece.readableBytes)
                    context.write(wrapOutboundOut(.body(.byteBuffer(piece.getSlice(at: 0, length: count)!))), promise: nil)
                    left -= count
                }
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            case "/silent":
                break
            case "/once":
                // A second request on a kept connection finds it closed, as when a service's idle
                // close crosses the reuse.
                if served > 1 { context.close(promise: nil) } else { send(context, body: "fresh", head: head) }
            case "/slow":
                let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                context.eventLoop.scheduleTask(in: .milliseconds(100)) {
                    let (handler, context) = loopBound.value
                    handler.send(context, body: "slow", head: head)
                }
            case "/short":
                send(context, body: "short", head: head, fields: [("keep-alive", "timeout=1")])
            case "/stall":
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: ["content-length": "1000"]))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: "the start")))), promise: nil)
            default:
                send(context, body: "no such path", head: head, status: .notFound)
            }
        }

        fileprivate func send(_ context: ChannelHandlerContext, body: String, head: HTTPRequestHead, status: HTTPResponseStatus = .ok,
                          fields: [(String, String)] = [], close: Bool = false) {
            var headers = HTTPHeaders([("content-type", "text/plain"), ("content-length", String(body.utf8.count))])
            headers.add(contentsOf: fields)
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            if head.method != .HEAD { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil) }
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in if close { channel.close(promise: nil) } }
        }
    }
}

@Suite("ForwardingClient")
struct ForwardingClientTests {
    private func call(_ client: ForwardingClient, _ url: String, method: HTTPRequest.Method = .get, body: ByteBuffer? = nil,
                      timeout: Duration = .seconds(60)) async throws -> (status: Int, headers: HTTPFields, body: String) {
        let request = UpstreamRequest(method: method, url: url, body: body, timeout: timeout)
        let response = try await client.open(request, target: try #require(ForwardingTarget(url: url)), fields: [:])
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return (response.status.code, response.headers, String(buffer: bytes))
    }

    /// `body` with a fresh service, its base URL and a client of its own (its idle connections closed afterwards).
    private func withService<R: Sendable>(bodyIdleTimeout: TimeAmount = .seconds(60), maxConnections: Int = 512,
                                          _ body: @Sendable (ScriptedService, ForwardingClient, String) async throws -> R) async throws -> R {
        let service = ScriptedService()
        let client = ForwardingClient(group: MultiThreadedEventLoopGroup.singleton, bodyIdleTimeout: bodyIdleTimeout,
                                      maxConnectionsPerAddress: maxConnections)
        defer { client.closeIdle() }
        return try await service.serve { base in try await body(service, client, base) }
    }

    @Test("calls to one address reuse one kept-alive connection, one call at a time each")
    func reuse() async throws {
        try await withService { (service, client, base) async throws in
            for _ in 0..<5 { #expect(try await call(client, base + "/ok").body == "hello") }
            #expect(service.connections.load(ordering: .relaxed) == 1)
            // Eight at once need eight connections; afterwards they are all kept.
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<8 { group.addTask { try await call(client, base + "/ok").body } }
                for try await body in group { #expect(body == "hello") }
            }
            let opened = service.connections.load(ordering: .relaxed)
            #expect(opened <= 8)
            for _ in 0..<8 { _ = try await call(client, base + "/ok") }
            #expect(service.connections.load(ordering: .relaxed) == opened, "no new connection once enough are kept")
        }
    }

    @Test("a reply with Connection: close is not reused; the next call opens a fresh connection")
    func closing() async throws {
        try await withService { (service, client, base) async throws in
            #expect(try await call(client, base + "/close").body == "bye")
            #expect(try await call(client, base + "/ok").body == "hello")
            #expect(service.connections.load(ordering: .relaxed) == 2)
        }
    }

    @Test("a body left unread closes its connection: the next call gets its own reply, not the rest of the last")
    func unread() async throws {
        try await withService { (service, client, base) async throws in
            do {
                let response = try await client.open(UpstreamRequest(url: base + "/big?size=4194304"), target: try #require(ForwardingTarget(url: base + "/big?size=4194304")), fields: [:])
                var iterator = response.body.makeAsyncIterator()
                let first = try await iterator.next()
                #expect((first?.readableBytes ?? 0) > 0)
            }
            #expect(try await call(client, base + "/ok").body == "hello")
            #expect(service.connections.load(ordering: .relaxed) == 2)
        }
    }

    @Test("a large body arrives whole, read with back-pressure, and the connection is kept")
    func large() async throws {
        try await withService { (service, client, base) async throws in
            let size = 2 << 20
            let response = try await client.open(UpstreamRequest(url: base + "/big?size=\(size)"), target: try #require(ForwardingTarget(url: base + "/big?size=\(size)")), fields: [:])
            var total = 0
            var pieces = 0
            for try await piece in response.body {
                total += piece.readableBytes
                pieces += 1
                #expect(piece.getBytes(at: piece.readerIndex, length: 1) == [0x61])
                // A slow reader: reading pauses and resumes as it catches up.
                if pieces % 16 == 0 { try await Task.sleep(for: .milliseconds(1)) }
            }
            #expect(total == size)
            #expect(try await call(client, base + "/ok").body == "hello")
            #expect(service.connections.load(ordering: .relaxed) == 1)
        }
    }

    @Test("HEAD gets the head alone (its length field is not waited for) and the connection is kept")
    func head() async throws {
        try await withService { (service, client, base) async throws in
            let reply = try await call(client, base + "/ok", method: .head, timeout: .seconds(10))
            #expect(reply.status == 200)
            #expect(reply.headers[.contentLength] == "5")
            #expect(reply.body.isEmpty)
            #expect(try await call(client, base + "/ok").body == "hello")
            #expect(service.connections.load(ordering: .relaxed) == 1)
        }
    }

    @Test("a body goes with its length; the Host field is the URL's authority; a POST without a body says length 0")
    func bodies() async throws {
        try await withService { (service, client, base) async throws in
            let authority = String(base.dropFirst(7))
            #expect(try await call(client, base + "/echo", method: .post, body: ByteBuffer(string: "twelve bytes")).body == "POST 12 \(authority)")
            #expect(try await call(client, base + "/echo", method: .post).body == "POST 0 \(authority)")
            #expect(try await call(client, base + "/echo").body == "GET 0 \(authority)")
        }
    }

    @Test("a body that stalls ends its reader with a 504 problem after the idle time; the connection is not reused")
    func stall() async throws {
        try await withService(bodyIdleTimeout: .milliseconds(300)) { (service, client, base) async throws in
            let response = try await client.open(UpstreamRequest(url: base + "/stall"), target: try #require(ForwardingTarget(url: base + "/stall")), fields: [:])
            #expect(response.status == .ok)
            let error = await #expect(throws: GatewayError.self) { _ = try await response.body.collect(upTo: 1 << 20) }
            #expect(error?.status == 504)
            #expect(try await call(client, base + "/ok").body == "hello")
            #expect(service.connections.load(ordering: .relaxed) == 2)
        }
    }

    @Test("a head that does not come within the request's timeout is a 504 (its connection closed); nothing listening is a 502")
    func failures() async throws {
        try await withService { (service, client, base) async throws in
            // The service never answers: only the deadline ends the call.
            let error = await #expect(throws: GatewayError.self) { _ = try await call(client, base + "/silent", timeout: .milliseconds(200)) }
            #expect(error?.status == 504)
            #expect(try await call(client, base + "/ok").body == "hello")
            #expect(service.connections.load(ordering: .relaxed) == 2, "the silent call's connection was not reused")
        }
        // A service that is down: nothing listens at its address.
        try await withRefusingPort { port in
            let error = await #expect(throws: GatewayError.self) {
                _ = try await call(ForwardingClient(group: MultiThreadedEventLoopGroup.singleton), "http://127.0.0.1:\(port)/ok")
            }
            #expect(error?.status == 502)
        }
    }

    @Test("a kept connection closed as it is reused: a GET goes again on a new connection, a POST is a 502")
    func staleReuse() async throws {
        try await withService { (service, client, base) async throws in
            #expect(try await call(client, base + "/once").body == "fresh")
            #expect(try await call(client, base + "/once").body == "fresh", "retried on a connection of its own")
            #expect(service.connections.load(ordering: .relaxed) == 2)
            client.closeIdle()
            #expect(try await call(client, base + "/once", method: .post).body == "fresh")
            let error = await #expect(throws: GatewayError.self) { _ = try await call(client, base + "/once", method: .post) }
            #expect(error?.status == 502, "a POST may have been acted on: never sent twice")
        }
    }

    @Test("a service's Keep-Alive timeout is honoured: a connection it will close soon is not kept")
    func keepAliveTimeout() async throws {
        try await withService { (service, client, base) async throws in
            #expect(try await call(client, base + "/short").body == "short")
            #expect(try await call(client, base + "/short").body == "short")
            #expect(service.connections.load(ordering: .relaxed) == 2)
        }
        #expect(ForwardingConnectionHandler.keepAliveTimeout(["keep-alive": "timeout=5, max=1000"]) == .seconds(4))
        #expect(ForwardingConnectionHandler.keepAliveTimeout(["keep-alive": "max=1000"]) == nil)
        #expect(ForwardingConnectionHandler.keepAliveTimeout(["keep-alive": "timeout=abc"]) == nil)
        #expect(ForwardingConnectionHandler.keepAliveTimeout([:]) == nil)
    }

    @Test("at most so many connections to an address: further calls wait for one to come free, within their timeout")
    func connectionLimit() async throws {
        try await withService(maxConnections: 2) { (service, client, base) async throws in
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<6 { group.addTask { try await call(client, base + "/slow").body } }
                for try await body in group { #expect(body == "slow") }
            }
            #expect(service.connections.load(ordering: .relaxed) == 2, "six calls on two connections")
        }
        try await withService(maxConnections: 1) { (service, client, base) async throws in
            // The one connection is held by a call the service never answers (for long enough that
            // a loaded machine cannot end it before the next call has waited its 200 ms).
            async let held: Void = { _ = try? await call(client, base + "/silent", timeout: .seconds(8)) }()
            while service.requests.load(ordering: .relaxed) < 1 { try await Task.sleep(for: .milliseconds(10)) }
            let error = await #expect(throws: GatewayError.self) { _ = try await call(client, base + "/ok", timeout: .milliseconds(200)) }
            #expect(error?.status == 504, "no connection came free in time")
            // Once the held call's deadline closes its connection, its place opens for the next.
            #expect(try await call(client, base + "/ok", timeout: .seconds(60)).body == "hello")
            await held
            #expect(service.connections.load(ordering: .relaxed) == 2)
        }
    }

    @Test("many callers on a full address: every call is answered (a connection that comes back idle as a caller queues is not left unused)")
    func connectionLimitUnderContention() async throws {
        try await withService(maxConnections: 2) { (service, client, base) async throws in
            let answered = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<32 {
                    group.addTask {
                        var count = 0
                        for _ in 0..<25 where try await call(client, base + "/ok").body == "hello" { count += 1 }
                        return count
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(answered == 32 * 25)
            #expect(service.connections.load(ordering: .relaxed) <= 2)
        }
    }

    @Test("a connection not made within the call's timeout is a 504: an address whose backlog is full drops the handshake")
    func connectTimeout() async throws {
        // A socket that listens but never accepts, its backlog filled: further handshakes go unanswered.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try #require(withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } } == 0)
        try #require(listen(listener, 0) == 0)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        let port = Int(UInt16(bigEndian: address.sin_port))
        var fillers: [any Channel] = []
        for _ in 0..<2 {
            if let channel = try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connectTimeout(.milliseconds(300))
                .connect(host: "127.0.0.1", port: port).get() { fillers.append(channel) }
        }
        // The handshake really goes unanswered now (else this test would prove nothing).
        do {
            let probe = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connectTimeout(.milliseconds(200))
                .connect(host: "127.0.0.1", port: port).get()
            fillers.append(probe)
            Issue.record("the listener's backlog did not fill")
            return
        } catch ChannelError.connectTimeout {}
        let client = ForwardingClient(group: MultiThreadedEventLoopGroup.singleton)
        let error = await #expect(throws: GatewayError.self) { _ = try await call(client, "http://127.0.0.1:\(port)/ok", timeout: .milliseconds(300)) }
        #expect(error?.status == 504)
        for channel in fillers { try? await channel.close() }
    }

    @Test("targets: host, port and path from plain http URLs; https, user info and fragments are not forwarding targets")
    func targets() throws {
        let plain = try #require(ForwardingTarget(url: "http://127.0.0.1:8080/v1/x?a=1"))
        #expect(plain.host == "127.0.0.1" && plain.port == 8080 && plain.pathAndQuery == "/v1/x?a=1" && plain.authority == "127.0.0.1:8080")
        let bare = try #require(ForwardingTarget(url: "http://service.internal"))
        #expect(bare.host == "service.internal" && bare.port == 80 && bare.pathAndQuery == "/")
        let query = try #require(ForwardingTarget(url: "http://service.internal?q=1"))
        #expect(query.pathAndQuery == "/?q=1")
        let six = try #require(ForwardingTarget(url: "http://[::1]:9000/a"))
        #expect(six.host == "::1" && six.port == 9000 && six.authority == "[::1]:9000")
        #expect(ForwardingTarget(url: "https://example.com/") == nil)
        #expect(ForwardingTarget(url: "http://user:secret@example.com/") == nil)
        #expect(ForwardingTarget(url: "http://example.com/#part") == nil)
        #expect(ForwardingTarget(url: "http://example.com:99999/") == nil)
        #expect(ForwardingTarget(url: "http://example.com:port/") == nil)
        #expect(ForwardingTarget(url: "http://") == nil)
    }
}
