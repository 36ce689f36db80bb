import Foundation
import HTTPTypes

/// Which peers may say who the client is: `server.trustedProxies`. Only a request whose socket
/// peer is one of them has its `Forwarded` / `X-Forwarded-For` believed — the client is the
/// right-most address of the chain that is not itself a trusted proxy, since each proxy appends
/// the address it saw — and keeps its `X-Forwarded-Host` / `-Proto` for the plugins; from anyone
/// else these fields are removed before a plugin sees the request, and the peer is the client.
struct ProxyTrust: Sendable {
    let proxies: [AddressMatcher]

    static let forwarded = HTTPField.Name("Forwarded")!
    static let forwardedFor = HTTPField.Name("X-Forwarded-For")!
    static let forwardingFields = [forwarded, forwardedFor, HTTPField.Name("X-Forwarded-Host")!, HTTPField.Name("X-Forwarded-Proto")!]

    init(_ patterns: [String]) {
        proxies = patterns.compactMap(AddressMatcher.init)
    }

    func trusts(_ address: String) -> Bool {
        proxies.contains { $0.matches(address) }
    }

    /// The client's address; `headers` lose the forwarding fields unless the peer is trusted.
    func client(peer: String, headers: inout HTTPFields) -> String {
        guard !proxies.isEmpty, trusts(peer) else {
            for name in Self.forwardingFields where headers[name] != nil { headers[name] = nil }
            return peer
        }
        let chain = Self.chain(headers)
        for address in chain.reversed() where !trusts(address) {
            return Self.isAddress(address) ? address : peer
        }
        return chain.first.flatMap { Self.isAddress($0) ? $0 : nil } ?? peer
    }

    /// The addresses a request passed through, the client first: `Forwarded`'s `for=` (RFC 7239),
    /// else `X-Forwarded-For`; every field of each name, in order.
    static func chain(_ headers: HTTPFields) -> [String] {
        let forwardedValues = headers[values: forwarded]
        if !forwardedValues.isEmpty {
            return forwardedValues.flatMap { $0.split(separator: ",") }.compactMap { element in
                for pair in element.split(separator: ";") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "for" else { continue }
                    return bare(parts[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
                }
                return nil
            }
        }
        return headers[values: forwardedFor].flatMap { $0.split(separator: ",") }.map { bare($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// An address without brackets or port: `[2001:db8::1]:4711` → `2001:db8::1`, `192.0.2.1:80` → `192.0.2.1`.
    static func bare(_ text: String) -> String {
        if text.hasPrefix("["), let end = text.firstIndex(of: "]") { return String(text[text.index(after: text.startIndex)..<end]) }
        if text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") { return String(text[..<colon]) }
        return text
    }

    static func isAddress(_ text: String) -> Bool {
        guard !text.isEmpty, text.count <= 45 else { return false }
        if AddressMatcher.ipv4(text) != nil { return true }
        return text.contains(":") && text.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
    }
}
