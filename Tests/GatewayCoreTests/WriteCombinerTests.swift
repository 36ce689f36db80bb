import GatewayCore
import GatewaySupport
import Synchronization
import Testing

/// Records every call of a combiner's write, and holds the first one until it is let go, so that
/// the writes submitted meanwhile are known to queue behind it.
private final class Recorder: Sendable {
    private let calls = Mutex<[[Int]]>([])
    private let gate = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let started = AsyncStream<Void>.makeStream()
    /// Items whose write fails whenever they are in it.
    let failing: Set<Int>
    let holdFirst: Bool

    init(failing: Set<Int> = [], holdFirst: Bool = true) {
        self.failing = failing
        self.holdFirst = holdFirst
    }

    var written: [[Int]] { calls.withLock { $0 } }

    func write(_ items: [Int]) async throws {
        let first = calls.withLock { calls in
            calls.append(items)
            return calls.count == 1
        }
        if first && holdFirst {
            await withCheckedContinuation { continuation in
                gate.withLock { $0 = continuation }
                started.continuation.yield()
            }
        }
        if !failing.isDisjoint(with: items) { throw Failure(items: items) }
    }

    /// Waits until the first write is held.
    func firstWriteHeld() async {
        var iterator = started.stream.makeAsyncIterator()
        _ = await iterator.next()
    }

    func release() { gate.withLock { $0 }?.resume() }

    /// A combiner that writes through this recorder.
    func combiner(maxItems: Int) -> WriteCombiner<String, Int> {
        WriteCombiner(maxItems: maxItems) { _, items in try await self.write(items) }
    }

    /// Submits item 0 under `key` and runs `body` while its write is held; then lets it go and
    /// waits for every write.
    func whileFirstHeld(_ combiner: WriteCombiner<String, Int>, key: String, _ body: (inout ThrowingTaskGroup<Void, any Error>) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await combiner.submit(0, key: key) }
            await firstWriteHeld()
            try await body(&group)
            release()
            try await group.waitForAll()
        }
    }

    struct Failure: Error, Equatable {
        let items: [Int]
    }
}

@Suite("WriteCombiner: group commit for plugins")
struct WriteCombinerTests {
    @Test("a write with nothing running goes at once, alone")
    func alone() async throws {
        let recorder = Recorder(holdFirst: false)
        let combiner = recorder.combiner(maxItems: 10)
        for item in 1...3 { try await combiner.submit(item, key: "k") }
        #expect(recorder.written == [[1], [2], [3]])
    }

    @Test("writes that arrive while one runs go together, in arrival order, at most maxItems a call")
    func combined() async throws {
        let recorder = Recorder()
        let combiner = recorder.combiner(maxItems: 4)
        try await recorder.whileFirstHeld(combiner, key: "k") { group in
            // Queued one after another, so that their order is known.
            for item in 1...6 {
                group.addTask { try await combiner.submit(item, key: "k") }
                try await waitUntil { combiner.waiting(for: "k") == item }
            }
        }
        #expect(recorder.written == [[0], [1, 2, 3, 4], [5, 6]])
    }

    @Test("keys do not wait for each other")
    func keys() async throws {
        let recorder = Recorder()
        let combiner = recorder.combiner(maxItems: 4)
        try await recorder.whileFirstHeld(combiner, key: "a") { _ in
            // Key "b" is written while "a" is held.
            try await combiner.submit(1, key: "b")
            #expect(recorder.written == [[0], [1]])
        }
    }

    @Test("a failed combined write is written again item by item: only the bad item fails")
    func failure() async throws {
        let recorder = Recorder(failing: [3])
        let combiner = recorder.combiner(maxItems: 10)
        let outcomes = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
            group.addTask { (0, (try? await combiner.submit(0, key: "k")) != nil) }
            await recorder.firstWriteHeld()
            for item in 1...4 {
                group.addTask { (item, (try? await combiner.submit(item, key: "k")) != nil) }
                try await waitUntil { combiner.waiting(for: "k") == item }
            }
            recorder.release()
            var outcomes: [Int: Bool] = [:]
            for try await (item, ok) in group { outcomes[item] = ok }
            return outcomes
        }
        #expect(outcomes == [0: true, 1: true, 2: true, 3: false, 4: true])
        let calls = recorder.written
        #expect(calls.prefix(2) == [[0], [1, 2, 3, 4]])
        #expect(Set(calls.dropFirst(2)) == [[1], [2], [3], [4]], "each item of the failed call written again alone")
        #expect(combiner.waiting(for: "k") == 0)
    }

    @Test("an error of a write alone is its caller's")
    func error() async throws {
        let recorder = Recorder(failing: [7], holdFirst: false)
        let combiner = WriteCombiner<Int, Int>(maxItems: 10) { _, items in try await recorder.write(items) }
        await #expect(throws: Recorder.Failure(items: [7])) { try await combiner.submit(7, key: 1) }
        try await combiner.submit(8, key: 1)
        #expect(recorder.written == [[7], [8]])
    }
}

/// Polls `condition` until it holds (up to 10 s).
private func waitUntil(_ condition: () -> Bool) async throws {
    for _ in 0..<1_000 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
    #expect(condition())
}
