import NIOCore
import NIOHTTPTypes

/// What happens in an HTTP/1.1 exchange, told to the ``ConnectionDeadlineHandler`` at the front of
/// the connection's pipeline as outbound user events.
enum HTTPExchangeEvent: Sendable {
    /// A request head was read whole.
    case requestHead
    /// A request's body was read to its end.
    case requestEnd
    /// A response was written to its end.
    case responseEnd
    /// The connection is becoming a WebSocket: its pings keep it, not these deadlines.
    case upgrading
}

/// The deadlines of `server.timeouts` on one HTTP/1.1 connection. It sits first in the pipeline,
/// where it sees every byte arrive (before TLS and the HTTP decoder), and learns where each request
/// begins and ends from ``HTTPExchangeObserver``. Hummingbird's own idle timeout is not used: on a
/// listener that accepts WebSocket upgrades it starts only once the first request head has been
/// read, so a head sent slowly enough would never meet it.
///
/// - No request in progress and no byte of a new one: closed after `idle`.
/// - The first byte of a head arrived: the head must be complete within `head`, or the client
///   gets 408 (when nothing else is being answered and the connection is not TLS, whose bytes are
///   written after this handler) and the connection is closed.
/// - A body being read: closed after `body` without a byte.
/// - A request being answered, or a WebSocket: no deadline here.
final class ConnectionDeadlineHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = Any
    typealias OutboundOut = ByteBuffer

    private let head: TimeAmount
    private let idle: TimeAmount
    private let body: TimeAmount
    /// Whether bytes written here reach the client as they are (no TLS behind this handler).
    private let canReply: Bool

    /// Requests whose head has arrived and whose response has not ended.
    private var inFlight = 0
    private var readingBody = false
    private var upgrading = false
    /// When the connection last had nothing to do (opened, or its last response ended).
    private var idleSince = NIODeadline.now()
    /// When the first byte of the head being read arrived.
    private var headStartedAt: NIODeadline?
    private var lastReadAt = NIODeadline.now()
    private var armed: Scheduled<Void>?
    private var armedAt: NIODeadline?

    private enum Expiry { case head, idle, body }

    init(_ timeouts: ServerTimeouts, canReply: Bool) {
        head = timeouts.head.timeAmount
        idle = timeouts.idle.timeAmount
        body = timeouts.body.timeAmount
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
        if readingBody { return (lastReadAt + body, .body) }
        if inFlight > 0 { return nil }
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

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = NIODeadline.now()
        lastReadAt = now
        if headStartedAt == nil, inFlight == 0, !readingBody, !upgrading {
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
        }
        arm(context)
        promise?.succeed()
    }

    /// Schedules a check at the next deadline unless one is due no later. A check that finds its
    /// deadline moved (bytes arrived meanwhile) schedules the next.
    private func arm(_ context: ChannelHandlerContext) {
        guard let next = nextDeadline else { return }
        if let armedAt, armedAt <= next.at { return }
        armed?.cancel()
        armedAt = next.at
        armed = context.eventLoop.assumeIsolated().scheduleTask(deadline: next.at) { [self] in
            armed = nil
            armedAt = nil
            check(context)
        }
    }

    private func disarm() {
        armed?.cancel()
        armed = nil
        armedAt = nil
    }

    private func check(_ context: ChannelHandlerContext) {
        guard context.channel.isActive, let next = nextDeadline else { return }
        guard next.at <= .now() else {
            arm(context)
            return
        }
        if next.expiry == .head, canReply, inFlight == 0 {
            context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: Self.timeoutReply)), promise: nil)
        }
        if next.expiry != .body {
            // Between requests, the HTTP handlers are told the input ended, as when a client stops
            // sending: a connection given up on is not an error to log.
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
        context.close(promise: nil)
    }
}

/// Tells the ``ConnectionDeadlineHandler`` where each request and response begins and ends: added
/// after Hummingbird's HTTP decoding, it passes every part on unchanged.
final class HTTPExchangeObserver: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head: context.triggerUserOutboundEvent(HTTPExchangeEvent.requestHead, promise: nil)
        case .end: context.triggerUserOutboundEvent(HTTPExchangeEvent.requestEnd, promise: nil)
        case .body: break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let ends = if case .end = unwrapOutboundIn(data) { true } else { false }
        context.write(data, promise: promise)
        if ends { context.triggerUserOutboundEvent(HTTPExchangeEvent.responseEnd, promise: nil) }
    }
}
