import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import JWTKit
import NIOCore
import NotesFixturePlugin
import Synchronization
import Testing

extension InProcessResponse {
    var text: String { String(buffer: body) }
}

/// Tokens of outside identity providers (`auth.providers`): every validation rule, keys fetched
/// and refreshed, introspection, and what a verified caller becomes (an account, its scopes).
@Suite("identity providers: JWT, OpenID Connect and introspection")
struct IdentityProviderTests {
    /// plugins.yaml of a gateway taking `provider`'s tokens as `corp` (OpenID Connect discovery),
    /// with `more` added under `corp:`, and `extra` after the providers.
    static func yaml(_ provider: TestIdentityProvider, corp more: String = "", extra: String = "", plugins: String = notesYAML) -> String {
        """
        \(plugins)
        auth:
          providers:
            corp:
              type: oidc
              issuer: \(provider.issuer)
              audiences: [gateway]
              claims:
                admin: { claim: groups, value: gateway-admins }
                group: { claim: groups }
        \(more.split(separator: "\n").map { "      " + $0 }.joined(separator: "\n"))
        \(extra)
        """
    }

    /// A provider served on loopback and a gateway taking its tokens.
    static func withProvider(storage: TestStorage = .sqlite, corp: String = "", extra: String = "", plugins: String = notesYAML, limits: Bool = false,
                             _ body: @Sendable @escaping (TestIdentityProvider, TestGateway) async throws -> Void) async throws {
        let provider = try await TestIdentityProvider.make()
        try await provider.serve { provider in
            try await TestGateway.with(notes, yaml: yaml(provider, corp: corp, extra: extra, plugins: plugins), storage: storage, limits: limits) { gateway in
                try await body(provider, gateway)
            }
        }
    }

    /// plugins.yaml of a gateway asking `provider`'s introspection endpoint as `sso`, with `more` under `sso:`.
    static func introspectionYAML(_ provider: TestIdentityProvider, more: String = "") -> String {
        notesYAML + """

        auth:
          providers:
            sso:
              type: introspection
              endpoint: \(provider.issuer)/introspect
              client: { id: gateway, secret: gateway-secret }
        \(more.split(separator: "\n").map { "      " + $0 }.joined(separator: "\n"))
        """
    }

    static func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer " + token] }
    static func bearerJSON(_ token: String) -> HTTPFields { [.authorization: "Bearer " + token, .contentType: "application/json"] }

    /// Expects a 401 for a refused token, with RFC 6750's challenge and a problem saying why.
    static func expectRefused(_ gateway: TestGateway, _ token: String, _ reason: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let response = try await gateway.gateway.handle(.get, "/v1/me", headers: bearer(token))
        #expect(response.status == 401, "\(reason): \(response.text)", sourceLocation: sourceLocation)
        #expect(response.headers[.wwwAuthenticate]?.hasPrefix(#"Bearer error="invalid_token""#) == true, sourceLocation: sourceLocation)
        #expect(response.text.contains(reason), "\(response.text)", sourceLocation: sourceLocation)
    }

