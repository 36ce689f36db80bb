import Synchronization

/// The deadlines of inner calls (a composite's steps), kept by one sleeping task for all of them.
///
/// A timer of its own per call (a `Task.sleep` in a child task, a timer set on the system's queue
/// and cancelled when the call ends) costs two more tasks and a wake-up of another thread for each
/// call. Here a deadline is an entry in a sorted list: setting one that is not the earliest, and
/// removing one, take a lock and no thread; the one sleeping task wakes at the earliest deadline,
/// expires what is due and sleeps until the next. With equal timeouts each new deadline goes last,
/// so the sleep is set again only when the earliest expires or the list was empty.
final class CallDeadlines: Sendable {
    static let shared = CallDeadlines()

    /// What ``schedule(at:_:)`` returns, to remove the deadline before it expires.
    struct Token: Sendable {
        fileprivate let deadline: ContinuousClock.Instant
        fileprivate let id: UInt64
    }

    private struct Entry {
        let deadline: ContinuousClock.Instant
        let id: UInt64
        let expire: @Sendable () -> Void

        func precedes(_ deadline: ContinuousClock.Instant, _ id: UInt64) -> Bool {
            self.deadline < deadline || (self.deadline == deadline && self.id < id)
        }
    }

    private struct State {
        /// By deadline, then by the order they were set.
        var entries: [Entry] = []
        var nextID: UInt64 = 0
        /// When the sleeping task wakes (nil: none sleeps).
        var wakesAt: ContinuousClock.Instant?
        var sleeper: Task<Void, Never>?
    }

    private let state = Mutex(State())

    /// Calls `expire` once `deadline` has passed, unless ``cancel(_:)`` removed it first.
    @discardableResult
    func schedule(at deadline: ContinuousClock.Instant, _ expire: @escaping @Sendable () -> Void) -> Token {
        state.withLock { state in
            let id = state.nextID
            state.nextID &+= 1
            // Found from the end: with equal timeouts the newest deadline is the latest.
            var index = state.entries.endIndex
            while index > state.entries.startIndex, !state.entries[index - 1].precedes(deadline, id) { index -= 1 }
            state.entries.insert(Entry(deadline: deadline, id: id, expire: expire), at: index)
            if state.wakesAt.map({ deadline < $0 }) ?? true { arm(&state, at: deadline) }
            return Token(deadline: deadline, id: id)
        }
    }

    /// Removes a deadline that has not expired (nothing happens if it has).
    func cancel(_ token: Token) {
        state.withLock { state in
            // The first entry not before the token's: it, if it is still there.
            var low = state.entries.startIndex, high = state.entries.endIndex
            while low < high {
                let middle = (low + high) / 2
                if state.entries[middle].precedes(token.deadline, token.id) { low = middle + 1 } else { high = middle }
            }
            if low < state.entries.endIndex, state.entries[low].id == token.id { state.entries.remove(at: low) }
        }
    }

    /// Deadlines set and not yet expired or removed.
    var pending: Int { state.withLock { $0.entries.count } }

    /// The sleeping task, set to wake at `deadline` (one sleeping for a later time is cancelled).
    private func arm(_ state: inout State, at deadline: ContinuousClock.Instant) {
        state.sleeper?.cancel()
        state.wakesAt = deadline
        // Detached: the sleeper outlives the call that set it, and keeps none of its task-local values.
        state.sleeper = Task.detached { [weak self] in
            do { try await Task.sleep(until: deadline, clock: .continuous) } catch { return }
            self?.expireDue(woken: deadline)
        }
    }

    /// Expires every deadline that has passed and sets the sleep for the next.
    private func expireDue(woken deadline: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        let due = state.withLock { state -> [Entry] in
            // A sleeper replaced after it woke has nothing more to do.
            guard state.wakesAt == deadline else { return [] }
            let count = state.entries.prefix { $0.deadline <= now }.count
            let due = Array(state.entries.prefix(count))
            state.entries.removeFirst(count)
            state.sleeper = nil
            state.wakesAt = nil
            if let next = state.entries.first { arm(&state, at: next.deadline) }
            return due
        }
        for entry in due { entry.expire() }
    }
}

/// One call that ends with its own outcome or, at its deadline, with another: whichever comes
/// first resumes the waiting caller; the deadline also cancels the call's task.
final class TimedCall<Outcome: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Outcome, Never>?
        var task: Task<Void, Never>?
        var cancelled = false
    }

    private let state = Mutex(State())

    /// Runs `body` in a task of its own and returns its outcome, or `expired` once `timeout` has
    /// passed (the task is then cancelled and left to end on its own). Cancelling the caller
    /// cancels the task, whose outcome is then returned.
    static func run(timeout: Duration, deadlines: CallDeadlines = .shared, expired: @escaping @Sendable () -> Outcome,
                    _ body: @escaping @Sendable () async -> Outcome) async -> Outcome {
        let call = TimedCall()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                call.state.withLock { $0.continuation = continuation }
                let token = deadlines.schedule(at: .now + timeout) { call.finish(expired(), cancelling: true) }
                let task = Task {
                    let outcome = await body()
                    deadlines.cancel(token)
                    call.finish(outcome, cancelling: false)
                }
                call.attach(task)
            }
        } onCancel: {
            call.cancelTask()
        }
    }

    private func attach(_ task: Task<Void, Never>) {
        let cancel = state.withLock { state -> Bool in
            state.task = task
            return state.cancelled
        }
        if cancel { task.cancel() }
    }

    private func finish(_ outcome: Outcome, cancelling: Bool) {
        let (continuation, task) = state.withLock { state -> (CheckedContinuation<Outcome, Never>?, Task<Void, Never>?) in
            defer { state.continuation = nil }
            guard state.continuation != nil else { return (nil, nil) }
            if cancelling { state.cancelled = true }
            return (state.continuation, cancelling ? state.task : nil)
        }
        task?.cancel()
        continuation?.resume(returning: outcome)
    }

    private func cancelTask() {
        let task = state.withLock { state -> Task<Void, Never>? in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }
}
