import GatewayCore
import NIOConcurrencyHelpers

/// The gateway's response cache: in memory, least-recently-used, bounded by entry count and by
/// bytes, with an index from tag to entries so that a write purges exactly what it invalidates.
///
/// Guarantees: never holds more than ``maxEntries`` entries or ``maxBytes`` bytes of bodies; never
/// returns an entry whose TTL has passed; after ``invalidate(tags:)`` returns, no entry carrying
/// one of the tags is served. Invalidations are also handed to ``broadcast`` (when set) so other
/// instances can purge theirs.
public final class MemoryResponseCache: ResponseCacheStore {
    public let maxEntries: Int
    public let maxBytes: Int

    private final class Node {
        let key: String
        let reply: CachedReply
        let size: Int
        var newer: Node?
        var older: Node?
        init(key: String, reply: CachedReply, size: Int) {
            self.key = key
            self.reply = reply
            self.size = size
        }
    }

    private struct State {
        var nodes: [String: Node] = [:]
        var newest: Node?
        var oldest: Node?
        var bytes = 0
        var tagIndex: [String: Set<String>] = [:]
        var hits = 0
        var misses = 0
        var evictions = 0

        mutating func unlink(_ node: Node) {
            if let newer = node.newer { newer.older = node.older } else { newest = node.older }
            if let older = node.older { older.newer = node.newer } else { oldest = node.newer }
            node.newer = nil
            node.older = nil
        }

        mutating func pushNewest(_ node: Node) {
            node.older = newest
            node.newer = nil
            newest?.newer = node
            newest = node
            if oldest == nil { oldest = node }
        }

        mutating func remove(_ key: String) {
            guard let node = nodes.removeValue(forKey: key) else { return }
            unlink(node)
            bytes -= node.size
            for tag in node.reply.tags {
                tagIndex[tag]?.remove(key)
                if tagIndex[tag]?.isEmpty == true { tagIndex[tag] = nil }
            }
        }
    }

    // The linked nodes are only touched under the lock.
    private let state: NIOLockedValueBox<UnsafeTransfer<State>>

    /// Receives every invalidation made on this instance (to pass on to other instances).
    public let broadcast: (@Sendable ([String]) async -> Void)?

    public init(maxEntries: Int, maxBytes: Int, broadcast: (@Sendable ([String]) async -> Void)? = nil) {
        self.maxEntries = max(0, maxEntries)
        self.maxBytes = max(0, maxBytes)
        self.broadcast = broadcast
        self.state = NIOLockedValueBox(UnsafeTransfer(State()))
    }

    public func lookup(_ key: String) async -> CachedReply? {
        let now = ContinuousClock.now
        return state.withLockedValue { box in
            guard let node = box.wrappedValue.nodes[key] else {
                box.wrappedValue.misses += 1
                return nil
            }
            if now - node.reply.storedAt >= node.reply.ttl {
                box.wrappedValue.remove(key)
                box.wrappedValue.misses += 1
                return nil
            }
            box.wrappedValue.unlink(node)
            box.wrappedValue.pushNewest(node)
            box.wrappedValue.hits += 1
            return node.reply
        }
    }

    public func store(_ key: String, _ reply: CachedReply) async {
        let size = reply.body.count + key.utf8.count + reply.headers.reduce(0) { $0 + $1.name.rawName.utf8.count + $1.value.utf8.count } + 64
        // One reply may not take more than an eighth of the cache: it would evict everything else.
        guard maxEntries > 0, size <= maxBytes / 8 else { return }
        state.withLockedValue { box in
            box.wrappedValue.remove(key)
            let node = Node(key: key, reply: reply, size: size)
            box.wrappedValue.nodes[key] = node
            box.wrappedValue.pushNewest(node)
            box.wrappedValue.bytes += size
            for tag in reply.tags { box.wrappedValue.tagIndex[tag, default: []].insert(key) }
            while box.wrappedValue.nodes.count > maxEntries || box.wrappedValue.bytes > maxBytes, let oldest = box.wrappedValue.oldest {
                box.wrappedValue.remove(oldest.key)
                box.wrappedValue.evictions += 1
            }
        }
    }

    public func invalidate(tags: [String]) async {
        purgeLocally(tags: tags)
        await broadcast?(tags)
    }

    /// Purges entries carrying any of `tags` on this instance only (what a broadcast receiver calls).
    public func purgeLocally(tags: [String]) {
        state.withLockedValue { box in
            if tags.contains(ResponseCacheTags.all) {
                // Emptied, its counts kept (they only ever grow).
                var fresh = State()
                (fresh.hits, fresh.misses, fresh.evictions) = (box.wrappedValue.hits, box.wrappedValue.misses, box.wrappedValue.evictions)
                box.wrappedValue = fresh
                return
            }
            for tag in tags {
                for key in box.wrappedValue.tagIndex[tag] ?? [] { box.wrappedValue.remove(key) }
            }
        }
    }

    /// Entry count, body bytes, and hits, misses and evictions so far.
    public var statistics: (entries: Int, bytes: Int, hits: Int, misses: Int, evictions: Int) {
        state.withLockedValue { ($0.wrappedValue.nodes.count, $0.wrappedValue.bytes, $0.wrappedValue.hits, $0.wrappedValue.misses, $0.wrappedValue.evictions) }
    }
}

/// Moves a non-Sendable value into a lock; only ever accessed while the lock is held.
struct UnsafeTransfer<Value>: @unchecked Sendable {
    var wrappedValue: Value
    init(_ value: Value) { wrappedValue = value }
}
