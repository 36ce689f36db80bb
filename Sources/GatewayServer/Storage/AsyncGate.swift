import Dispatch
import Synchronization

/// A counting semaphore with callbacks: at most `width` holders at a time, the others wait in
/// order, each for at most its timeout.
///
/// A waiter hears that it holds a place through a callback that the ``leave()`` freeing the place
/// sends to a dispatch queue, not by resuming a task: a place handed on never sits idle while the
/// next holder waits for one of Swift's cooperative threads (and a callback that gives its place
/// back at once, as reads do on a closed pool, does not recurse through the waiters). SQLite's
/// readers and its one writer are reached through gates (``SQLiteStore``): GRDB's own pool waits
/// without a timeout, so the gate in front of it is what answers `database.acquireTimeout`, and
/// under load (thousands of tasks queued for two cooperative threads) a reader stays busy as long
/// as reads are waiting.
final class AsyncGate: Sendable {
    private struct Waiter {
        let id: UInt64
        let granted: @Sendable () -> Void
        /// The task that ends the wait at its timeout (cancelled when the place comes first).
        var timer: Task<Void, Never>?
    }

    private struct State {
        var free: Int
        var waiting: [Waiter] = []
        var nextID: UInt64 = 0
    }

    private let state: Mutex<State>

    init(width: Int) {
        state = Mutex(State(free: max(1, width)))
    }

    /// Calls `granted` once a place is held: at once (here) when one is free, else on a dispatch
    /// queue when a ``leave()`` frees one. With a `timeout`, `timedOut` is called instead (and
    /// `granted` never) when no place came free in time. Every `granted` is paired with one
    /// ``leave()``.
    func enter(timeout: Duration? = nil, timedOut: @escaping @Sendable () -> Void = {}, granted: @escaping @Sendable () -> Void) {
        let id = state.withLock { state -> UInt64? in
            if state.free > 0 {
                state.free -= 1
                return nil
            }
            state.nextID += 1
            state.waiting.append(Waiter(id: state.nextID, granted: granted))
            return state.nextID
        }
        guard let id else {
            granted()
            return
        }
        guard let timeout else { return }
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            let expired = self?.state.withLock { state -> Bool in
                guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return false }
                state.waiting.remove(at: index)
                return true
            }
            if expired == true { timedOut() }
        }
        let stillWaiting = state.withLock { state in
            guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return false }
            state.waiting[index].timer = timer
            return true
        }
        if !stillWaiting { timer.cancel() }
    }

    /// Waits for a place, as long as it takes.
    func enter() async {
        await withCheckedContinuation { continuation in
            enter { continuation.resume() }
        }
    }

    /// Gives the place back: to the longest waiter (its callback sent to a dispatch queue), or to the gate.
    func leave() {
        let next = state.withLock { state -> Waiter? in
            guard !state.waiting.isEmpty else {
                state.free += 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        guard let next else { return }
        next.timer?.cancel()
        DispatchQueue.global().async(execute: next.granted)
    }
}
