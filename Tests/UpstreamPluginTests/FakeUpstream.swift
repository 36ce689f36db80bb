import AsyncHTTPClient
import Foundation
import HTTPTypes
import GatewayServer
import GatewayTesting
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import NIOPosix
import Synchronization

/// An upstream service on loopback whose answers the test switches: it echoes what it got, answers
/// any status, sleeps, streams large bodies, counts what it sent and received, and has a health
/// path that can be turned down.
final class FakeUpstream: Sendable {
    let name: String
    let requests = Atomic<Int>(0)
    let inFlight = Atomic<Int>(0)
    /// The most requests `/hold` had in flight at once.
    let mostInFlight = Atomic<Int>(0)
    /// Bytes of `/big` written so far.
    let sent = Atomic<Int>(0)
    /// Bytes of request bodies read so far.
    let received = Atomic<Int>(0)
    let healthy = Mutex(true)
    /// The status every request answers instead of its own, when set.
    let failWith = Mutex<Int?>(nil)

    init(_ name: String) { self.name = name }

    func serve<R: Sendable>(_ body: @Sendable (String) async throws -> R) async throws -> R {
        let router = Router()
        router.get("/health") { _, _ -> Response in
            Response(status: self.healthy.withLock { $0 } ? .ok : .serviceUnavailable)
        }
        router.get("/big") { request, _ -> Response in
            self.requests.add(1, ordering: .relaxed)
            let size = request.uri.queryParameters["size"].flatMap { Int($0) } ?? 1 << 20
            return Response(status: .ok, headers: [.contentType: "application/octet-stream", .contentLength: String(size)],
                            body: ResponseBody(contentLength: size) { writer in
                                let chunk = ByteBuffer(repeating: 0x61, count: 64 << 10)
                                var left = size
                                while left > 0 {
                                    let piece = chunk.getSlice(at: 0, length: min(left, chunk.readableBytes))!
                                    try await writer.write(piece)
                                    left -= piece.readableBytes
                                    self.sent.add(piece.readableBytes, ordering: .relaxed)
                                }
                                try await writer.finish(nil)
                            })
        }
        router.get("/slow") { _, _ -> Response in
            self.requests.add(1, ordering: .relaxed)
            try await Task.sleep(for: .seconds(30))
            return Response(status: .ok)
        }
        router.get("/hold") { request, _ -> Response in
            self.requests.add(1, ordering: .relaxed)
            let now = self.inFlight.add(1, ordering: .relaxed).newValue
            self.mostInFlight.max(now, ordering: .relaxed)
            defer { self.inFlight.subtract(1, ordering: .relaxed) }
            let milliseconds = request.uri.queryParameters["ms"].flatMap { Int($0) } ?? 500
            try await Task.sleep(for: .milliseconds(milliseconds))
            return Response(status: .ok, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: self.name)))
        }
        router.get("/status/{code}") { _, context -> Response in
            self.requests.add(1, ordering: .relaxed)
            let code = context.parameters.get("code").flatMap { Int($0) } ?? 500
            return Response(status: .init(code: code), headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "status \(code) from \(self.name)")))
        }
        for method in [HTTPRequest.Method.get, .post, .put, .patch, .delete] {
            router.on("**", method: method) { request, context -> Response in
                self.requests.add(1, ordering: .relaxed)
                if let status = self.failWith.withLock({ $0 }) {
                    return Response(status: .init(code: status), headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "failing")))
                }
                var length = 0
                for try await piece in request.body {
                    length += piece.readableBytes
                    self.received.add(piece.readableBytes, ordering: .relaxed)
                }
                var headers: [String: String] = [:]
                for field in request.headers { headers[field.name.canonicalName] = headers[field.name.canonicalName].map { $0 + ", " + field.value } ?? field.value }
                let echo: [String: Any] = [
                    "upstream": self.name, "method": request.method.rawValue, "path": request.uri.path, "query": request.uri.query ?? "",
                    "headers": headers, "bodyLength": length,
                ]
                let data = try JSONSerialization.data(withJSONObject: echo, options: [.sortedKeys])
                return Response(status: .ok, headers: [.contentType: "application/json", HTTPField.Name("X-Upstream")!: self.name,
                                                       HTTPField.Name("X-Internal")!: "secret", .connection: "keep-alive"],
                                body: .init(byteBuffer: ByteBuffer(bytes: data)))
            }
        }
        return try await withLoopbackServer(router) { port in try await body("http://127.0.0.1:\(port)") }
    }
}

