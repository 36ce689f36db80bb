import AsyncHTTPClient
import GatewayCore
import HTTPTypes
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import Tracing

/// The upstream HTTP client plugins receive: AsyncHTTPClient with a deadline per request, and
/// failures mapped to 502 / 504 problems so plugins can let them propagate.
///
/// A request whose URL a caller set (``UpstreamRequest/egress`` other than
/// ``EgressPolicy/operatorConfigured``) goes through ``EgressGuard`` first: its host is read in
/// every spelling or resolved once, every address checked, and the call made by a client of its
/// own that connects to the address checked (AsyncHTTPClient's `dnsOverride`, which keeps the
/// name for `Host`, SNI and the certificate) and follows no redirect.
public struct AsyncUpstreamClient: UpstreamHTTPClient {
    let client: HTTPClient
    let egress: EgressGuard

    package init(client: HTTPClient = .shared, resolver: any EgressResolver = SystemEgressResolver()) {
        self.client = client
        self.egress = EgressGuard(resolver: resolver)
    }

    /// Runs `body` with a client that connects to `target`'s checked address and follows no
    /// redirect, then shuts that client down.
    private static func withCheckedClient<R>(_ target: EgressGuard.Target, _ body: (HTTPClient) async throws -> R) async throws -> R {
        let client = checkedClient(target)
        do {
            let result = try await body(client)
            try? await client.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    private static func checkedClient(_ target: EgressGuard.Target) -> HTTPClient {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5), read: .seconds(60)))
        if let address = target.address { configuration.dnsOverride = [target.host: address.description] }
        configuration.decompression = .disabled
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// The clients of proxied requests (``open(_:body:)``) that go through AsyncHTTPClient (TLS,
    /// streamed uploads): they never follow a redirect (the caller gets it, as from the upstream
    /// itself), keep up to so many connections per upstream (one client per such number, as
    /// AsyncHTTPClient's limit is the client's), and give up on a reply whose body stalls for a
    /// minute. Made once and kept for the process, like `HTTPClient.shared`.
    static func proxying(maxConnections: Int?) -> HTTPClient {
        let limit = max(1, maxConnections ?? defaultMaxConnections)
        return proxyingClients.withLock { clients in
            if let client = clients[limit] { return client }
            var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow,
                                                         timeout: .init(connect: .seconds(5), read: .seconds(60)))
            configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: limit)
            configuration.decompression = .disabled
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            clients[limit] = client
            return client
        }
    }

    /// Connections per upstream address when a request does not say (AsyncHTTPClient's default).
    static let defaultMaxConnections = 512
    private static let proxyingClients = Mutex<[Int: HTTPClient]>([:])

    public func send(_ request: UpstreamRequest, maxBodySize: Int) async throws -> UpstreamResponse<ByteBuffer> {
        try await GatewayTracing.span("\(request.method.rawValue) upstream", kind: .client) { try await sendInSpan(request, maxBodySize: maxBodySize) }
    }

    private func sendInSpan(_ request: UpstreamRequest, maxBodySize: Int) async throws -> UpstreamResponse<ByteBuffer> {
        var outbound = Self.outbound(request)
        if let body = request.body { outbound.body = .bytes(body) }
        do {
            if request.egress != .operatorConfigured {
                let target = try await egress.check(request.url, policy: request.egress)
                return try await Self.withCheckedClient(target) { client in
                    let response = try await client.execute(outbound, timeout: Self.timeAmount(request.timeout))
                    let body = try await response.body.collect(upTo: maxBodySize)
                    return UpstreamResponse(status: HTTPResponse.Status(code: Int(response.status.code)), headers: Self.fields(response.headers), body: body)
                }
            }
            let response = try await client.execute(outbound, timeout: Self.timeAmount(request.timeout))
            let body = try await response.body.collect(upTo: maxBodySize)
            return UpstreamResponse(status: HTTPResponse.Status(code: Int(response.status.code)), headers: Self.fields(response.headers), body: body)
        } catch {
            throw Self.problem(error, url: request.url)
        }
    }

    public func open(_ request: UpstreamRequest, body: ByteStream?) async throws -> UpstreamResponse<ByteStream> {
        try await GatewayTracing.span("\(request.method.rawValue) upstream", kind: .client) { try await openInSpan(request, body: body) }
    }

    private func openInSpan(_ request: UpstreamRequest, body: ByteStream?) async throws -> UpstreamResponse<ByteStream> {
        if request.egress != .operatorConfigured { return try await openChecked(request, body: body) }
        // Plain HTTP with the body (if any) at hand: the forwarding client (see its doc for why).
        if body == nil, let target = ForwardingTarget(url: request.url) {
            return try await ForwardingClient.shared.open(request, target: target, fields: Self.outboundHeaders(request))
        }
        var outbound = Self.outbound(request)
        if let body {
            let length = request.headers[.contentLength].flatMap(Int64.init)
            outbound.body = .stream(body, length: length.map { .known($0) } ?? .unknown)
        } else if let buffer = request.body {
            outbound.body = .bytes(buffer)
        }
        do {
            let response = try await Self.proxying(maxConnections: request.maxConnections).execute(outbound, timeout: Self.timeAmount(request.timeout))
            return UpstreamResponse(status: HTTPResponse.Status(code: Int(response.status.code)), headers: Self.fields(response.headers),
                                            body: ByteStream(response.body))
        } catch {
            throw Self.problem(error, url: request.url)
        }
    }

    /// ``open(_:body:)`` for a URL a caller set: checked, then sent by a client of its own that
    /// lives until the reply's body is read or dropped.
    private func openChecked(_ request: UpstreamRequest, body: ByteStream?) async throws -> UpstreamResponse<ByteStream> {
        var outbound = Self.outbound(request)
        if let body {
            let length = request.headers[.contentLength].flatMap(Int64.init)
            outbound.body = .stream(body, length: length.map { .known($0) } ?? .unknown)
        } else if let buffer = request.body {
            outbound.body = .bytes(buffer)
        }
        let lease: ClientLease
        do {
            lease = ClientLease(Self.checkedClient(try await egress.check(request.url, policy: request.egress)))
        } catch {
            throw Self.problem(error, url: request.url)
        }
        do {
            let response = try await lease.client.execute(outbound, timeout: Self.timeAmount(request.timeout))
            let iterator = ByteStream(response.body).makeAsyncIterator()
            return UpstreamResponse(status: HTTPResponse.Status(code: Int(response.status.code)), headers: Self.fields(response.headers),
                                            body: ByteStream(next: { [lease] in
                                                _ = lease
                                                var copy = iterator
                                                return try await copy.next()
                                            }))
        } catch {
            throw Self.problem(error, url: request.url)
        }
    }

    /// A client made for one call, shut down once nothing holds it.
    private final class ClientLease: Sendable {
        let client: HTTPClient
        init(_ client: HTTPClient) { self.client = client }
        deinit {
            let client = client
            Task { try? await client.shutdown() }
        }
    }

    public func webSocket(_ url: String, headers: HTTPFields, session: @escaping @Sendable (any WebSocketConnection) async throws -> Void) async throws {
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 20, additionalHeaders: headers)
        do {
            try await WebSocketClient.connect(url: url, configuration: configuration, logger: Self.socketLogger) { inbound, outbound, _ in
                try await HummingbirdSocket.serve(inbound: inbound, outbound: outbound, session: session)
            }
        } catch let error as GatewayError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw GatewayError.badGateway("The upstream service refused the WebSocket: \(error)")
        }
    }

    static let socketLogger: Logger = {
        var logger = Logger(label: "gateway.upstream-websocket")
        logger.logLevel = .warning
        return logger
    }()

    private static func outbound(_ request: UpstreamRequest) -> HTTPClientRequest {
        var outbound = HTTPClientRequest(url: request.url)
        outbound.method = HTTPMethod(rawValue: request.method.rawValue)
        outbound.headers = outboundHeaders(request)
        return outbound
    }

    /// The request's fields, and its trace continued with a span of this call (unless the plugin set its own).
    private static func outboundHeaders(_ request: UpstreamRequest) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.reserveCapacity(request.headers.count + 2)
        for field in request.headers { headers.add(name: field.name.rawName, value: field.value) }
        if request.headers[RequestTrace.traceparent] == nil, GatewayTracing.isEnabled, let context = ServiceContext.current {
            var fields = HTTPFields()
            InstrumentationSystem.instrument.inject(context, into: &fields, using: HTTPFieldsInjector())
            for field in fields { headers.add(name: field.name.rawName, value: field.value) }
        } else if request.headers[RequestTrace.traceparent] == nil {
            let trace = RequestTrace.outgoingFields()
            headers.add(name: "traceparent", value: trace.traceparent)
            if let state = trace.tracestate { headers.add(name: "tracestate", value: state) }
        }
        return headers
    }

    private static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(Int64(duration.components.seconds) * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }

    private static func fields(_ headers: HTTPHeaders) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in headers { if let field = HTTPField.Name(name) { fields.append(HTTPField(name: field, value: value)) } }
        return fields
    }

    /// A failure as the 504 or 502 problem the contract promises.
    private static func problem(_ error: any Error, url: String) -> any Error {
        if let error = error as? HTTPClientError, error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return GatewayError.gatewayTimeout("The upstream service at \(url) did not answer in time.")
        }
        if error is GatewayError || error is CancellationError { return error }
        return GatewayError.badGateway("The upstream service at \(url) failed: \(error)")
    }
}
