import Foundation
import GatewayCore
import GatewayServer
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOFoundationCompat

/// A gateway for a test: a fresh database, the given plugins, and helpers to send requests
/// through the real pipeline (in-process router or a real socket).
public struct TestGateway: Sendable {
    public let gateway: Gateway
    public let storage: TestStorage

    /// Wraps a gateway a test started itself (several instances on one database, say).
    public init(gateway: Gateway, storage: TestStorage) {
        self.gateway = gateway
        self.storage = storage
    }

    /// Starts a gateway from plugins.yaml text on a fresh database of `storage`, runs `body`, and
    /// tears everything down. The text's `storage:` is replaced by the test database. Unless
    /// `limits` is true, rate limits are off (tests send far more than a real client would); the
    /// bcrypt cost is the minimum unless the text sets one.
    public static func with<R: Sendable>(
        _ registrations: [PluginRegistration],
        yaml: String = "",
        storage: TestStorage = .sqlite,
        limits: Bool = false,
        configure: @Sendable (inout Gateway.Options) -> Void = { _ in },
        _ body: @Sendable (TestGateway) async throws -> R
    ) async throws -> R {
        try await storage.withFreshLocation { location, directory in
            var configuration = try GatewayConfiguration.parse(Data(yaml.utf8), file: "plugins.yaml", knownPlugins: registrations.map(\.id),
                                                                   instanceTypes: registrations.filter(\.multipleInstances).map(\.id))
            configuration.storage = location
            if !yaml.contains("bcryptCost") { configuration.auth.bcryptCost = 10 }
            var options = Gateway.Options(baseDirectory: directory)
            options.logger = TestStorage.quietLogger
            options.loadDemoData = false
            if !limits { options.rateLimiter = UnlimitedRateLimiter() }
            configure(&options)
            let gateway = try await Gateway.start(configuration: configuration, registrations: registrations, options: options)
            do {
                let result = try await body(TestGateway(gateway: gateway, storage: storage))
                await gateway.shutdown()
                return result
            } catch {
                await gateway.shutdown()
                throw error
            }
        }
    }

    /// Starts two gateways on one configuration (two instances sharing one database), runs `body`
    /// with both and shuts both down afterwards, whatever happens: a gateway released without
    /// its shutdown trips the connection pools' checks.
    public static func withTwo<R: Sendable>(configuration: GatewayConfiguration, registrations: [PluginRegistration], options: Gateway.Options,
                                            _ body: @Sendable (Gateway, Gateway) async throws -> R) async throws -> R {
        let first = try await Gateway.start(configuration: configuration, registrations: registrations, options: options)
        let second: Gateway
        do {
            second = try await Gateway.start(configuration: configuration, registrations: registrations, options: options)
        } catch {
            await first.shutdown()
            throw error
        }
        do {
            let result = try await body(first, second)
            await first.shutdown()
            await second.shutdown()
            return result
        } catch {
            await first.shutdown()
            await second.shutdown()
            throw error
        }
    }

    /// Runs `body` with a client of the gateway's application: `.router` in-process, `.live` over a real socket.
    public func test<R: Sendable>(_ setup: TestingSetup = .router, _ body: @Sendable (any TestClientProtocol) async throws -> R) async throws -> R {
        try await gateway.makeApplication(host: "127.0.0.1", port: 0).test(setup, body)
    }
}

extension TestResponse {
    /// The body as text.
    public var text: String { String(buffer: body) }

    /// The body decoded as JSON into `T`.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONCoding.decoder.decode(T.self, from: Data(buffer: body))
    }

    /// The body as a JSON object (nil when it is not one).
    public var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(buffer: body))) as? [String: Any]
    }
}

extension String {
    /// The string as a request body.
    public var buffer: ByteBuffer { ByteBuffer(string: self) }
}

extension HTTPFields {
    /// `Content-Type: application/json`.
    public static var json: HTTPFields { [.contentType: "application/json"] }
}

extension TestGateway {
    /// Registers `username` with `password` and returns its session token.
    public func register(_ username: String, password: String = "correct horse battery") async throws -> (token: String, userID: String) {
        let body = #"{"username": "\#(username)", "password": "\#(password)"}"#
        let response = try await gateway.handle(.post, "/v1/auth/register", headers: .json, body: ByteBuffer(string: body))
        guard response.status == 201,
              let object = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any],
              let token = object["token"] as? String, let user = object["user"] as? [String: Any], let id = user["id"] as? String
        else { throw TestGatewayError("registering \(username) answered \(response.status): \(String(buffer: response.body))") }
        return (token, id)
    }

    /// Creates an API key for the user of `token` with `grant` (JSON) and returns its secret and id.
    public func createKey(token: String, grant: String) async throws -> (secret: String, id: String) {
        let response = try await gateway.handle(.post, "/v1/me/keys", headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                                                body: ByteBuffer(string: grant))
        guard response.status == 201, let object = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any],
              let secret = object["secret"] as? String, let key = object["key"] as? [String: Any], let id = key["id"] as? String
        else { throw TestGatewayError("creating a key answered \(response.status): \(String(buffer: response.body))") }
        return (secret, id)
    }
}

extension TestGateway {
    /// The gateway's `/openapi.json`, parsed, for tests that check what the document describes.
    public func openAPIDocument() async throws -> [String: Any] {
        let response = try await gateway.handle(.get, "/openapi.json")
        guard response.status == 200,
              let document = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any]
        else { throw TestGatewayError("/openapi.json answered \(response.status)") }
        return document
    }
}

/// A test set-up step that failed.
public struct TestGatewayError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
