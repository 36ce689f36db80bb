/// A closure kept behind a lock, in a class of its own. A function value stored in a `Mutex` (or
/// `NIOLockedValueBox`) and read with `withLock { $0 }` comes back wrapped in one more
/// reabstraction thunk on every read (Swift 6.3), so each call through it is slower than the last
/// (a statement timer read this way took a benchmark from 4,700 to 550 requests a second within
/// a minute). A class reference is read as it is.
final class StoredClosure<Function: Sendable>: Sendable {
    let call: Function

    init(_ call: Function) {
        self.call = call
    }
}
