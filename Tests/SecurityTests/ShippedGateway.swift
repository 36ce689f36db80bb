import AsyncHTTPClient
import EventsPlugin
import FeedsPlugin
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import SuggestPlugin
import TodoPlugin
import TransitPlugin
import UpstreamPlugin

/// A gateway started from the repository's own plugins.yaml, as the README tells a newcomer to run
/// it, serving on a loopback port: the target of the security suite. Every test here is an attack
/// made from outside, over a real socket.
struct ShippedGateway: Sendable {
    let test: TestGateway
    let port: Int
    var gateway: Gateway { test.gateway }
    var base: String { "http://127.0.0.1:\(port)" }

    /// The plugins the `gateway` binary is built with (Sources/gateway/BundledPlugins.swift).
    static let registrations: [PluginRegistration] = [
        PluginRegistration(EventsPlugin.self),
        PluginRegistration(FeedsPlugin.self),
        PluginRegistration(SuggestPlugin.self),
        PluginRegistration(TodoPlugin.self),
        PluginRegistration(TransitPlugin.self),
        PluginRegistration(UpstreamPlugin.self, multipleInstances: true),
    ]

    /// The repository's folder, where the shipped plugins.yaml and the demo data it names are.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The shipped plugins.yaml, as text.
    static let shippedYAML: String = (try? String(contentsOf: root.appendingPathComponent("plugins.yaml"), encoding: .utf8)) ?? ""

    /// Starts the shipped configuration (changed by `edit`, for a test that needs one more
    /// setting) on a fresh database of `storage`, with rate limits on unless `limits` is false,
    /// serves it on a free loopback port and runs `body`.
    static func with<R: Sendable>(
        storage: TestStorage = .sqlite, limits: Bool = true, edit: @Sendable (String) -> String = { $0 },
        configure: @Sendable (inout Gateway.Options) -> Void = { _ in },
        _ body: @Sendable (ShippedGateway) async throws -> R
    ) async throws -> R {
        // The shipped bcrypt cost, 12, would make every test's sign-ups slow; 10 is the least allowed.
        let yaml = edit(shippedYAML).replacingOccurrences(of: "bcryptCost: 12", with: "bcryptCost: 10")
        return try await TestGateway.with(registrations, yaml: yaml, storage: storage, limits: limits, configure: { options in
            // Relative paths in the file (the suggestion dictionaries) are the repository's.
            options.baseDirectory = root
            configure(&options)
        }) { test in
            try await withServing(test.gateway) { port in
                try await body(ShippedGateway(test: test, port: port))
            }
        }
    }

    /// A reply as a client sees it.
    struct Reply: Sendable {
        var status: Int
        var headers: HTTPHeaders
        var body: String
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] }
        var array: [Any]? { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [Any] }
    }

    /// Sends one request over a new connection of the shared client and reads the whole reply.
    func send(_ method: HTTPMethod = .GET, _ path: String, headers: [(String, String)] = [], json: String? = nil,
              timeout: TimeAmount = .seconds(30)) async throws -> Reply {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.replaceOrAdd(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        let body = try await response.body.collect(upTo: 16 << 20)
        return Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: body))
    }

    /// Registers `username` through the API and returns its session token and id.
    func register(_ username: String, password: String = "correct horse battery") async throws -> (token: String, userID: String) {
        try await test.register(username, password: password)
    }

    /// Registers `username` and makes it an administrator (as `gateway user add --admin` would).
    func administrator(_ username: String, password: String = "correct horse battery") async throws -> (token: String, userID: String) {
        let user = try await test.register(username, password: password)
        try await gateway.accounts.setAdmin(userID: user.userID, true)
        gateway.forgetCredentials()
        return user
    }
}

/// The storages a security test runs on: SQLite always, PostgreSQL when `POSTGRES_URL` is set.
let securityStorages = TestStorage.available
