import GatewayCore
import NIOConcurrencyHelpers

/// An event bus within one process: every subscriber whose topic matches gets each event, in
/// publish order. A subscriber that falls more than ``bufferSize`` events behind loses the oldest.
public final class LocalEventBus: EventBus {
    public static let bufferSize = 1024
    private struct Subscriber {
        let topic: String
        let continuation: AsyncStream<GatewayEvent>.Continuation
    }

    private let subscribers = NIOLockedValueBox<[Int: Subscriber]>([:])
    private let nextID = NIOLockedValueBox(0)

    public init() {}

    public func publish(_ event: GatewayEvent) async {
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
