import Foundation
import GatewayCore
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The client of forwarded calls to plain-HTTP services (`type: upstream`, composites): kept-alive
/// HTTP/1.1 connections, one request at a time each; a reply that arrives in one read is handed
/// over whole, a longer one as soon as its head arrives, its body streamed with back-pressure.
///
/// A forwarded call is the gateway's hottest path after its own endpoints, and AsyncHTTPClient's
/// general machinery (URL parsing, redirect and decompression handling, a state machine and a
/// timer per request, its own tracing span) cost about four times what the call itself costs
/// (Benchmarks/README.md, "Forwarding to an upstream service"). This client does only what
/// forwarding needs: the request is already made (path, query and fields by the forwarder), the
/// reply goes back as it came. TLS, streamed uploads and every other call of a plugin still go
/// through AsyncHTTPClient (``AsyncUpstreamClient``).
///
/// Measured (`Benchmarks/upstream/run`, 2 rounds each, runs interleaved, 2-core machine,
/// 2026-11-28): forwarding on 32 connections 0.196 and 0.198 of nginx's throughput through this
/// client, 0.134 and 0.127 through AsyncHTTPClient (gateway CPU 184–210 against 319–330 µs a
/// request); latency added on one connection 0.248 and 0.247 ms against 0.477 and 0.328 ms.
///
/// Guarantees: a connection carries one exchange at a time and goes back to the idle set only
/// after its reply ended whole with keep-alive; a reply the caller stops reading closes its
/// connection; the head must come within the request's timeout (504 otherwise) and the body may
/// stall at most its ``bodyIdleTimeout``; a service that cannot be reached, resets or answers with a
/// malformed reply is a 502.
final class ForwardingClient: Sendable {
    /// One per process, like `HTTPClient.shared`, on the event loops the server runs on.
    static let shared = ForwardingClient(group: MultiThreadedEventLoopGroup.singleton)

    static let connectTimeout = TimeAmount.seconds(5)
    /// An idle connection older than this is closed rather than reused, unless the service said
    /// less (`Keep-Alive: timeout=N`, as Node.js sends: 5 s): services close theirs after 5 s to
    /// 75 s; one the service closed is dropped at once, and the race of a close with a reuse is
    /// retried for calls that may be sent twice.
    static let idleLifetime = TimeAmount.seconds(50)
    /// Idle connections kept per service address; more are closed when their exchange ends.
    static let idlePerAddress = 256

    let group: any EventLoopGroup
    /// How long a reply's body may stall (nothing read) before the call ends as a 504.
    let bodyIdleTimeout: TimeAmount
    /// Connections open to one address at most, unless a call says otherwise
    /// (``UpstreamRequest/maxConnections``; 512 as AsyncHTTPClient's default); further calls wait
    /// for one to come free, within their timeout.
    let maxConnectionsPerAddress: Int
    private let pools = Mutex<[String: AddressPool]>([:])
    private let waiterIDs = Atomic<UInt64>(0)

    init(group: any EventLoopGroup, bodyIdleTimeout: TimeAmount = .seconds(60), maxConnectionsPerAddress: Int = 512) {
        self.group = group
        self.bodyIdleTimeout = bodyIdleTimeout
        self.maxConnectionsPerAddress = maxConnectionsPerAddress
    }

