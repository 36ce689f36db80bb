import Foundation
import GatewayCore

/// `auth.providers.<name>`: an identity provider whose tokens the gateway accepts beside its own
/// sessions and keys.
///
/// - `oidc`: an OpenID Connect provider; its keys are found by discovery at
///   `{issuer}/.well-known/openid-configuration`.
/// - `jwt`: JSON Web Tokens signed by keys from a JWKS URL (`jwks:`) or configured here (`keys:`).
/// - `introspection`: opaque tokens, asked of an RFC 7662 endpoint.
///
/// The name is used in logs, metrics, `accept` lists and as the token principal's kind.
public struct ProviderSettings: Decodable, Sendable, Equatable {
    public enum Kind: String, Decodable, Sendable, Equatable { case oidc, jwt, introspection }
    /// How a token's caller becomes a gateway account.
    public enum Provisioning: String, Decodable, Sendable, Equatable {
        /// An account is made on first sight, linked by (issuer, subject).
        case auto
        /// Only accounts already linked (by an administrator, or made earlier) are accepted.
        case existing
        /// No account: the caller is a principal of the provider alone (no user data of its own).
        case none
    }

    /// A key configured in the file: a PEM public key (`file:` a path, or `pem:` the text) for
    /// RSA, ECDSA or Ed25519 tokens, or an HMAC `secret:`.
    public struct StaticKey: Decodable, Sendable, Equatable {
        public var file: String?
        public var pem: String?
        public var secret: String?
        /// The key id tokens name in `kid`; absent, the key serves tokens without a `kid`.
        public var kid: String?
        /// The one algorithm the key verifies (RS256, PS384, ES256, EdDSA, HS512, …); default:
        /// RS256 for an RSA key, ES256/ES384 by the curve, EdDSA, HS256 for a secret.
        public var algorithm: String?

