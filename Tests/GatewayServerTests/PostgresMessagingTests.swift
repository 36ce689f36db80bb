import Foundation
@testable import GatewayServer
import GatewayTesting
import Logging
import SQLKit
import Synchronization
import Testing

/// The messages between instances on PostgreSQL: one listening connection for every channel,
/// equal cache invalidations sent together merged, events never.
@Suite("messages between instances (PostgreSQL)", .enabled(if: TestStorage.available.contains(.postgres)))
struct PostgresMessagingTests {
    @Test("equal invalidations published at once arrive merged, every event arrives, each channel to its own receiver, over one connection")
    func mergedInvalidations() async throws {
        try await withTwoInstances { database, sender, receiver in
            let sentPurges = sender.channel("gateway_cache", merging: true)
            let sentEvents = sender.channel("gateway_events")
            let purges = Mutex<[String]>([])
            let events = Mutex<[String]>([])
            receiver.channel("gateway_cache", merging: true).onMessage { message in purges.withLock { $0.append(message) } }
            receiver.channel("gateway_events").onMessage { message in events.withLock { $0.append(message) } }
            let listening = try await listen(receiver)
            defer { listening.cancel() }
            // One connection listens on both channels.
            let listeners = try await database.sql.raw("""
                SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'
                """).first()?.decode(column: "n", as: Int.self)
            #expect(listeners == 1)

            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<64 {
                    group.addTask {
                        #expect(await sentPurges.publish("todo:bucket:todos"))
                        #expect(await sentEvents.publish(index % 2 == 0 ? "same" : "event \(index)"))
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await eventually(within: .seconds(15)) { events.withLock { $0.count } == 64 })
            #expect(events.withLock { $0.filter { $0 == "same" }.count } == 32)
            let merged = purges.withLock { $0 }
            #expect(!merged.isEmpty && merged.count < 64, "\(merged.count) invalidations arrived for 64 equal ones sent at once")
            #expect(merged.allSatisfy { $0 == "todo:bucket:todos" })
            // A later one is not merged into an earlier one.
            #expect(await sentPurges.publish("todo:bucket:todos"))
            #expect(try await eventually(within: .seconds(15)) { purges.withLock { $0.count } == merged.count + 1 })
            // Its own messages are not delivered to the sender.
            let echoes = Mutex(0)
            sentPurges.onMessage { _ in echoes.withLock { $0 += 1 } }
            let own = try await listen(sender)
            defer { own.cancel() }
            #expect(await sentPurges.publish("mine"))
            #expect(try await eventually(within: .seconds(15)) { purges.withLock { $0.last } == "mine" })
            #expect(echoes.withLock { $0 } == 0)
        }
    }

    @Test("what a request publishes waits for the end of its handling and goes in one statement; a task outliving it sends its own")
    func collectedPerRequest() async throws {
        try await withTwoInstances { database, sender, receiver in
            let sentPurges = sender.channel("gateway_cache", merging: true)
            let sentEvents = sender.channel("gateway_events")
            let received = Mutex<[String]>([])
            receiver.channel("gateway_cache", merging: true).onMessage { message in received.withLock { $0.append("purge " + message) } }
            receiver.channel("gateway_events").onMessage { message in received.withLock { $0.append("event " + message) } }
            let listening = try await listen(receiver)
            defer { listening.cancel() }

            let late = try await sender.collecting { () async throws -> Task<Bool, Never> in
                #expect(await sentPurges.publish("feeds:1"))
                #expect(await sentEvents.publish("changed 1"))
                #expect(await sentPurges.publish("feeds:1"))
                #expect(await sentEvents.publish("changed 2"))
                // Kept until the handling ends: a marker sent meanwhile, outside the request, arrives alone.
                await Task.detached { #expect(await sentEvents.publish("outside")) }.value
                #expect(try await eventually(within: .seconds(15)) { received.withLock { $0 } == ["event outside"] })
                // A task started here that publishes after the handling ended sends on its own.
                return Task {
                    try? await Task.sleep(for: .milliseconds(300))
                    return await sentEvents.publish("late")
                }
            }
            // Sent together: the invalidation published twice arrives once, events in their order.
            // (Each channel is delivered by a task of its own, so the two channels' messages may
            // interleave either way, and on a loaded machine the late one may already be there.)
            #expect(try await eventually(within: .seconds(15)) { received.withLock { $0.count } >= 4 })
            #expect(await late.value)
            #expect(try await eventually(within: .seconds(15)) { received.withLock { $0.count } == 5 })
            let all = received.withLock { $0 }
            #expect(all.filter { $0.hasPrefix("purge ") } == ["purge feeds:1"])
            #expect(all.filter { $0.hasPrefix("event ") } == ["event outside", "event changed 1", "event changed 2", "event late"])

            // A handling that fails still sends what it published.
            struct Refused: Error {}
            await #expect(throws: Refused.self) {
                try await sender.collecting {
                    #expect(await sentEvents.publish("before the failure"))
                    throw Refused()
                }
            }
            #expect(try await eventually(within: .seconds(15)) { received.withLock { $0.last } == "event before the failure" })
        }
    }

    @Test("a request that publishes more than one statement holds sends it all, in order, together")
    func manyFromOneRequest() async throws {
        try await withTwoInstances { _, sender, receiver async throws in
            let sentEvents = sender.channel("gateway_events")
            let received = Mutex<[String]>([])
            receiver.channel("gateway_events").onMessage { message in received.withLock { $0.append(message) } }
            let listening = try await listen(receiver)
            defer { listening.cancel() }
            let sent = (0..<(2 * 64 + 5)).map { "change \($0)" }
            await sender.collecting {
                for message in sent { #expect(await sentEvents.publish(message)) }
            }
            #expect(try await eventually(within: .seconds(15)) { received.withLock { $0.count } == sent.count })
            #expect(received.withLock { $0 } == sent)
        }
    }

    /// Two instances' messaging on one test database (neither running yet).
    private func withTwoInstances(_ body: (GatewayDatabase, PostgresMessaging, PostgresMessaging) async throws -> Void) async throws {
        try await TestStorage.postgres.withDatabase { database in
            guard case .postgres(let url) = database.location else { return }
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            try await body(database, PostgresMessaging(url: url, database: database.sql, logger: logger),
                           PostgresMessaging(url: url, database: database.sql, logger: logger))
        }
    }

    /// Runs `instance` (its channels made already) and returns once it listens; cancel the task to stop it.
    private func listen(_ instance: PostgresMessaging) async throws -> Task<Void, any Error> {
        let run = Task { try await instance.run() }
        #expect(try await eventually(within: .seconds(10)) { instance.isListening })
        return run
    }
}
