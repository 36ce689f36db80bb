import Foundation
import GatewayCore

/// `auth.certificates`: which caller a verified client certificate (`server.tls.clientCertificates`)
/// names. The first rule whose `subject` (the RFC 4514 subject, `CN=billing,O=Acme`) or `san`
/// (`dns:…`, `email:…`, `uri:…`, `ip:…`) matches decides: the caller acts for the account `user`
/// and/or is bound by `scopes` (default `*`: the account's own rights), and is an administrator
/// with `admin: true` (and the scope `admin` or `*`). Its credential kind is `certificate`.
public struct CertificateRule: Decodable, Sendable, Equatable {
    public var subject: String?
    public var san: String?
    public var user: String?
    public var scopes: [String]?
    public var admin: Bool?

    enum CodingKeys: String, CodingKey { case subject, san, user, scopes, admin }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        subject = try container.decodeIfPresent(String.self, forKey: .subject)
        san = try container.decodeIfPresent(String.self, forKey: .san)
        user = try container.decodeIfPresent(String.self, forKey: .user)
        scopes = try container.decodeIfPresent([String].self, forKey: .scopes)
        admin = try container.decodeIfPresent(Bool.self, forKey: .admin)
        guard (subject == nil) != (san == nil) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a rule matches one of subject: or san:"))
        }
        if let subject, subject.isEmpty {
            throw DecodingError.dataCorruptedError(forKey: .subject, in: container, debugDescription: "an empty subject names no certificate")
        }
        if let san, !["dns:", "email:", "uri:", "ip:"].contains(where: { san.hasPrefix($0) && san.count > $0.count }) {
            throw DecodingError.dataCorruptedError(forKey: .san, in: container, debugDescription: "'\(san.prefix(80))' is not dns:NAME, email:ADDRESS, uri:URI or ip:ADDRESS")
        }
        if let san, san.hasPrefix("ip:"), !Self.isStrictAddress(String(san.dropFirst(3))) {
            throw DecodingError.dataCorruptedError(forKey: .san, in: container, debugDescription: "'\(san.prefix(80))' is not ip: and an IPv4 address in dotted decimal or an IPv6 address")
        }
        guard user != nil || scopes != nil else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a rule names a user:, scopes: or both"))
        }
        for (index, scope) in (scopes ?? []).enumerated() where !AccountStore.isValidScope(scope) {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath + [CodingKeys.scopes],
                                                    debugDescription: "scopes[\(index)]: '\(scope.prefix(60))' is not <plugin>:read, <plugin>:write, <plugin>:*, * or admin"))
        }
    }

    /// What the rule matches, as the caller's subject: `subject:CN=…` or `san:dns:…`.
    var selector: String { subject.map { "subject:" + $0 } ?? "san:" + (san.map(Self.normalized) ?? "") }

    /// Whether the rule names `certificate`: its subject exactly, or one of its alternative names
    /// (DNS names and e-mail addresses without regard to case, IP addresses in any spelling).
    func matches(_ certificate: ClientCertificate) -> Bool {
        if let subject { return subject == certificate.subject }
        if let san {
            let wanted = Self.normalized(san)
            return certificate.alternativeNames.contains { Self.normalized($0) == wanted }
        }
        return false
    }

    /// Dotted decimal without leading zeros (`10.0.0.1`, never `010.0.0.1` or `10.1`), or IPv6.
    static func isStrictAddress(_ text: String) -> Bool {
        if text.contains(":") { return IPAddress(host: text).map { !$0.isIPv4 } ?? false }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in
            part.count <= 3 && !part.isEmpty && part.allSatisfy(\.isASCII) && part.allSatisfy(\.isNumber)
                && (part.count == 1 || part.first != "0") && Int(part).map { $0 <= 255 } == true
        }
    }

    /// A name as compared: `dns:` and `email:` lowercased, `ip:` as its address bytes' one spelling.
    static func normalized(_ name: String) -> String {
        if name.hasPrefix("dns:") || name.hasPrefix("email:") { return name.lowercased() }
        if name.hasPrefix("ip:"), let address = IPAddress(host: String(name.dropFirst(3))) { return "ip:" + address.description }
        return name
    }
}

extension AccountAuthenticator {
    /// The principal of a request with a verified client certificate and no other credential:
    /// the first matching rule's; a certificate no rule names is a 401 (it verified, but names no
    /// caller this gateway knows). Remembered as credentials are, and forgotten with its account.
    func principal(for certificate: ClientCertificate, rules: [CertificateRule], address: String) async throws -> Principal {
        let cacheKey = "c:" + certificate.fingerprint
        if let known = try remembered(cacheKey, address: address) { return known }
        guard let rule = rules.first(where: { $0.matches(certificate) }) else {
            throw GatewayError.unauthorized("The client certificate (\(certificate.subject.prefix(200))) names no caller of this gateway (auth.certificates).")
        }
        let scopes = Set(rule.scopes ?? ["*"])
        let mayAdminister = Principal.covers(scopes, Principal.adminScope)
        // The caller is the rule's: every certificate it names is the same caller (subjects are
        // not unique across certificates, a rule's selector is unique among the rules).
        var principal = Principal(kind: .token(provider: Principal.certificateKind, subject: rule.selector), displayName: certificate.subject,
                                  isAdmin: rule.admin == true && mayAdminister, scopes: scopes, address: "")
        if let username = rule.user {
            guard let user = try await store.user(named: username), !user.disabled else {
                throw GatewayError.unauthorized("The account this client certificate names is unknown or disabled.")
            }
            principal.userID = user.id
            principal.displayName = user.displayName
            principal.isAdmin = (rule.admin == true || user.isAdmin) && mayAdminister
            principal.grants = Set(try await store.grants(of: user.id))
            principal.groups = user.consumerGroup.map { [$0] } ?? []
        }
        remember(cacheKey, principal: principal)
        var admitted = principal
        admitted.address = address
        return admitted
    }
}
