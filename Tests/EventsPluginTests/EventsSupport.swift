import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import EventsPlugin
import Testing

let events = [PluginRegistration(EventsPlugin.self)]

/// Kaohsiung (the old app's city) and New York (a zone far from UTC, with DST), the old service's
/// categories, and an app key for the COIMOTION dialect.
let eventsYAML = """
    auth:
      appKeys: [test-app-key]
    plugins:
      events:
        config:
          timeZone: Asia/Taipei
          cities:
            - { id: 15, name: 高雄市, timeZone: Asia/Taipei }
            - { id: 99, name: New York, timeZone: America/New_York }
    """

/// 2026-11-24 12:00 in Kaohsiung (04:00 UTC), a Tuesday.
let eventsNow = Date(timeIntervalSince1970: 1_795_492_800)

/// Runs `body` with a gateway serving the events plugin on `storage`, its clock at `eventsNow`.
func withEvents<R: Sendable>(_ storage: TestStorage = .sqlite, yaml: String = eventsYAML, clock: TestClock = TestClock(eventsNow),
                             _ body: @Sendable (TestGateway) async throws -> R) async throws -> R {
    try await TestGateway.with(events, yaml: yaml, storage: storage, configure: { $0.clock = clock }, body)
}

extension TestGateway {
    var eventsPlugin: EventsPlugin {
        get throws { try #require(gateway.plugins.first { $0.id == "events" }?.instance as? EventsPlugin) }
    }

    /// Sends a request and parses the JSON reply.
    @discardableResult
    func call(_ method: HTTPRequest.Method, _ target: String, token: String? = nil, headers extra: HTTPFields = [:], json: String? = nil)
        async throws -> (status: Int, json: JSONValue, headers: HTTPFields, text: String) {
        var headers: HTTPFields = extra
        if let token { headers[.authorization] = "Bearer \(token)" }
        if json != nil, headers[.contentType] == nil { headers[.contentType] = "application/json" }
        let response = try await gateway.handle(method, target, headers: headers, body: json.map { ByteBuffer(string: $0) })
        let value = response.body.readableBytes == 0 ? JSONValue.null : (try? JSONValue.parse(response.body, maximumDepth: 64)) ?? .string(String(buffer: response.body))
        return (response.status, value, response.headers, String(buffer: response.body))
    }

    /// A user who may write events (every user holds `events:write`), with a venue of their own.
    func organizer(_ name: String = "organizer") async throws -> (token: String, userID: String, venue: Int) {
        let user = try await register(name)
        let venue = try await call(.post, "/v1/events/venues", token: user.token,
                                   json: #"{"name": "衛武營國家藝術文化中心", "address": "高雄市鳳山區三多一路1號", "city": 15, "lat": 22.6237, "lon": 120.3420}"#)
        #expect(venue.status == 201, "\(venue.text)")
        return (user.token, user.userID, Int(venue.json["id"]?.numberValue ?? 0))
    }

    /// Creates an event and returns its id and its showings' ids.
    func createEvent(token: String, _ body: String) async throws -> (id: Int, showings: [Int]) {
        let created = try await call(.post, "/v1/events", token: token, json: body)
        #expect(created.status == 201, "\(created.text)")
        let showings = (created.json["showings"]?.arrayValue ?? []).compactMap { $0["id"]?.numberValue }.map { Int($0) }
        return (Int(created.json["id"]?.numberValue ?? 0), showings)
    }

    /// Calls a COIMOTION route with `_key` and the parameters.
    func coimotion(_ path: String, _ parameters: [String: Any] = [:], key: String = "test-app-key", token: String? = nil) async throws -> JSONValue {
        var body = parameters
        body["_key"] = key
        if let token { body["token"] = token }
        let data = try JSONSerialization.data(withJSONObject: body)
        let reply = try await call(.post, "/coimotion/" + path, json: String(decoding: data, as: UTF8.self))
        #expect(reply.status == 200, "\(reply.text)")
        return reply.json
    }
}

extension JSONValue {
    subscript(_ key: String) -> JSONValue? { self[path: [key]] }
    subscript(_ index: Int) -> JSONValue? {
        guard let array = arrayValue, array.indices.contains(index) else { return nil }
        return array[index]
    }
    var items: [JSONValue] { self["items"]?.arrayValue ?? [] }
    var int: Int? { numberValue.map { Int($0) } }
    var string: String? { stringValue }
}

/// Percent-encodes a query parameter value.
func encoded(_ text: String) -> String {
    text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
}
