import Logging
import ServiceLifecycle
import Synchronization

/// Runs the background services of plugins that a reload may add or remove (instances of a type
/// that serves ids of the file's choice, such as upstream services): started with the gateway,
/// started and stopped as reloads add, replace and remove their plugins, cancelled at shutdown.
final class PluginServiceRunner: Service, Sendable {
    private struct State {
        var running = false
        var stopped = false
        /// Services given before the gateway runs, started when it does.
        var waiting: [(id: String, services: [any Service])] = []
        var tasks: [String: [Task<Void, Never>]] = [:]
    }

    private let state = Mutex(State())
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    /// Runs `services` for the plugin `id` (at once when the gateway runs, else when it starts).
    func add(_ id: String, services: [any Service]) {
        guard !services.isEmpty else { return }
        state.withLock { state in
            guard !state.stopped else { return }
            if state.running {
                state.tasks[id, default: []] += services.map(start)
            } else {
                state.waiting.append((id, services))
            }
        }
    }

    /// Stops the services of the plugin `id` (cancelled) and waits until they have ended.
    func remove(_ id: String) async {
        let tasks = state.withLock { state in
            state.waiting.removeAll { $0.id == id }
            return state.tasks.removeValue(forKey: id) ?? []
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    /// Ids whose services run now (for tests).
    var runningIDs: Set<String> { state.withLock { Set($0.tasks.keys) } }

    func run() async throws {
        state.withLock { state in
            guard !state.stopped else { return }
            state.running = true
            for (id, services) in state.waiting { state.tasks[id, default: []] += services.map(start) }
            state.waiting = []
        }
        try? await gracefulShutdown()
        await stop()
    }

    /// Cancels every service and waits for them; later additions are ignored.
    func stop() async {
        let tasks = state.withLock { state in
            state.stopped = true
            state.waiting = []
            defer { state.tasks = [:] }
            return state.tasks.values.flatMap { $0 }
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    private func start(_ service: any Service) -> Task<Void, Never> {
        let logger = self.logger
        return Task {
            do {
                try await service.run()
            } catch is CancellationError {
            } catch {
                if !Task.isCancelled { logger.error("a plugin's background service stopped", metadata: ["error": .string("\(error)")]) }
            }
        }
    }
}
