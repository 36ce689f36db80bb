import Foundation
import GatewayCore
import Synchronization

/// The plugin's live state: the network every query reads, and each feed's last good realtime
/// message resolved against it. Both are swapped whole; a query takes one consistent ``TransitView``.
final class TransitRuntime: Sendable {
    struct RealtimeFeed: Sendable {
        var message: Data?
        var receivedAt: Int64?
        var status = RealtimeStatus(tripUpdates: 0, unknownTrips: 0, unmatchedStops: 0)
    }

    private struct State: Sendable {
        var network = TransitNetwork.empty
        var realtime = RealtimeIndex.empty
        var feeds: [String: RealtimeFeed] = [:]
        /// Reloads started, and the newest one whose network is in place.
        var started = 0
        var applied = 0
    }

    let store: TransitStore
    let clock: any WallClock
    private let state = Mutex(State())

    init(store: TransitStore, clock: any WallClock) {
        self.store = store
        self.clock = clock
    }

    func view() -> TransitView {
        state.withLock { TransitView(network: $0.network, realtime: $0.realtime) }
    }

    var network: TransitNetwork { state.withLock { $0.network } }

    func now() -> Int64 { Int64(clock.now().timeIntervalSince1970.rounded(.down)) }

    /// Reads the served feeds from the database and swaps the network in, realtime data re-resolved.
    /// A reload that started later (and so read later data) is never replaced by an earlier one.
    func reload() async throws {
        let generation = state.withLock { state in
            state.started += 1
            return state.started
        }
        let network = try await store.loadNetwork()
        state.withLock { state in
            guard generation > state.applied else { return }
            state.applied = generation
            state.network = network
            state.realtime = Self.index(state.feeds, network: network, statuses: &state.feeds)
        }
    }

    /// Takes a GTFS-realtime message for `feed`: the new last good message when it reads, otherwise
    /// an error kept in the feed's status (the previous message stays in use).
    @discardableResult
    func applyRealtime(feed: String, message: Data, receivedAt: Int64? = nil) throws -> RealtimeStatus {
        let received = receivedAt ?? now()
        do {
            let network = self.network
            guard let feedIndex = network.feeds.firstIndex(where: { $0.id == feed }) else {
                throw GatewayError.notFound("No feed '\(feed)' is served: import its schedule first.")
            }
            let decoded = try RealtimeDecoder.decode(message, feed: Int32(feedIndex), network: network)
            return state.withLock { state in
                var entry = state.feeds[feed] ?? RealtimeFeed()
                entry.message = message
                entry.receivedAt = received
                entry.status = decoded.status
                entry.status.receivedAt = Date(timeIntervalSince1970: Double(received))
                state.feeds[feed] = entry
                if state.network === network {
                    var index = state.realtime
                    index.predictions = index.predictions.filter { network.routes[Int(network.trips[Int($0.key.trip)].route)].feed != Int32(feedIndex) }
                    for (prediction, delay) in decoded.predictions { index.add(prediction, delay: delay) }
                    state.realtime = index
                } else {
                    state.realtime = Self.index(state.feeds, network: state.network, statuses: &state.feeds)
                }
                return entry.status
            }
        } catch let error as RealtimeDecoder.Failure {
            recordFailure(feed: feed, "unreadable GTFS-realtime message: " + error.message)
            throw GatewayError.invalid(field: "/", "is not a readable GTFS-realtime FeedMessage: \(error.message)")
        }
    }

    /// Records a failed fetch or an unreadable message; the last good message stays in use.
    /// Takes a message received here (polled, or posted to this instance) and stores it for every
    /// instance of the cluster; an unreadable one is refused before anything is stored.
    @discardableResult
    func receiveRealtime(feed: String, message: Data) async throws -> RealtimeStatus {
        let received = now()
        let status = try applyRealtime(feed: feed, message: message, receivedAt: received)
        try await store.saveRealtime(feed: feed, message: message, receivedAt: received)
        return status
    }

    /// Applies the messages other instances stored since this one last looked; true when any was new.
    @discardableResult
    func syncRealtime() async throws -> Bool {
        var applied = false
        for record in try await store.realtimeRecords() where realtimeReceivedAt(record.feed).map({ $0 < record.receivedAt }) ?? true {
            guard network.feeds.contains(where: { $0.id == record.feed }),
                  let stored = try await store.realtimeMessage(feed: record.feed) else { continue }
            _ = try? applyRealtime(feed: record.feed, message: stored.message, receivedAt: stored.receivedAt)
            applied = true
        }
        return applied
    }

    func recordFailure(feed: String, _ message: String) {
        let at = now()
        state.withLock { state in
            var entry = state.feeds[feed] ?? RealtimeFeed()
            entry.status.lastError = message
            entry.status.lastErrorAt = Date(timeIntervalSince1970: Double(at))
            state.feeds[feed] = entry
        }
    }

    func realtimeStatus(_ feed: String) -> RealtimeStatus? {
        state.withLock { $0.feeds[feed]?.status }
    }

    func realtimeReceivedAt(_ feed: String) -> Int64? {
        state.withLock { $0.feeds[feed]?.receivedAt }
    }

    /// Every feed's last good message resolved against `network`.
    private static func index(_ feeds: [String: RealtimeFeed], network: TransitNetwork, statuses: inout [String: RealtimeFeed]) -> RealtimeIndex {
        var index = RealtimeIndex()
        for (feed, entry) in feeds {
            guard let message = entry.message, let feedIndex = network.feeds.firstIndex(where: { $0.id == feed }),
                  let decoded = try? RealtimeDecoder.decode(message, feed: Int32(feedIndex), network: network) else { continue }
            for (prediction, delay) in decoded.predictions { index.add(prediction, delay: delay) }
            var status = decoded.status
            status.receivedAt = entry.status.receivedAt
            status.lastError = entry.status.lastError
            status.lastErrorAt = entry.status.lastErrorAt
            statuses[feed]?.status = status
        }
        return index
    }
}
