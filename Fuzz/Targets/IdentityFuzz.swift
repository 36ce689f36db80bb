import Foundation
import JWTKit
@testable import GatewayServer

/// A bearer token as the identity stage reads it before any key is involved: whether it looks like
/// a JWT, its header and claims parsed, the claims read by a provider's `claims:` settings; the same
/// bytes as an introspection answer, and as a JWKS's `Cache-Control`.
enum IdentityFuzz {
    static let settings: ProviderSettings = {
        let json = #"{"type": "jwt", "issuer": "https://idp.example", "audiences": ["gateway"], "jwks": "https://idp.example/keys","#
            + #" "claims": {"admin": {"claim": "realm_access.roles", "value": "admin"}, "group": {"claim": "groups"}}}"#
        return try! JSONDecoder().decode(ProviderSettings.self, from: Data(json.utf8))
    }()

    static let token: FuzzTargets.Target = { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        _ = IdentityProviders.isJWT(text)
        if let (header, claims, _) = try? DefaultJWTParser().parse(Array(bytes), as: TokenClaims.self) {
            _ = (header.alg, header.kid, header.typ, header.crit)
            _ = try? settings.identity(named: "fuzz", issuer: "https://idp.example", claims: claims, expiresAt: Date())
        }
        if let answer = try? JSONDecoder().decode(TokenClaims.self, from: Data(bytes)) {
            _ = (answer.bool("active"), answer.date("exp"), answer.strings("aud"))
            _ = try? settings.identity(named: "fuzz", issuer: "https://idp.example", claims: answer, expiresAt: Date())
        }
        _ = ProviderTransport.maxAge(text)
    }
}