    /// Sends `request` (its body, if any, whole) to `target` and returns the reply's status and
    /// fields once they arrive; the body follows as the caller reads it.
    func open(_ request: UpstreamRequest, target: ForwardingTarget, fields: HTTPHeaders) async throws -> UpstreamResponse<ByteStream> {
        var headers = fields
        if !headers.contains(name: "host") { headers.add(name: "host", value: target.authority) }
        headers.remove(name: "content-length")
        if let body = request.body {
            headers.add(name: "content-length", value: String(body.readableBytes))
        } else if [.post, .put, .patch].contains(request.method) {
            headers.add(name: "content-length", value: "0")
        }
        let head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: request.method.rawValue), uri: target.pathAndQuery, headers: headers)
        // A kept connection the service closed just as it was reused fails before any reply:
        // a call that may be sent twice (RFC 9110 §9.2.2, as browsers and Go retry) goes again on
        // a new connection.
        let replayable = [.get, .head, .options, .trace].contains(request.method)
        let deadline = NIODeadline.now() + Self.timeAmount(request.timeout)
        let cap = max(1, request.maxConnections ?? maxConnectionsPerAddress)
        var answer: ForwardingExchange.Answer?
        while answer == nil {
            let connection: ForwardingConnection
            let reused: Bool
            do {
                (connection, reused) = try await checkout(target, cap: cap, deadline: deadline)
            } catch let error as ForwardingError {
                throw error.problem(url: request.url)
            }
            let exchange = ForwardingExchange(head: head, body: request.body, timeout: Self.timeAmount(request.timeout),
                                              answer: connection.channel.eventLoop.makePromise())
            let written = connection.channel.eventLoop.makePromise(of: Void.self)
            written.futureResult.whenFailure { error in exchange.fail(ForwardingError.closed(error)) }
            connection.channel.writeAndFlush(exchange, promise: written)
            do {
                answer = try await withTaskCancellationHandler {
                    try await exchange.answer.futureResult.get()
                } onCancel: {
                    connection.channel.close(promise: nil)
                }
            } catch ForwardingError.closed where reused && replayable && !Task.isCancelled {
                continue
            } catch let error as ForwardingError {
                throw Task.isCancelled ? CancellationError() : error.problem(url: request.url)
            }
        }
        guard let answer else { throw CancellationError() }
        let status = HTTPResponse.Status(code: Int(answer.head.status.code), reasonPhrase: answer.head.status.reasonPhrase)
        var replyFields = HTTPFields()
        replyFields.reserveCapacity(answer.head.headers.count)
        for (name, value) in answer.head.headers {
            if let name = HTTPField.Name(name) { replyFields.append(HTTPField(name: name, value: value)) }
        }
        switch answer.body {
        case .whole(let buffer):
            return UpstreamResponse(status: status, headers: replyFields, body: ByteStream(buffer.readableBytes == 0 ? [] : [buffer]))
        case .streamed(let body):
            let url = request.url
            return UpstreamResponse(status: status, headers: replyFields, body: ByteStream(next: { [iterator = IteratorBox(body.makeAsyncIterator())] in
                do {
                    return try await iterator.next()
                } catch let error as ForwardingError {
                    throw error.problem(url: url)
                }
            }))
        }
    }

    /// An idle connection to the target's address (`reused`), a new one while the address has
    /// fewer than ``maxConnectionsPerAddress``, or else the first one freed before `deadline`.
    private func checkout(_ target: ForwardingTarget, cap: Int, deadline: NIODeadline) async throws -> (ForwardingConnection, reused: Bool) {
        enum Step { case use(ForwardingConnection), connect, wait }
        let now = NIODeadline.now()
        var stale: [any Channel] = []
        let step = pools.withLock { pools -> Step in
            Self.update(&pools, target.address) { pool -> Step in
                while let kept = pool.idle.popLast() {
                    if kept.connection.channel.isActive && now < kept.until { return .use(kept.connection) }
                    // Closing it frees its place (channelInactive).
                    stale.append(kept.connection.channel)
                }
                guard pool.open < cap else { return .wait }
                pool.open += 1
                return .connect
            }
        }
        for channel in stale { channel.close(promise: nil) }
        switch step {
        case .use(let connection):
            return (connection, true)
        case .connect:
            return (try await connect(target, deadline: deadline), false)
        case .wait:
            switch try await waitForTurn(target.address, cap: cap, deadline: deadline) {
            case .connection(let connection): return (connection, true)
            case .place: return (try await connect(target, deadline: deadline), false)
            }
        }
    }

    /// A new connection, in a place already counted for the address; connecting counts against
    /// the call's deadline too (and a connection not made in time is a 504, as an answer not
    /// given in time is).
    private func connect(_ target: ForwardingTarget, deadline: NIODeadline) async throws -> ForwardingConnection {
        let address = target.address
        let bodyIdleTimeout = bodyIdleTimeout
        do {
            let channel = try await ClientBootstrap(group: group)
                .connectTimeout(max(.milliseconds(1), min(Self.connectTimeout, deadline - .now())))
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { [weak self] channel in
                    channel.eventLoop.makeCompletedFuture {
                        // The fields were checked as they became `HTTPFields`.
                        try channel.pipeline.syncOperations.addHTTPClientHandlers(enableOutboundHeaderValidation: false)
                        try channel.pipeline.syncOperations.addHandler(ForwardingConnectionHandler(client: self, address: address, bodyIdleTimeout: bodyIdleTimeout))
                    }
                }
                .connect(host: target.host, port: target.port).get()
            return ForwardingConnection(channel: channel)
        } catch {
            // No channel, so no channelInactive: the place is given back here.
            freePlace(address, channel: nil)
            if case ChannelError.connectTimeout = error { throw ForwardingError.headTimeout }
            throw ForwardingError.unreachable(error)
        }
    }

    /// Waits for a connection of the address to come free (handed over as its exchange ends) or
    /// to close (its place taken for a new one); a timeout or the caller's cancellation ends the wait.
    private func waitForTurn(_ address: String, cap: Int, deadline: NIODeadline) async throws -> Turn {
        let id = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Turn, any Error>) in
                // What changed since the checkout looked: a connection may have come back idle
                // (with no one queued to hand it to) or closed in the meantime.
                let now = NIODeadline.now()
                var stale: [any Channel] = []
                let turn = pools.withLock { pools -> Turn? in
                    Self.update(&pools, address) { pool -> Turn? in
                        while let kept = pool.idle.popLast() {
                            if kept.connection.channel.isActive && now < kept.until { return .connection(kept.connection) }
                            stale.append(kept.connection.channel)
                        }
                        guard pool.open >= cap else {
                            pool.open += 1
                            return .place
                        }
                        pool.waiters.append(Waiter(id: id, continuation: continuation))
                        return nil
                    }
                }
                for channel in stale { channel.close(promise: nil) }
                if let turn { return continuation.resume(returning: turn) }
                if Task.isCancelled { abandon(address, id, CancellationError()) }
                group.next().scheduleTask(deadline: deadline) { [weak self] in self?.abandon(address, id, ForwardingError.headTimeout) }
            }
        } onCancel: {
            abandon(address, id, CancellationError())
        }
    }

    /// Ends a wait that is still queued with `error`.
    private func abandon(_ address: String, _ id: UInt64, _ error: any Error) {
        let waiter = pools.withLock { pools -> Waiter? in
            guard let index = pools[address]?.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return pools[address]?.waiters.remove(at: index)
        }
        waiter?.continuation.resume(throwing: error)
    }

    /// Keeps a connection whose exchange ended with keep-alive for the next call to its address
    /// (handed at once to a call waiting for one), for at most `lifetime` (the service's
    /// `Keep-Alive: timeout`, or ``idleLifetime``). The longest-idle connections, reused last,
    /// are closed here once they are past their time.
    fileprivate func checkin(_ channel: any Channel, address: String, lifetime: TimeAmount) {
        enum Step { case kept, handed(Waiter), close }
        let now = NIODeadline.now()
        var expired: [any Channel] = []
        let step = pools.withLock { pools -> Step in
            Self.update(&pools, address) { pool -> Step in
                while let oldest = pool.idle.first, oldest.until <= now {
                    expired.append(oldest.connection.channel)
                    pool.idle.removeFirst()
                }
                if !pool.waiters.isEmpty { return .handed(pool.waiters.removeFirst()) }
                guard pool.idle.count < Self.idlePerAddress else { return .close }
                pool.idle.append(IdleConnection(connection: ForwardingConnection(channel: channel), until: now + lifetime))
                return .kept
            }
        }
        switch step {
        case .kept: break
        case .handed(let waiter): waiter.continuation.resume(returning: .connection(ForwardingConnection(channel: channel)))
        case .close: channel.close(promise: nil)
        }
        for channel in expired { channel.close(promise: nil) }
    }

    /// A connection of the address closed (or never opened): its place goes to a waiting call, if any.
    fileprivate func freePlace(_ address: String, channel: (any Channel)?) {
        let waiter = pools.withLock { pools -> Waiter? in
            Self.update(&pools, address) { pool -> Waiter? in
                if let channel { pool.idle.removeAll { $0.connection.channel === channel } }
                guard pool.waiters.isEmpty else { return pool.waiters.removeFirst() }
                pool.open -= 1
                return nil
            }
        }
        waiter?.continuation.resume(returning: .place)
    }

    /// `body` on the address's pool where it is stored: a copy taken out and put back would copy
    /// its arrays on every change (they would be shared with the dictionary's while it is changed).
    private static func update<R>(_ pools: inout [String: AddressPool], _ address: String, _ body: (inout AddressPool) -> R) -> R {
        body(&pools[address, default: AddressPool()])
    }

    /// Closes every idle connection (a shutdown, or a test that wants a clean slate).
    func closeIdle() {
        let all = pools.withLock { pools in
            var all: [IdleConnection] = []
            for address in pools.keys {
                all += pools[address]?.idle ?? []
                pools[address]?.idle = []
            }
            return all
        }
        for kept in all { kept.connection.channel.close(promise: nil) }
    }

    static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(Int64(duration.components.seconds) * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }

    private struct IdleConnection: Sendable {
        let connection: ForwardingConnection
        let until: NIODeadline
    }

    /// A call waiting for a connection of a full address.
    private struct Waiter: Sendable {
        let id: UInt64
        let continuation: CheckedContinuation<Turn, any Error>
    }

    /// What a waiting call gets: a connection whose exchange ended, or the place of one that closed.
    private enum Turn: Sendable {
        case connection(ForwardingConnection)
        case place
    }

    /// An address's connections: how many are open (in use, idle or connecting), the idle ones
    /// (the most recently used last), and the calls waiting for one.
    private struct AddressPool: Sendable {
        var open = 0
        var idle: [IdleConnection] = []
        var waiters: [Waiter] = []
    }
}

