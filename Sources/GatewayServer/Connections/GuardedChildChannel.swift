import HummingbirdCore
import Logging
import NIOCore

/// A listener's connection set-up with its bounds: each accepted connection is admitted by the
/// listener's ``ConnectionGuard`` (or answered 503 and closed at once, before any HTTP handling is
/// set up) and, when `timeouts` are given, gets a ``ConnectionDeadlineHandler`` in front of
/// everything else; then `base` (HTTP/1.1, WebSocket upgrades, TLS) sets up the rest.
struct GuardedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    enum Value: ServerChildChannelValue {
        case admitted(Base.Value, ConnectionCertificate?)
        case refused(any Channel)

        var channel: any Channel {
            switch self {
            case .admitted(let value, _): value.channel
            case .refused(let channel): channel
            }
        }
    }

    let base: Base
    let connections: ConnectionGuard
    /// The deadlines of an HTTP/1.1 exchange; nil where the protocol keeps its own (HTTP/2).
    let timeouts: ServerTimeouts?
    /// Whether bytes written first in the pipeline reach the client as they are (not under TLS).
    let canReply: Bool
    /// Whether the TLS handshake asks for a client certificate, which requests then see
    /// (``ConnectionCertificate``).
    var clientCertificates = false

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard let ticket = connections.admit(peer: channel.remoteAddress) else {
            logger.debug("connection refused: too many open", metadata: ["peer": .string(channel.remoteAddress?.description ?? "-")])
            do {
                try channel.pipeline.syncOperations.addHandler(RefusingHandler(canReply: canReply))
            } catch {
                channel.close(promise: nil)
            }
            return channel.eventLoop.makeSucceededFuture(.refused(channel))
        }
        let connections = self.connections
        channel.closeFuture.whenComplete { _ in connections.release(ticket) }
        if let timeouts {
            do {
                try channel.pipeline.syncOperations.addHandler(ConnectionDeadlineHandler(timeouts, canReply: canReply))
            } catch {
                return channel.eventLoop.makeFailedFuture(error)
            }
        }
        let clientCertificates = self.clientCertificates
        return base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            // The TLS handler was added by the base's set-up, before the channel is active: the
            // handshake cannot complete unseen.
            .admitted(value, clientCertificates ? try ClientCertificateRecorder.install(on: channel) : nil)
        }
    }

    func handle(value: Value, logger: Logger) async {
        guard case .admitted(let admitted, let certificate) = value else { return }
        guard let certificate else { return await base.handle(value: admitted, logger: logger) }
        await ConnectionCertificate.$current.withValue(certificate) { await base.handle(value: admitted, logger: logger) }
    }
}

/// Answers a connection over the caps 503 (where it can) and closes it as soon as it is active.
private final class RefusingHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let canReply: Bool

    init(canReply: Bool) { self.canReply = canReply }

    static let reply: String = {
        let problem = #"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"Too many connections are open; try again shortly."}"#
        return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nContent-Length: \(problem.utf8.count)\r\n"
            + "Retry-After: 1\r\nConnection: close\r\n\r\n" + problem
    }()

    func channelActive(context: ChannelHandlerContext) {
        if canReply {
            context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: Self.reply)), promise: nil)
        }
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}
