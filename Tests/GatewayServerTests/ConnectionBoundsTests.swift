import Foundation
import GatewayCore
@testable import GatewayServer
import NIOCore
import Testing

@Suite("connection bounds and guest keys")
struct ConnectionBoundsTests {
    func parse(_ text: String) throws(ConfigurationFileError) -> GatewayConfiguration {
        try GatewayConfiguration.parse(Data(text.utf8), file: "plugins.yaml", knownPlugins: [])
    }

    func error(_ text: String) -> ConfigurationFileError? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test("server.timeouts, maxConnections, maxConnectionsPerAddress and limits.ipv6Prefix have safe defaults")
    func defaults() throws {
        let configuration = try parse("")
        #expect(configuration.server.timeouts == ServerTimeouts(head: .init(seconds: 10), idle: .init(seconds: 60), body: .init(seconds: 30)))
        #expect(configuration.server.maxConnections == 4096)
        #expect(configuration.server.maxConnectionsPerAddress == 128)
        #expect(configuration.limits.ipv6Prefix == 64)
    }

    @Test("the settings are read from plugins.yaml")
    func parsed() throws {
        let configuration = try parse("""
            server: { timeouts: { head: 2s, idle: 90s, body: 500ms }, maxConnections: 50, maxConnectionsPerAddress: 5 }
            limits: { ipv6Prefix: 56 }
            """)
        #expect(configuration.server.timeouts == ServerTimeouts(head: .init(seconds: 2), idle: .init(seconds: 90), body: .milliseconds(500)))
        #expect(configuration.server.maxConnections == 50)
        #expect(configuration.server.maxConnectionsPerAddress == 5)
        #expect(configuration.limits.ipv6Prefix == 56)
    }

    @Test("a bad value is an error naming its key")
    func badValues() {
        #expect(error("server: { timeouts: { head: 0s } }")?.keyPath == "server.timeouts.head")
        #expect(error("server: { timeouts: { idle: 2d } }")?.keyPath == "server.timeouts.idle")
        #expect(error("server: { timeouts: { body: soon } }")?.keyPath == "server.timeouts.body")
        #expect(error("server: { timeouts: { header: 1s } }")?.keyPath.hasPrefix("server.timeouts") == true)
        #expect(error("server: { maxConnections: 0 }")?.keyPath == "server.maxConnections")
        #expect(error("server: { maxConnections: 10, maxConnectionsPerAddress: 11 }")?.keyPath == "server.maxConnectionsPerAddress")
        #expect(error("limits: { ipv6Prefix: 129 }")?.keyPath == "limits.ipv6Prefix")
        #expect(error("limits: { ipv6Prefix: 0 }")?.keyPath == "limits.ipv6Prefix")
    }

    @Test("IPv6 guests are keyed by their network, IPv4 guests by their address")
    func guestKeys() {
        #expect(ClientAddressKey.key(for: "192.0.2.7", ipv6Prefix: 64) == "192.0.2.7")
        #expect(ClientAddressKey.key(for: "local", ipv6Prefix: 64) == "local")
        #expect(ClientAddressKey.key(for: "2001:db8:1:2:aaaa:bbbb:cccc:dddd", ipv6Prefix: 64) == "2001:db8:1:2::/64")
        #expect(ClientAddressKey.key(for: "2001:DB8:1:2::1", ipv6Prefix: 64) == "2001:db8:1:2::/64")
        #expect(ClientAddressKey.key(for: "[2001:db8:1:2::1]", ipv6Prefix: 64) == "2001:db8:1:2::/64")
        #expect(ClientAddressKey.key(for: "fe80::1%eth0", ipv6Prefix: 64) == "fe80::/64")
        #expect(ClientAddressKey.key(for: "2001:db8:1:3::1", ipv6Prefix: 64) != ClientAddressKey.key(for: "2001:db8:1:2::1", ipv6Prefix: 64))
        #expect(ClientAddressKey.key(for: "2001:db8:1:2ff::1", ipv6Prefix: 56) == "2001:db8:1:200::/56")
        #expect(ClientAddressKey.key(for: "2001:db8::1", ipv6Prefix: 128) == "2001:db8::1")
        #expect(ClientAddressKey.key(for: "::ffff:192.0.2.9", ipv6Prefix: 64) == "192.0.2.9")
        // Not an address: kept as it is, never merged with another caller.
        #expect(ClientAddressKey.key(for: "not:an:address", ipv6Prefix: 64) == "not:an:address")
    }

    @Test("the local limiter gives one /64 one bucket")
    func localLimiterSharesPrefix() async throws {
        var settings = LimitSettings()
        settings.anonymous = RateSpec(count: 2, period: 60)
        let limiter = LocalRateLimiter(policies: RateLimitPolicies(defaults: settings))
        #expect(try await limiter.acquire(principal: .anonymous(address: "2001:db8:5:6::1"), plugin: "p", cost: 1).allowed)
        #expect(try await limiter.acquire(principal: .anonymous(address: "2001:db8:5:6::2"), plugin: "p", cost: 1).allowed)
        #expect(try await !limiter.acquire(principal: .anonymous(address: "2001:db8:5:6:ffff::3"), plugin: "p", cost: 1).allowed)
        #expect(try await limiter.acquire(principal: .anonymous(address: "2001:db8:5:7::1"), plugin: "p", cost: 1).allowed)
        #expect(try await limiter.acquire(principal: .anonymous(address: "192.0.2.1"), plugin: "p", cost: 1).allowed)
    }

    @Test("the connection guard holds both caps, counts an IPv6 network as one address and exempts trusted proxies")
    func connectionGuard() throws {
        let connections = ConnectionGuard(maxConnections: 5, maxPerAddress: 2, ipv6Prefix: 64) { $0 == "10.0.0.1" }
        let a = try SocketAddress(ipAddress: "192.0.2.1", port: 1000)
        let v6 = try SocketAddress(ipAddress: "2001:db8::1", port: 1000)
        let v6Sibling = try SocketAddress(ipAddress: "2001:db8::2", port: 1001)
        let proxy = try SocketAddress(ipAddress: "10.0.0.1", port: 1000)
        let first = try #require(connections.admit(peer: a))
        #expect(connections.admit(peer: a) != nil)
        #expect(connections.admit(peer: a) == nil)
        #expect(connections.admit(peer: v6) != nil)
        #expect(connections.admit(peer: v6Sibling) != nil)
        #expect(connections.admit(peer: v6) == nil)
        #expect(connections.openConnections == 4)
        // The proxy is held only by the total.
        #expect(connections.admit(peer: proxy) != nil)
        #expect(connections.admit(peer: proxy) == nil)
        connections.release(first)
        #expect(connections.admit(peer: proxy) != nil)
        #expect(connections.openConnections == 5)
    }
}