/// Where a plain-HTTP URL points: `http://host[:port]/path?query`, nothing else (no user info, no
/// fragment). Other URLs (https) are not for ``ForwardingClient``.
struct ForwardingTarget: Sendable, Equatable {
    let host: String
    let port: Int
    /// As the URL wrote it, for the `Host` field.
    let authority: String
    let pathAndQuery: String
    /// The key of the idle connections: the authority as written (two spellings of one address
    /// keep connections apart, which is harmless).
    var address: String { authority }

    init?(url: String) {
        guard url.utf8.count > 7, url.utf8.starts(with: "http://".utf8) else { return nil }
        let rest = url.utf8.dropFirst(7)
        let end = rest.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? rest.endIndex
        guard end > rest.startIndex, !rest[..<end].contains(UInt8(ascii: "@")), !rest[end...].contains(UInt8(ascii: "#")),
              let authority = String(rest[..<end]) else { return nil }
        let path = String(Substring(rest[end...]))
        var host = Substring(authority)
        var port = 80
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let number = Int(after.dropFirst()) else { return nil }
                port = number
            }
            host = host[host.index(after: host.startIndex)..<close]
        } else if let colon = host.lastIndex(of: ":") {
            guard let number = Int(host[host.index(after: colon)...]) else { return nil }
            port = number
            host = host[..<colon]
        }
        guard !host.isEmpty, (1...65535).contains(port) else { return nil }
        self.host = String(host)
        self.port = port
        self.authority = authority
        self.pathAndQuery = path.isEmpty ? "/" : (path.hasPrefix("?") ? "/" + path : path)
    }
}

