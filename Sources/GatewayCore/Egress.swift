import Foundation

/// Which addresses a request to an upstream may reach (``UpstreamRequest/egress``).
///
/// A URL an operator wrote in plugins.yaml may name any address: a service on the same host or
/// network is the usual case. A URL a caller set (a trigger's target) must not make the gateway
/// the caller's way into the network it stands in: such a request reaches public addresses only,
/// checked on the address actually connected to (the host's name is resolved once, every address
/// of the answer checked, and the connection made to the address checked), and a redirect is its
/// reply, never followed.
public struct EgressPolicy: Sendable, Hashable {
    /// Whether only public addresses may be reached (not loopback, private, link-local, reserved, ...).
    public let publicAddressesOnly: Bool
    /// Whether redirects are followed; when not, a 3xx is the reply.
    public let followsRedirects: Bool

    private init(publicAddressesOnly: Bool, followsRedirects: Bool) {
        self.publicAddressesOnly = publicAddressesOnly
        self.followsRedirects = followsRedirects
    }

    /// A URL from the operator's configuration: any address, redirects followed.
    public static let operatorConfigured = EgressPolicy(publicAddressesOnly: false, followsRedirects: true)

    /// A URL a caller set: public addresses only and no redirects. `allowingInternalAddresses` is
    /// the operator's explicit opt-out (a setting such as `triggerPrivateTargets: true`): any
    /// address, still no redirects.
    public static func callerSupplied(allowingInternalAddresses: Bool = false) -> EgressPolicy {
        EgressPolicy(publicAddressesOnly: !allowingInternalAddresses, followsRedirects: false)
    }

    /// Why a caller's URL cannot be used, judged by its text alone, or nil: not http or https, no
    /// host, or a host that is a literal internal address in any spelling (`127.1`, `0x7f.0.0.1`, `::ffff:127.0.0.1`, ...)
    /// or a name for this host or network (`localhost`, `*.localhost`, `*.local`, `*.internal`).
    /// A name that resolves inside is caught only when the request is sent.
    public static func textRefusal(of url: String) -> String? {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            return "must be an http or https URL"
        }
        guard let host = parsed.host, !host.isEmpty else { return "must name a host" }
        if let address = IPAddress(host: host) {
            let scope = address.scope
            return scope == .public ? nil : "must not name \(scope.phrase) (\(address))"
        }
        let name = IPAddress.bare(host).lowercased()
        guard !name.isEmpty, name.utf8.allSatisfy({ byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
        }) else {
            return "must name a host by a DNS name or an IP address"
        }
        if isInternalName(name) { return "must not name this host or its network (\(name))" }
        return nil
    }

    /// Whether a URL's host is a name or literal address (in any spelling a resolver reads) that is
    /// not public: `localhost`, loopback, private, link-local, unique-local, metadata, ... Names are
    /// not resolved here: a request sent under the policy checks the address it connects to.
    public static func isPrivateHost(_ host: String) -> Bool {
        if let address = IPAddress(host: host) { return address.scope != .public }
        return isInternalName(host)
    }

    /// Whether a host name means this host or its network wherever it is resolved: `localhost`
    /// and its kin, `*.localhost`, `*.local`, `*.internal`, `*.localdomain`, `*.home.arpa`.
    public static func isInternalName(_ host: String) -> Bool {
        let name = IPAddress.bare(host).lowercased()
        return internalNames.contains(name) || internalSuffixes.contains { name.hasSuffix($0) }
    }

    /// Names that mean this host or its network wherever they are resolved.
    static let internalNames: Set<String> = ["localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"]
    static let internalSuffixes = [".localhost", ".local", ".internal", ".localdomain", ".home.arpa"]
}

