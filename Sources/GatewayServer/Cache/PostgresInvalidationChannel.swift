import Foundation
import GatewayCore
import Logging
import NIOConcurrencyHelpers
import PostgresKit
import ServiceLifecycle
import SQLKit

/// Carries cache invalidations between gateway instances that share one PostgreSQL database,
/// over `LISTEN` / `NOTIFY` on the channel `gateway_cache`.
///
/// ``publish(_:)`` sends the tags an instance purged; ``run()`` (a service in the gateway's group)
/// listens on its own connection and purges the same tags from this instance's cache, ignoring its
/// own messages. A lost connection is re-established with backoff; during the gap an instance may
/// serve entries another purged, for at most their TTL.
final class PostgresInvalidationChannel: Service, Sendable {
    static let channel = "gateway_cache"
    let url: String
    let database: any SQLDatabase
    let logger: Logger
    let instanceID = UUID().uuidString
    private let target = NIOLockedValueBox<MemoryResponseCache?>(nil)
    private let listening = NIOLockedValueBox(false)

    init(url: String, database: any SQLDatabase, logger: Logger) {
        self.url = url
        self.database = database
        self.logger = logger
    }

    /// The cache that receives other instances' invalidations.
    func attach(_ cache: MemoryResponseCache) {
        target.withLockedValue { $0 = cache }
    }

    /// Whether the listener is connected (for tests and health).
    var isListening: Bool { listening.withLockedValue { $0 } }

    func publish(_ tags: [String]) async {
        // A NOTIFY payload is limited to 8000 bytes: send large purges in several messages.
        var batch: [String] = []
        var size = 0
        func flush() async {
            guard !batch.isEmpty else { return }
            let payload = instanceID + "\n" + batch.joined(separator: "\n")
            do {
                try await database.raw("SELECT pg_notify(\(bind: Self.channel), \(bind: payload))").run()
            } catch {
                logger.warning("could not publish a cache invalidation", metadata: ["error": "\(error)"])
            }
            batch.removeAll()
            size = 0
        }
        for tag in tags where tag.utf8.count < 4000 {
            if size + tag.utf8.count > 7000 { await flush() }
            batch.append(tag)
            size += tag.utf8.count + 1
        }
        await flush()
    }

    func run() async throws {
        var delay = Duration.milliseconds(100)
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let configuration = try SQLPostgresConfiguration(url: url).coreConfiguration
                let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
                defer { Task { try? await connection.close() } }
                try await cancelWhenGracefulShutdown {
                    try await connection.listen(on: Self.channel) { notifications in
                        self.listening.withLockedValue { $0 = true }
                        for try await notification in notifications {
                            let lines = notification.payload.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                            guard let sender = lines.first, sender != self.instanceID else { continue }
                            self.target.withLockedValue { $0 }?.purgeLocally(tags: Array(lines.dropFirst()))
                        }
                    }
                }
            } catch {
                // A connection that worked for a while starts the backoff over.
                if listening.withLockedValue({ $0 }) { delay = .milliseconds(100) }
                listening.withLockedValue { $0 = false }
                if Task.isShuttingDownGracefully || Task.isCancelled { break }
                logger.warning("cache invalidation listener lost its connection; reconnecting", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(10))
            }
        }
        listening.withLockedValue { $0 = false }
    }
}
