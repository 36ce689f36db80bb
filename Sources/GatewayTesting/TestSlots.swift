import Foundation
import Synchronization

/// How many tests hold a fresh database (and so, nearly always, a running gateway) at once.
///
/// Swift Testing starts every test at the same moment. Unbounded, a full run on a 2-core machine
/// had some 500 gateways migrating and serving at once: every await waited behind thousands of
/// queued tasks, a gateway took 35 s to start and the tests that measure an attack's cost
/// (a statement's budget, a regular expression's time) measured the crowd instead. Bounded to a
/// few tests per core, the whole run takes the same time and each test runs as it would alone.
/// `GATEWAY_TEST_WIDTH` sets the bound; a test that already holds a place (two instances, a
/// nested database, in its own task or its child tasks) takes no second one. A `Task.detached`
/// does not inherit the place: a test that waits for a detached task opening a database could
/// wait for ever once every place is taken, so tests do not do that.
enum TestSlots {
    @TaskLocal private static var held = false

    static let width: Int = {
        if let text = ProcessInfo.processInfo.environment["GATEWAY_TEST_WIDTH"], let width = Int(text), width > 0 { return width }
        return max(4, 4 * ProcessInfo.processInfo.activeProcessorCount)
    }()

    private struct State {
        var free = TestSlots.width
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private static let state = Mutex(State())

    /// Runs `body` holding a place, waiting in turn for one.
    static func with<R>(_ body: () async throws -> R) async throws -> R {
        if held { return try await body() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let free = state.withLock { state in
                guard state.free > 0 else {
                    state.waiting.append(continuation)
                    return false
                }
                state.free -= 1
                return true
            }
            if free { continuation.resume() }
        }
        defer {
            let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard !state.waiting.isEmpty else {
                    state.free += 1
                    return nil
                }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await $held.withValue(true) { try await body() }
    }
}
