import GatewayCore
import NIOConcurrencyHelpers
import NIOCore

/// The gateway's event bus: every subscriber whose topic matches gets each event, in publish
/// order. A subscriber that falls more than ``bufferSize`` events behind loses the oldest.
///
/// With ``broadcast`` set (PostgreSQL storage), each event is also sent to the other instances on
/// the database as `topic\npayload`, and their events arrive through ``deliverRemote(_:)``.
public final class LocalEventBus: EventBus {
    public static let bufferSize = 1024
    private struct Subscriber {
        let topic: String
        let continuation: AsyncStream<GatewayEvent>.Continuation
    }

    private let subscribers = NIOLockedValueBox<[Int: Subscriber]>([:])
    private let nextID = NIOLockedValueBox(0)

    /// Sends an event to the other instances (nil: this instance is alone).
    public let broadcast: (@Sendable (String) async -> Void)?

    public init(broadcast: (@Sendable (String) async -> Void)? = nil) {
        self.broadcast = broadcast
    }

    public func publish(_ event: GatewayEvent) async {
        deliver(event)
        await broadcast?(event.topic + "\n" + String(buffer: event.payload))
    }

    /// Delivers an event another instance published (`topic\npayload`) to this instance's subscribers.
    public func deliverRemote(_ message: String) {
        let parts = message.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty else { return }
        deliver(GatewayEvent(topic: String(parts[0]), payload: ByteBuffer(string: String(parts[1]))))
    }

    private func deliver(_ event: GatewayEvent) {
        let targets = subscribers.withLockedValue { table in
            table.values.filter { event.topic == $0.topic || event.topic.hasPrefix($0.topic + "/") }
        }
        for subscriber in targets { subscriber.continuation.yield(event) }
    }

    public func subscribe(to topic: String) -> AsyncStream<GatewayEvent> {
        let id = nextID.withLockedValue { value in
            value += 1
            return value
        }
        let (stream, continuation) = AsyncStream<GatewayEvent>.makeStream(bufferingPolicy: .bufferingNewest(Self.bufferSize))
        subscribers.withLockedValue { $0[id] = Subscriber(topic: topic, continuation: continuation) }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLockedValue { $0.removeValue(forKey: id) }
        }
        return stream
    }

    /// How many live subscriptions there are (for tests and health).
    public var subscriberCount: Int { subscribers.withLockedValue { $0.count } }
}
