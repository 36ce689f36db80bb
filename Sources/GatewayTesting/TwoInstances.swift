import Foundation
import GatewayCore
import GatewayServer
import ServiceLifecycle

extension TestGateway {
    /// Two instances of a gateway on one fresh PostgreSQL database, their host services running
    /// (the LISTEN/NOTIFY channels that carry cache invalidations, events and revocations), both
    /// listening before `body` runs; shut down afterwards, whatever happens. `credentialCacheTTL`
    /// set long lets a test tell a change that reached the other instance from one that expired.
    public static func withTwoListening(_ registrations: [PluginRegistration], yaml: String, credentialCacheTTL: Duration = .seconds(5),
                                        configure: @Sendable (inout Gateway.Options) -> Void = { _ in },
                                        _ body: @Sendable (Gateway, Gateway) async throws -> Void) async throws {
        try await TestStorage.postgres.withFreshLocation { location, directory in
            var configuration = try GatewayConfiguration.parse(Data(yaml.utf8), file: "plugins.yaml", knownPlugins: registrations.map(\.id),
                                                                   instanceTypes: registrations.filter(\.multipleInstances).map(\.id))
            configuration.storage = location
            if !yaml.contains("bcryptCost") { configuration.auth.bcryptCost = 10 }
            var options = Gateway.Options(baseDirectory: directory)
            options.logger.logLevel = .critical
            options.loadDemoData = false
            options.rateLimiter = UnlimitedRateLimiter()
            options.credentialCacheTTL = credentialCacheTTL
            configure(&options)
            let logger = options.logger
            try await withTwo(configuration: configuration, registrations: registrations, options: options) { first, second in
                let group = ServiceGroup(configuration: .init(services: (first.hostServices + second.hostServices).map { .init(service: $0) },
                                                              logger: logger))
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask { try await group.run() }
                    do {
                        // Seconds in a loaded test run (many tests at once on two cores); a fraction of one otherwise.
                        let deadline = ContinuousClock.now + .seconds(60)
                        while ContinuousClock.now < deadline, !(first.isListeningForInvalidations && second.isListeningForInvalidations) {
                            try await Task.sleep(for: .milliseconds(50))
                        }
                        guard first.isListeningForInvalidations && second.isListeningForInvalidations else {
                            throw GatewayStartupError("the instances did not start listening within 60 seconds")
                        }
                        try await body(first, second)
                    } catch {
                        await group.triggerGracefulShutdown()
                        try? await tasks.waitForAll()
                        throw error
                    }
                    await group.triggerGracefulShutdown()
                    try await tasks.waitForAll()
                }
            }
        }
    }
}

/// Whether `condition` holds within `limit`, asked every 20 ms (for what another instance learns
/// a moment later).
public func eventually(within limit: Duration, _ condition: () async throws -> Bool) async throws -> Bool {
    let until = ContinuousClock.now + limit
    while ContinuousClock.now < until {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(20))
    }
    return false
}
