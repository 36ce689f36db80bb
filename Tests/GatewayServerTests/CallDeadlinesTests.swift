import Foundation
@testable import GatewayServer
import Synchronization
import Testing

@Suite("deadlines of inner calls")
struct CallDeadlinesTests {
    @Test("deadlines expire in their order, whatever order they were set in; removed ones never expire")
    func order() async throws {
        let deadlines = CallDeadlines()
        let fired = Lines()  // names, in the order their deadlines expired
        let start = ContinuousClock.now
        // Later first, then an earlier one (the sleep is set again), then equal ones (in the order set).
        deadlines.schedule(at: start + .milliseconds(2_500)) { fired.append("c") }
        deadlines.schedule(at: start + .milliseconds(1_000)) { fired.append("a") }
        let removed = deadlines.schedule(at: start + .milliseconds(1_500)) { fired.append("removed") }
        deadlines.schedule(at: start + .milliseconds(1_800)) { fired.append("b1") }
        deadlines.schedule(at: start + .milliseconds(1_800)) { fired.append("b2") }
        deadlines.cancel(removed)
        #expect(deadlines.pending == 4)
        try await Task.sleep(for: .milliseconds(50))
        #expect(fired.all.isEmpty, "nothing expires early")
        let deadline = ContinuousClock.now + .seconds(30)
        while fired.all.count < 4 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(fired.all == ["a", "b1", "b2", "c"])
        #expect(ContinuousClock.now - start >= .milliseconds(2_500))
        #expect(deadlines.pending == 0)
        // Set again after the list emptied: the sleep starts again.
        deadlines.schedule(at: .now + .milliseconds(10)) { fired.append("again") }
        while fired.all.count < 5 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(fired.all.last == "again")
    }

    @Test("a call answers with its outcome before its deadline, with the expired outcome after it (cancelled), and many at once keep none behind")
    func timedCalls() async throws {
        let deadlines = CallDeadlines()
        let quick = await TimedCall.run(timeout: .seconds(10), deadlines: deadlines, expired: { "expired" }) { "done" }
        #expect(quick == "done")
        #expect(deadlines.pending == 0, "a call that ended removed its deadline")

        // A call past its deadline is answered at once and its task cancelled.
        let sawCancel = Mutex(false)
        let started = ContinuousClock.now
        let slow = await TimedCall.run(timeout: .milliseconds(100), deadlines: deadlines, expired: { "expired" }) {
            do { try await Task.sleep(for: .seconds(20)) } catch { sawCancel.withLock { $0 = true } }
            return "done"
        }
        #expect(slow == "expired")
        #expect(ContinuousClock.now - started < .seconds(15))
        let deadline = ContinuousClock.now + .seconds(30)
        while !sawCancel.withLock({ $0 }) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(sawCancel.withLock { $0 }, "the expired call's task was cancelled")

        // A call that ignores cancellation is still answered at its deadline.
        let stubborn = await TimedCall.run(timeout: .milliseconds(50), deadlines: deadlines, expired: { "expired" }) {
            let until = ContinuousClock.now + .seconds(3)
            while ContinuousClock.now < until { try? await Task.sleep(for: .milliseconds(50)) }
            return "done"
        }
        #expect(stubborn == "expired")

        // Many at once, half of them past their deadline.
        let outcomes = await withTaskGroup(of: String.self) { group in
            for index in 0..<400 {
                group.addTask {
                    await TimedCall.run(timeout: .milliseconds(index.isMultiple(of: 2) ? 20_000 : 30), deadlines: deadlines, expired: { "expired" }) {
                        if index.isMultiple(of: 2) { return "done" }
                        try? await Task.sleep(for: .seconds(20))
                        return "late"
                    }
                }
            }
            var outcomes: [String] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        #expect(outcomes.filter { $0 == "done" }.count == 200)
        #expect(outcomes.filter { $0 == "expired" }.count == 200)
        #expect(deadlines.pending == 0)
    }

    @Test("cancelling the caller cancels the call, whose own outcome is returned")
    func cancelled() async throws {
        let deadlines = CallDeadlines()
        let task = Task {
            await TimedCall.run(timeout: .seconds(20), deadlines: deadlines, expired: { "expired" }) {
                do { try await Task.sleep(for: .seconds(20)); return "done" } catch { return "cancelled" }
            }
        }
        try await Task.sleep(for: .milliseconds(50))
        task.cancel()
        #expect(await task.value == "cancelled")
        #expect(deadlines.pending == 0)
        // Cancelled before it started: the call's task is cancelled as soon as it exists.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await TimedCall.run(timeout: .seconds(20), deadlines: deadlines, expired: { "expired" }) {
                do { try await Task.sleep(for: .seconds(20)); return "done" } catch { return "cancelled" }
            }
        }
        #expect(await early.value == "cancelled")
    }
}
