import Synchronization

/// Group commit for a plugin's hottest write: writes of one key that arrive while an earlier one of
/// that key is running wait for it and then go to the database together, in one call of `write`
/// (one statement, one transaction), instead of one round trip and one commit each.
///
/// A write that finds nothing running for its key runs at once, alone, so an idle server answers
/// as fast as without the combiner; batches form only under concurrent load, where they save the
/// most. Items keep their arrival order within a batch (a later item may override an earlier one).
///
/// Failure stays per item: when a combined write fails, every item of it is written again on its
/// own (concurrently, outside the combiner), so one bad item fails only its own request and the
/// others succeed as they would have without combining. `write` must therefore be all-or-nothing
/// (a single statement, or a transaction).
///
/// On SQLite the gateway's single writer already commits concurrent statements together; the
/// combiner pays off on PostgreSQL, where every statement is a round trip and every transaction a
/// commit of its own. Use one combiner per kind of write and keep it for the plugin's life.
public final class WriteCombiner<Key: Hashable & Sendable, Item: Sendable>: Sendable {
    /// What a waiting item is told when its turn comes.
    private enum Turn: Sendable {
        /// Write these (the item's own first, then the others, which wait for the outcome).
        case lead([Waiter])
        /// Written as part of another item's batch.
        case written
        /// The batch failed: write the item alone.
        case alone
    }

    private struct Waiter: Sendable {
        let item: Item
        let continuation: CheckedContinuation<Turn, Never>
    }

    private struct Group {
        var queue: [Waiter] = []
    }

    private let groups = Mutex<[Key: Group]>([:])
    private let maxItems: Int
    private let write: @Sendable (Key, [Item]) async throws -> Void

    /// - Parameters:
    ///   - maxItems: the most items in one call of `write` (at least 1).
    ///   - write: writes the items of one key, all or none, in their order.
    public init(maxItems: Int, write: @escaping @Sendable (Key, [Item]) async throws -> Void) {
        self.maxItems = max(1, maxItems)
        self.write = write
    }

    /// Writes `item` under `key`, alone or with others that arrive meanwhile; returns once it is
    /// written, and throws the error of writing it (alone, when a combined write failed).
    public func submit(_ item: Item, key: Key) async throws {
        let turn: Turn = await withCheckedContinuation { continuation in
            let leads = groups.withLock { groups -> Bool in
                if groups[key] != nil {
                    groups[key]!.queue.append(Waiter(item: item, continuation: continuation))
                    return false
                }
                groups[key] = Group()
                return true
            }
            if leads { continuation.resume(returning: .lead([])) }
        }
        switch turn {
        case .written:
            return
        case .alone:
            try await write(key, [item])
        case .lead(let others):
            do {
                try await write(key, [item] + others.map(\.item))
            } catch {
                handOver(key)
                guard !others.isEmpty else { throw error }
                for other in others { other.continuation.resume(returning: .alone) }
                try await write(key, [item])
                return
            }
            handOver(key)
            for other in others { other.continuation.resume(returning: .written) }
        }
    }

    /// How many writes of `key` wait for the one running (for tests and diagnostics).
    public func waiting(for key: Key) -> Int {
        groups.withLock { $0[key]?.queue.count ?? 0 }
    }

    /// Gives the key's turn to the first waiting item with those queued behind it, or ends the turn.
    private func handOver(_ key: Key) {
        let batch: [Waiter]? = groups.withLock { groups in
            guard var group = groups[key], !group.queue.isEmpty else {
                groups[key] = nil
                return nil
            }
            let count = min(group.queue.count, maxItems)
            let batch = Array(group.queue.prefix(count))
            group.queue.removeFirst(count)
            groups[key] = group
            return batch
        }
        guard let batch, let first = batch.first else { return }
        first.continuation.resume(returning: .lead(Array(batch.dropFirst())))
    }
}
