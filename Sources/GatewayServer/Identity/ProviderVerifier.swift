import Foundation
import GatewayCore
import JWTKit

/// Verifies the tokens of one provider: a JWT's header, signature and registered claims
/// (`jwt`, `oidc`), or an opaque token's introspection answer (`introspection`).
struct ProviderVerifier: Sendable {
    let name: String
    let settings: ProviderSettings
    /// The keys (`jwt`, `oidc`); nil for `introspection`.
    let keys: ProviderKeys?
    let transport: ProviderTransport?
    let now: @Sendable () -> Date

    /// The `typ` values a token may carry: none, a plain JWT, or an RFC 9068 access token.
    static let acceptedTypes: Set<String> = ["jwt", "at+jwt", "application/at+jwt"]

    /// The algorithms this provider's tokens may use.
    var algorithms: Set<String> {
        let configured = settings.algorithms.map(Set.init) ?? Set(JWTAlgorithms.all)
        // HMAC only where the file gives a secret.
        let hmacAllowed = settings.keys.contains { $0.secret != nil }
        return configured.filter { hmacAllowed || !JWTAlgorithms.hmac.contains($0) }
    }

    /// Verifies a JWT whose header is `header`.
    func verify(jwt token: String, header: JWTHeader) async throws -> VerifiedIdentity {
        guard let keys, let issuer = settings.issuer else { throw TokenRefusal("This provider does not take JWTs.") }
        guard let algorithm = header.alg, algorithm.lowercased() != "none" else {
            throw TokenRefusal("The token is unsigned (alg none).")
        }
        guard algorithms.contains(algorithm) else {
            throw TokenRefusal("The token's algorithm \(algorithm.prefix(16)) is not accepted from this provider.")
        }
        if let type = header.typ, !Self.acceptedTypes.contains(type.lowercased()) {
            throw TokenRefusal("The token's type \(type.prefix(32)) is not an access token.")
        }
        if let critical = header.crit, !critical.isEmpty {
            throw TokenRefusal("The token needs extensions this gateway does not know (crit).")
        }
        let (collection, keyAlgorithm) = try await keys.key(for: header.kid)
        guard keyAlgorithm == algorithm else {
            throw TokenRefusal("The token's algorithm \(algorithm) is not its key's (\(keyAlgorithm)).")
        }
        let claims: TokenClaims
        do {
            claims = try await collection.verify(token, as: TokenClaims.self)
        } catch let error as JWTError {
            switch error.errorType {
            case .signatureVerificationFailed: throw TokenRefusal("The token's signature does not verify.")
            case .malformedToken: throw TokenRefusal("The token is malformed.")
            default: throw TokenRefusal("The token does not verify (\(error.errorType)).")
            }
        } catch {
            throw TokenRefusal("The token does not verify.")
        }
        guard claims.string("iss") == issuer else { throw TokenRefusal("The token's issuer is not \(issuer).") }
        let expiresAt = try checkTimes(claims)
        try checkAudience(claims, required: true)
        return try settings.identity(named: name, issuer: issuer, claims: claims, expiresAt: expiresAt)
    }

    /// `exp` (required), `nbf` and `iat`, each with the provider's `clockSkew`.
    private func checkTimes(_ claims: TokenClaims, expRequired: Bool = true) throws -> Date {
        let skew = settings.clockSkew.seconds
        let now = now()
        guard let expiry = claims.date("exp") else {
            if expRequired { throw TokenRefusal("The token has no expiry (exp).") }
            return now.addingTimeInterval(settings.cacheFor.seconds)
        }
        guard now.addingTimeInterval(-skew) < expiry else { throw TokenRefusal("The token has expired.") }
        if let notBefore = claims.date("nbf"), now.addingTimeInterval(skew) < notBefore {
            throw TokenRefusal("The token is not valid yet (nbf).")
        }
        if let issued = claims.date("iat"), now.addingTimeInterval(skew) < issued {
            throw TokenRefusal("The token was issued in the future (iat).")
        }
        return expiry
    }

    private func checkAudience(_ claims: TokenClaims, required: Bool) throws {
        guard !settings.audiences.isEmpty else { return }
        guard let audiences = claims.strings("aud", splittingSpaces: false) else {
            if required { throw TokenRefusal("The token names no audience (aud).") }
            return
        }
        guard audiences.contains(where: settings.audiences.contains) else {
            throw TokenRefusal("The token is not meant for this gateway (aud).")
        }
    }

    /// Asks the RFC 7662 endpoint about an opaque token (or a JWT no other provider takes).
    func introspect(_ token: String) async throws -> VerifiedIdentity {
        guard let transport, let endpoint = settings.endpoint, let client = settings.client else {
            throw TokenRefusal("This provider does not introspect tokens.")
        }
        let answer = try await transport.postForm(endpoint, fields: [("token", token), ("token_type_hint", "access_token")],
                                                  user: client.id, password: client.secret)
        guard answer.status == 200 else {
            throw ProviderError.unreachable("the introspection endpoint answered \(answer.status)")
        }
        guard let claims = try? JSONDecoder().decode(TokenClaims.self, from: answer.body) else {
            throw ProviderError.badDocument("the introspection answer is not a JSON object")
        }
        // RFC 7662 §2.2: `active` is required; anything but true is an inactive token.
        guard claims.bool("active") == true else { throw TokenRefusal("The token is not active.", inactive: true) }
        let issuer = settings.linkIssuer
        if let settingsIssuer = settings.issuer, let stated = claims.string("iss"), stated != settingsIssuer {
            throw TokenRefusal("The token's issuer is not \(settingsIssuer).")
        }
        // Kept up to cacheFor, never past exp: a token revoked at the provider stops working then.
        let expiresAt = min(try checkTimes(claims, expRequired: false), now().addingTimeInterval(settings.cacheFor.seconds))
        try checkAudience(claims, required: false)
        return try settings.identity(named: name, issuer: issuer, claims: claims, expiresAt: expiresAt)
    }
}
