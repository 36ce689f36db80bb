import Foundation
import GatewayCore
import GatewayServer
import Logging
import SQLKit

/// The databases a store test runs against: SQLite always, and PostgreSQL when the environment
/// variable `POSTGRES_URL` names a server (CI sets it). Each run gets a database of its own, so
/// tests can run in parallel and leave nothing behind.
public enum TestStorage: String, Sendable, CaseIterable, CustomStringConvertible {
    case sqlite
    case postgres

    public var description: String { rawValue }

    /// The kinds available here: `[.sqlite]`, plus `.postgres` when `POSTGRES_URL` is set.
    public static var available: [TestStorage] {
        ProcessInfo.processInfo.environment["POSTGRES_URL"].map { $0.isEmpty ? [.sqlite] : [.sqlite, .postgres] } ?? [.sqlite]
    }

    /// Runs `body` with a fresh, empty database of this kind, and removes it afterwards. A few
    /// tests per core hold one at a time (``TestSlots``); the others wait their turn first.
    public func withFreshLocation<R>(_ body: (StorageLocation, URL) async throws -> R) async throws -> R {
        try await TestSlots.with { try await withFreshLocationNow(body) }
    }

    private func withFreshLocationNow<R>(_ body: (StorageLocation, URL) async throws -> R) async throws -> R {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        switch self {
        case .sqlite:
            return try await body(.sqlite(path: directory.appendingPathComponent("test.sqlite").path), directory)
        case .postgres:
            guard let base = ProcessInfo.processInfo.environment["POSTGRES_URL"], var components = URLComponents(string: base) else {
                throw GatewayStartupError("POSTGRES_URL is not set")
            }
            let name = "gw_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(20).lowercased()
            let admin = try await GatewayDatabase.open(.postgres(url: base), baseDirectory: directory, logger: Self.quietLogger)
            // Many tests run at once: a busy server may refuse for a moment (too many clients, a
            // template in use). Try again a few times, and never leave the pool open.
            var attempt = 0
            while true {
                do {
                    try await admin.sql.raw("CREATE DATABASE \(unsafeRaw: name)").run()
                    break
                } catch {
                    attempt += 1
                    if attempt >= 5 {
                        await admin.shutdown()
                        throw error
                    }
                    try? await Task.sleep(for: .milliseconds(200 * attempt))
                }
            }
            components.path = "/" + name
            do {
                let result = try await body(.postgres(url: components.string ?? base), directory)
                try? await admin.sql.raw("DROP DATABASE IF EXISTS \(unsafeRaw: name) WITH (FORCE)").run()
                await admin.shutdown()
                return result
            } catch {
                try? await admin.sql.raw("DROP DATABASE IF EXISTS \(unsafeRaw: name) WITH (FORCE)").run()
                await admin.shutdown()
                throw error
            }
        }
    }

    /// Runs `body` with an open, empty database of this kind.
    public func withDatabase<R>(_ body: (GatewayDatabase) async throws -> R) async throws -> R {
        try await withFreshLocation { location, directory in
            let database = try await GatewayDatabase.open(location, baseDirectory: directory, logger: Self.quietLogger)
            do {
                let result = try await body(database)
                await database.shutdown()
                return result
            } catch {
                await database.shutdown()
                throw error
            }
        }
    }

    /// A logger that stays quiet unless `GATEWAY_TEST_LOG` names a level.
    public static var quietLogger: Logger {
        var logger = Logger(label: "gateway-test")
        logger.logLevel = ProcessInfo.processInfo.environment["GATEWAY_TEST_LOG"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        return logger
    }
}
