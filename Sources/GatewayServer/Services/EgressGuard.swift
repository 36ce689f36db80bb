import AsyncHTTPClient
import Foundation
import GatewayCore
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Resolves host names for the egress check of URLs callers set (``EgressPolicy``).
package protocol EgressResolver: Sendable {
    /// The addresses `host` names (a name, never a literal address), in the order to try them.
    func addresses(of host: String) async throws -> [IPAddress]
}

/// The system's resolver: `getaddrinfo`, as a connection to the name would use, run off the event loops.
package struct SystemEgressResolver: EgressResolver {
    package init() {}

    package func addresses(of host: String) async throws -> [IPAddress] {
        try await NIOThreadPool.singleton.runIfActive { try Self.lookup(host) }
    }

    private static func lookup(_ host: String) throws -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let first = list else {
            throw GatewayError.badGateway("The name \(host.prefix(100)) could not be resolved.")
        }
        defer { freeaddrinfo(first) }
        var found: [IPAddress] = []
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            if let socket = current.pointee.ai_addr {
                switch Int32(socket.pointee.sa_family) {
                case AF_INET:
                    let address = socket.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                    let bytes = withUnsafeBytes(of: address) { Array($0) }
                    if let ip = IPAddress(bytes: bytes), !found.contains(ip) { found.append(ip) }
                case AF_INET6:
                    let address = socket.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                    let bytes = withUnsafeBytes(of: address) { Array($0) }
                    if let ip = IPAddress(bytes: bytes), !found.contains(ip) { found.append(ip) }
                default:
                    break
                }
            }
            entry = current.pointee.ai_next
        }
        return found
    }
}

/// The egress check of one request: the URL's host read in every spelling or resolved once, every
/// address checked against the request's ``EgressPolicy``, and the address the connection must go
/// to, so that a second lookup (a DNS answer that changed since) cannot lead elsewhere.
struct EgressGuard: Sendable {
    let resolver: any EgressResolver

    /// Where a checked request connects.
    struct Target: Sendable {
        /// The URL's host as the client reads it.
        var host: String
        /// The address checked, to connect to instead of resolving `host` again; nil when `host`
        /// is already a plain address the client connects to as it is.
        var address: IPAddress?
    }

    /// The target of `url` under `policy`, or a 502 problem naming why the gateway will not go there.
    func check(_ url: String, policy: EgressPolicy) async throws -> Target {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let raw = parsed.host, !raw.isEmpty else {
            throw GatewayError.badGateway("Refused \(Self.shown(url)): only http and https URLs with a host may be reached.")
        }
        let host = raw.hasPrefix("[") && raw.hasSuffix("]") ? String(raw.dropFirst().dropLast()) : raw
        let addresses: [IPAddress]
        if let literal = IPAddress(host: host) {
            addresses = [literal]
        } else {
            do {
                addresses = try await resolver.addresses(of: host)
            } catch {
                throw GatewayError.badGateway("The name \(host.prefix(100)) could not be resolved.")
            }
        }
        guard let first = addresses.first else { throw GatewayError.badGateway("The name \(host.prefix(100)) has no address.") }
        if policy.publicAddressesOnly, let inside = addresses.first(where: { $0.scope != .public }) {
            throw GatewayError.badGateway(
                "Refused \(Self.shown(url)): \(host.prefix(100)) is \(inside.scope.phrase) (\(inside)); a URL set by a caller may reach public addresses only.")
        }
        // A plain address is connected to as written; anything else (a name, or an address in a
        // spelling only a resolver reads) goes to the address checked.
        let plain = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        return Target(host: host, address: plain ? nil : first)
    }

    /// A URL in a message: without its query, shortened.
    static func shown(_ url: String) -> String {
        String((url.split(separator: "?", maxSplits: 1).first ?? "").prefix(200))
    }
}
