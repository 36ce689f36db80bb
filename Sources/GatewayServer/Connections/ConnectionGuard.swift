import NIOConcurrencyHelpers
import NIOCore

/// Counts the connections open on one listener, in all and per client address, and admits a new
/// one only while both stay under their caps (`server.maxConnections`,
/// `server.maxConnectionsPerAddress`), so that no caller, and no crowd, holds descriptors without
/// bound. Addresses are counted as guests are for rate limits (an IPv6 network of
/// `limits.ipv6Prefix` bits); a trusted proxy, which carries many clients, counts only in all.
final class ConnectionGuard: Sendable {
    let maxConnections: Int
    let maxPerAddress: Int
    let ipv6Prefix: Int
    /// Whether a peer address is a trusted proxy (asked per connection: proxies may be reloaded).
    let isProxy: @Sendable (String) -> Bool

    private struct Counts {
        var total = 0
        var perAddress: [String: Int] = [:]
    }
    private let counts = NIOLockedValueBox(Counts())

    /// An admitted connection: what it gives back when it closes.
    struct Ticket: Sendable {
        /// The address it counts against; nil when it counts only in all.
        let address: String?
    }

    init(maxConnections: Int, maxPerAddress: Int, ipv6Prefix: Int, isProxy: @escaping @Sendable (String) -> Bool = { _ in false }) {
        self.maxConnections = maxConnections
        self.maxPerAddress = maxPerAddress
        self.ipv6Prefix = ipv6Prefix
        self.isProxy = isProxy
    }

    convenience init(_ settings: ServerSettings, ipv6Prefix: Int, isProxy: @escaping @Sendable (String) -> Bool = { _ in false }) {
        self.init(maxConnections: settings.maxConnections, maxPerAddress: settings.maxConnectionsPerAddress, ipv6Prefix: ipv6Prefix, isProxy: isProxy)
    }

    /// A ticket for a connection from `peer`, or nil when a cap is reached.
    func admit(peer: SocketAddress?) -> Ticket? {
        let address = peer?.ipAddress.flatMap { isProxy($0) ? nil : ClientAddressKey.key(for: $0, ipv6Prefix: ipv6Prefix) }
        return counts.withLockedValue { counts in
            guard counts.total < maxConnections else { return nil }
            if let address {
                let held = counts.perAddress[address, default: 0]
                guard held < maxPerAddress else { return nil }
                counts.perAddress[address] = held + 1
            }
            counts.total += 1
            return Ticket(address: address)
        }
    }

    /// Gives back what `ticket` took.
    func release(_ ticket: Ticket) {
        counts.withLockedValue { counts in
            counts.total -= 1
            guard let address = ticket.address, let held = counts.perAddress[address] else { return }
            counts.perAddress[address] = held > 1 ? held - 1 : nil
        }
    }

    /// Connections open now.
    var openConnections: Int { counts.withLockedValue { $0.total } }
}
