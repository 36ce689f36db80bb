import NIOCore
import NIOHTTPTypes

/// What happens in an HTTP exchange, told to the ``ConnectionDeadlineHandler`` at the front of the
/// connection's pipeline as outbound user events.
enum HTTPExchangeEvent: Sendable {
    /// A request head was read whole.
    case requestHead
    /// A request's body was read to its end.
    case requestEnd
    /// A response was written to its end.
    case responseEnd
    /// The connection is becoming a WebSocket: its pings keep it, not these deadlines.
    case upgrading
    /// An HTTP/2 stream began (its request head arrived) or ended: the stream keeps its own body
    /// and send deadlines (``HTTPExchangeObserver``), the connection counts what is in flight.
    case streamOpened
    case streamClosed
}

/// The deadlines of `server.timeouts` on one connection. It sits first in the pipeline, where it
/// sees every byte arrive (before TLS and the HTTP decoder), and learns where each request begins
/// and ends from ``HTTPExchangeObserver``. Hummingbird's own idle timeout is not used: on a
/// listener that accepts WebSocket upgrades it starts only once the first request head has been
/// read, so a head sent slowly enough would never meet it.
///
/// - No request in progress and no byte of a new one: closed after `idle`.
/// - The first byte of a head arrived: the head must be complete within `head`, or the client
///   gets 408 (when nothing else is being answered and the connection is not TLS, whose bytes are
///   written after this handler) and the connection is closed. On HTTP/2 the TLS handshake and
///   the connection preface up to the first stream count as the head; after a stream, trickled
///   frames do not hold the connection past `idle` from its last stream.
/// - A body being read: closed after `body` without a byte.
/// - A reply the client stops taking (nothing can be written): closed after `send`.
/// - A request being answered, or a WebSocket: no other deadline here.
final class ConnectionDeadlineHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = Any
    typealias OutboundOut = ByteBuffer

    private let head: TimeAmount
    private let idle: TimeAmount
    private let body: TimeAmount
    private let send: TimeAmount
    /// Whether bytes written here reach the client as they are (no TLS behind this handler).
    private let canReply: Bool

    /// Requests whose head has arrived and whose response has not ended.
    private var inFlight = 0
    private var readingBody = false
    private var upgrading = false
    /// HTTP/2 streams seen on this connection, and those open.
    private var streamsSeen = 0
    private var openStreams = 0
    /// Since when nothing could be written (the client does not read), if so.
    private var stalledSince: NIODeadline?
    /// When the connection last had nothing to do (opened, or its last response ended).
    private var idleSince = NIODeadline.now()
    /// When the first byte of the head being read arrived.
    private var headStartedAt: NIODeadline?
    private var lastReadAt = NIODeadline.now()
    private let timer = DeadlineTimer()

    private enum Expiry { case head, idle, body, send }

    init(_ timeouts: ServerTimeouts, canReply: Bool) {
        head = timeouts.head.timeAmount
        idle = timeouts.idle.timeAmount
        body = timeouts.body.timeAmount
        send = timeouts.send.timeAmount
        self.canReply = canReply
    }

    /// The reply to a head that took too long.
    static let timeoutReply: String = {
        let problem = #"{"type":"about:blank","title":"Request Timeout","status":408,"detail":"The request head was not received in time."}"#
        return "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/problem+json\r\nContent-Length: \(problem.utf8.count)\r\n"
            + "Connection: close\r\n\r\n" + problem
    }()

    private var nextDeadline: (at: NIODeadline, expiry: Expiry)? {
        if upgrading { return nil }
        if let stalledSince { return (stalledSince + send, .send) }
        if readingBody { return (lastReadAt + body, .body) }
        if inFlight > 0 || openStreams > 0 { return nil }
        if let headStartedAt { return (headStartedAt + head, .head) }
        return (idleSince + idle, .idle)
    }

    func channelActive(context: ChannelHandlerContext) {
        idleSince = .now()
        arm(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        disarm()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if DeadlineTimer.noteWritability(context.channel.isWritable, stalledSince: &stalledSince) { arm(context) }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = NIODeadline.now()
        lastReadAt = now
        if headStartedAt == nil, inFlight == 0, openStreams == 0, streamsSeen == 0, !readingBody, !upgrading {
            headStartedAt = now
            arm(context)
        }
        context.fireChannelRead(data)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let event = event as? HTTPExchangeEvent else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        switch event {
        case .requestHead:
            inFlight += 1
            readingBody = true
            headStartedAt = nil
            upgrading = false
        case .requestEnd:
            readingBody = false
        case .responseEnd:
            inFlight = max(0, inFlight - 1)
            if inFlight == 0 {
                idleSince = .now()
                headStartedAt = nil
            }
        case .upgrading:
            upgrading = true
        case .streamOpened:
            streamsSeen += 1
            openStreams += 1
            headStartedAt = nil
        case .streamClosed:
            openStreams = max(0, openStreams - 1)
            if openStreams == 0 { idleSince = .now() }
        }
        arm(context)
        promise?.succeed()
    }

    /// Schedules a check at the next deadline unless one is due no later. A check that finds its
    /// deadline moved (bytes arrived meanwhile) schedules the next.
    private func arm(_ context: ChannelHandlerContext) {
        guard let next = nextDeadline else { return }
        timer.arm(next.at, on: context.eventLoop) { [self] in check(context) }
    }

    private func disarm() { timer.disarm() }

    private func check(_ context: ChannelHandlerContext) {
        guard context.channel.isActive, let next = nextDeadline else { return }
        guard next.at <= .now() else {
            arm(context)
            return
        }
        if next.expiry == .head, canReply, inFlight == 0 {
            context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: Self.timeoutReply)), promise: nil)
        }
        if next.expiry == .head || next.expiry == .idle {
            // Between requests, the HTTP handlers are told the input ended, as when a client stops
            // sending: a connection given up on is not an error to log.
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
        context.close(promise: nil)
    }
}

