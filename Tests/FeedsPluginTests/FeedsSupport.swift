import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import FeedsPlugin
import Testing

let feeds = [PluginRegistration(FeedsPlugin.self)]

let feedsYAML = """
    plugins:
      feeds:
        config:
          frozenAfter: 15m
          maxFutureSkew: 5m
          maxDatapointsPerRequest: 2000
          triggerTimeout: 10s
          triggerAttempts: 3
          triggerPrivateTargets: true
    """

/// Runs `body` with a gateway serving the feeds plugin on `storage`, its clock at `clock`.
func withFeeds<R: Sendable>(_ storage: TestStorage = .sqlite, clock: TestClock = TestClock(Date(timeIntervalSince1970: 1_700_000_000)),
                            _ body: @Sendable (TestGateway) async throws -> R) async throws -> R {
    try await TestGateway.with(feeds, yaml: feedsYAML, storage: storage, configure: { $0.clock = clock }, body)
}

/// A parsed reply.
struct Reply: Sendable {
    var status: Int
    var json: JSONValue
    var text: String
    var headers: HTTPFields
}

extension TestGateway {
    var feedsPlugin: FeedsPlugin {
        get throws { try #require(gateway.plugins.first { $0.id == "feeds" }?.instance as? FeedsPlugin) }
    }

    /// Sends a request (JSON body unless a content type says otherwise) and parses a JSON reply.
    @discardableResult
    func call(_ method: HTTPRequest.Method, _ target: String, token: String? = nil, key: String? = nil, headers extra: HTTPFields = [:],
              body: String? = nil) async throws -> Reply {
        var headers: HTTPFields = extra
        if let token { headers[.authorization] = "Bearer \(token)" }
        if let key { headers[HTTPField.Name("X-ApiKey")!] = key }
        if body != nil, headers[.contentType] == nil { headers[.contentType] = "application/json" }
        let response = try await gateway.handle(method, target, headers: headers, body: body.map { ByteBuffer(string: $0) })
        let text = String(buffer: response.body)
        let value = response.body.readableBytes == 0 ? JSONValue.null : (try? JSONValue.parse(response.body, maximumDepth: 64)) ?? .string(text)
        return Reply(status: response.status, json: value, text: text, headers: response.headers)
    }
}

extension JSONValue {
    subscript(_ key: String) -> JSONValue? { self[path: [key]] }
    subscript(_ index: Int) -> JSONValue? {
        guard let array = arrayValue, array.indices.contains(index) else { return nil }
        return array[index]
    }
    var items: [JSONValue] { self["items"]?.arrayValue ?? [] }
    var string: String? { stringValue }
    var keys: Set<String> { Set(objectValue?.keys.map { $0 } ?? []) }
}

/// `2023-11-14T22:13:20Z` plus `seconds`: the tests' clock starts at 1,700,000,000.
func at(_ seconds: Int) -> String {
    UTCTimestamp.format(micros: (1_700_000_000 + Int64(seconds)) * 1_000_000)
}

extension TestGateway {
    /// Registers `user` and creates a feed with one datastream `id`: the user's token and the
    /// datastream's path (`/v1/feeds/N/datastreams/id`).
    func feedWithStream(_ id: String, user: String = "ann") async throws -> (token: String, stream: String) {
        let owner = try await register(user)
        let feed = try await call(.post, "/v1/feeds", token: owner.token, body: #"{"title": "Test feed", "datastreams": [{"id": "\#(id)"}]}"#)
        let feedID = try #require(feed.json["id"]?.numberValue.map { Int($0) })
        return (owner.token, "/v1/feeds/\(feedID)/datastreams/\(id)")
    }
}
