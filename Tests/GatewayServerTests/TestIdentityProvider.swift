import CryptoExtras
import Foundation
@testable import GatewayServer
import GatewayTesting
import Hummingbird
import JWTKit
import NIOFoundationCompat
import Synchronization

/// A small identity provider for tests, served on loopback: discovery, a JWKS the test can change
/// (rotation, outage) and an RFC 7662 introspection endpoint, each counting its calls; and tokens
/// signed with its keys, one `kid` per algorithm.
final class TestIdentityProvider: Sendable {
    struct State {
        var issuer = ""
        /// The kids the JWKS lists (nil: the JWKS answers 503).
        var published: [String]?
        var jwksFetches = 0
        var discoveryFetches = 0
        /// Introspection answers by token; a token not listed is inactive.
        var active: [String: [String: JWTHeaderField]] = [:]
        var introspections = 0
        /// Whether introspection answers 500 (an outage).
        var introspectionDown = false
        /// How long introspection takes to answer.
        var introspectionDelay: Duration = .zero
        var cacheControl = "max-age=300"
    }

    let state = Mutex(State())
    let signer: JWTKeyCollection
    let jwks: [String: JWK]
    /// The RSA public key as PEM (for the key-confusion attack).
    let rsaPublicPEM: String

    static let kids = ["rs256", "rs384", "rs512", "ps256", "ps384", "ps512", "es256", "es384", "eddsa"]

    private init(signer: JWTKeyCollection, jwks: [String: JWK], rsaPublicPEM: String) {
        self.signer = signer
        self.jwks = jwks
        self.rsaPublicPEM = rsaPublicPEM
    }

    /// A provider of its own (calls counted from zero), with the keys every test shares (an RSA
    /// key takes a moment to make).
    static func make() async throws -> TestIdentityProvider {
        let keys = try await sharedKeys.value
        let provider = TestIdentityProvider(signer: keys.signer, jwks: keys.jwks, rsaPublicPEM: keys.rsaPublicPEM)
        provider.state.withLock { $0.published = kids }
        return provider
    }

    private struct Keys: Sendable {
        let signer: JWTKeyCollection
        let jwks: [String: JWK]
        let rsaPublicPEM: String
    }

    private static let sharedKeys = Task { try await makeKeys() }

    private static func makeKeys() async throws -> Keys {
        let rsa = try JWTKit.Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
        let es256 = ES256PrivateKey()
        let es384 = ES384PrivateKey()
        let ed = try EdDSA.PrivateKey()
        let signer = JWTKeyCollection()
        var jwks: [String: JWK] = [:]
        let primitives = try rsa.publicKey.getKeyPrimitives()
        let (modulus, exponent) = (base64URL(primitives.modulus), base64URL(primitives.publicExponent))
        for (kid, digest, algorithm, pss) in [("rs256", DigestAlgorithm.sha256, JWK.Algorithm.rs256, false), ("rs384", .sha384, .rs384, false),
                                             ("rs512", .sha512, .rs512, false), ("ps256", .sha256, .ps256, true), ("ps384", .sha384, .ps384, true),
                                             ("ps512", .sha512, .ps512, true)] {
            if pss {
                await signer.add(pss: rsa, digestAlgorithm: digest, kid: JWKIdentifier(string: kid))
            } else {
                await signer.add(rsa: rsa, digestAlgorithm: digest, kid: JWKIdentifier(string: kid))
            }
            jwks[kid] = JWK.rsa(algorithm, identifier: JWKIdentifier(string: kid), modulus: modulus, exponent: exponent)
        }
        await signer.add(ecdsa: es256, kid: "es256")
        let p256 = es256.publicKey.parameters!
        jwks["es256"] = JWK.ecdsa(.es256, identifier: "es256", x: p256.x, y: p256.y, curve: .p256)
        await signer.add(ecdsa: es384, kid: "es384")
        let p384 = es384.publicKey.parameters!
        jwks["es384"] = JWK.ecdsa(.es384, identifier: "es384", x: p384.x, y: p384.y, curve: .p384)
        await signer.add(eddsa: ed, kid: "eddsa")
        jwks["eddsa"] = JWK.octetKeyPair(.eddsa, identifier: "eddsa", x: base64URL(ed.publicKey.rawRepresentation), y: nil, curve: .ed25519)
        return Keys(signer: signer, jwks: jwks, rsaPublicPEM: rsa.publicKey.pemRepresentation)
    }