/// A TCP server on loopback that misbehaves at the socket: it closes each connection as soon as it
/// has read a request (`reset`), or answers a head promising more body than it sends (`truncate`).
enum BrokenServer {
    enum Kind: Sendable { case reset, truncate }

    static func serve<R: Sendable>(_ kind: Kind, _ body: @Sendable (String) async throws -> R) async throws -> R {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in channel.pipeline.addHandler(Misbehaving(kind: kind)) }
            .bind(host: "127.0.0.1", port: 0).get()
        do {
            let result = try await body("http://127.0.0.1:\(channel.localAddress!.port!)")
            try? await channel.close()
            return result
        } catch {
            try? await channel.close()
            throw error
        }
    }

    final class Misbehaving: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let kind: Kind
        init(kind: Kind) { self.kind = kind }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch kind {
            case .reset:
                context.close(promise: nil)
            case .truncate:
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\nonly the start"
                context.writeAndFlush(NIOAny(ByteBuffer(string: head))).whenComplete { _ in context.close(promise: nil) }
            }
        }
    }
}

/// Serves `gateway` on a free loopback port while `body` runs; `body` gets the port.
func listening<R: Sendable>(_ gateway: Gateway, _ body: @Sendable (Int) async throws -> R) async throws -> R {
    let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
    let app = gateway.makeApplication(host: "127.0.0.1", port: 0, onStart: { continuation.yield($0) })
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await app.runService(gracefulShutdownSignals: []) }
        var iterator = ports.makeAsyncIterator()
        let port = await iterator.next() ?? 0
        defer { group.cancelAll() }
        return try await body(port)
    }
}

/// Sends raw bytes to a loopback port and reads everything until the server closes the connection.
enum RawClient {
    static func exchange(port: Int, request: String) async throws -> String {
        let collector = Collector()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in channel.pipeline.addHandler(collector) }
            .connect(host: "127.0.0.1", port: port).get()
        try await channel.writeAndFlush(ByteBuffer(string: request))
        try await channel.closeFuture.get()
        return collector.text
    }

    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        private let received = Mutex(ByteBuffer())
        var text: String { received.withLock { String(buffer: $0) } }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = Self.unwrapInboundIn(data)
            received.withLock { $0.writeBuffer(&buffer) }
        }
    }
}

/// A WebSocket service on loopback: it first tells what it was opened with (path, query, the
/// service key field), then echoes every text message.
func withWebSocketEcho<R: Sendable>(_ body: @Sendable (String) async throws -> R) async throws -> R {
    let router = Router(context: BasicWebSocketRequestContext.self)
    router.ws("**") { inbound, outbound, context in
        let request = context.request
        let key = request.headers[HTTPField.Name("X-Service-Key")!] ?? "-"
        let version = request.headers[HTTPField.Name("Sec-WebSocket-Version")!] ?? "-"
        try await outbound.write(.text("opened \(request.uri.path)?\(request.uri.query ?? "") key=\(key) version=\(version)"))
        for try await message in inbound.messages(maxSize: 1 << 16) {
            if case .text(let text) = message { try await outbound.write(.text("echo \(text)")) }
        }
    }
    return try await withLoopbackServer(router, server: .http1WebSocketUpgrade(webSocketRouter: router)) { port in
        try await body("http://127.0.0.1:\(port)")
    }
}
