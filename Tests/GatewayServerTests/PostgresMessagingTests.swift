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
        try await TestStorage.postgres.withDatabase { database in
            guard case .postgres(let url) = database.location else { return }
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            let sender = PostgresMessaging(url: url, database: database.sql, logger: logger)
            let receiver = PostgresMessaging(url: url, database: database.sql, logger: logger)
            let sentPurges = sender.channel("gateway_cache", merging: true)
            let sentEvents = sender.channel("gateway_events")
            let purges = Mutex<[String]>([])
            let events = Mutex<[String]>([])
            receiver.channel("gateway_cache", merging: true).onMessage { message in purges.withLock { $0.append(message) } }
            receiver.channel("gateway_events").onMessage { message in events.withLock { $0.append(message) } }
            let listening = Task { try await receiver.run() }
            defer { listening.cancel() }
            #expect(try await eventually(within: .seconds(10)) { receiver.isListening })
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
            let own = Task { try await sender.run() }
            defer { own.cancel() }
            #expect(try await eventually(within: .seconds(10)) { sender.isListening })
            #expect(await sentPurges.publish("mine"))
            #expect(try await eventually(within: .seconds(15)) { purges.withLock { $0.last } == "mine" })
            #expect(echoes.withLock { $0 } == 0)
        }
    }
}
