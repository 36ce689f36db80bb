import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import Logging
import NotesFixturePlugin
import ServiceLifecycle
import SQLKit
import Synchronization
import Testing

/// Work that records which instance runs it, and how many run at once.
final class LeaseProbe: Sendable {
    let running = Mutex<[String]>([])
    let overlaps = Atomic<Int>(0)
    let ran = Mutex<Set<String>>([])

    func work(_ instance: String) -> any Service {
        Work(probe: self, instance: instance)
    }

    struct Work: Service {
        let probe: LeaseProbe
        let instance: String
        func run() async throws {
            probe.running.withLock { running in
                if !running.isEmpty { probe.overlaps.add(1, ordering: .relaxed) }
                running.append(instance)
            }
            probe.ran.withLock { _ = $0.insert(instance) }
            defer { probe.running.withLock { $0.removeAll { $0 == instance } } }
            try await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(3_600)) }
        }
    }

    var current: [String] { running.withLock { $0 } }
}

@Suite("work that runs once in a cluster")
struct LeasedServiceTests {
    static let logger = Logger(label: "lease-test")

    /// Runs `services` in a group of their own until `body` returns.
    static func running(_ services: [any Service], _ body: (ServiceGroup) async throws -> Void) async throws {
        let group = ServiceGroup(configuration: .init(services: services.map { .init(service: $0) }, logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await body(group)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    static func waitFor(_ condition: () -> Bool) async throws -> Bool {
        try await eventually(within: .seconds(20)) { condition() }
    }

    @Test("of two instances one runs the work; stopped cleanly, the other takes it over at once; dead (its lease unrenewed), after the lease's time",
          arguments: TestStorage.available)
    func failover(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            let database = gateway.gateway.database.sql
            let probe = LeaseProbe()
            // Renewals every 5 s of a 15 s lease: a machine busy with the whole suite may stall one for
            // seconds without the lease expiring under its holder (which would let the other start
            // before the holder's next renewal stops it). A stop gives the lease up at once, so the
            // take-over below does not wait for it.
            let ttl = Duration.seconds(15)
            let first = LeasedService("test.work", database: database, ttl: ttl, holder: "first", logger: Self.logger, work: probe.work("first"))
            let second = LeasedService("test.work", database: database, ttl: ttl, holder: "second", logger: Self.logger, work: probe.work("second"))
            try await Self.running([second]) { _ in
                try await Self.running([first]) { _ in
                    let oneRuns = try await Self.waitFor { probe.current.count == 1 }
                    #expect(oneRuns)
                    // Several renewals later, still exactly one.
                    try await Task.sleep(for: .seconds(2))
                    #expect(probe.current.count == 1)
                    #expect(probe.overlaps.load(ordering: .relaxed) == 0)
                }
                // The first group stopped (if it held the lease, it gave it up): the second runs the work.
                let secondTookOver = try await Self.waitFor { probe.current == ["second"] }
                #expect(secondTookOver)
            }
            #expect(probe.current.isEmpty)

            // A holder that died: its row stays until it expires, then a new instance takes over.
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            try await database.raw("INSERT INTO gateway_leases (name, holder, expires_at) VALUES ('test.dead', 'gone', \(bind: now + 1500))").run()
            let survivor = LeaseProbe()
            let start = ContinuousClock.now
            try await Self.running([LeasedService("test.dead", database: database, ttl: .seconds(1), holder: "survivor", logger: Self.logger,
                                                  work: survivor.work("survivor"))]) { _ in
                let survivorTookOver = try await Self.waitFor { survivor.current == ["survivor"] }
                #expect(survivorTookOver)
                #expect(ContinuousClock.now - start >= .seconds(1), "not before the dead holder's lease expired")
            }
            #expect(probe.overlaps.load(ordering: .relaxed) == 0)
        }
    }

    @Test("a lease taken over behind the holder's back stops its work at the next renewal")
    func lostLease() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let database = gateway.gateway.database.sql
            let probe = LeaseProbe()
            let service = LeasedService("test.lost", database: database, ttl: .seconds(1), holder: "me", logger: Self.logger, work: probe.work("me"))
            try await Self.running([service]) { _ in
                let started = try await Self.waitFor { probe.current == ["me"] }
                #expect(started)
                // Another holder's lease, far in the future: the next renewal fails.
                try await database.raw("UPDATE gateway_leases SET holder = 'thief', expires_at = \(bind: Int64.max / 2) WHERE name = 'test.lost'").run()
                let stopped = try await Self.waitFor { probe.current.isEmpty }
                #expect(stopped)
            }
        }
    }
}
