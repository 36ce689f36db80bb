import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import ServiceLifecycle
import Testing

/// Two gateway instances on one PostgreSQL: a write through one purges the other's cache.
@Suite("cache invalidation across instances", .enabled(if: TestStorage.available.contains(.postgres)))
struct ClusterCacheTests {
    @Test("a write through one instance purges the cached reply of another (LISTEN/NOTIFY)")
    func crossInstanceInvalidation() async throws {
        try await TestGateway.withTwoListening(notes, yaml: notesYAML) { first, second in
            let xCache = HTTPField.Name("X-Cache")!
            _ = try await second.handle(.get, "/v1/notes/notes")
            #expect(try await second.handle(.get, "/v1/notes/notes").headers[xCache] == "HIT")
            let created = try await first.handle(.post, "/v1/notes/notes", headers: [.contentType: "application/json"],
                                                 body: ByteBuffer(string: #"{"title": "from the first", "body": "b"}"#))
            #expect(created.status == 201)
            let purged = try await eventually(within: .seconds(15)) {
                let response = try await second.handle(.get, "/v1/notes/notes")
                return response.headers[xCache] == "MISS" && String(buffer: response.body).contains("from the first")
            }
            #expect(purged, "the second instance kept serving its stale entry")
        }
    }

    @Test("events published at once on one instance all reach the other, equal ones too, each once and in order per publisher")
    func crossInstanceEvents() async throws {
        try await TestGateway.withTwoListening(notes, yaml: notesYAML) { first, second in
            let received = second.events.subscribe(to: "burst")
            // 8 publishers of 25 events each, all at once: notifications sent together go in one
            // statement, where PostgreSQL would deliver a payload sent twice only once.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for publisher in 0..<8 {
                    group.addTask {
                        for index in 0..<25 {
                            // Every fifth the same event from every publisher.
                            let (topic, payload) = index % 5 == 0 ? ("burst/all", "same") : ("burst/\(publisher)", "\(publisher) \(index)")
                            await first.events.publish(GatewayEvent(topic: topic, payload: ByteBuffer(string: payload)))
                        }
                    }
                }
                try await group.waitForAll()
            }
            // Read until all 200 arrived, or for 15 seconds at most.
            let reader = Task {
                var events: [GatewayEvent] = []
                for await event in received {
                    events.append(event)
                    if events.count == 200 { break }
                }
                return events
            }
            let timeout = Task {
                try await Task.sleep(for: .seconds(15))
                reader.cancel()
            }
            let events = await reader.value
            timeout.cancel()
            #expect(events.count == 200)
            var perPublisher: [String: [String]] = [:]
            for event in events { perPublisher[event.topic, default: []].append(String(buffer: event.payload)) }
            #expect(perPublisher["burst/all"]?.count == 40)
            for publisher in 0..<8 {
                #expect(perPublisher["burst/\(publisher)"] == (0..<25).filter { $0 % 5 != 0 }.map { "\(publisher) \($0)" })
            }
        }
    }

    @Test("a key revoked or a session ended through one instance stops working on the other at once, not after its credential cache")
    func crossInstanceRevocation() async throws {
        // Credentials remembered for ten minutes: only the announcement can end them within the wait.
        try await TestGateway.withTwoListening(notes, yaml: notesYAML, credentialCacheTTL: .seconds(600)) { first, second in
            let one = TestGateway(gateway: first, storage: .postgres)
            let (token, _) = try await one.register("everywhere")
            let key = try await one.createKey(token: token, grant: #"{"label": "k", "scopes": ["notes:read"]}"#)
            let apiKey = HTTPField.Name("X-Api-Key")!
            let bearer: HTTPFields = [.authorization: "Bearer \(token)"]
            // The second instance resolves both and remembers them.
            #expect(try await second.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 200)
            #expect(try await second.handle(.get, "/v1/me", headers: bearer).status == 200)

            #expect(try await first.handle(.delete, "/v1/me/keys/\(key.id)", headers: bearer).status == 204)
            let keyRefused = try await eventually(within: .seconds(15)) {
                try await second.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 401
            }
            #expect(keyRefused, "the revoked key still worked on the other instance")

            #expect(try await first.handle(.post, "/v1/auth/logout", headers: bearer).status == 204)
            let sessionRefused = try await eventually(within: .seconds(15)) {
                try await second.handle(.get, "/v1/me", headers: bearer).status == 401
            }
            #expect(sessionRefused, "the ended session still worked on the other instance")
        }
    }
}