/// Why a forwarded call failed, before it becomes the 502 or 504 problem the contract promises.
enum ForwardingError: Error {
    case unreachable(any Error)
    case closed(any Error)
    case headTimeout
    case bodyStalled
    case cancelled

    func problem(url: String) -> any Error {
        switch self {
        case .headTimeout, .bodyStalled:
            return GatewayError.gatewayTimeout("The upstream service at \(url) did not answer in time.")
        case .cancelled:
            return CancellationError()
        case .unreachable(let error), .closed(let error):
            return GatewayError.badGateway("The upstream service at \(url) failed: \(error)")
        }
    }
}

/// A connection handed out for one exchange.
struct ForwardingConnection: Sendable {
    let channel: any Channel
}

/// One request and its reply on a connection; its state is touched on the connection's event loop only.
final class ForwardingExchange: @unchecked Sendable {
    typealias Body = NIOThrowingAsyncSequenceProducer<ByteBuffer, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark,
                                                      ForwardingBodyDelegate>
    struct Answer: Sendable {
        let head: HTTPResponseHead
        let body: Reply
    }
    /// A reply that ended in the read that brought its head comes whole; a longer one streams.
    enum Reply: Sendable {
        case whole(ByteBuffer)
        case streamed(Body)
    }

    let head: HTTPRequestHead
    let body: ByteBuffer?
    let timeout: TimeAmount
    let answer: EventLoopPromise<Answer>
    /// The reply's head, once it came; its body so far, until it ends or streams.
    var received: HTTPResponseHead?
    var collected = ByteBuffer()
    /// The reply's body, once it streams.
    var source: Body.Source?
    var answered = false
    var ended = false

    init(head: HTTPRequestHead, body: ByteBuffer?, timeout: TimeAmount, answer: EventLoopPromise<Answer>) {
        self.head = head
        self.body = body
        self.timeout = timeout
        self.answer = answer
    }

    /// Fails the exchange where it stands: the head's wait, or the body's reader.
    func fail(_ error: ForwardingError) {
        guard !ended else { return }
        ended = true
        if let source {
            source.finish(error)
        } else if !answered {
            answered = true
            answer.fail(error)
        }
    }
}

