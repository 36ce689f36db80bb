#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What a guest is counted by — for rate limits and for connections per address. An IPv4 address
/// is one caller. An IPv6 address is not: one customer is usually given a whole /64 (or more), so
/// counting each address would hand a single caller millions of buckets. IPv6 callers are counted
/// by their first `prefix` bits (`limits.ipv6Prefix`, default 64), written as the network
/// (`2001:db8:1:2::/64`); an IPv4-mapped IPv6 address (`::ffff:192.0.2.1`) is its IPv4 address.
/// Anything else (`local` for in-process calls) is kept as it is.
enum ClientAddressKey {
    static func key(for address: String, ipv6Prefix prefix: Int) -> String {
        // IPv4 and names: the common case, without parsing.
        guard address.utf8.contains(UInt8(ascii: ":")) else { return address }
        var text = Substring(address)
        if text.hasPrefix("["), let end = text.firstIndex(of: "]") { text = text[text.index(after: text.startIndex)..<end] }
        if let zone = text.firstIndex(of: "%") { text = text[..<zone] }
        var bytes = in6_addr()
        guard inet_pton(AF_INET6, String(text), &bytes) == 1 else { return address }
        return withUnsafeMutableBytes(of: &bytes) { raw -> String in
            // ::ffff:a.b.c.d — an IPv4 client reached over an IPv6 socket.
            if raw.prefix(10).allSatisfy({ $0 == 0 }) && raw[10] == 0xff && raw[11] == 0xff {
                return "\(raw[12]).\(raw[13]).\(raw[14]).\(raw[15])"
            }
            let bits = min(max(prefix, 0), 128)
            for index in 0..<16 {
                let kept = min(max(bits - index * 8, 0), 8)
                raw[index] &= kept == 8 ? 0xff : ~(UInt8(0xff) >> kept)
            }
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            guard inet_ntop(AF_INET6, raw.baseAddress, &buffer, socklen_t(buffer.count)) != nil else { return address }
            let network = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return bits == 128 ? network : network + "/\(bits)"
        }
    }
}
