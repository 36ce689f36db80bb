import Logging
import ServiceLifecycle

extension EventBus {
    /// A plugin service (``ServicePlugin/services``) that hands each event of `topic` to `handle`,
    /// from start until the gateway shuts down. On PostgreSQL the bus crosses instances, so this is
    /// how an instance hears of what another one changed. A failing event is logged and the next
    /// one handled.
    public func listener(topic: String, logger: Logger, handle: @escaping @Sendable (GatewayEvent) async throws -> Void) -> any Service {
        EventBusListener(bus: self, topic: topic, logger: logger, handle: handle)
    }
}

private struct EventBusListener: Service {
    let bus: any EventBus
    let topic: String
    let logger: Logger
    let handle: @Sendable (GatewayEvent) async throws -> Void

    func run() async throws {
        let events = bus.subscribe(to: topic)
        await cancelWhenGracefulShutdown {
            for await event in events {
                do {
                    try await handle(event)
                } catch {
                    logger.warning("an event of the bus could not be applied", metadata: ["topic": "\(event.topic)", "error": "\(error)"])
                }
            }
        }
    }
}
