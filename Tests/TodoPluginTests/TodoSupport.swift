import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import TodoPlugin
import Testing

let todo = [PluginRegistration(TodoPlugin.self)]

/// The plugin's default `todos` bucket, a `notes` bucket only signed-in users write to, and a
/// NEC tenant `t1` with one application.
let todoYAML = """
    plugins:
      todo:
        config:
          maxObjectBytes: 2048
          buckets:
            todos:
              create: anyone
              index: [updatedAt, done, "done,updatedAt"]
              schema:
                type: object
                required: [description]
                properties:
                  description: { type: string, minLength: 1, maxLength: 1000 }
                  done: { type: boolean, default: false }
                  due: { type: string, format: date }
                  tags: { type: array, items: { type: string }, maxItems: 50 }
            notes:
              create: authenticated
              index: [rank, "kind,rank"]
          tenants:
            t1:
              apps:
                - { id: app1, key: app1-key-123, masterKey: app1-master-key-123456 }
    """

/// Runs `body` with a gateway serving the todo plugin on `storage`.
func withTodo<R: Sendable>(_ storage: TestStorage = .sqlite, limits: Bool = false, _ body: @Sendable (TestGateway) async throws -> R) async throws -> R {
    try await TestGateway.with(todo, yaml: todoYAML, storage: storage, limits: limits, body)
}

extension TestGateway {
    var todoPlugin: TodoPlugin {
        get throws { try #require(gateway.plugins.first { $0.id == "todo" }?.instance as? TodoPlugin) }
    }

    /// Sends a request and parses the JSON reply.
    @discardableResult
    func call(_ method: HTTPRequest.Method, _ target: String, token: String? = nil, headers extra: HTTPFields = [:], json: String? = nil)
        async throws -> (status: Int, json: JSONValue, headers: HTTPFields) {
        var headers: HTTPFields = extra
        if let token { headers[.authorization] = "Bearer \(token)" }
        if json != nil, headers[.contentType] == nil { headers[.contentType] = "application/json" }
        let response = try await gateway.handle(method, target, headers: headers, body: json.map { ByteBuffer(string: $0) })
        let value = response.body.readableBytes == 0 ? JSONValue.null : (try? JSONValue.parse(response.body, maximumDepth: 64)) ?? .string(String(buffer: response.body))
        return (response.status, value, response.headers)
    }
}

extension JSONValue {
    subscript(_ key: String) -> JSONValue? { self[path: [key]] }
    var items: [JSONValue] { self["items"]?.arrayValue ?? [] }
    var string: String? { stringValue }
}

/// Percent-encodes a query parameter value.
func encoded(_ text: String) -> String {
    text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
}
