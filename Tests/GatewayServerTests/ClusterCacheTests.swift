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
        try await TestStorage.postgres.withFreshLocation { location, directory in
            var configuration = try GatewayConfiguration.parse(Data(notesYAML.utf8), file: "plugins.yaml", knownPlugins: ["notes"])
            configuration.storage = location
            var options = Gateway.Options(baseDirectory: directory)
            options.logger.logLevel = .critical
            options.loadDemoData = false
            options.rateLimiter = UnlimitedRateLimiter()
            let logger = options.logger
            try await TestGateway.withTwo(configuration: configuration, registrations: notes, options: options) { first, second in
                let group = ServiceGroup(configuration: .init(services: (first.hostServices + second.hostServices).map { .init(service: $0) },
                                                              logger: logger))
                let xCache = HTTPField.Name("X-Cache")!
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask { try await group.run() }
                    // Wait until both listeners are connected.
                    let deadline = ContinuousClock.now + .seconds(10)
                    while ContinuousClock.now < deadline {
                        if first.isListeningForInvalidations && second.isListeningForInvalidations { break }
                        try await Task.sleep(for: .milliseconds(50))
                    }
                    #expect(first.isListeningForInvalidations && second.isListeningForInvalidations)
                    _ = try await second.handle(.get, "/v1/notes/notes")
                    #expect(try await second.handle(.get, "/v1/notes/notes").headers[xCache] == "HIT")
                    let created = try await first.handle(.post, "/v1/notes/notes", headers: [.contentType: "application/json"],
                                                         body: ByteBuffer(string: #"{"title": "from the first", "body": "b"}"#))
                    #expect(created.status == 201)
                    var purged = false
                    let until = ContinuousClock.now + .seconds(5)
                    while ContinuousClock.now < until {
                        let response = try await second.handle(.get, "/v1/notes/notes")
                        if response.headers[xCache] == "MISS" {
                            #expect(String(buffer: response.body).contains("from the first"))
                            purged = true
                            break
                        }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                    #expect(purged, "the second instance kept serving its stale entry")
                    await group.triggerGracefulShutdown()
                    try await tasks.waitForAll()
                }
            }
        }
    }

    @Test("a key revoked or a session ended through one instance stops working on the other at once, not after its credential cache")
    func crossInstanceRevocation() async throws {
        try await TestStorage.postgres.withFreshLocation { location, directory in
            var configuration = try GatewayConfiguration.parse(Data(notesYAML.utf8), file: "plugins.yaml", knownPlugins: ["notes"])
            configuration.storage = location
            configuration.auth.bcryptCost = 10
            var options = Gateway.Options(baseDirectory: directory)
            options.logger.logLevel = .critical
            options.loadDemoData = false
            options.rateLimiter = UnlimitedRateLimiter()
            let logger = options.logger
            try await TestGateway.withTwo(configuration: configuration, registrations: notes, options: options) { first, second in
                let group = ServiceGroup(configuration: .init(services: (first.hostServices + second.hostServices).map { .init(service: $0) },
                                                              logger: logger))
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask { try await group.run() }
                    let deadline = ContinuousClock.now + .seconds(10)
                    while ContinuousClock.now < deadline, !(first.isListeningForInvalidations && second.isListeningForInvalidations) {
                        try await Task.sleep(for: .milliseconds(50))
                    }
                    let one = TestGateway(gateway: first, storage: .postgres)
                    let (token, _) = try await one.register("everywhere")
                    let key = try await one.createKey(token: token, grant: #"{"label": "k", "scopes": ["notes:read"]}"#)
                    let apiKey = HTTPField.Name("X-Api-Key")!
                    let bearer: HTTPFields = [.authorization: "Bearer \(token)"]
                    // The second instance resolves both and remembers them (for five seconds).
                    #expect(try await second.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 200)
                    #expect(try await second.handle(.get, "/v1/me", headers: bearer).status == 200)

                    #expect(try await first.handle(.delete, "/v1/me/keys/\(key.id)", headers: bearer).status == 204)
                    let keyRefused = try await Self.within(.seconds(1)) {
                        try await second.handle(.get, "/v1/notes/echo?name=x", headers: [apiKey: key.secret]).status == 401
                    }
                    #expect(keyRefused, "the revoked key still worked on the other instance after a second")

                    #expect(try await first.handle(.post, "/v1/auth/logout", headers: bearer).status == 204)
                    let sessionRefused = try await Self.within(.seconds(1)) {
                        try await second.handle(.get, "/v1/me", headers: bearer).status == 401
                    }
                    #expect(sessionRefused, "the ended session still worked on the other instance after a second")
                    await group.triggerGracefulShutdown()
                    try await tasks.waitForAll()
                }
            }
        }
    }

    /// Whether `condition` holds within `limit`, asked every 20 ms.
    static func within(_ limit: Duration, _ condition: () async throws -> Bool) async throws -> Bool {
        let until = ContinuousClock.now + limit
        while ContinuousClock.now < until {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}