/// Hears from a reply's reader: wants more (reading resumes) or is gone (a reply left unread
/// closes its connection, which cannot carry another exchange before this one's bytes are read).
struct ForwardingBodyDelegate: NIOAsyncSequenceProducerDelegate {
    let channel: any Channel
    let handler: NIOLoopBound<ForwardingConnectionHandler>
    let exchange: ForwardingExchange

    func produceMore() {
        channel.eventLoop.execute { handler.value.resume(exchange) }
    }

    func didTerminate() {
        channel.eventLoop.execute { handler.value.readerLeft(exchange) }
    }
}

/// The end of a forwarding connection's pipeline (after NIO's HTTP/1.1 client codec): writes an
/// exchange's request, answers its head, streams its body, and returns the connection to the idle
/// set when the reply ended with keep-alive.
final class ForwardingConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = ForwardingExchange
    typealias OutboundOut = HTTPClientRequestPart

    private weak var client: ForwardingClient?
    private let address: String
    private let bodyIdleTimeout: TimeAmount
    private var context: ChannelHandlerContext?
    private var current: ForwardingExchange?
    private var keepAlive = true
    /// The whole request went out (its end was written): only then may the connection carry
    /// another one, even when the reply came first (a 401 or 413 before the body was read).
    private var requestWritten = false
    /// How long the connection may wait idle for its next call.
    private var idleLifetime = ForwardingClient.idleLifetime
    /// A read the reader's back-pressure held back.
    private var paused = false
    private var pendingRead = false
    private var timer: Scheduled<Void>?
    private var lastRead = NIODeadline.now()

    init(client: ForwardingClient?, address: String, bodyIdleTimeout: TimeAmount) {
        self.client = client
        self.address = address
        self.bodyIdleTimeout = bodyIdleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let exchange = unwrapOutboundIn(data)
        guard current == nil else {
            // One exchange at a time: a connection is handed out only while it has none.
            promise?.fail(ChannelError.inappropriateOperationForState)
            return
        }
        current = exchange
        keepAlive = exchange.head.isKeepAlive
        requestWritten = false
        paused = false
        lastRead = .now()
        context.write(wrapOutboundOut(.head(exchange.head)), promise: nil)
        if let body = exchange.body, body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { result in
            let handler = loopBound.value
            if handler.current === exchange {
                switch result {
                case .success:
                    handler.requestWritten = true
                case .failure(let error):
                    // Not sent whole: the exchange fails and the connection, in an unknown state, closes.
                    exchange.fail(.closed(error))
                    handler.current = nil
                    handler.context?.close(promise: nil)
                }
            }
            promise?.completeWith(result)
        }
        context.write(wrapOutboundOut(.end(nil)), promise: written)
        arm(context: context, in: exchange.timeout, exchange: exchange)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let exchange = current else { return }
        lastRead = .now()
        switch unwrapInboundIn(data) {
        case .head(let head):
            // Interim replies (100 Continue, 103 Early Hints) are not the answer.
            if (100..<200).contains(head.status.code) && head.status.code != 101 { return }
            // A 101 switches the connection to another protocol: never reused.
            keepAlive = keepAlive && head.isKeepAlive && head.status.code != 101
            idleLifetime = Self.keepAliveTimeout(head.headers).map { min($0, ForwardingClient.idleLifetime) } ?? ForwardingClient.idleLifetime
            exchange.received = head
            // The head's deadline is over; from here the body may stall at most bodyIdleTimeout.
            timer?.cancel()
            arm(context: context, in: bodyIdleTimeout, exchange: exchange)
        case .body(var buffer):
            guard exchange.received != nil, !exchange.ended else { return }
            if let source = exchange.source {
                if source.yield(buffer) == .stopProducing { paused = true }
            } else {
                exchange.collected.writeBuffer(&buffer)
                if exchange.collected.readableBytes > Self.wholeLimit { stream(exchange, context: context) }
            }
        case .end:
            guard let head = exchange.received, !exchange.ended else { return }
            let whole = !exchange.answered
            finish(exchange, context: context)
            if whole {
                exchange.answered = true
                exchange.answer.succeed(.init(head: head, body: .whole(exchange.collected)))
            }
        }
    }

    /// The service's `Keep-Alive: timeout=N` (RFC 9112 appendix C.2.2), less a second for the
    /// close to travel: how long it keeps an idle connection open.
    static func keepAliveTimeout(_ headers: HTTPHeaders) -> TimeAmount? {
        guard let value = headers.first(name: "keep-alive") else { return nil }
        for parameter in value.split(separator: ",") {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "timeout",
                  let seconds = Int(pair[1].trimmingCharacters(in: .whitespaces)), seconds > 0 else { continue }
            return .seconds(Int64(max(seconds - 1, 0)))
        }
        return nil
    }

    /// Replies up to this size that end in the read that brought their head are handed over whole.
    static let wholeLimit = 256 << 10

    func channelReadComplete(context: ChannelHandlerContext) {
        // A reply whose head came but whose end did not: its body streams from here.
        if let exchange = current, exchange.received != nil, !exchange.answered, !exchange.ended { stream(exchange, context: context) }
        context.fireChannelReadComplete()
    }

    /// Answers `exchange` with its head and a body that streams, starting with what came so far.
    private func stream(_ exchange: ForwardingExchange, context: ChannelHandlerContext) {
        guard let head = exchange.received, !exchange.answered else { return }
        let body = ForwardingExchange.Body.makeSequence(
            backPressureStrategy: .init(lowWatermark: 2, highWatermark: 8), finishOnDeinit: false,
            delegate: ForwardingBodyDelegate(channel: context.channel, handler: NIOLoopBound(self, eventLoop: context.eventLoop), exchange: exchange))
        exchange.source = body.source
        exchange.answered = true
        if exchange.collected.readableBytes > 0 {
            if body.source.yield(exchange.collected) == .stopProducing { paused = true }
            exchange.collected = ByteBuffer()
        }
        exchange.answer.succeed(.init(head: head, body: .streamed(body.sequence)))
    }

    /// The reply ended whole: the connection is free again, and then its reader gets the end (a
    /// caller that goes on to its next call finds the connection idle).
    private func finish(_ exchange: ForwardingExchange, context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        exchange.ended = true
        current = nil
        paused = false
        if pendingRead {
            pendingRead = false
            context.read()
        }
        if keepAlive, requestWritten, let client {
            client.checkin(context.channel, address: address, lifetime: idleLifetime)
        } else {
            context.close(promise: nil)
        }
        exchange.source?.finish()
    }

    func read(context: ChannelHandlerContext) {
        if paused {
            pendingRead = true
        } else {
            context.read()
        }
    }

    /// The reader wants more of `exchange`'s body.
    func resume(_ exchange: ForwardingExchange) {
        guard current === exchange, paused, let context else { return }
        paused = false
        // The pause was the reader's: the service's idle time starts again here.
        lastRead = .now()
        if pendingRead {
            pendingRead = false
            context.read()
        }
    }

    /// The reader of `exchange`'s body is gone: unless the body had ended, the connection cannot be reused.
    func readerLeft(_ exchange: ForwardingExchange) {
        guard current === exchange, !exchange.ended, let context else { return }
        exchange.ended = true
        current = nil
        context.close(promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        current?.fail(.closed(error))
        current = nil
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        if let exchange = current {
            current = nil
            exchange.fail(.closed(ChannelError.eof))
        }
        client?.freePlace(address, channel: context.channel)
        context.fireChannelInactive()
    }

    /// A deadline for the exchange: before its head, the head must come; after it, the body must
    /// move. A timer that finds the body moved since it was set waits again for the rest.
    private func arm(context: ChannelHandlerContext, in amount: TimeAmount, exchange: ForwardingExchange) {
        let set = NIODeadline.now()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: amount) {
            let handler = loopBound.value
            guard handler.current === exchange, !exchange.ended, let context = handler.context else { return }
            if exchange.received != nil && handler.paused {
                // The reader is slow, not the service: its pace is its own.
                handler.arm(context: context, in: handler.bodyIdleTimeout, exchange: exchange)
                return
            }
            if exchange.received != nil && handler.lastRead > set {
                handler.arm(context: context, in: handler.bodyIdleTimeout - (.now() - handler.lastRead), exchange: exchange)
                return
            }
            exchange.fail(exchange.received != nil ? .bodyStalled : .headTimeout)
            handler.current = nil
            context.close(promise: nil)
        }
    }
}

/// Holds an iterator for a `ByteStream` closure (the stream is read by one task at a time).
private final class IteratorBox<Iterator: AsyncIteratorProtocol>: @unchecked Sendable where Iterator.Element == ByteBuffer {
    private var iterator: Iterator

    init(_ iterator: Iterator) {
        self.iterator = iterator
    }

    func next() async throws -> ByteBuffer? {
        try await iterator.next()
    }
}
