import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import JWTKit
import NIOHTTP1
import Testing

/// Attacks on outside identity, against the shipped plugins.yaml with one provider of static keys
/// added: forged and confused tokens, a flood of made-up key ids, an administrator's claim without
/// the scope, and a consumer group's quota hammered in parallel.
@Suite("attacks on outside identity", .serialized)
struct IdentityAttackTests {
    static let issuer = "https://idp.example"

    /// The provider's signing key and the shipped file with the provider (and a group) added.
    static func setUp() async throws -> (key: ES256PrivateKey, signer: JWTKeyCollection, edit: @Sendable (String) -> String) {
        let key = ES256PrivateKey()
        let signer = JWTKeyCollection()
        await signer.add(ecdsa: key, kid: "k1")
        let pem = key.publicKey.pemRepresentation.split(separator: "\n").map { "            " + $0 }.joined(separator: "\n")
        let provider = """
            auth:
              providers:
                corp:
                  type: jwt
                  issuer: \(issuer)
                  audiences: [gateway]
                  claims: { admin: { claim: groups, value: gateway-admins }, group: { claim: groups } }
                  keys:
                    - kid: k1
                      pem: |
            \(pem)
            """
        let edit: @Sendable (String) -> String = { yaml in
            yaml.replacingOccurrences(of: "auth:\n", with: provider + "\n")
                .replacingOccurrences(of: "limits:\n", with: "limits:\n  groups:\n    partners: { quota: 5/day }\n")
        }
        return (key, signer, edit)
    }

    struct Claims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var aud: AudienceClaim
        var exp: ExpirationClaim
        var scope: String?
        var groups: [String]?
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    static func claims(subject: String = "mallory", scope: String = "todo:read todo:write accounts:read", groups: [String]? = nil, expires: TimeInterval = 300) -> Claims {
        Claims(iss: .init(value: issuer), sub: .init(value: subject), aud: .init(value: ["gateway"]), exp: .init(value: Date().addingTimeInterval(expires)),
               scope: scope, groups: groups)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// A token of `header` and `claims` with `signature` (already base64url).
    static func forged(header: [String: String], claims: Claims, signature: String = "") throws -> String {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        return base64URL(try JSONSerialization.data(withJSONObject: header)) + "." + base64URL(try encoder.encode(claims)) + "." + signature
    }

    static func expectRefused(_ reply: ShippedGateway.Reply, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(reply.status == 401, "\(what): \(reply.status) \(reply.body)", sourceLocation: sourceLocation)
        #expect(reply.headers.first(name: "WWW-Authenticate")?.contains("error=\"invalid_token\"") == true, "\(what)", sourceLocation: sourceLocation)
    }

    @Test("forged tokens: alg none, HMAC keyed with the public key, another key under the same kid, expired, another audience, made-up kids in a flood")
    func forgedTokens() async throws {
        let (key, signer, edit) = try await Self.setUp()
        try await ShippedGateway.with(limits: false, edit: AccountAttackTests.shipped(edit)) { gateway in
            func me(_ token: String) async throws -> ShippedGateway.Reply {
                try await gateway.send(.GET, "/v1/me", headers: [("Authorization", "Bearer " + token)])
            }
            // The genuine token works: the attacks below fail for what they change, not by accident.
            let genuine = try await signer.sign(Self.claims(), kid: "k1")
            #expect(try await me(genuine).status == 200)

            Self.expectRefused(try await me(try Self.forged(header: ["alg": "none", "typ": "JWT", "kid": "k1"], claims: Self.claims())), "alg none")
            Self.expectRefused(try await me(try Self.forged(header: ["alg": "none", "kid": "k1"], claims: Self.claims(),
                                                           signature: String(genuine.split(separator: ".")[2]))), "alg none with a signature")
            // HMAC with the public key's PEM as the secret (the classic key confusion).
            let confused = JWTKeyCollection()
            await confused.add(hmac: HMACKey(from: key.publicKey.pemRepresentation), digestAlgorithm: .sha256, kid: "k1")
            Self.expectRefused(try await me(try await confused.sign(Self.claims(), kid: "k1")), "HS256 keyed with the public key")
            // The attacker's own key under the provider's kid.
            let own = JWTKeyCollection()
            await own.add(ecdsa: ES256PrivateKey(), kid: "k1")
            Self.expectRefused(try await me(try await own.sign(Self.claims(), kid: "k1")), "another key")
            Self.expectRefused(try await me(try await signer.sign(Self.claims(expires: -600), kid: "k1")), "expired")
            var elsewhere = Self.claims()
            elsewhere.aud = .init(value: ["another-api"])
            Self.expectRefused(try await me(try await signer.sign(elsewhere, kid: "k1")), "another audience")
            // A flood of made-up kids: every one refused, quickly, none a 500.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<100 {
                    group.addTask {
                        let token = try Self.forged(header: ["alg": "ES256", "typ": "JWT", "kid": "made-up-\(index)"], claims: Self.claims(), signature: "AAAA")
                        return try await me(token).status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 401 }, "\(Set(statuses))")
            // Garbage in the Authorization field is a 401, never a 500.
            for garbage in ["a.b.c", "....", "eyJ.eyJ.", String(repeating: "A", count: 10_000), "e30.e30.e30"] {
                let reply = try await me(garbage)
                #expect(reply.status == 401, "\(garbage.prefix(20)): \(reply.status)")
            }
        }
    }

    @Test("the admin claim without the admin scope is no administrator; a token's scopes bind it")
    func adminClaimWithoutScope() async throws {
        let (_, signer, edit) = try await Self.setUp()
        try await ShippedGateway.with(limits: false, edit: AccountAttackTests.shipped(edit)) { gateway in
            let claimed = try await signer.sign(Self.claims(subject: "claims-admin", groups: ["gateway-admins"]), kid: "k1")
            let metrics = try await gateway.send(.GET, "/metrics", headers: [("Authorization", "Bearer " + claimed)])
            #expect(metrics.status == 403, "\(metrics.status) \(metrics.body.prefix(200))")
            let reader = try await signer.sign(Self.claims(subject: "reader", scope: "todo:read accounts:read"), kid: "k1")
            let write = try await gateway.send(.POST, "/v1/todo/buckets/todos/objects", headers: [("Authorization", "Bearer " + reader)],
                                               json: #"{"description": "not allowed"}"#)
            #expect(write.status == 403, "\(write.status) \(write.body.prefix(200))")
        }
    }

    @Test("a group's quota holds under 30 parallel requests: exactly the quota passes")
    func quotaUnderParallelRequests() async throws {
        let (_, signer, edit) = try await Self.setUp()
        try await ShippedGateway.with(edit: AccountAttackTests.shipped(edit)) { gateway in
            let partner = try await signer.sign(Self.claims(subject: "partner", groups: ["partners"]), kid: "k1")
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<30 {
                    group.addTask { try await gateway.send(.GET, "/v1/me", headers: [("Authorization", "Bearer " + partner)]).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 200 }.count == 5, "\(statuses)")
            #expect(statuses.filter { $0 == 429 }.count == 25, "\(statuses)")
        }
    }
}