        enum CodingKeys: String, CodingKey { case file, pem, secret, kid, algorithm }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            file = try container.decodeIfPresent(String.self, forKey: .file)
            pem = try container.decodeIfPresent(String.self, forKey: .pem)
            secret = try container.decodeIfPresent(String.self, forKey: .secret)
            kid = try container.decodeIfPresent(String.self, forKey: .kid)
            algorithm = try container.decodeIfPresent(String.self, forKey: .algorithm)
            guard [file, pem, secret].compactMap({ $0 }).count == 1 else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a key is one of file:, pem: or secret:"))
            }
            if let algorithm, !JWTAlgorithms.all.contains(algorithm) {
                throw DecodingError.dataCorruptedError(forKey: .algorithm, in: container,
                    debugDescription: "'\(algorithm)' is not one of \(JWTAlgorithms.all.joined(separator: ", "))")
            }
            if let algorithm, (secret != nil) != algorithm.hasPrefix("HS") {
                throw DecodingError.dataCorruptedError(forKey: .algorithm, in: container,
                    debugDescription: secret != nil ? "a secret verifies HS256, HS384 or HS512 only" : "HS256, HS384 and HS512 need a secret:, not a public key")
            }
            // RFC 7518 §3.2: a key at least as long as the hash's output.
            let needed = algorithm == "HS512" ? 64 : algorithm == "HS384" ? 48 : 32
            if let secret, secret.utf8.count < needed {
                throw DecodingError.dataCorruptedError(forKey: .secret, in: container,
                    debugDescription: "an HMAC secret for \(algorithm ?? "HS256") must be at least \(needed) bytes")
            }
        }
    }

    /// A claim holding a list (or one string) and, for `admin`, the value that grants the role.
    public struct ClaimMatch: Decodable, Sendable, Equatable {
        public var claim: String
        public var value: String?
    }

    /// Where the caller's facts are in the token's claims (or the introspection answer).
    public struct Claims: Decodable, Sendable, Equatable {
        /// The stable id of the caller (default `sub`).
        public var subject = "sub"
        /// A name shown, and used for a provisioned account (default `preferred_username`, then the subject).
        public var username = "preferred_username"
        /// The scopes: a space-separated string or an array (default `scope`, then `scp`). Set to
        /// the empty string for tokens whose scopes do not bound the caller.
        public var scopes = "scope"
        /// The claim and value that make the caller an administrator (absent: none does).
        public var admin: ClaimMatch?
        /// The claim naming the caller's consumer groups (absent: none).
        public var group: ClaimMatch?

        public init() {}

        enum CodingKeys: String, CodingKey { case subject, username, scopes, admin, group }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            subject = try container.decodeIfPresent(String.self, forKey: .subject) ?? subject
            username = try container.decodeIfPresent(String.self, forKey: .username) ?? username
            scopes = try container.decodeIfPresent(String.self, forKey: .scopes) ?? scopes
            admin = try container.decodeIfPresent(ClaimMatch.self, forKey: .admin)
            group = try container.decodeIfPresent(ClaimMatch.self, forKey: .group)
            if let admin, admin.value == nil {
                throw DecodingError.dataCorruptedError(forKey: .admin, in: container, debugDescription: "admin: needs a value: (the claim's value that makes an administrator)")
            }
        }
    }

    /// An introspection endpoint's client credentials.
    public struct Client: Decodable, Sendable, Equatable {
        public var id: String
        public var secret: String
    }

    public var type: Kind
    /// The `iss` tokens carry (and, for `oidc`, where discovery is).
    public var issuer: String?
    /// `aud` must hold one of these.
    public var audiences: [String] = []
    /// Leeway for `exp`, `nbf` and `iat` (default 30 s, at most 5 min).
    public var clockSkew = ConfigDuration(seconds: 30)
    public var claims = Claims()
    public var provision: Provisioning = .auto
    /// Only these algorithms are accepted (default: every one the keys allow).
    public var algorithms: [String]?
    /// `jwt`: the JWKS URL.
    public var jwks: String?
    /// `jwt`: keys configured here.
    public var keys: [StaticKey] = []
    /// A PEM file of the certificate authorities trusted for this provider's https (default: the system's).
    public var ca: String?
    /// `introspection`: the RFC 7662 endpoint and the gateway's client at the provider.
    public var endpoint: String?
    public var client: Client?
    /// `introspection`: how long an answer is kept (never past the token's `exp`).
    public var cacheFor = ConfigDuration(seconds: 60)

    enum CodingKeys: String, CodingKey {
        case type, issuer, audiences, clockSkew, claims, provision, algorithms, jwks, keys, ca, endpoint, client, cacheFor
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        type = try container.decode(Kind.self, forKey: .type)
        issuer = try container.decodeIfPresent(String.self, forKey: .issuer)
        audiences = try container.decodeIfPresent([String].self, forKey: .audiences) ?? []
        clockSkew = try container.decodeIfPresent(ConfigDuration.self, forKey: .clockSkew) ?? clockSkew
        claims = try container.decodeIfPresent(Claims.self, forKey: .claims) ?? claims
        provision = try container.decodeIfPresent(Provisioning.self, forKey: .provision) ?? provision
        algorithms = try container.decodeIfPresent([String].self, forKey: .algorithms)
        jwks = try container.decodeIfPresent(String.self, forKey: .jwks)
        keys = try container.decodeIfPresent([StaticKey].self, forKey: .keys) ?? []
        ca = try container.decodeIfPresent(String.self, forKey: .ca)
        endpoint = try container.decodeIfPresent(String.self, forKey: .endpoint)
        client = try container.decodeIfPresent(Client.self, forKey: .client)
        cacheFor = try container.decodeIfPresent(ConfigDuration.self, forKey: .cacheFor) ?? cacheFor

        func fail(_ key: CodingKeys, _ text: String) -> DecodingError {
            DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: text)
        }
        guard (0...300).contains(clockSkew.seconds) else { throw fail(.clockSkew, "clockSkew must be between 0s and 5m") }
        if let algorithms {
            for algorithm in algorithms where !JWTAlgorithms.all.contains(algorithm) {
                throw fail(.algorithms, "'\(algorithm)' is not one of \(JWTAlgorithms.all.joined(separator: ", "))")
            }
            if algorithms.contains(where: JWTAlgorithms.hmac.contains), !keys.contains(where: { $0.secret != nil }) {
                throw fail(.algorithms, "HS256, HS384 and HS512 are accepted only with a secret: among keys:")
            }
        }
        for (key, url) in [(CodingKeys.issuer, issuer), (.jwks, jwks), (.endpoint, endpoint)] {
            if let url, let problem = ProviderSettings.transportProblem(url) { throw fail(key, problem) }
        }
        switch type {
        case .oidc:
            guard issuer != nil else { throw fail(.issuer, "an oidc provider needs issuer: (discovery is at {issuer}/.well-known/openid-configuration)") }
            guard !audiences.isEmpty else { throw fail(.audiences, "an oidc provider needs audiences: (the aud values meant for this gateway)") }
            guard jwks == nil, keys.isEmpty else { throw fail(.jwks, "an oidc provider finds its keys by discovery; use type: jwt for jwks: or keys:") }
        case .jwt:
            guard issuer != nil else { throw fail(.issuer, "a jwt provider needs issuer: (the iss its tokens carry)") }
            guard !audiences.isEmpty else { throw fail(.audiences, "a jwt provider needs audiences: (the aud values meant for this gateway)") }
            guard (jwks != nil) != !keys.isEmpty else { throw fail(.jwks, "a jwt provider needs either jwks: (a URL) or keys:") }
        case .introspection:
            guard endpoint != nil else { throw fail(.endpoint, "an introspection provider needs endpoint: (its RFC 7662 URL)") }
            guard client != nil else { throw fail(.client, "an introspection provider needs client: { id, secret } to authenticate to the endpoint") }
            guard cacheFor.seconds >= 0, cacheFor.seconds <= 3600 else { throw fail(.cacheFor, "cacheFor must be between 0s and 1h") }
        }
    }

    /// The issuer an identity of this provider is linked by: its `issuer`, or for an
    /// introspection provider without one, its endpoint.
    public var linkIssuer: String { issuer ?? endpoint ?? "" }

    /// Why `text` may not be fetched from: it must be an https URL, or http to a loopback address
    /// (a sidecar, a test). Nil when it may.
    static func transportProblem(_ text: String) -> String? {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            return "'\(text)' is not an absolute URL"
        }
        if scheme == "https" { return nil }
        guard scheme == "http" else { return "'\(text)' is not an https URL" }
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).lowercased()
        if bare == "localhost" || bare == "::1" || isLoopbackIPv4(bare) { return nil }
        return "'\(text)' is plain http to a host that is not loopback: use https"
    }

    /// Whether `host` is an IPv4 address in 127.0.0.0/8, written as four decimal parts (a name
    /// such as `127.example.com` is not).
    static func isLoopbackIPv4(_ host: String) -> Bool {
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "127" else { return false }
        return parts.allSatisfy { part in part.count <= 3 && !part.isEmpty && part.allSatisfy(\.isASCII) && Int(part).map { (0...255).contains($0) } == true }
    }
}

/// The JOSE algorithms the gateway verifies (RFC 7518, and EdDSA of RFC 8037).
enum JWTAlgorithms {
    static let asymmetric = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
    static let hmac = ["HS256", "HS384", "HS512"]
    static let all = asymmetric + hmac
}
