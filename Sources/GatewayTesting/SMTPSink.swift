import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// An SMTP server on loopback that accepts every message and keeps it: for tests of what a
/// gateway mails (`mail: { host: 127.0.0.1, port: sink.port, from: ... }`).
public final class SMTPSink: Sendable {
    /// The port it listens on (127.0.0.1).
    public let port: Int
    private let store: SMTPSinkStore
    private let channel: any Channel

    private init(port: Int, channel: any Channel, store: SMTPSinkStore) {
        self.port = port
        self.channel = channel
        self.store = store
    }

    /// Listens on a free port of 127.0.0.1.
    public static func start() async throws -> SMTPSink {
        let store = SMTPSinkStore()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(SMTPSessionHandler(store: store)) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return SMTPSink(port: channel.localAddress?.port ?? 0, channel: channel, store: store)
    }

    public func stop() async { try? await channel.close() }

    /// The messages received: the recipient and the text between DATA and the final dot.
    public var all: [(to: String, data: String)] { store.messages.withLock { $0 } }

    /// The messages received, once there are at least `count` or `limit` has passed (the gateway
    /// sends mail off the request path, a moment after the request is answered).
    public func waitForMessages(_ count: Int, within limit: Duration = .seconds(30)) async throws -> [(to: String, data: String)] {
        let deadline = ContinuousClock.now + limit
        while all.count < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        return all
    }

    /// The first http(s) link in the last message, if any.
    public var lastLink: String? {
        all.last.flatMap { message in
            message.data.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.hasPrefix("http") }
        }
    }
}

final class SMTPSinkStore: Sendable {
    let messages = Mutex<[(to: String, data: String)]>([])
}

/// One SMTP session: greets, answers each command, collects DATA until the lone dot.
final class SMTPSessionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let store: SMTPSinkStore
    var pending = ""
    var recipient = ""
    var data: [String]?

    init(store: SMTPSinkStore) { self.store = store }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: "220 sink ready\r\n")), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data input: NIOAny) {
        pending += String(buffer: unwrapInboundIn(input))
        while let end = pending.range(of: "\r\n") {
            let line = String(pending[..<end.lowerBound])
            pending = String(pending[end.upperBound...])
            respond(to: line, context: context)
        }
    }

    func respond(to line: String, context: ChannelHandlerContext) {
        func say(_ text: String) { context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: text + "\r\n")), promise: nil) }
        if var lines = data {
            if line == "." {
                store.messages.withLock { $0.append((recipient, lines.joined(separator: "\n"))) }
                data = nil
                say("250 kept")
            } else {
                lines.append(line)
                data = lines
            }
            return
        }
        switch line.prefix(4).uppercased() {
        case "EHLO": say("250-sink\r\n250 8BITMIME")
        case "MAIL": say("250 ok")
        case "RCPT":
            recipient = String(line.drop { $0 != "<" }.dropFirst().prefix { $0 != ">" })
            say("250 ok")
        case "DATA":
            data = []
            say("354 go on")
        case "QUIT":
            say("221 bye")
            context.close(promise: nil)
        default: say("500 what")
        }
    }
}
