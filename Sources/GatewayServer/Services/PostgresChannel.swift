import Foundation
import GatewayCore
import Logging
import NIOConcurrencyHelpers
import PostgresKit
import ServiceLifecycle
import SQLKit
import Synchronization

/// Carries messages between gateway instances that share one PostgreSQL database, over
/// `LISTEN` / `NOTIFY` on one channel (`gateway_cache` for cache invalidations, `gateway_events`
/// for the event bus).
///
/// ``publish(_:)`` sends a message to the other instances; ``run()`` (a service in the gateway's
/// group) listens on its own connection and hands every other instance's message to the receiver,
/// ignoring its own. A lost connection is re-established with backoff; messages sent during the
/// gap are lost to this instance (cached entries then live at most their TTL; live subscribers
/// miss those changes).
final class PostgresChannel: Service, Sendable {
    /// The largest message: a NOTIFY payload holds at most 8000 bytes, less the sender's id.
    static let maximumMessageBytes = 7_900
    let channel: String
    let url: String
    let database: any SQLDatabase
    let logger: Logger
    let instanceID = UUID().uuidString
    private let receiver = NIOLockedValueBox<StoredClosure<@Sendable (String) -> Void>?>(nil)
    private let listening = NIOLockedValueBox(false)
    /// Messages published while one is being sent go in one statement: every request that changes
    /// something publishes (a cache invalidation, an event), and a statement each would be a
    /// round trip and a transaction each.
    private let sender: WriteCombiner<Int, String>
    /// Numbers this instance's messages, so that two equal messages sent in one statement stay two
    /// (PostgreSQL delivers a payload sent twice in one transaction once).
    private let sequence = Atomic<UInt64>(0)

    init(channel: String, url: String, database: any SQLDatabase, logger: Logger) {
        self.channel = channel
        self.url = url
        self.database = database
        self.logger = logger
        sender = WriteCombiner(maxItems: 64) { _, messages in
            var query: SQLQueryString = "SELECT "
            for (index, message) in messages.enumerated() {
                query += (index == 0 ? "" : ", ") + "pg_notify(\(bind: channel), \(bind: message))"
            }
            try await database.raw(query).run()
        }
    }

    /// Sets what receives the other instances' messages.
    func onMessage(_ receive: @escaping @Sendable (String) -> Void) {
        receiver.withLockedValue { $0 = StoredClosure(receive) }
    }

    /// Whether the listener is connected (for tests and health).
    var isListening: Bool { listening.withLockedValue { $0 } }

    /// Sends `message` (at most ``maximumMessageBytes``) to the other instances; false when it could not.
    @discardableResult
    func publish(_ message: String) async -> Bool {
        guard message.utf8.count <= Self.maximumMessageBytes else {
            logger.warning("a message is too large for the other instances", metadata: ["channel": "\(channel)", "bytes": "\(message.utf8.count)"])
            return false
        }
        do {
            let number = sequence.add(1, ordering: .relaxed).newValue
            try await sender.submit("\(instanceID) \(number)\n\(message)", key: 0)
            return true
        } catch {
            logger.warning("could not publish to the other instances", metadata: ["channel": "\(channel)", "error": "\(error)"])
            return false
        }
    }

    func run() async throws {
        var delay = Duration.milliseconds(100)
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let configuration = try SQLPostgresConfiguration(url: url).coreConfiguration
                let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
                defer { Task { try? await connection.close() } }
                try await cancelWhenGracefulShutdown {
                    try await connection.listen(on: self.channel) { notifications in
                        self.listening.withLockedValue { $0 = true }
                        for try await notification in notifications {
                            let parts = notification.payload.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
                            // `sender number`: this instance's own messages are not for it.
                            guard parts.count == 2, parts[0].prefix(while: { $0 != " " }) != self.instanceID else { continue }
                            self.receiver.withLockedValue { $0 }?.call(String(parts[1]))
                        }
                    }
                }
            } catch {
                // A connection that worked for a while starts the backoff over.
                if listening.withLockedValue({ $0 }) { delay = .milliseconds(100) }
                listening.withLockedValue { $0 = false }
                if Task.isShuttingDownGracefully || Task.isCancelled { break }
                logger.warning("a listener between instances lost its connection; reconnecting", metadata: ["channel": "\(channel)", "error": "\(error)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(10))
            }
        }
        listening.withLockedValue { $0 = false }
    }
}
