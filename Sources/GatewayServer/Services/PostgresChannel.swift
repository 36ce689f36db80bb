import Foundation
import GatewayCore
import GatewaySupport
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
    fileprivate let outbox: Outbox

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

    /// Runs `body` (the handling of one request) keeping what it publishes on any channel of this
    /// instance, and sends all of it together once `body` returns: a reply leaves after its
    /// messages have been sent, as when each was sent on its own, but in one statement.
    func collecting<Result>(_ body: () async throws -> Result) async rethrows -> Result {
        let pending = PendingMessages(outbox: outbox)
        let result: Result
        do {
            result = try await PendingMessages.$current.withValue(pending) { try await body() }
        } catch {
            await outbox.send(pending)
            throw error
        }
        await outbox.send(pending)
        return result
    }

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
    fileprivate let outbox: Outbox
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

/// What an instance sends. Messages published while a request is handled (inside
/// ``PostgresMessaging/collecting(_:)``) wait for the end of its handling and go together, before
/// its reply; messages published while others are being sent wait for that statement and go
/// together in the next one. A statement is a round trip, a commit, and a wake-up of every
/// listening connection on the database: a feeds ingest publishes three messages (its datastream's
/// event and two invalidations of its feed's tag), and sent one by one they cost PostgreSQL more than
/// the ingest itself.
fileprivate final class Outbox: Sendable {
    let instanceID: String
    let logger: Logger
    private let sender: WriteCombiner<Int, [Outgoing]>
    /// Numbers this instance's messages, so that two equal messages sent in one statement stay two
    /// (PostgreSQL delivers a payload sent twice in one transaction once).
    private let sequence = Atomic<UInt64>(0)

    struct Outgoing: Sendable {
        let channel: String
        let number: UInt64
        let message: String
        let merging: Bool
    }

    init(database: any SQLDatabase, instanceID: String, logger: Logger) {
        self.instanceID = instanceID
        self.logger = logger
        sender = WriteCombiner(maxItems: 32) { _, batches in
            var merged = Set<[String]>()
            let messages = batches.joined().filter { !$0.merging || merged.insert([$0.channel, $0.message]).inserted }
            guard messages.count > Self.perStatement else {
                if !messages.isEmpty {
                    let (text, values) = Self.statement(messages, instanceID: instanceID)
                    try await database.run(statement: text, values)
                }
                return
            }
            // More than a statement holds (an import that changed many things): several statements
            // in one transaction, so that they are delivered together, in order, or not at all.
            try await database.transaction { db in
                for start in stride(from: 0, to: messages.count, by: Self.perStatement) {
                    let (text, values) = Self.statement(messages[start..<min(start + Self.perStatement, messages.count)], instanceID: instanceID)
                    try await db.run(statement: text, values)
                }
            }
        }
    }

    /// The most messages in one statement (each count is a text prepared on each connection that
    /// runs it; combined requests rarely send more than a few).
    static let perStatement = 64

    /// `SELECT pg_notify(?, ?), …` with its values, for `messages`.
    private static func statement(_ messages: some Collection<Outgoing>, instanceID: String) -> (String, [StatementValue]) {
        var text = "SELECT "
        var values: [StatementValue] = []
        values.reserveCapacity(messages.count * 2)
        for outgoing in messages {
            text += values.isEmpty ? "pg_notify(?, ?)" : ", pg_notify(?, ?)"
            values.append(.text(outgoing.channel))
            values.append(.text("\(instanceID) \(outgoing.number)\n\(outgoing.message)"))
        }
        return (text, values)
    }

    func send(_ message: String, on channel: String, merging: Bool) async throws {
        let outgoing = Outgoing(channel: channel, number: sequence.add(1, ordering: .relaxed).newValue, message: message, merging: merging)
        if let pending = PendingMessages.current, pending.outbox === self, pending.add(outgoing) { return }
        try await sender.submit([outgoing], key: 0)
    }

    /// Sends what a request published (nothing when it published nothing).
    func send(_ pending: PendingMessages) async {
        let messages = pending.close()
        guard !messages.isEmpty else { return }
        do {
            try await sender.submit(messages, key: 0)
        } catch {
            logger.warning("could not publish to the other instances", metadata: [
                "channels": "\(Set(messages.map(\.channel)).sorted().joined(separator: ", "))", "error": "\(error)"])
        }
    }
}

/// The messages one request has published so far, sent when its handling ends. A task that
/// outlives the request (it inherits the task-local) finds them closed and sends its own at once.
final class PendingMessages: Sendable {
    @TaskLocal static var current: PendingMessages?

    fileprivate let outbox: Outbox
    private let state = Mutex<(messages: [Outbox.Outgoing], open: Bool)>(([], true))

    fileprivate init(outbox: Outbox) {
        self.outbox = outbox
    }

    /// Keeps `outgoing` for later; false once the request's messages were sent.
    fileprivate func add(_ outgoing: Outbox.Outgoing) -> Bool {
        state.withLock { state in
            guard state.open else { return false }
            state.messages.append(outgoing)
            return true
        }
    }

    /// The messages kept, in the order they were published; nothing more is kept afterwards.
    fileprivate func close() -> [Outbox.Outgoing] {
        state.withLock { state in
            state.open = false
            defer { state.messages = [] }
            return state.messages
        }
    }
}
