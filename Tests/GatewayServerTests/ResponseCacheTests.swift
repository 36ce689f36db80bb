import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import SQLKit
import Testing

@Suite("response cache")
struct ResponseCacheTests {
    static let xCache = HTTPField.Name("X-Cache")!

    func notesPlugin(_ gateway: TestGateway) throws -> NotesPlugin {
        try #require(gateway.gateway.plugins.first { $0.id == "notes" }?.instance as? NotesPlugin)
    }

    @Test("a cache hit costs no handler call and no database access")
    func hitSkipsHandlerAndDatabase() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let plugin = try notesPlugin(gateway)
            _ = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: .json, body: ByteBuffer(string: #"{"title": "cached", "body": "b"}"#))
            let miss = try await gateway.gateway.handle(.get, "/v1/notes/notes")
            #expect(miss.headers[Self.xCache] == "MISS")
            #expect(plugin.handlerCalls.count == 1)
            // With the table gone, only the cache can still answer.
            try await gateway.gateway.database.sql.drop(table: "notes_items").run()
            let hit = try await gateway.gateway.handle(.get, "/v1/notes/notes")
            #expect(hit.status == 200)
            #expect(hit.headers[Self.xCache] == "HIT")
            #expect(hit.body == miss.body)
            #expect(hit.headers[.eTag] == miss.headers[.eTag])
            #expect(hit.headers[HTTPField.Name("Age")!] != nil)
            #expect(plugin.handlerCalls.count == 1)
        }
    }

    @Test("query order does not split the cache; a write to the tag purges it")
    func keyingAndInvalidation() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let plugin = try notesPlugin(gateway)
            _ = try await gateway.gateway.handle(.get, "/v1/notes/notes?limit=5&tag=x")
            let reordered = try await gateway.gateway.handle(.get, "/v1/notes/notes?tag=x&limit=5")
            #expect(reordered.headers[Self.xCache] == "HIT")
            _ = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: .json, body: ByteBuffer(string: #"{"title": "new", "body": "b"}"#))
            let after = try await gateway.gateway.handle(.get, "/v1/notes/notes?limit=5&tag=x")
            #expect(after.headers[Self.xCache] == "MISS")
            #expect(String(buffer: after.body).contains("new"))
            #expect(plugin.handlerCalls.count == 2)
        }
    }

    @Test("RFC 9111: request no-cache revalidates, no-store bypasses, max-age bounds age, 304 for a matching ETag")
    func requestDirectives() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let first = try await gateway.gateway.handle(.get, "/v1/notes/notes")
            #expect(first.headers[.cacheControl] == "public, max-age=30")
            let noCache = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [.cacheControl: "no-cache"])
            #expect(noCache.headers[Self.xCache] == "MISS")
            let noStore = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [.cacheControl: "no-store"])
            #expect(noStore.headers[Self.xCache] == "BYPASS")
            let etag = try #require(first.headers[.eTag])
            let conditional = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [.ifNoneMatch: etag])
            #expect(conditional.status == 304)
            #expect(conditional.headers[Self.xCache] == "HIT")
            try await Task.sleep(for: .milliseconds(1100))
            let young = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [.cacheControl: "max-age=0"])
            #expect(young.headers[Self.xCache] == "MISS")
        }
    }

    @Test("caller-dependent replies are never served to another caller")
    func perPrincipal() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let a = try await gateway.register("alice")
            let b = try await gateway.register("bob")
            _ = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: [.authorization: "Bearer \(a.token)", .contentType: "application/json"],
                                                 body: ByteBuffer(string: #"{"title": "alice's secret", "body": "b"}"#))
            let alice = try await gateway.gateway.handle(.get, "/v1/notes/me/notes", headers: [.authorization: "Bearer \(a.token)"])
            #expect(String(buffer: alice.body).contains("alice's secret"))
            #expect(alice.headers[.cacheControl] == "private, max-age=30")
            let bob = try await gateway.gateway.handle(.get, "/v1/notes/me/notes", headers: [.authorization: "Bearer \(b.token)"])
            #expect(bob.headers[Self.xCache] == "MISS")
            #expect(!String(buffer: bob.body).contains("alice's secret"))
            let anonymous = try await gateway.gateway.handle(.get, "/v1/notes/me/notes")
            #expect(anonymous.status == 401)
        }
    }

    @Test("an administrator purges by tag; others may not")
    func purge() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let admin = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: admin.userID, true)
            let user = try await gateway.register("user")
            gateway.gateway.forgetCredentials()
            _ = try await gateway.gateway.handle(.get, "/v1/notes/notes")
            let denied = try await gateway.gateway.handle(.post, "/v1/admin/cache/purge", headers: [.authorization: "Bearer \(user.token)", .contentType: "application/json"],
                                                          body: ByteBuffer(string: #"{"tags": ["notes:list"]}"#))
            #expect(denied.status == 403)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/notes").headers[Self.xCache] == "HIT")
            let purged = try await gateway.gateway.handle(.post, "/v1/admin/cache/purge", headers: [.authorization: "Bearer \(admin.token)", .contentType: "application/json"],
                                                          body: ByteBuffer(string: #"{"tags": ["notes:list"]}"#))
            #expect(purged.status == 200)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/notes").headers[Self.xCache] == "MISS")
        }
    }

    @Test("the LRU keeps within its entry and byte bounds and drops the least recently used")
    func bounds() async throws {
        let cache = MemoryResponseCache(maxEntries: 3, maxBytes: 100_000)
        func reply(_ size: Int, tags: [String] = []) -> CachedReply {
            CachedReply(status: .ok, headers: [:], body: Array(repeating: 1, count: size), etag: "\"x\"", storedAt: .now, ttl: .seconds(60), tags: tags)
        }
        await cache.store("a", reply(10))
        await cache.store("b", reply(10))
        await cache.store("c", reply(10))
        _ = await cache.lookup("a")
        await cache.store("d", reply(10))
        #expect(await cache.lookup("b") == nil)
        #expect(await cache.lookup("a") != nil)
        #expect(cache.statistics.entries == 3)

        let small = MemoryResponseCache(maxEntries: 100, maxBytes: 10_000)
        for index in 0..<50 { await small.store("k\(index)", reply(1000)) }
        #expect(small.statistics.bytes <= 10_000)
        await small.store("huge", reply(5000))
        #expect(await small.lookup("huge") == nil)

        let tagged = MemoryResponseCache(maxEntries: 10, maxBytes: 100_000)
        await tagged.store("x", reply(10, tags: ["t1"]))
        await tagged.store("y", reply(10, tags: ["t2"]))
        await tagged.invalidate(tags: ["t1"])
        #expect(await tagged.lookup("x") == nil)
        #expect(await tagged.lookup("y") != nil)
        await tagged.invalidate(tags: [ResponseCacheTags.all])
        #expect(tagged.statistics.entries == 0)
    }

    @Test("an expired entry is never served")
    func expiry() async throws {
        let cache = MemoryResponseCache(maxEntries: 10, maxBytes: 100_000)
        await cache.store("k", CachedReply(status: .ok, headers: [:], body: [1], etag: "\"e\"", storedAt: .now - .seconds(2), ttl: .seconds(1), tags: []))
        #expect(await cache.lookup("k") == nil)
    }
}
