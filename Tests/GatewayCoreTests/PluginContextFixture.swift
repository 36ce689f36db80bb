import Foundation
import GatewayCore
import Logging
import Metrics
import NIOCore
import SQLKit

/// A plugin context for unit tests of core types that never touch its services.
enum PluginContextFixture {
    struct Unreachable: UpstreamHTTPClient, EventBus, AccountDirectory {
        func send(_ request: UpstreamRequest, maxBodySize: Int) async throws -> UpstreamResponse<ByteBuffer> { throw GatewayError.unavailable("no network in unit tests") }
        func publish(_ event: GatewayEvent) async {}
        func subscribe(to topic: String) -> AsyncStream<GatewayEvent> { AsyncStream { $0.finish() } }
        func register(username: String, email: String?, password: String) async throws -> AccountRecord { throw GatewayError.unavailable("no accounts in unit tests") }
        func signIn(identifier: String, password: String, address: String) async throws -> (token: String, expiresAt: Date, account: AccountRecord) { throw GatewayError.unavailable("no accounts in unit tests") }
        func signOut(token: String) async throws {}
        func account(id: String) async throws -> AccountRecord? { nil }
        func accounts(username: String?, email: String?, skip: Int, limit: Int) async throws -> (accounts: [AccountRecord], total: Int?) { ([], 0) }
        func updateAccount(id: String, username: String?, email: String?, password: String?, options: JSONValue?) async throws -> AccountRecord { throw GatewayError.notFound("no accounts in unit tests") }
        func deleteAccount(id: String) async throws -> Bool { false }
        func requestPasswordReset(username: String?, email: String?) async throws {}
        func principal(for credential: Credential, address: String) async throws -> Principal { throw GatewayError.unauthorized() }
        func issueKey(for userID: String?, label: String, scopes: [String], resources: [String: [String]]?, allowedAddresses: [String]?,
                      expiresAt: Date?) async throws -> (id: String, secret: String) { throw GatewayError.unavailable("no accounts in unit tests") }
        func revokeKey(id: String, of userID: String?) async throws -> Bool { false }
        func addMember(_ userID: String, to realm: String) async throws {}
        func isAdministrable(_ userID: String, by realm: String) async throws -> Bool { false }
        func members(of realm: String, username: String?, email: String?, skip: Int, limit: Int) async throws -> (accounts: [AccountRecord], total: Int?) { ([], 0) }
    }

    struct NoDatabase: SQLDatabase {
        var logger: Logger { Logger(label: "none") }
        var eventLoop: any EventLoop { fatalError("unit tests of core types use no database") }
        var dialect: any SQLDialect { fatalError("unit tests of core types use no database") }
        func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> ()) -> EventLoopFuture<Void> {
            fatalError("unit tests of core types use no database")
        }
    }

    struct MachineClock: WallClock {
        func now() -> Date { Date() }
    }

    static func make() -> PluginContext {
        PluginContext(pluginID: "test", logger: Logger(label: "test"), metrics: NOOPMetricsHandler.instance, database: NoDatabase(),
                      clock: MachineClock(), http: Unreachable(), notify: { _, _, _, _, _ in fatalError("unit tests of core types notify nobody") }, recordView: { _, _, _, _ in }, lease: { _, work in work }, events: Unreachable(),
                      purgeCache: { _ in }, accounts: Unreachable(), baseDirectory: URL(fileURLWithPath: "/tmp"))
    }
}
