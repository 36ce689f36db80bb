import GatewayCore

/// `server.timeouts`: how long a connection may take over each part of an HTTP/1.1 exchange
/// before the gateway closes it, on every listener (main, socket listeners, admin).
///
/// - `head` (default 10s): the whole request head, from its first byte to its blank line. A head
///   trickled a line at a time is answered 408 and closed when this runs out, however often bytes
///   arrive.
/// - `idle` (default 60s): a connection with no request in progress and no byte of a new one:
///   a kept-alive connection between requests, and a new connection before its first byte.
/// - `body` (default 30s): the longest pause between two pieces of a request body while the
///   gateway is reading it.
///
/// The time a handler takes to answer is not counted (statements and upstream calls have their own
/// budgets), and a WebSocket, once upgraded, is kept alive by its pings instead. With
/// `server.tls.http2`, HTTP/2 connections are closed after `idle` without an open stream.
public struct ServerTimeouts: Decodable, Sendable, Equatable {
    public var head = ConfigDuration(seconds: 10)
    public var idle = ConfigDuration(seconds: 60)
    public var body = ConfigDuration(seconds: 30)

    public init(head: ConfigDuration = ConfigDuration(seconds: 10), idle: ConfigDuration = ConfigDuration(seconds: 60),
                body: ConfigDuration = ConfigDuration(seconds: 30)) {
        self.head = head
        self.idle = idle
        self.body = body
    }

    enum CodingKeys: String, CodingKey { case head, idle, body }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        head = try container.decodeIfPresent(ConfigDuration.self, forKey: .head) ?? head
        idle = try container.decodeIfPresent(ConfigDuration.self, forKey: .idle) ?? idle
        body = try container.decodeIfPresent(ConfigDuration.self, forKey: .body) ?? body
        for (key, value) in [(CodingKeys.head, head), (.idle, idle), (.body, body)] where !(0.01...86_400).contains(value.seconds) {
            throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "\(value) is outside 10ms to 1d")
        }
    }
}