/// Tells the ``ConnectionDeadlineHandler`` where each request and response begins and ends: added
/// after Hummingbird's HTTP decoding, it passes every part on unchanged.
///
/// On an HTTP/2 stream (a channel with a parent) it keeps the stream's own deadlines, as streams
/// share their connection: the request body must keep arriving (`body`) and the client must keep
/// taking the reply (`send`, HTTP/2 flow control), or the stream is reset; the connection's
/// handler is told when the stream opens and closes.
final class HTTPExchangeObserver: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The deadlines of a stream; nil on an HTTP/1.1 connection, whose front handler keeps them.
    private let timeouts: ServerTimeouts?
    private var connection: (any Channel)?
    private var streamOpen = false
    private var readingBody = false
    private var lastReadAt = NIODeadline.now()
    private var stalledSince: NIODeadline?
    private let timer = DeadlineTimer()

    init(streamTimeouts: ServerTimeouts? = nil) {
        timeouts = streamTimeouts
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // An HTTP/2 stream's parent is its connection, whose parent is the listener; an HTTP/1.1
        // connection (ALPN's other choice) has the listener for a parent and no grandparent.
        if timeouts != nil, let parent = context.channel.parent, parent.parent != nil { connection = parent }
    }

    func handlerRemoved(context: ChannelHandlerContext) { closeStream() }

    func channelInactive(context: ChannelHandlerContext) {
        closeStream()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            if let connection {
                streamOpen = true
                readingBody = true
                connection.pipeline.triggerUserOutboundEvent(HTTPExchangeEvent.streamOpened, promise: nil)
            } else {
                context.triggerUserOutboundEvent(HTTPExchangeEvent.requestHead, promise: nil)
            }
        case .end:
            if connection != nil { readingBody = false } else { context.triggerUserOutboundEvent(HTTPExchangeEvent.requestEnd, promise: nil) }
        case .body: break
        }
        if connection != nil {
            lastReadAt = .now()
            arm(context)
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let ends = if case .end = unwrapOutboundIn(data) { true } else { false }
        context.write(data, promise: promise)
        if ends, connection == nil { context.triggerUserOutboundEvent(HTTPExchangeEvent.responseEnd, promise: nil) }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if connection != nil, DeadlineTimer.noteWritability(context.channel.isWritable, stalledSince: &stalledSince) { arm(context) }
        context.fireChannelWritabilityChanged()
    }

    // MARK: A stream's deadlines

    private var nextDeadline: NIODeadline? {
        guard let timeouts else { return nil }
        if let stalledSince { return stalledSince + timeouts.send.timeAmount }
        if readingBody { return lastReadAt + timeouts.body.timeAmount }
        return nil
    }

    private func arm(_ context: ChannelHandlerContext) {
        guard let next = nextDeadline else { return }
        timer.arm(next, on: context.eventLoop) { [self] in
            guard context.channel.isActive, let due = nextDeadline else { return }
            if due <= .now() { context.close(promise: nil) } else { arm(context) }
        }
    }

    private func closeStream() {
        timer.disarm()
        if streamOpen, let connection {
            streamOpen = false
            connection.pipeline.triggerUserOutboundEvent(HTTPExchangeEvent.streamClosed, promise: nil)
        }
    }
}

/// One scheduled check at a time, at the earliest deadline asked for; a check that finds its
/// deadline moved (bytes arrived meanwhile) asks again. Used on its channel's event loop only.
final class DeadlineTimer {
    private var armed: Scheduled<Void>?
    private var armedAt: NIODeadline?

    func arm(_ deadline: NIODeadline, on loop: any EventLoop, _ fire: @escaping () -> Void) {
        if let armedAt, armedAt <= deadline { return }
        armed?.cancel()
        armedAt = deadline
        armed = loop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            armed = nil
            armedAt = nil
            fire()
        }
    }

    func disarm() {
        armed?.cancel()
        armed = nil
        armedAt = nil
    }

    /// Keeps when a channel stopped being writable (nil while it is); true when it has just
    /// stopped, so that the send deadline is armed.
    static func noteWritability(_ writable: Bool, stalledSince: inout NIODeadline?) -> Bool {
        if writable {
            stalledSince = nil
            return false
        }
        guard stalledSince == nil else { return false }
        stalledSince = .now()
        return true
    }
}
