import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import NIOHTTP1
import Testing

/// API keys and batches: ways to get more than the configured limits, or more than a key was
/// given, that must not work.
@Suite("security: key rates, keys minting keys, nested and uncounted batches")
struct KeyAndBatchAttackTests {
    /// Small limits, so that a test reaches them in a few requests.
    static func smallLimits(_ yaml: String) -> String {
        yaml.replacingOccurrences(of: "  anonymous: 60/min", with: "  anonymous: 10/min")
            .replacingOccurrences(of: "  key: 6000/min", with: "  key: 5/min")
            .replacingOccurrences(of: "  bcryptCost: 12", with: "  bcryptCost: 12\n  maxKeysPerUser: 3")
    }

    static func bearer(_ token: String) -> [(String, String)] { [("Authorization", "Bearer \(token)")] }

    @Test("a user cannot give a key a rate above what keys get, nor make more keys than the cap", arguments: securityStorages)
    func keyRateAndCount(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.smallLimits) { gateway in
            let user = try await gateway.register("rate-seeker")
            let unlimited = try await gateway.send(.POST, "/v1/me/keys", headers: Self.bearer(user.token),
                                                   json: #"{"label": "fast", "scopes": ["*"], "rate": "1000000000/s"}"#)
            #expect(unlimited.status == 422, "\(unlimited.body)")
            #expect(unlimited.body.contains("/rate"))
            #expect(try await gateway.send(.POST, "/v1/me/keys", headers: Self.bearer(user.token),
                                           json: #"{"label": "slow", "scopes": ["*"], "rate": "2/min"}"#).status == 201)
            for index in 0..<2 {
                #expect(try await gateway.send(.POST, "/v1/me/keys", headers: Self.bearer(user.token), json: #"{"label": "k\#(index)", "scopes": ["*"]}"#).status == 201)
            }
            let fourth = try await gateway.send(.POST, "/v1/me/keys", headers: Self.bearer(user.token), json: #"{"label": "one too many", "scopes": ["*"]}"#)
            #expect(fourth.status == 409, "\(fourth.body)")
        }
    }

    @Test("a user's keys share one rate-limit bucket; a key an administrator gave a bucket of its own does not", arguments: securityStorages)
    func keysShareTheOwnersBucket(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.smallLimits) { gateway in
            let user = try await gateway.register("many-keys")
            let first = try await gateway.test.createKey(token: user.token, grant: #"{"label": "a", "scopes": ["*"]}"#)
            let second = try await gateway.test.createKey(token: user.token, grant: #"{"label": "b", "scopes": ["*"]}"#)
            for index in 0..<5 {
                let reply = try await gateway.send(.GET, "/v1/suggest?q=st\(index)", headers: [("X-Api-Key", first.secret)])
                #expect(reply.status == 200)
            }
            let other = try await gateway.send(.GET, "/v1/suggest?q=sx", headers: [("X-Api-Key", second.secret)])
            #expect(other.status == 429, "a second key of the same user must not bring a fresh quota")
            // An administrator's key for the same user, with a bucket of its own.
            let (secret, _) = try await gateway.gateway.accounts.createKey(userID: user.userID, grant: .init(label: "own", scopes: ["*"]), ownLimit: true)
            #expect(try await gateway.send(.GET, "/v1/suggest?q=sy", headers: [("X-Api-Key", secret)]).status == 200)
        }
    }

    @Test("a key cannot mint keys (stronger or not): only a signed-in session makes or revokes them", arguments: securityStorages)
    func keysCannotMintKeys(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage) { gateway in
            let user = try await gateway.register("key-minter")
            let restricted = try await gateway.test.createKey(token: user.token, grant: #"{"label": "one feed", "scopes": ["feeds:*"], "resources": {"feeds": ["1"]}}"#)
            for headers in [[("X-Api-Key", restricted.secret)], [("Authorization", "Bearer \(restricted.secret)")]] {
                let minted = try await gateway.send(.POST, "/v1/me/keys", headers: headers, json: #"{"label": "everything", "scopes": ["*"]}"#)
                #expect(minted.status == 403, "\(minted.body)")
                let revoked = try await gateway.send(.DELETE, "/v1/me/keys/\(restricted.id)", headers: headers)
                #expect(revoked.status == 403)
            }
            #expect(try await gateway.send(.POST, "/v1/me/keys", headers: Self.bearer(user.token), json: #"{"label": "by session", "scopes": ["*"]}"#).status == 201)
        }
    }

    @Test("a batch inside a batch is refused however it is spelled", arguments: securityStorages)
    func nestedBatchesRefused(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false) { gateway in
            let byName = try await gateway.send(.POST, "/v1/batch", json: #"{"calls": [{"operation": "batch.run", "input": {}}]}"#)
            #expect(byName.status == 422, "\(byName.body)")
            let inner = #"{"calls": [{"method": "GET", "path": "/healthz"}]}"#
            for path in ["/v1//batch", "/v1/batch/", "/v1/batch//", "/v1///batch?x=1"] {
                let reply = try await gateway.send(.POST, "/v1/batch", json: #"{"calls": [{"method": "POST", "path": "\#(path)", "body": \#(inner)}]}"#)
                if reply.status == 200 {
                    let results = reply.json?["results"] as? [[String: Any]]
                    let status = results?.first?["status"] as? Int
                    #expect(status == 400 || status == 404, "\(path): \(reply.body)")
                } else {
                    #expect(reply.status == 422, "\(path): \(reply.body)")
                }
            }
        }
    }

    @Test("every call of a batch, and every operation of a todo or NEC batch, is charged to the caller", arguments: securityStorages)
    func batchesAreCharged(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.smallLimits) { gateway in
            let calls = (0..<10).map { #"{"method": "GET", "path": "/v1/suggest?q=a\#($0)"}"# }.joined(separator: ",")
            let batch = try await gateway.send(.POST, "/v1/batch", json: #"{"calls": [\#(calls)]}"#)
            #expect(batch.status == 200)
            #expect(try await gateway.send(.GET, "/v1/suggest?q=zz").status == 429, "ten calls in a batch used the guest's ten a minute")

            let many = (0..<20).map { #"{"op": "create", "object": {"description": "item \#($0)"}}"# }.joined(separator: ",")
            let big = try await gateway.send(.POST, "/v1/todo/buckets/todos/batch", json: #"{"operations": [\#(many)]}"#)
            #expect(big.status == 429, "twenty operations for a guest of ten a minute: \(big.body)")
            let count = try await gateway.send(.GET, "/v1/todo/buckets/todos/objects?count=true")
            #expect((count.json?["count"] as? Int) == 0, "a refused batch wrote nothing: \(count.body)")
        }
        try await ShippedGateway.with(storage: storage, edit: Self.smallLimits) { gateway in
            let requests = (0..<20).map { #"{"op": "insert", "data": {"description": "item \#($0)"}}"# }.joined(separator: ",")
            let reply = try await gateway.send(.POST, "/1/tutorial/objects/todos/_batch", headers: TenantAttackTests.app, json: #"{"requests": [\#(requests)]}"#)
            #expect(reply.status == 429, "\(reply.body)")
            let small = (0..<4).map { #"{"op": "insert", "data": {"description": "item \#($0)"}}"# }.joined(separator: ",")
            let fits = try await gateway.send(.POST, "/1/tutorial/objects/todos/_batch", headers: TenantAttackTests.app, json: #"{"requests": [\#(small)]}"#)
            #expect(fits.status == 200, "\(fits.body)")
            // The refused batch cost its request (1), the four operations four: one more request leaves at most 10 - 6.
            let next = try await gateway.send(.GET, "/1/tutorial/objects/todos", headers: TenantAttackTests.app)
            let remaining = next.headers.first(name: "X-RateLimit-Remaining").flatMap { Int($0) }
            #expect(remaining.map { $0 <= 5 } ?? false, "four operations cost four: \(next.headers)")
        }
    }
}
