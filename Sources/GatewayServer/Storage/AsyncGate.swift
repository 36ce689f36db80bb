import Synchronization

/// A counting semaphore for tasks: at most `width` holders at a time, the others wait in order,
/// each for at most its timeout. Entering a free gate does not suspend.
///
/// SQLite's readers and its one writer are reached through gates (``SQLiteStore``): GRDB's own
/// pool waits without a timeout, so the gate in front of it is what answers
/// `database.acquireTimeout`.
final class AsyncGate: Sendable {
    private struct Waiter {
        let id: UInt64
        let grant: Grant
        /// The task that ends the wait at its timeout (cancelled when the place comes first).
        var timer: Task<Void, Never>?
    }

    /// How a waiter hears that it holds a place.
    private enum Grant {
        case task(CheckedContinuation<Void, any Error>)
        case callback(@Sendable () -> Void)

        func give() {
            switch self {
            case .task(let continuation): continuation.resume()
            case .callback(let callback): callback()
            }
        }
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

    /// Waits for a place, for at most `timeout` (nil: as long as it takes); throws `timedOut` when
    /// none came free in time. Every successful `enter` is paired with one ``leave()``.
    func enter(timeout: Duration?, timedOut: @autoclosure @escaping @Sendable () -> any Error) async throws {
        let isFree = state.withLock { state in
            guard state.free > 0 else { return false }
            state.free -= 1
            return true
        }
        guard !isFree else { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            // Looked at again under the same lock as the queueing: a place given back meanwhile is taken.
            let id = state.withLock { state -> UInt64? in
                if state.free > 0 {
                    state.free -= 1
                    return nil
                }
                state.nextID += 1
                state.waiting.append(Waiter(id: state.nextID, grant: .task(continuation)))
                return state.nextID
            }
            guard let id else {
                continuation.resume()
                return
            }
            guard let timeout else { return }
            let timer = Task { [weak self] in
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                let expired = self?.state.withLock { state -> Waiter? in
                    guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return nil }
                    return state.waiting.remove(at: index)
                }
                if case .task(let continuation) = expired?.grant { continuation.resume(throwing: timedOut()) }
            }
            let stillWaiting = state.withLock { state in
                guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return false }
                state.waiting[index].timer = timer
                return true
            }
            if !stillWaiting { timer.cancel() }
        }
    }

    /// Calls `granted` once a place is held (at once when one is free, else from the ``leave()``
    /// that frees it), without a task: for work that runs on threads of its own.
    func enter(then granted: @escaping @Sendable () -> Void) {
        let isFree = state.withLock { state in
            if state.free > 0 {
                state.free -= 1
                return true
            }
            state.nextID += 1
            state.waiting.append(Waiter(id: state.nextID, grant: .callback(granted)))
            return false
        }
        if isFree { granted() }
    }

    /// Gives the place back: to the longest waiter, or to the gate.
    func leave() {
        let next = state.withLock { state -> Waiter? in
            guard !state.waiting.isEmpty else {
                state.free += 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.timer?.cancel()
        next?.grant.give()
    }
}