    static func base64URL(_ data: some DataProtocol) -> String {
        Data(data).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    var issuer: String { state.withLock { $0.issuer } }

    /// Claims of a good access token for `subject`, valid for five minutes.
    func claims(subject: String = "alice-id", username: String? = "alice", scope: String? = "notes:read notes:write accounts:read",
                groups: [String] = [], audience: String = "gateway", lifetime: TimeInterval = 300) -> [String: JWTHeaderField] {
        let now = Int(Date().timeIntervalSince1970)
        var claims: [String: JWTHeaderField] = [
            "iss": .string(issuer), "sub": .string(subject), "aud": .string(audience),
            "iat": .int(now), "nbf": .int(now), "exp": .int(now + Int(lifetime)), "jti": .string(UUID().uuidString),
        ]
        if let username { claims["preferred_username"] = .string(username) }
        if let scope { claims["scope"] = .string(scope) }
        if !groups.isEmpty { claims["groups"] = .array(groups.map { .string($0) }) }
        return claims
    }

    /// A token signed with the key `kid`, with header `typ` (nil: none).
    func token(_ claims: [String: JWTHeaderField], kid: String = "rs256", typ: String? = "at+jwt") async throws -> String {
        var header = JWTHeader()
        header.typ = typ
        if typ == nil { header.remove("typ") }
        return try await signer.sign(TokenClaims(fields: claims), kid: JWKIdentifier(string: kid), header: header)
    }

    /// `token` with its header's `kid` replaced (its signature no longer matches).
    static func renaming(_ token: String, kid: String) throws -> String {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        var base64 = parts[0].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        var header = try JSONDecoder().decode([String: JWTHeaderField].self, from: Data(base64Encoded: base64) ?? Data())
        header["kid"] = .string(kid)
        return base64URL(try JSONEncoder().encode(header)) + "." + parts[1] + "." + parts[2]
    }

    /// A token with any header and signature the test chooses (for attacks).
    static func forged(header: [String: JWTHeaderField], claims: [String: JWTHeaderField], signature: String = "") throws -> String {
        let encoder = JSONEncoder()
        return base64URL(try encoder.encode(header)) + "." + base64URL(try encoder.encode(claims)) + "." + signature
    }

    /// Serves the provider while `body` runs; the issuer is `http://127.0.0.1:PORT/idp`.
    func serve<R: Sendable>(_ body: @Sendable (TestIdentityProvider) async throws -> R) async throws -> R {
        let router = Router()
        router.get("/idp/.well-known/openid-configuration") { _, _ -> Response in
            let issuer = self.state.withLock { state in
                state.discoveryFetches += 1
                return state.issuer
            }
            let document = #"{"issuer":"\#(issuer)","jwks_uri":"\#(issuer)/jwks.json","introspection_endpoint":"\#(issuer)/introspect"}"#
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: document)))
        }
        router.get("/idp/jwks.json") { _, _ -> Response in
            let (kids, cacheControl) = self.state.withLock { state in
                state.jwksFetches += 1
                return (state.published, state.cacheControl)
            }
            guard let kids else { return Response(status: .serviceUnavailable) }
            let document = try JSONEncoder().encode(JWKS(keys: kids.compactMap { self.jwks[$0] }))
            return Response(status: .ok, headers: [.contentType: "application/json", .cacheControl: cacheControl],
                            body: .init(byteBuffer: ByteBuffer(data: document)))
        }
        router.post("/idp/introspect") { request, _ -> Response in
            let expected = "Basic " + Data("gateway:gateway-secret".utf8).base64EncodedString()
            guard request.headers[.authorization] == expected else { return Response(status: .unauthorized) }
            let form = String(buffer: try await request.body.collect(upTo: 1 << 16))
            let token = form.split(separator: "&").first { $0.hasPrefix("token=") }.map { String($0.dropFirst(6)).removingPercentEncoding ?? "" } ?? ""
            let (answer, down, delay): ([String: JWTHeaderField]?, Bool, Duration) = self.state.withLock { state in
                state.introspections += 1
                return (state.active[token], state.introspectionDown, state.introspectionDelay)
            }
            if delay > .zero { try await Task.sleep(for: delay) }
            if down { return Response(status: .internalServerError) }
            var fields = answer ?? [:]
            fields["active"] = .bool(answer != nil)
            let document = try JSONEncoder().encode(fields)
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: document)))
        }
        return try await withLoopbackServer(router) { port in
            self.state.withLock { $0.issuer = "http://127.0.0.1:\(port)/idp" }
            return try await body(self)
        }
    }
}
