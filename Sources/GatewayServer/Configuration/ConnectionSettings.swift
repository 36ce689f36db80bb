import GatewayCore

/// `server.timeouts`: how long a connection may take over each part of an HTTP exchange before
/// the gateway closes it, on every listener (main, socket listeners, admin).
///
/// - `head` (default 10s): the whole request head, from its first byte to its blank line. A head
///   trickled a line at a time is answered 408 and closed when this runs out, however often bytes
///   arrive. On HTTP/2 (`server.tls.http2`) the TLS handshake and the preface up to the first
///   stream count as the head.
/// - `idle` (default 60s): a connection with no request in progress and no byte of a new one:
///   a kept-alive connection between requests, and a new connection before its first byte. An
///   HTTP/2 connection without an open stream, from its last stream on.
/// - `body` (default 30s): the longest pause between two pieces of a request body while the
///   gateway is reading it (on HTTP/2, per stream).
/// - `send` (default 60s): the longest time a reply may wait for a client that takes none of it;
///   on HTTP/2 the stream is reset and the connection serves on.
///
/// The time a handler takes to answer is not counted (statements and upstream calls have their own
/// budgets), and a WebSocket, once upgraded, is kept alive by its pings instead.
public struct ServerTimeouts: Decodable, Sendable, Equatable {
    public var head = ConfigDuration(seconds: 10)
    public var idle = ConfigDuration(seconds: 60)
    public var body = ConfigDuration(seconds: 30)
    /// How long a reply may wait for a client that takes none of it (HTTP/2: per stream).
    public var send = ConfigDuration(seconds: 60)

    public init(head: ConfigDuration = ConfigDuration(seconds: 10), idle: ConfigDuration = ConfigDuration(seconds: 60),
                body: ConfigDuration = ConfigDuration(seconds: 30), send: ConfigDuration = ConfigDuration(seconds: 60)) {
        self.head = head
        self.idle = idle
        self.body = body
        self.send = send
    }

    enum CodingKeys: String, CodingKey { case head, idle, body, send }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        head = try container.decodeIfPresent(ConfigDuration.self, forKey: .head) ?? head
        idle = try container.decodeIfPresent(ConfigDuration.self, forKey: .idle) ?? idle
        body = try container.decodeIfPresent(ConfigDuration.self, forKey: .body) ?? body
        send = try container.decodeIfPresent(ConfigDuration.self, forKey: .send) ?? send
        for (key, value) in [(CodingKeys.head, head), (.idle, idle), (.body, body), (.send, send)] where !(0.01...86_400).contains(value.seconds) {
            throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "\(value) is outside 10ms to 1d")
        }
    }
}
