import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import Logging
import NIOCore
@testable import FeedsPlugin
import SQLKit
import Testing

@Suite("feeds v2 keys")
struct LegacyKeysTests {
    static let keyMembers: Set<String> = ["api_key", "label", "private_access", "expires_at", "permissions"]

    @Test("v2 keys: a master key manages keys; methods, resources, private access, referer, source_ip and minimum_interval are enforced in both APIs", arguments: TestStorage.available)
    func keys(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let joe = try await gateway.register("joe")
            func create(_ body: String, with credential: String? = nil, token: String? = nil) async throws -> (status: Int, key: String?, reply: Reply) {
                let reply = try await gateway.call(.post, "/v2/keys", token: token, key: credential, body: body)
                return (reply.status, reply.headers[.location].flatMap { $0.split(separator: "/").last.map(String.init) }, reply)
            }
            #expect(try await create(#"{"key": {"label": "x", "permissions": [{"access_methods": ["get"]}]}}"#).status == 401)
            let master = try #require(try await create(#"{"key": {"label": "master", "private_access": true, "permissions": [{"access_methods": ["get", "put", "post", "delete"]}]}}"#,
                                                       token: joe.token).key)
            // Feeds: A public, B public, C private.
            var ids: [String] = []
            for body in [#"{"title": "A", "datastreams": [{"id": "t"}]}"#, #"{"title": "B"}"#, #"{"title": "C", "private": "true"}"#] {
                let reply = try await gateway.call(.post, "/v2/feeds", key: master, body: body)
                #expect(reply.status == 201)
                ids.append(String(try #require(reply.headers[.location]).split(separator: "/").last!))
            }
            let (a, b, c) = (ids[0], ids[1], ids[2])

            let readA = try #require(try await create(#"{"key": {"label": "ro", "permissions": [{"access_methods": ["get"], "resources": [{"feed_id": \#(a)}]}]}}"#, with: master).key)
            #expect(try await gateway.call(.get, "/v2/feeds/\(a)", key: readA).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(b)", key: readA).status == 403, "another feed is outside the key's resources")
            #expect(try await gateway.call(.put, "/v2/feeds/\(a)", key: readA, body: #"{"title": "A2"}"#).status == 403, "put is not among its methods")
            #expect(try await gateway.call(.get, "/v1/feeds/\(a)", headers: [HTTPField.Name("X-Api-Key")!: readA]).status == 200)
            #expect(try await gateway.call(.post, "/v1/feeds/\(a)/datastreams/t/datapoints", headers: [HTTPField.Name("X-Api-Key")!: readA],
                                            body: #"[{"value": 1}]"#).status == 403, "the native API enforces the same permissions")

            let everything = try #require(try await create(#"{"key": {"label": "get", "permissions": [{"access_methods": ["get"]}]}}"#, with: master).key)
            #expect(try await gateway.call(.get, "/v2/feeds/\(c)", key: everything).status == 404, "without private_access the private feed does not exist")
            #expect(try await gateway.call(.get, "/v2/feeds/\(c)", key: master).status == 200)
            let titles = (try await gateway.call(.get, "/v2/feeds", key: everything).json["results"]?.arrayValue ?? []).compactMap { $0["title"]?.string }
            #expect(Set(titles) == ["A", "B"])

            let referer = try #require(try await create(#"{"key": {"label": "web", "permissions": [{"access_methods": ["get"], "referer": "https://app.example.com"}]}}"#, with: master).key)
            #expect(try await gateway.call(.get, "/v2/feeds/\(a)", key: referer, headers: [.referer: "https://app.example.com/page"]).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(a)", key: referer).status == 403)
            let office = try #require(try await create(#"{"key": {"label": "office", "permissions": [{"access_methods": ["get"], "source_ip": "10.1.0.0/16"}]}}"#, with: master).key)
            #expect(try await gateway.call(.get, "/v2/feeds/\(a)", key: office).status == 403, "the test's address is not in 10.1.0.0/16")
            let slow = try #require(try await create(#"{"key": {"label": "slow", "permissions": [{"access_methods": ["get"], "minimum_interval": 60}]}}"#, with: master).key)
            #expect(try await gateway.call(.get, "/v2/feeds/\(a)", key: slow).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(a)", key: slow).status == 403, "minimum_interval")

            // The native API's cached reads (5 s per caller) do not let these checks be skipped:
            // the reply to an allowed request is not served to the next one.
            let apiKey = HTTPField.Name("X-Api-Key")!
            #expect(try await gateway.call(.get, "/v1/feeds/\(a)", headers: [apiKey: referer, .referer: "https://app.example.com/x"]).status == 200)
            let wrongReferer = try await gateway.call(.get, "/v1/feeds/\(a)", headers: [apiKey: referer, .referer: "https://elsewhere.example/"])
            #expect(wrongReferer.status == 403, "a cached reply would have answered 200")
            let native = try #require(try await create(#"{"key": {"label": "slow2", "permissions": [{"access_methods": ["get"], "minimum_interval": 60}]}}"#, with: master).key)
            #expect(try await gateway.call(.get, "/v1/feeds/\(a)", headers: [apiKey: native]).status == 200)
            #expect(try await gateway.call(.get, "/v1/feeds/\(a)", headers: [apiKey: native]).status == 403, "minimum_interval holds for cached reads too")
            // A key without such bindings is still answered from the cache.
            let plain = try await gateway.call(.get, "/v1/feeds/\(a)", headers: [apiKey: everything])
            #expect(plain.status == 200)
            #expect(try await gateway.call(.get, "/v1/feeds/\(a)", headers: [apiKey: everything]).headers[HTTPField.Name("X-Cache")!] == "HIT")

            // Triggers and live subscriptions obey the same permissions.
            let postA = try #require(try await create(#"{"key": {"label": "post", "private_access": true, "permissions": [{"access_methods": ["get", "post"], "resources": [{"feed_id": \#(a)}]}]}}"#, with: master).key)
            #expect(try await gateway.call(.post, "/v2/triggers", key: postA,
                                            body: #"{"environment_id": \#(b), "stream_id": "t", "url": "http://example.com/h", "trigger_type": "change"}"#).status == 403)
            #expect(try await gateway.call(.post, "/v2/triggers", key: postA,
                                            body: #"{"environment_id": \#(a), "stream_id": "t", "url": "http://example.com/h", "trigger_type": "change"}"#).status == 201)
            #expect(try await gateway.call(.post, "/v2/feeds/\(b)/datastreams", key: master, body: #"{"datastreams": [{"id": "s"}]}"#).status == 201)
            #expect(try await gateway.call(.post, "/v2/triggers", key: master,
                                            body: #"{"environment_id": \#(b), "stream_id": "s", "url": "http://example.com/h", "trigger_type": "change"}"#).status == 201)
            #expect(try await gateway.call(.get, "/v2/triggers", key: master).json.arrayValue?.count == 2)
            #expect(try await gateway.call(.get, "/v2/triggers", key: readA).json.arrayValue?.count == 1, "a key sees the triggers of the feeds it may read")
            #expect(try await gateway.call(.get, "/v2/triggers", key: everything).json.arrayValue?.count == 2)
            // An owner-less (administrator) gateway key cannot mint v2 keys: they would act as administrators.
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            let masterOfGateway = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "ops", scopes: ["*"]))
            #expect(try await create(#"{"key": {"label": "x", "permissions": [{"access_methods": ["get"]}]}}"#, with: masterOfGateway.secret).status == 403)

            // Management: only a master key; the list shows the old members.
            #expect(try await gateway.call(.get, "/v2/keys", key: readA).status == 403)
            let list = try await gateway.call(.get, "/v2/keys", key: master)
            let listed = list.json["keys"]?.arrayValue ?? []
            #expect(listed.count == 8)
            #expect(listed.allSatisfy { $0.keys.isSubset(of: Self.keyMembers) })
            #expect(listed.contains { $0["api_key"] == .string(readA) && $0["permissions"]?[0]?["resources"]?[0]?["feed_id"] == .number(Double(a)!) })
            let one = try await gateway.call(.get, "/v2/keys/\(readA)", key: master)
            #expect(one.json["key"]?["label"] == .string("ro") && one.json["key"]?["private_access"] == .bool(false))
            #expect(try await gateway.call(.put, "/v2/keys/\(readA)", key: master,
                                            body: #"{"key": {"permissions": [{"access_methods": ["get", "put"], "resources": [{"feed_id": \#(a)}]}]}}"#).status == 200)
            #expect(try await gateway.call(.put, "/v2/feeds/\(a)", key: readA, body: #"{"title": "A2"}"#).status == 200, "the new permission applies")
            #expect(try await gateway.call(.delete, "/v2/keys/\(readA)", key: master).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(a)", key: readA).status == 401, "a deleted key is revoked at once")

            // Another user's master key sees none of joe's keys.
            let kim = try await gateway.register("kim")
            let kimMaster = try #require(try await create(#"{"key": {"label": "m", "private_access": true, "permissions": [{"access_methods": ["get", "put", "post", "delete"]}]}}"#,
                                                          token: kim.token).key)
            #expect(try await gateway.call(.get, "/v2/keys/\(master)", key: kimMaster).status == 404)
            #expect(try await gateway.call(.get, "/v2/keys", key: kimMaster).json["keys"]?.arrayValue?.count == 1)

            // Bad keys.
            for (body, pointer) in [(#"{"key": {"label": "x"}}"#, "/key/permissions"),
                                    (#"{"key": {"label": "x", "permissions": [{"access_methods": ["fly"]}]}}"#, "/key/permissions/0/access_methods"),
                                    (#"{"key": {"label": "x", "expires_at": "2001-01-01T00:00:00Z", "permissions": [{"access_methods": ["get"]}]}}"#, "/key/expires_at"),
                                    (#"{"key": {"permissions": [{"access_methods": ["get"], "resources": [{"feed_id": "x"}]}]}}"#, "/key/label")] {
                let (status, _, reply) = try await create(body, with: master)
                #expect(status == 422, "\(body)")
                #expect(reply.json.keys == ["title", "errors"])
                #expect(reply.json["errors"]?.string?.contains(pointer) == true, "\(reply.text)")
            }
        }
    }

    @Test("trigger URLs inside the network are refused unless allowed")
    func privateTargets() {
        for host in ["localhost", "127.0.0.1", "10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.169.254", "[::1]", "fd00::1", "metadata.internal"] {
            #expect(FeedService.isPrivateHost(host), "\(host)")
        }
        for host in ["example.com", "8.8.8.8", "172.32.0.1", "2606:4700:4700::1111"] {
            #expect(!FeedService.isPrivateHost(host), "\(host)")
        }
    }

    @Test("source_ip: exact addresses and IPv4 CIDR ranges")
    func addresses() {
        #expect(LegacyKeys.address("10.1.2.3", matches: "10.1.0.0/16"))
        #expect(!LegacyKeys.address("10.2.2.3", matches: "10.1.0.0/16"))
        #expect(LegacyKeys.address("127.0.0.1", matches: "127.0.0.1"))
        #expect(LegacyKeys.address("8.8.8.8", matches: "0.0.0.0/0"))
        #expect(!LegacyKeys.address("::1", matches: "10.0.0.0/8"))
    }
}

@Suite("feeds v2 key secrets at rest")
struct KeySealTests {
    @Test("an upgrade hashes and seals the secrets stored before; a configured keySecret seals them again; nothing stays in plain text", arguments: TestStorage.available)
    func upgrade(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let db = database.sql
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            let runner = MigrationRunner(database: db, logger: logger)
            _ = try await runner.migrate([(owner: "feeds", steps: FeedsPlugin.migrations.filter { $0.version < 6 })])
            try await db.raw("""
                INSERT INTO feeds_keys (key_id, api_key, user_id, label, private_access, expires_at, permissions, created)
                VALUES ('k1', 'gk_plain_secret_of_old', 'u1', 'old', 1, NULL, '[]', 1)
                """).run()
            _ = try await runner.migrate([(owner: "feeds", steps: FeedsPlugin.migrations)])
            let row = try #require(try await db.raw("SELECT key_hash, sealed_key FROM feeds_keys WHERE key_id = 'k1'").first())
            let sealed = try row.decode(column: "sealed_key", as: String.self)
            #expect(try row.decode(column: "key_hash", as: String.self) == KeySeal.hash("gk_plain_secret_of_old"))
            #expect(sealed.hasPrefix("db:") && !sealed.contains("gk_plain"))
            let stored = KeySeal(configured: nil, stored: try await KeySeal.storedKey(db))
            #expect(stored.open(sealed) == "gk_plain_secret_of_old")

            // With keySecret configured, the copy is sealed again under it.
            let configured = KeySeal(configured: KeySeal.key(fromSecret: String(repeating: "s", count: 32)), stored: try await KeySeal.storedKey(db))
            let resealed = try configured.seal("gk_plain_secret_of_old")
            #expect(resealed.hasPrefix("cfg:"))
            #expect(configured.open(resealed) == "gk_plain_secret_of_old")
            #expect(stored.open(resealed) == nil, "a copy sealed under keySecret does not open with the database's key")
        }
    }
}