/// What part of the network an address belongs to; only ``public`` addresses may be reached from
/// a URL a caller set.
package enum AddressScope: String, Sendable, Hashable, CaseIterable {
    case `public`
    /// `0.0.0.0/8`, `::`.
    case unspecified
    /// `127.0.0.0/8`, `::1`.
    case loopback
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`) and IPv6 site-local `fec0::/10`.
    case `private`
    /// Carrier-grade NAT, `100.64.0.0/10`.
    case sharedAddressSpace
    /// `169.254.0.0/16`, `fe80::/10`.
    case linkLocal
    /// `fc00::/7`.
    case uniqueLocal
    /// `224.0.0.0/4`, `ff00::/8`.
    case multicast
    /// `255.255.255.255`.
    case broadcast
    /// A cloud provider's instance metadata or platform service (`169.254.169.254`, `fd00:ec2::254`,
    /// `168.63.129.16`, `100.100.100.200`).
    case metadata
    /// Not routable on the internet: documentation, benchmarking, future use, IETF protocol
    /// assignments, IPv6 outside global unicast, deprecated or tunnelling forms.
    case reserved

    /// The scope in a sentence ("a loopback address").
    public var phrase: String {
        switch self {
        case .public: "a public address"
        case .unspecified: "an unspecified address"
        case .loopback: "a loopback address"
        case .private: "a private address"
        case .sharedAddressSpace: "a carrier-grade NAT address"
        case .linkLocal: "a link-local address"
        case .uniqueLocal: "a unique-local address"
        case .multicast: "a multicast address"
        case .broadcast: "a broadcast address"
        case .metadata: "a cloud metadata address"
        case .reserved: "a reserved address"
        }
    }
}

/// An IPv4 or IPv6 address, as its bytes.
package struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// 4 bytes for IPv4, 16 for IPv6, in network order.
    package let bytes: [UInt8]

    package init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// A URL's host read as resolvers read it, or nil when it is a name. IPv4 in every form
    /// `inet_aton` accepts (`127.0.0.1`, `127.1`, `2130706433`, `0177.0.0.1`, `0x7f.0.0.1`);
    /// IPv6 with or without brackets, with an IPv4 tail (`::ffff:127.0.0.1`) and a zone id
    /// (`fe80::1%eth0`, `%25eth0`); a trailing dot is ignored.
    package init?(host: String) {
        let text = Self.bare(host)
        if text.contains(":") {
            guard let bytes = Self.ipv6(text[...]) else { return nil }
            self.bytes = bytes
        } else {
            guard let bytes = Self.ipv4(text[...]) else { return nil }
            self.bytes = bytes
        }
    }

    package var isIPv4: Bool { bytes.count == 4 }

    /// Dotted decimal for IPv4; eight groups of hexadecimal for IPv6 (what `inet_pton` reads).
    package var description: String {
        if isIPv4 { return bytes.map(String.init).joined(separator: ".") }
        return stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }.joined(separator: ":")
    }

    /// The IPv4 address an IPv6 address stands for, where it carries one that a network would
    /// reach: IPv4-mapped `::ffff:0:0/96`, IPv4-translated `::ffff:0:0:0/96`, IPv4-compatible
    /// `::/96`, NAT64 `64:ff9b::/96` and 6to4 `2002::/16`.
    package var embeddedIPv4: IPAddress? {
        guard !isIPv4 else { return nil }
        let b = bytes
        let zeros = { (range: Range<Int>) in range.allSatisfy { b[$0] == 0 } }
        if zeros(0..<10) && b[10] == 0xFF && b[11] == 0xFF { return IPAddress(bytes: Array(b[12..<16])) }
        if zeros(0..<8) && b[8] == 0xFF && b[9] == 0xFF && zeros(10..<12) { return IPAddress(bytes: Array(b[12..<16])) }
        if zeros(0..<12) && !zeros(12..<15) { return IPAddress(bytes: Array(b[12..<16])) }
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && zeros(4..<12) { return IPAddress(bytes: Array(b[12..<16])) }
        if b[0] == 0x20 && b[1] == 0x02 { return IPAddress(bytes: Array(b[2..<6])) }
        return nil
    }

    /// The part of the network the address belongs to (IPv4 forms inside IPv6 as their IPv4 address).
    package var scope: AddressScope {
        isIPv4 ? Self.scope(ipv4: bytes) : Self.scope(ipv6: self)
    }

    private static let metadata: Set<[UInt8]> = [[169, 254, 169, 254], [169, 254, 170, 2], [168, 63, 129, 16], [100, 100, 100, 200],
                                                 [192, 0, 0, 192]]
    /// `fd00:ec2::254`, the AWS metadata service over IPv6.
    private static let metadataIPv6: [UInt8] = [0xFD, 0x00, 0x0E, 0xC2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54]

    private static func scope(ipv4 b: [UInt8]) -> AddressScope {
        if metadata.contains(b) { return .metadata }
        switch (b[0], b[1], b[2]) {
        case (0, _, _): return .unspecified
        case (10, _, _): return .private
        case (100, 64...127, _): return .sharedAddressSpace
        case (127, _, _): return .loopback
        case (169, 254, _): return .linkLocal
        case (172, 16...31, _): return .private
        case (192, 0, 0), (192, 0, 2), (192, 88, 99), (198, 51, 100), (203, 0, 113), (198, 18...19, _): return .reserved
        case (192, 168, _): return .private
        case (224...239, _, _): return .multicast
        case (255, 255, 255) where b[3] == 255: return .broadcast
        case (240...255, _, _): return .reserved
        default: return .public
        }
    }

    private static func scope(ipv6 address: IPAddress) -> AddressScope {
        let b = address.bytes
        if b == metadataIPv6 { return .metadata }
        if b.allSatisfy({ $0 == 0 }) { return .unspecified }
        if b[0..<15].allSatisfy({ $0 == 0 }) && b[15] == 1 { return .loopback }
        if let inner = address.embeddedIPv4 {
            let innerScope = scope(ipv4: inner.bytes)
            // IPv4-compatible addresses are deprecated and reach nothing public.
            if innerScope == .public && b[0..<12].allSatisfy({ $0 == 0 }) { return .reserved }
            return innerScope
        }
        switch (b[0], b[1]) {
        case (0xFF, _): return .multicast
        case (0xFE, 0x80...0xBF): return .linkLocal
        case (0xFE, 0xC0...0xFF): return .private
        case (0xFC...0xFD, _): return .uniqueLocal
        default: break
        }
        // 64:ff9b:1::/48 (local NAT64), 2001::/32 (Teredo), 2001:db8::/32 (documentation),
        // 2001:2::/48 (benchmarking), 100::/64 (discard); outside 2000::/3 nothing is global unicast.
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B { return .reserved }
        if b[0] == 0x20 && b[1] == 0x01 && ((b[2] == 0 && b[3] == 0) || (b[2] == 0x0D && b[3] == 0xB8) || (b[2] == 0 && b[3] == 2 && b[4] == 0 && b[5] == 0)) {
            return .reserved
        }
        if b[0] & 0xE0 != 0x20 { return .reserved }
        return .public
    }

    /// A host without its brackets, zone id and trailing dot.
    static func bare(_ host: String) -> String {
        var text = Substring(host)
        if text.hasPrefix("[") && text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if let zone = text.firstIndex(of: "%") { text = text[..<zone] }
        if text.hasSuffix(".") { text = text.dropLast() }
        return String(text)
    }

    /// IPv4 as `inet_aton` reads it: one to four parts, each decimal, octal (a leading 0) or
    /// hexadecimal (0x); the last part fills the bytes the others leave.
    static func ipv4(_ text: Substring) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(parts.count) else { return nil }
        var values: [UInt32] = []
        for part in parts {
            guard let value = number(part) else { return nil }
            values.append(value)
        }
        let last = values.removeLast()
        guard values.allSatisfy({ $0 <= 255 }) else { return nil }
        let lastBytes = 4 - values.count
        guard lastBytes == 4 || last < UInt32(1) << (8 * UInt32(lastBytes)) else { return nil }
        var bytes = values.map(UInt8.init)
        for index in (0..<lastBytes).reversed() { bytes.append(UInt8((last >> (8 * UInt32(index))) & 0xFF)) }
        return bytes
    }

    /// One part of an `inet_aton` address.
    private static func number(_ text: Substring) -> UInt32? {
        guard !text.isEmpty else { return nil }
        var digits = text
        var radix: UInt32 = 10
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") {
            radix = 16
            digits = digits.dropFirst(2)
        } else if digits.hasPrefix("0") {
            radix = 8
            digits = digits.dropFirst()
        }
        var value: UInt64 = 0
        for character in digits {
            guard character.isASCII, let digit = character.hexDigitValue, UInt32(digit) < radix else { return nil }
            value = value * UInt64(radix) + UInt64(digit)
            guard value <= UInt64(UInt32.max) else { return nil }
        }
        return UInt32(value)
    }

    /// IPv6 text: groups of up to four hexadecimal digits, at most one `::`, optionally ending in
    /// a dotted IPv4 address.
    static func ipv6(_ text: Substring) -> [UInt8]? {
        func groups(_ part: Substring) -> [UInt8]? {
            guard !part.isEmpty else { return [] }
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            var bytes: [UInt8] = []
            for (index, piece) in pieces.enumerated() {
                if index == pieces.count - 1, piece.contains(".") {
                    let quads = piece.split(separator: ".", omittingEmptySubsequences: false)
                    guard quads.count == 4 else { return nil }
                    for quad in quads {
                        guard (1...3).contains(quad.count), quad.allSatisfy(\.isASCII), let value = UInt8(quad) else { return nil }
                        bytes.append(value)
                    }
                    continue
                }
                guard (1...4).contains(piece.count), piece.allSatisfy(\.isHexDigit), piece.allSatisfy(\.isASCII),
                      let value = UInt16(piece, radix: 16) else { return nil }
                bytes.append(UInt8(value >> 8))
                bytes.append(UInt8(value & 0xFF))
            }
            return bytes
        }
        let halves = text.components(separatedBy: "::")
        switch halves.count {
        case 1:
            guard let bytes = groups(text), bytes.count == 16 else { return nil }
            return bytes
        case 2:
            guard !halves[0].contains("."), let head = groups(halves[0][...]), let tail = groups(halves[1][...]), head.count + tail.count <= 14 else { return nil }
            return head + Array(repeating: 0, count: 16 - head.count - tail.count) + tail
        default:
            return nil
        }
    }
}
