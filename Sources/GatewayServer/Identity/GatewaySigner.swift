import Crypto
import Foundation
import GatewayCore
import JWTKit
import Synchronization

/// `auth.signingKeys`: private keys (PEM) the gateway signs identity tokens with, for upstream
/// services that want a verifiable statement of who the caller is (an upstream service's
/// `forwardToken`). The first key signs; every key is published at `/.well-known/jwks.json`, so a
/// rotation adds the new key second, lets services fetch it, then moves it first and later drops
/// the old one (a restart takes each step: `auth` is read at start).
public struct SigningKeySettings: Decodable, Sendable, Equatable {
    /// A PEM file of the private key (ECDSA P-256 or P-384, RSA of 2048 bits or more, or Ed25519),
    /// relative to plugins.yaml's folder.
    public var file: String?
    /// The PEM text itself (from `${ENV}`).
    public var pem: String?
    /// The key id (`kid`); default: the first 16 hexadecimal digits of the SHA-256 of the public key.
    public var kid: String?

    enum CodingKeys: String, CodingKey { case file, pem, kid }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        file = try container.decodeIfPresent(String.self, forKey: .file)
        pem = try container.decodeIfPresent(String.self, forKey: .pem)
        kid = try container.decodeIfPresent(String.self, forKey: .kid)
        guard (file == nil) != (pem == nil) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a signing key is one of file: or pem:"))
        }
        if let kid, kid.isEmpty || kid.utf8.count > 128 || !kid.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 32 && $0.value < 127 }) {
            throw DecodingError.dataCorruptedError(forKey: .kid, in: container, debugDescription: "a kid is 1 to 128 printable ASCII characters")
        }
    }
}

/// Signs the gateway's identity tokens (short-lived JWTs naming the caller for an upstream
/// service) and publishes the public keys as a JWKS.
///
/// A token is `{iss, sub, aud, iat, nbf, exp, jti}` with `scope` (a key's or a provider's token's
/// scopes), `credential` (`session`, `key` or the provider's name), `admin` (true for an
/// administrator), `name` (the display name) and `groups` (consumer groups). `sub` is the account
/// id, else `key:<id>` for a master key or `<provider>:<subject>` for a provider's caller without
/// an account. Tokens are remembered per caller and audience for half their lifetime (signing
/// costs tens of microseconds; a service sees the same token for a while, which is fine).
public final class GatewaySigner: Sendable {
    /// The issuer tokens carry: `server.publicURL`, else `gateway`.
    public let issuer: String
    /// The published keys, as the JSON of a JWKS.
    public let jwksJSON: Data
    private let keys: JWTKeyCollection
    private let signingKid: JWKIdentifier
    private let remembered = Mutex<[String: (token: String, renewAt: Date)]>([:])

    private init(issuer: String, jwksJSON: Data, keys: JWTKeyCollection, signingKid: JWKIdentifier) {
        self.issuer = issuer
        self.jwksJSON = jwksJSON
        self.keys = keys
        self.signingKid = signingKid
    }