    @Test("each asymmetric algorithm verifies: RS, PS 256/384/512, ES256, ES384, EdDSA")
    func algorithms() async throws {
        try await Self.withProvider { provider, gateway in
            for kid in TestIdentityProvider.kids {
                let token = try await provider.token(provider.claims(subject: "user-\(kid)", username: "u-\(kid)"), kid: kid)
                let response = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(token))
                #expect(response.status == 200, "\(kid): \(response.text)")
                #expect(response.object["username"] as? String == "u-\(kid)", "\(kid)")
            }
        }
    }

    @Test("HMAC only where a secret is configured; none, key confusion and a foreign algorithm are refused")
    func algorithmAttacks() async throws {
        let secret = String(repeating: "a-shared-secret-", count: 4)
        let extra = """
            partners:
              type: jwt
              issuer: https://partners.example
              audiences: [gateway]
              keys: [{ secret: "\(secret)", kid: hs256 }, { secret: "\(secret)-384", kid: hs384, algorithm: HS384 }, { secret: "\(secret)-512", kid: hs512, algorithm: HS512 }]
        """
        try await Self.withProvider(extra: extra) { provider, gateway in
            let hmac = JWTKeyCollection()
            await hmac.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: "hs256")
            await hmac.add(hmac: HMACKey(from: secret + "-384"), digestAlgorithm: .sha384, kid: "hs384")
            await hmac.add(hmac: HMACKey(from: secret + "-512"), digestAlgorithm: .sha512, kid: "hs512")
            var claims = provider.claims(subject: "partner-1", username: "partner")
            claims["iss"] = .string("https://partners.example")
            for kid in ["hs256", "hs384", "hs512"] {
                let token = try await hmac.sign(TokenClaims(fields: claims), kid: JWKIdentifier(string: kid))
                let response = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(token))
                #expect(response.status == 200, "\(kid): \(response.text)")
            }
            // HS256 signed with the provider's RSA public key as the secret, naming the RSA key.
            let confusion = JWTKeyCollection()
            await confusion.add(hmac: HMACKey(from: provider.rsaPublicPEM), digestAlgorithm: .sha256, kid: "rs256")
            let confused = try await confusion.sign(TokenClaims(fields: provider.claims()), kid: "rs256")
            try await Self.expectRefused(gateway, confused, "algorithm HS256 is not accepted")
            // alg none, with and without a signature.
            let none = try TestIdentityProvider.forged(header: ["alg": "none", "typ": "JWT"], claims: provider.claims())
            try await Self.expectRefused(gateway, none, "unsigned")
            let noneSigned = try TestIdentityProvider.forged(header: ["alg": "none", "kid": "rs256"], claims: provider.claims(), signature: "c2ln")
            try await Self.expectRefused(gateway, noneSigned, "unsigned")
            // A token signed with the RS384 key but naming the RS256 key.
            let rs384 = try await provider.token(provider.claims(), kid: "rs384")
            let swapped = try TestIdentityProvider.renaming(rs384, kid: "rs256")
            try await Self.expectRefused(gateway, swapped, "is not its key's")
            // A bad signature.
            let good = try await provider.token(provider.claims())
            let tampered = good.dropLast(4) + (good.hasSuffix("AAAA") ? "BBBB" : "AAAA")
            try await Self.expectRefused(gateway, String(tampered), "signature does not verify")
        }
    }

    @Test("iss, aud, exp, nbf and iat are checked with the clock skew; typ and crit too")
    func registeredClaims() async throws {
        try await Self.withProvider(corp: "clockSkew: 30s") { provider, gateway in
            let now = Int(Date().timeIntervalSince1970)
            func accepted(_ change: (inout [String: JWTHeaderField]) -> Void, typ: String? = "at+jwt") async throws -> Bool {
                var claims = provider.claims()
                change(&claims)
                let response = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(try await provider.token(claims, typ: typ)))
                return response.status == 200
            }
            #expect(try await accepted { _ in })
            #expect(try await accepted({ _ in }, typ: nil))
            #expect(try await accepted({ _ in }, typ: "JWT"))
            #expect(try await accepted { $0["exp"] = .int(now - 10) }, "expired within the skew")
            #expect(try await accepted { $0["nbf"] = .int(now + 10) }, "not yet valid, within the skew")
            #expect(try await accepted { $0["aud"] = .array(["other", "gateway"]) })
            var claims = provider.claims()
            claims["exp"] = .int(now - 60)
            try await Self.expectRefused(gateway, try await provider.token(claims), "expired")
            claims = provider.claims()
            claims["exp"] = nil
            try await Self.expectRefused(gateway, try await provider.token(claims), "no expiry")
            claims = provider.claims()
            claims["nbf"] = .int(now + 60)
            try await Self.expectRefused(gateway, try await provider.token(claims), "not valid yet")
            claims = provider.claims()
            claims["iat"] = .int(now + 60)
            try await Self.expectRefused(gateway, try await provider.token(claims), "issued in the future")
            claims = provider.claims(audience: "someone-else")
            try await Self.expectRefused(gateway, try await provider.token(claims), "not meant for this gateway")
            claims = provider.claims()
            claims["aud"] = nil
            try await Self.expectRefused(gateway, try await provider.token(claims), "names no audience")
            claims = provider.claims()
            claims["iss"] = .string(provider.issuer + "/other")
            try await Self.expectRefused(gateway, try await provider.token(claims), "No provider of this gateway issues tokens")
            claims = provider.claims()
            claims["sub"] = nil
            try await Self.expectRefused(gateway, try await provider.token(claims), "names no subject")
            try await Self.expectRefused(gateway, try await provider.token(provider.claims(), typ: "dpop+jwt"), "not an access token")
            var header = JWTHeader()
            header.typ = "at+jwt"
            header.crit = ["exp"]
            let critical = try await provider.signer.sign(TokenClaims(fields: provider.claims()), kid: "rs256", header: header)
            try await Self.expectRefused(gateway, critical, "crit")
            try await Self.expectRefused(gateway, "not.a.jwt", "malformed")
        }
    }

    @Test("a new kid is fetched at once; a flood of unknown kids costs no more fetches")
    func keyRotation() async throws {
        let provider = try await TestIdentityProvider.make()
        provider.state.withLock { $0.published = ["rs256"] }
        try await provider.serve { provider in
            try await TestGateway.with(notes, yaml: Self.yaml(provider)) { gateway in
                #expect(provider.state.withLock { $0.jwksFetches } == 1)
                let first = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(try await provider.token(provider.claims())))
                #expect(first.status == 200)
                // The provider rotates: a token of the new key is accepted after one fetch.
                provider.state.withLock { $0.published = ["es256", "rs256"] }
                let rotated = try await gateway.gateway.handle(.get, "/v1/me",
                                                               headers: Self.bearer(try await provider.token(provider.claims(), kid: "es256")))
                #expect(rotated.status == 200, "\(rotated.text)")
                #expect(provider.state.withLock { $0.jwksFetches } == 2)
                // Random kids, many at once: refused, and no fetch within 30 seconds of the last.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for index in 0..<50 {
                        group.addTask {
                            let forged = try TestIdentityProvider.renaming(try await provider.token(provider.claims()), kid: "random-\(index)-\(UUID().uuidString)")
                            let response = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(forged))
                            #expect(response.status == 401)
                        }
                    }
                    try await group.waitForAll()
                }
                #expect(provider.state.withLock { $0.jwksFetches } == 2)
            }
        }
    }

    @Test("keys stay in use while the provider is down, and /readyz says degraded")
    func providerOutage() async throws {
        try await Self.withProvider { provider, gateway in
            let before = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(try await provider.token(provider.claims())))
            #expect(before.status == 200)
            provider.state.withLock { $0.published = nil }
            // An unknown kid asks for the keys again, which fails: that token cannot be checked now (503)...
            let unknown = try TestIdentityProvider.renaming(try await provider.token(provider.claims()), kid: "new-key")
            let refused = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(unknown))
            #expect(refused.status == 503, "\(refused.text)")
            #expect(!refused.text.contains("127.0.0.1"), "the provider's address is not shown to the caller")
            // ...and the next attempt waits: a burst of them makes no more fetches.
            let fetches = provider.state.withLock { $0.jwksFetches }
            for _ in 0..<5 { _ = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(unknown)) }
            #expect(provider.state.withLock { $0.jwksFetches } == fetches)
            // ...and the keys fetched before still verify.
            let after = try await gateway.gateway.handle(.get, "/v1/me",
                                                         headers: Self.bearer(try await provider.token(provider.claims(subject: "other"), kid: "es256")))
            #expect(after.status == 200, "\(after.text)")
            let ready = try await gateway.gateway.handle(.get, "/readyz")
            #expect(ready.object["status"] as? String == "degraded", "\(ready.text)")
        }
        // A gateway that starts while the provider is down answers 503 for its tokens until it is back.
        let provider = try await TestIdentityProvider.make()
        provider.state.withLock { $0.published = nil }
        try await provider.serve { provider in
            try await TestGateway.with(notes, yaml: Self.yaml(provider)) { gateway in
                let token = try await provider.token(provider.claims())
                let down = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(token))
                #expect(down.status == 503, "\(down.text)")
                let ready = try await gateway.gateway.handle(.get, "/readyz")
                #expect(ready.object["status"] as? String == "degraded", "\(ready.text)")
            }
        }
    }

    @Test("introspection: active honoured, answers kept up to cacheFor and never past exp, failures not kept")
    func introspection() async throws {
        let provider = try await TestIdentityProvider.make()
        try await provider.serve { provider in
            let yaml = Self.introspectionYAML(provider, more: "cacheFor: 2s\nclockSkew: 0s\nclaims: { subject: username, username: username }")
            try await TestGateway.with(notes, yaml: yaml, configure: { $0.credentialCacheTTL = .milliseconds(100) }) { gateway in
                let now = Int(Date().timeIntervalSince1970)
                provider.state.withLock { state in
                    state.active["opaque-long"] = ["username": "carol", "scope": "notes:read accounts:read", "exp": .int(now + 300)]
                    state.active["opaque-short"] = ["username": "dave", "scope": "notes:read accounts:read", "exp": .int(now + 2)]
                }
                for _ in 0..<3 {
                    let response = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer("opaque-long"))
                    #expect(response.status == 200, "\(response.text)")
                    #expect(response.object["username"] as? String == "carol")
                    try await Task.sleep(for: .milliseconds(150))
                }
                #expect(provider.state.withLock { $0.introspections } == 1)
                for _ in 0..<2 { try await Self.expectRefused(gateway, "opaque-unknown", "not active") }
                #expect(provider.state.withLock { $0.introspections } == 2)
                let short = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer("opaque-short"))
                #expect(short.status == 200)
                try await Task.sleep(for: .milliseconds(2_500))
                // Past its exp: the answer kept is gone, and the endpoint's new answer is refused.
                try await Self.expectRefused(gateway, "opaque-short", "expired")
                #expect(provider.state.withLock { $0.introspections } == 4)
                // Revoked at the provider: refused once cacheFor (2 s) has passed, although its exp is minutes away.
                provider.state.withLock { _ = $0.active.removeValue(forKey: "opaque-long") }
                try await Self.expectRefused(gateway, "opaque-long", "not active")
                #expect(provider.state.withLock { $0.introspections } == 5)
                // An outage is a 503 and is not remembered.
                provider.state.withLock { $0.introspectionDown = true; $0.active["opaque-new"] = ["username": "erin", "scope": "accounts:read", "exp": .int(now + 300)] }
                let down = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer("opaque-new"))
                #expect(down.status == 503, "\(down.text)")
                provider.state.withLock { $0.introspectionDown = false }
                let back = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer("opaque-new"))
                #expect(back.status == 200, "\(back.text)")
                // A gateway session still works beside introspection.
                let session = try await gateway.register("frank")
                let own = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(session.token))
                #expect(own.object["username"] as? String == "frank")
            }
        }
    }

    @Test("a flood of made-up opaque tokens: at most 8 introspections under way per address (429 beyond), 64 in all (503 beyond)")
    func introspectionFlood() async throws {
        let provider = try await TestIdentityProvider.make()
        try await provider.serve { provider in
            let yaml = Self.introspectionYAML(provider)
            try await TestGateway.with(notes, yaml: yaml) { gateway in
                provider.state.withLock { $0.introspectionDelay = .milliseconds(500) }
                func flood(_ count: Int, from address: @escaping @Sendable (Int) -> String) async throws -> [Int] {
                    try await withThrowingTaskGroup(of: Int.self) { group in
                        for index in 0..<count {
                            group.addTask {
                                try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer("made-up-\(UUID().uuidString)"), from: address(index)).status
                            }
                        }
                        return try await group.reduce(into: [Int]()) { $0.append($1) }
                    }
                }
                // One address: its own share only.
                let one = try await flood(30) { _ in "203.0.113.9" }
                #expect(provider.state.withLock { $0.introspections } <= 8)
                #expect(one.filter { $0 == 429 }.count >= 22, "\(one)")
                #expect(one.allSatisfy { $0 == 401 || $0 == 429 }, "\(one)")
                // Many addresses: the total bound.
                provider.state.withLock { $0.introspections = 0 }
                let many = try await flood(100) { "198.51.100.\($0 % 50 + 1)" }
                #expect(provider.state.withLock { $0.introspections } <= 64)
                #expect(many.filter { $0 == 503 }.count >= 36, "\(many)")
                #expect(many.allSatisfy { $0 == 401 || $0 == 503 || $0 == 429 }, "\(many)")
            }
        }
    }

    @Test("accounts: made on first sight and linked by issuer and subject; existing and none", arguments: TestStorage.available)
    func provisioning(storage: TestStorage) async throws {
        try await Self.withProvider(storage: storage) { provider, gateway in
            let first = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(try await provider.token(provider.claims())))
            let id = try #require(first.object["id"] as? String)
            #expect(first.object["username"] as? String == "alice")
            // Renamed at the provider: the same account.
            let renamed = try await gateway.gateway.handle(.get, "/v1/me",
                                                           headers: Self.bearer(try await provider.token(provider.claims(username: "alice.smith"))))
            #expect(renamed.object["id"] as? String == id)
            // Another subject with the same name: an account of its own, under another name.
            let other = try await gateway.gateway.handle(.get, "/v1/me",
                                                         headers: Self.bearer(try await provider.token(provider.claims(subject: "someone-else"))))
            #expect(other.status == 200)
            #expect(other.object["id"] as? String != id)
            #expect((other.object["username"] as? String)?.hasPrefix("alice-") == true)
            // The account's own data: a note made with a token belongs to it.
            let created = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: Self.bearerJSON(try await provider.token(provider.claims())), body: ByteBuffer(string: #"{"title": "from a token", "body": "x"}"#))
            #expect(created.status == 201, "\(created.text)")
            #expect(created.object["owner"] as? String == id)
            // Many first requests of one new caller at once: one account.
            let newcomer = try await provider.token(provider.claims(subject: "newcomer", username: "newcomer"))
            let ids = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        let reply = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(newcomer))
                        return reply.object["id"] as? String ?? "\(reply.status) \(reply.text)"
                    }
                }
                return try await group.reduce(into: [String?]()) { $0.append($1) }
            }
            #expect(Set(ids).count == 1, "\(ids)")
            // Disabled: the token the gateway remembers is refused as soon as it forgets the account's credentials.
            let remembered = try await provider.token(provider.claims())
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(remembered)).status == 200)
            try await gateway.gateway.accounts.setDisabled(userID: id, true)
            gateway.gateway.forgetCredentials(userID: id)
            try await Self.expectRefused(gateway, remembered, "disabled")
        }
        try await Self.withProvider(storage: storage, corp: "provision: existing") { provider, gateway in
            let token = try await provider.token(provider.claims(subject: "linked-later"))
            let unlinked = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(token))
            #expect(unlinked.status == 403, "\(unlinked.text)")
            let user = try await gateway.register("grace")
            try await gateway.gateway.accounts.link(userID: user.userID, issuer: provider.issuer, subject: "linked-later", provider: "corp")
            let linked = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(token))
            #expect(linked.object["username"] as? String == "grace", "\(linked.text)")
        }
        try await Self.withProvider(storage: storage, corp: "provision: none") { provider, gateway in
            let token = try await provider.token(provider.claims(subject: "service-1", username: nil, scope: "notes:read accounts:read"))
            let open = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x", headers: Self.bearer(token))
            #expect(open.status == 200)
            let me = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(token))
            #expect(me.status == 403, "\(me.text)")
        }
    }

    @Test("scopes from the token bound it like a key's; the admin claim makes an administrator")
    func scopesAndAdmin() async throws {
        try await Self.withProvider { provider, gateway in
            let reader = try await provider.token(provider.claims(subject: "reader", scope: "notes:read"))
            let list = try await gateway.gateway.handle(.get, "/v1/notes/me/notes", headers: Self.bearer(reader))
            #expect(list.status == 200, "\(list.text)")
            let write = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: Self.bearerJSON(reader),
                                                         body: ByteBuffer(string: #"{"title": "t", "body": "b"}"#))
            #expect(write.status == 403)
            #expect(write.text.contains("notes:write"), "\(write.text)")
            let admin = try await provider.token(provider.claims(subject: "boss", scope: "admin notes:read", groups: ["gateway-admins"]))
            let stats = try await gateway.gateway.handle(.get, "/v1/notes/admin/stats", headers: Self.bearer(admin))
            #expect(stats.status == 200, "\(stats.text)")
            let notAdmin = try await provider.token(provider.claims(subject: "staff", scope: "admin notes:read", groups: ["staff"]))
            let refused = try await gateway.gateway.handle(.get, "/v1/notes/admin/stats", headers: Self.bearer(notAdmin))
            #expect(refused.status == 403)
            // An administrator's token without the scope admin is no administrator (as a master key is not).
            let narrow = try await provider.token(provider.claims(subject: "boss", scope: "notes:read accounts:read", groups: ["gateway-admins"]))
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/admin/stats", headers: Self.bearer(narrow)).status == 403)
            #expect(try await gateway.gateway.handle(.get, "/metrics", headers: Self.bearer(narrow)).status == 403)
            // A token makes no API key (a key would outlive it).
            let writer = try await provider.token(provider.claims(subject: "writer", scope: "accounts:read accounts:write notes:read"))
            let key = try await gateway.gateway.handle(.post, "/v1/me/keys", headers: Self.bearerJSON(writer),
                                                       body: ByteBuffer(string: #"{"label": "k", "scopes": ["*"]}"#))
            #expect(key.status == 403, "\(key.text)")
        }
    }

    @Test("accept: a plugin takes only the credential kinds it lists")
    func accept() async throws {
        let plugins = "plugins:\n  notes:\n    enabled: true\n    accept: [session, key]\n"
        try await Self.withProvider(plugins: plugins) { provider, gateway in
            let token = try await provider.token(provider.claims())
            let notes = try await gateway.gateway.handle(.get, "/v1/notes/me/notes", headers: Self.bearer(token))
            #expect(notes.status == 401, "\(notes.text)")
            #expect(notes.text.contains("corp"))
            let me = try await gateway.gateway.handle(.get, "/v1/me", headers: Self.bearer(token))
            #expect(me.status == 200)
            let session = try await gateway.register("henry")
            let own = try await gateway.gateway.handle(.get, "/v1/notes/me/notes", headers: Self.bearer(session.token))
            #expect(own.status == 200)
        }
    }

    @Test("accept on a composite: it takes only the kinds it lists, whatever the plugins it calls take")
    func compositeAccept() async throws {
        let plugins = notesYAML + """
            composites:
              greeting:
                path: /v1/views/greeting
                accept: [session]
                steps:
                  echo: { method: GET, path: "/v1/notes/echo?name=x" }
              open-greeting:
                path: /v1/views/open-greeting
                steps:
                  echo: { method: GET, path: "/v1/notes/echo?name=x" }

            """
        try await Self.withProvider(plugins: plugins) { provider, gateway in
            // A composite is bound by `composite:read` as every plugin by its own scope.
            let token = try await provider.token(provider.claims(scope: "notes:read composite:read"))
            let refused = try await gateway.gateway.handle(.get, "/v1/views/greeting", headers: Self.bearer(token))
            #expect(refused.status == 401 && refused.text.contains("corp"), "\(refused.text)")
            let open = try await gateway.gateway.handle(.get, "/v1/views/open-greeting", headers: Self.bearer(token))
            #expect(open.status == 200, "\(open.text)")
            let session = try await gateway.register("iris")
            #expect(try await gateway.gateway.handle(.get, "/v1/views/greeting", headers: Self.bearer(session.token)).status == 200)
        }
        #expect(throws: (any Error).self) {
            try GatewayConfiguration.parse(Data((notesYAML + "composites:\n  v:\n    path: /v1/v\n    accept: [nobody]\n    steps:\n      a: { operation: notes.echo }\n").utf8),
                                           file: "plugins.yaml", knownPlugins: ["notes"])
        }
    }

    @Test("providers are checked when the file is read", arguments: [
        ("type: oidc\nissuer: https://idp.example", "audiences"),
        ("type: oidc\nissuer: http://idp.example\naudiences: [g]", "not loopback"),
        ("type: oidc\nissuer: http://127.evil.example/\naudiences: [g]", "not loopback"),
        ("type: jwt\nissuer: https://idp.example\naudiences: [g]", "jwks"),
        ("type: jwt\nissuer: https://idp.example\naudiences: [g]\nkeys: [{ secret: short }]", "32 bytes"),
        ("type: jwt\nissuer: https://idp.example\naudiences: [g]\nkeys: [{ secret: \(String(repeating: "x", count: 50)), algorithm: HS512 }]", "64 bytes"),
        ("type: jwt\nissuer: https://idp.example\naudiences: [g]\nkeys: [{ pem: x, algorithm: HS256 }]", "need a secret"),
        ("type: jwt\nissuer: https://idp.example\naudiences: [g]\njwks: https://idp.example/k\nalgorithms: [RS1]", "RS1"),
        ("type: introspection\nendpoint: https://idp.example/i", "client"),
        ("type: oidc\nissuer: https://idp.example\naudiences: [g]\nclockSkew: 1h", "clockSkew"),
        ("type: saml\nissuer: https://idp.example", "saml"),
    ])
    func configurationErrors(provider: String, message: String) throws {
        let text = "auth:\n  providers:\n    p:\n" + provider.split(separator: "\n").map { "      " + $0 }.joined(separator: "\n") + "\n"
        #expect(throws: (any Error).self) { try GatewayConfiguration.parse(Data(text.utf8), file: "plugins.yaml", knownPlugins: ["notes"]) }
        do {
            _ = try GatewayConfiguration.parse(Data(text.utf8), file: "plugins.yaml", knownPlugins: ["notes"])
        } catch {
            #expect("\(error)".contains(message), "\(error)")
        }
        let unknownAccept = "plugins:\n  notes:\n    accept: [session, nobody]\n"
        #expect(throws: (any Error).self) {
            let two = "auth:\n  providers:\n" + ["a", "b"].map { "    \($0):\n      type: introspection\n      endpoint: https://\($0).example/i\n      client: { id: g, secret: s }\n" }.joined()
            let configuration = try GatewayConfiguration.parse(Data(two.utf8), file: "plugins.yaml", knownPlugins: ["notes"])
            _ = try IdentityProviders(configuration.auth.providers, baseDirectory: URL(fileURLWithPath: "/"))
        }
        #expect(throws: (any Error).self) { try GatewayConfiguration.parse(Data(unknownAccept.utf8), file: "plugins.yaml", knownPlugins: ["notes"]) }
    }
}
