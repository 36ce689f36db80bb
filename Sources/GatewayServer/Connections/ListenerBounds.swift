import GatewayCore
import HummingbirdCore
import HummingbirdHTTP2
import NIOCore

extension Gateway {
    /// The connection counts of one listener, under `server.maxConnections` and
    /// `server.maxConnectionsPerAddress`. Each listener has its own, so that a flood of the main
    /// port leaves the admin listener free.
    func connectionGuard() -> ConnectionGuard {
        let responder = self.responder
        return ConnectionGuard(configuration.server, ipv6Prefix: configuration.limits.ipv6Prefix) { peer in
            responder.current().settings.proxies.trusts(peer)
        }
    }

    /// A listener's server: the child channel `make` builds for the application's responder,
    /// behind `connections` and, for HTTP/1.1, the deadlines of `timeouts`.
    static func bounded<Base: ServerChildChannel>(
        _ connections: ConnectionGuard, timeouts: ServerTimeouts?, canReply: Bool, clientCertificates: Bool = false,
        _ make: @escaping @Sendable (@escaping HTTPChannelHandler.Responder) throws -> Base
    ) -> HTTPServerBuilder {
        HTTPServerBuilder { responder in
            GuardedChildChannel(base: try make(responder), connections: connections, timeouts: timeouts, canReply: canReply,
                                clientCertificates: clientCertificates)
        }
    }

    /// HTTP/1.1 as the listeners serve it: with the observer that tells the connection's
    /// deadlines where each request begins and ends.
    static var observedHTTP1: HTTP1Channel.Configuration {
        HTTP1Channel.Configuration(additionalChannelHandlers: [HTTPExchangeObserver()])
    }

    /// HTTP/2 (`server.tls.http2`): the connection's deadlines as for HTTP/1.1 (the handshake and
    /// preface up to the first stream within `head`, `idle` without an open stream), and each
    /// stream's body and send deadlines kept by its ``HTTPExchangeObserver``; an HTTP/1.1
    /// connection that ALPN chose gets the HTTP/1.1 deadlines.
    static func http2Configuration(_ timeouts: ServerTimeouts) -> HTTP2ChannelConfiguration {
        HTTP2ChannelConfiguration(idleTimeout: timeouts.idle.duration,
                                  streamConfiguration: HTTP1Channel.Configuration(additionalChannelHandlers: [HTTPExchangeObserver(streamTimeouts: timeouts)],
                                                                                  idleTimeout: timeouts.idle.timeAmount))
    }
}

extension ConfigDuration {
    /// The span as NIO's `TimeAmount`, to the millisecond.
    var timeAmount: TimeAmount { .milliseconds(Int64((seconds * 1000).rounded())) }
}
