import Foundation
import GatewayCore
import Logging
import NIOConcurrencyHelpers
import PostgresKit
import ServiceLifecycle
import SQLKit
import Synchronization

/// Carries messages between gateway instances that share one PostgreSQL database, over
/// `LISTEN` / `NOTIFY`, on named channels (`gateway_cache` for cache invalidations,
/// `gateway_events` for the event bus, …) made with ``channel(_:merging:)`` before it runs.
///
/// As a service in the gateway's group it listens on every channel over one connection
/// (PostgreSQL wakes each listening connection of the database for every notification, whatever
/// its channel: one connection for all channels costs the server a quarter of what a connection
/// per channel did) and hands every other instance's message to its channel's receiver, ignoring
/// this instance's own. A lost connection is re-established with backoff; messages sent during the
/// gap are lost to this instance (cached entries then live at most their TTL; live subscribers
/// miss those changes).
///
/// Messages of a channel published while others of it are being sent go together in one
/// statement: every request that changes something publishes (a cache invalidation, an event),
/// and a statement each would be a round trip and a transaction each.
final class PostgresMessaging: Service, Sendable {
    /// The largest message: a NOTIFY payload holds at most 8000 bytes, less the sender's id.
    static let maximumMessageBytes = 7_900
    let url: String
    let logger: Logger
    let instanceID: String
    private let registered = NIOLockedValueBox<[PostgresChannel]>([])
    private let outbox: Outbox

    init(url: String, database: any SQLDatabase, logger: Logger) {
        self.url = url
        self.logger = logger
        let instanceID = UUID().uuidString
        self.instanceID = instanceID
        outbox = Outbox(database: database, instanceID: instanceID, logger: logger)
    }

    /// A channel to publish on and receive from; make every channel before the service runs.
    /// - Parameter merging: whether equal messages published together may arrive once (cache
    ///   invalidations: purging a tag twice does what purging it once does). Concurrent writes to
    ///   one bucket all purge the same tag, so this spares the other instances most of the traffic.
    func channel(_ name: String, merging: Bool = false) -> PostgresChannel {
        let channel = PostgresChannel(name: name, merging: merging, outbox: outbox)
        registered.withLockedValue { $0.append(channel) }
        return channel
    }

    /// Whether every channel is being listened to (for tests and health).
    var isListening: Bool { registered.withLockedValue { $0 }.allSatisfy(\.isListening) }

    func run() async throws {
        let channels = registered.withLockedValue { $0 }
        func setListening(_ value: Bool) {
            for channel in channels { channel.listening.withLockedValue { $0 = value } }
        }
        var delay = Duration.milliseconds(100)
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let configuration = try SQLPostgresConfiguration(url: url).coreConfiguration
                let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
                defer { Task { try? await connection.close() } }
                try await cancelWhenGracefulShutdown {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for channel in channels {
                            group.addTask {
                                try await connection.listen(on: channel.name) { notifications in
                                    channel.listening.withLockedValue { $0 = true }
                                    for try await notification in notifications {
                                        channel.deliver(notification.payload)
                                    }
                                }
                            }
                        }
                        // One channel's listening ends only with the connection: start over.
                        try await group.next()
                        group.cancelAll()
                    }
                }
            } catch {
                // A connection that worked for a while starts the backoff over.
                if isListening { delay = .milliseconds(100) }
                setListening(false)
                if Task.isShuttingDownGracefully || Task.isCancelled { break }
                logger.warning("the listener between instances lost its connection; reconnecting", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(10))
            }
        }
        setListening(false)
    }
}

/// One named channel of ``PostgresMessaging``: ``publish(_:)`` sends a message to the other
/// instances, and the receiver set with ``onMessage(_:)`` gets theirs.
final class PostgresChannel: Sendable {
    let name: String
    let merging: Bool
    private let outbox: Outbox
    private let receiver = NIOLockedValueBox<StoredClosure<@Sendable (String) -> Void>?>(nil)
    fileprivate let listening = NIOLockedValueBox(false)

    fileprivate init(name: String, merging: Bool, outbox: Outbox) {
        self.name = name
        self.merging = merging
        self.outbox = outbox
    }

    /// Sets what receives the other instances' messages.
    func onMessage(_ receive: @escaping @Sendable (String) -> Void) {
        receiver.withLockedValue { $0 = StoredClosure(receive) }
    }

    /// Whether the listener is connected (for tests and health).
    var isListening: Bool { listening.withLockedValue { $0 } }

    /// Sends `message` (at most ``PostgresMessaging/maximumMessageBytes``) to the other instances; false when it could not.
    @discardableResult
    func publish(_ message: String) async -> Bool {
        guard message.utf8.count <= PostgresMessaging.maximumMessageBytes else {
            outbox.logger.warning("a message is too large for the other instances", metadata: ["channel": "\(name)", "bytes": "\(message.utf8.count)"])
            return false
        }
        do {
            try await outbox.send(message, on: name, merging: merging)
            return true
        } catch {
            outbox.logger.warning("could not publish to the other instances", metadata: ["channel": "\(name)", "error": "\(error)"])
            return false
        }
    }

    /// Hands a notification's payload (`sender number\nmessage`) to the receiver unless this instance sent it.
    fileprivate func deliver(_ payload: String) {
        let parts = payload.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].prefix(while: { $0 != " " }) != outbox.instanceID else { return }
        receiver.withLockedValue { $0 }?.call(String(parts[1]))
    }
}

/// What an instance sends: messages of a channel published while others of it are being sent go
/// together in one statement (channels send side by side: one request's cache invalidation does
/// not wait for another's event).
private final class Outbox: Sendable {
    let instanceID: String
    let logger: Logger
    private let sender: WriteCombiner<String, Outgoing>
    /// Numbers this instance's messages, so that two equal messages sent in one statement stay two
    /// (PostgreSQL delivers a payload sent twice in one transaction once).
    private let sequence = Atomic<UInt64>(0)

    private struct Outgoing: Sendable {
        let channel: String
        let number: UInt64
        let message: String
        let merging: Bool
    }

    init(database: any SQLDatabase, instanceID: String, logger: Logger) {
        self.instanceID = instanceID
        self.logger = logger
        sender = WriteCombiner(maxItems: 64) { _, messages in
            var merged = Set<[String]>()
            var query: SQLQueryString = "SELECT "
            var first = true
            for outgoing in messages where !outgoing.merging || merged.insert([outgoing.channel, outgoing.message]).inserted {
                query += (first ? "" : ", ") + "pg_notify(\(bind: outgoing.channel), \(bind: "\(instanceID) \(outgoing.number)\n\(outgoing.message)"))"
                first = false
            }
            try await database.raw(query).run()
        }
    }

    func send(_ message: String, on channel: String, merging: Bool) async throws {
        try await sender.submit(Outgoing(channel: channel, number: sequence.add(1, ordering: .relaxed).newValue, message: message, merging: merging), key: channel)
    }
}