    /// Reads the keys; a missing or unusable file is a startup error naming it.
    public static func make(_ settings: [SigningKeySettings], issuer: String, baseDirectory: URL) async throws -> GatewaySigner {
        let collection = JWTKeyCollection()
        var published: [JWK] = []
        var kids = Set<String>()
        for (index, key) in settings.enumerated() {
            let place = "auth.signingKeys[\(index)]"
            let pem: String
            if let file = key.file {
                let path = file.hasPrefix("/") ? file : baseDirectory.appendingPathComponent(file).path
                guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw GatewayStartupError("\(place): the file \(path) cannot be read") }
                pem = text
            } else {
                pem = key.pem ?? ""
            }
            func kid(_ publicKeyBytes: some DataProtocol) -> String {
                key.kid ?? SHA256.hash(data: publicKeyBytes).prefix(8).map { String(format: "%02x", $0) }.joined()
            }
            let name: String
            if let private256 = try? ES256PrivateKey(pem: pem) {
                name = kid(Data(private256.publicKey.pemRepresentation.utf8))
                let (x, y) = private256.publicKey.parameters!
                published.append(.ecdsa(.es256, identifier: JWKIdentifier(string: name), x: x, y: y, curve: .p256))
                await collection.add(ecdsa: private256, kid: JWKIdentifier(string: name))
            } else if let private384 = try? ES384PrivateKey(pem: pem) {
                name = kid(Data(private384.publicKey.pemRepresentation.utf8))
                let (x, y) = private384.publicKey.parameters!
                published.append(.ecdsa(.es384, identifier: JWKIdentifier(string: name), x: x, y: y, curve: .p384))
                await collection.add(ecdsa: private384, kid: JWKIdentifier(string: name))
            } else if let rsa = try? Insecure.RSA.PrivateKey(pem: pem) {
                let (modulus, exponent) = try rsa.publicKey.getKeyPrimitives()
                name = kid(modulus)
                published.append(.rsa(.rs256, identifier: JWKIdentifier(string: name), modulus: modulus.base64URL,
                                      exponent: exponent.base64URL))
                await collection.add(rsa: rsa, digestAlgorithm: .sha256, kid: JWKIdentifier(string: name))
            } else if let eddsa = try? EdDSA.PrivateKey(pem: pem) {
                let raw = eddsa.publicKey.rawRepresentation
                name = kid(raw)
                published.append(.octetKeyPair(.eddsa, identifier: JWKIdentifier(string: name), x: raw.base64URL, y: nil, curve: .ed25519))
                await collection.add(eddsa: eddsa, kid: JWKIdentifier(string: name))
            } else {
                throw GatewayStartupError("\(place): not a PEM private key of ECDSA P-256 or P-384, RSA (2048 bits or more) or Ed25519 "
                    + "(make one with `openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out signing.pem`)")
            }
            guard kids.insert(name).inserted else { throw GatewayStartupError("\(place): another signing key has the kid '\(name)'") }
        }
        guard let first = kids.isEmpty ? nil : published.first?.keyIdentifier else { throw GatewayStartupError("auth.signingKeys: no key given") }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let jwks = try encoder.encode(JWKS(keys: published))
        return GatewaySigner(issuer: issuer, jwksJSON: jwks, keys: collection, signingKid: first)
    }

    /// The claims of an identity token.
    struct IdentityClaims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var aud: AudienceClaim
        var iat: IssuedAtClaim
        var nbf: NotBeforeClaim
        var exp: ExpirationClaim
        var jti: IDClaim
        var scope: String?
        var credential: String?
        var admin: Bool?
        var name: String?
        var groups: [String]?

        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp.verifyNotExpired()
        }
    }

    /// The subject a token names for `principal`; nil for a guest (who gets no token).
    static func subject(of principal: Principal) -> String? {
        if let userID = principal.userID { return userID }
        switch principal.kind {
        case .anonymous, .user: return nil
        case .apiKey(let keyID): return "key:" + keyID
        case .token(let provider, let subject): return provider + ":" + subject
        }
    }

    /// A token for `principal`, valid `lifetime` seconds, for `audience`; nil for a guest.
    public func token(for principal: Principal, audience: String, lifetime: Double, now: Date = Date()) async throws -> String? {
        guard let subject = Self.subject(of: principal) else { return nil }
        let scope = principal.isBoundByScopes ? principal.scopes.sorted().joined(separator: " ") : nil
        let cacheKey = [audience, String(lifetime), subject, principal.credentialKind ?? "", scope ?? "", principal.isAdmin ? "a" : "",
                        principal.groups.joined(separator: ","), principal.displayName ?? ""].joined(separator: "\u{1}")
        if let known = remembered.withLock({ $0[cacheKey] }), known.renewAt > now { return known.token }
        let claims = IdentityClaims(iss: .init(value: issuer), sub: .init(value: subject), aud: .init(value: [audience]),
                                    iat: .init(value: now), nbf: .init(value: now.addingTimeInterval(-5)), exp: .init(value: now.addingTimeInterval(lifetime)),
                                    jti: .init(value: UUID().uuidString), scope: scope, credential: principal.credentialKind,
                                    admin: principal.isAdmin ? true : nil, name: principal.displayName,
                                    groups: principal.groups.isEmpty ? nil : principal.groups)
        var header = JWTHeader()
        header.typ = "JWT"
        let token = try await keys.sign(claims, kid: signingKid, header: header)
        remembered.withLock { table in
            if table.count >= 10_000 { table.removeAll(keepingCapacity: true) }
            table[cacheKey] = (token, now.addingTimeInterval(lifetime / 2))
        }
        return token
    }
}

extension DataProtocol {
    /// Base64url without padding (RFC 7515 §2).
    fileprivate var base64URL: String {
        Data(self).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
