import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import Testing

let notes = [PluginRegistration(NotesPlugin.self)]
let notesYAML = "plugins:\n  notes:\n    enabled: true\n"

@Suite("the request pipeline")
struct PipelineTests {
    @Test("an operation with query input answers JSON with an ETag and a request id")
    func queryOperation() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let response = try await client.execute(uri: "/v1/notes/echo?name=caf%C3%A9+au+lait", method: .get)
                #expect(response.status == .ok)
                #expect(try response.decode(Echo.self) == Echo(greeting: "hello, café au lait", length: 12))
                #expect(response.headers[.contentType] == "application/json")
                // The ETag is the top 52 bits of the body's XXH64, as 13 hex digits between quotes
                // (15 bytes in all, a string held inline).
                let hex = String(XXHash64.hash(Array(response.body.readableBytesView)) >> 12, radix: 16)
                #expect(response.headers[.eTag] == "\"" + String(repeating: "0", count: 13 - hex.count) + hex + "\"")
                #expect(response.headers[.eTag]?.utf8.count == 15)
                // Content-Length comes first: Hummingbird and NIO each look for it before sending.
                #expect(response.headers.first?.name == .contentLength)
                // Generated request ids: 15 lowercase hex digits, a fresh one per request.
                let id = HTTPField.Name("X-Request-Id")!
                let first = try #require(response.headers[id])
                let second = try #require(try await client.execute(uri: "/healthz", method: .get).headers[id])
                for generated in [first, second] {
                    #expect(generated.count == 15 && generated.allSatisfy { "0123456789abcdef".contains($0) })
                }
                #expect(first != second)
                #expect(first.prefix(8) == second.prefix(8))
            }
        }
    }

    @Test("X-Request-Id is echoed when the client sends a sane one")
    func requestIDEcho() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let id = HTTPField.Name("X-Request-Id")!
                let echoed = try await client.execute(uri: "/healthz", method: .get, headers: [id: "abc-123"])
                #expect(echoed.headers[id] == "abc-123")
                let replaced = try await client.execute(uri: "/healthz", method: .get, headers: [id: "bad id with spaces"])
                #expect(replaced.headers[id] != "bad id with spaces")
            }
        }
    }

    @Test("every kind of reply carries one X-Request-Id and one Content-Length that matches its body")
    func oneRequestIDAndLength() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let id = HTTPField.Name("X-Request-Id")!
                let xCache = HTTPField.Name("X-Cache")!
                func check(_ response: TestResponse, _ label: String, sent: String? = nil) {
                    let ids = response.headers[values: id]
                    #expect(ids.count == 1, "\(label): \(ids)")
                    if let sent { #expect(ids.first == sent, "\(label)") }
                    let lengths = response.headers[values: .contentLength]
                    #expect(lengths.count <= 1, "\(label): \(lengths)")
                    if response.status != .notModified, let length = lengths.first {
                        #expect(Int(length) == response.body.readableBytes, "\(label)")
                    }
                }
                let created = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: [.contentType: "application/json", id: "create-1"],
                                                       body: #"{"title": "One", "body": "text"}"#.buffer)
                #expect(created.status == .created)
                check(created, "201", sent: "create-1")
                check(try await client.execute(uri: "/v1/notes/echo?name=x", method: .get), "200")
                check(try await client.execute(uri: "/v1/notes/echo?name=x", method: .get, headers: [id: "echo-1"]), "200 echoed", sent: "echo-1")
                let miss = try await client.execute(uri: "/v1/notes/notes", method: .get)
                check(miss, "cache miss")
                let hit = try await client.execute(uri: "/v1/notes/notes", method: .get, headers: [id: "hit-1"])
                #expect(hit.headers[xCache] == "HIT")
                #expect(hit.body == miss.body)
                check(hit, "cache hit", sent: "hit-1")
                #expect(hit.headers.first?.name == .contentLength)
                let etag = try #require(hit.headers[.eTag])
                let notModified = try await client.execute(uri: "/v1/notes/notes", method: .get, headers: [.ifNoneMatch: etag])
                #expect(notModified.status == .notModified)
                check(notModified, "304")
                #expect(notModified.headers[.contentType] == nil)
                check(try await client.execute(uri: "/v1/notes/echo?name=x", method: .head), "HEAD")
                check(try await client.execute(uri: "/v1/notes/nowhere", method: .get), "404")
                check(try await client.execute(uri: "/v1/notes/echo?name=%zz", method: .get), "400")
                check(try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json, body: #"{"title": 5}"#.buffer), "422")
                check(try await client.execute(uri: "/legacy/notes.txt", method: .get), "dialect")
                check(try await client.execute(uri: "/healthz", method: .get), "gateway endpoint")
            }
        }
    }

    @Test("create, read, conditional update and list with path and body input")
    func crud() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let created = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json,
                                                       body: #"{"title": "First", "body": "text"}"#.buffer)
                #expect(created.status == .created)
                let note = try created.decode(Note.self)
                #expect(created.headers[.location] == "/v1/notes/notes/\(note.id)")
                let read = try await client.execute(uri: "/v1/notes/notes/\(note.id)", method: .get)
                #expect(try read.decode(Note.self) == note)
                let etag = try #require(read.headers[.eTag])
                let notModified = try await client.execute(uri: "/v1/notes/notes/\(note.id)", method: .get, headers: [.ifNoneMatch: etag])
                #expect(notModified.status == .notModified)
                #expect(notModified.body.readableBytes == 0)

                let update = #"{"title": "Second", "body": "more"}"#.buffer
                let updated = try await client.execute(uri: "/v1/notes/notes/\(note.id)", method: .put,
                                                       headers: [.contentType: "application/json", .ifMatch: etag], body: update)
                #expect(updated.status == .ok)
                let stale = try await client.execute(uri: "/v1/notes/notes/\(note.id)", method: .put,
                                                     headers: [.contentType: "application/json", .ifMatch: etag], body: update)
                #expect(stale.status == .preconditionFailed)
                #expect(stale.headers[.contentType] == "application/problem+json")

                let list = try await client.execute(uri: "/v1/notes/notes?limit=10", method: .get)
                let items = try list.decode(NoteList.self).items
                #expect(items.map(\.title) == ["Second"])
            }
        }
    }

    @Test("an unknown route is a 404 problem document")
    func unknownRoute() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let response = try await client.execute(uri: "/v1/nothing/here", method: .get)
                #expect(response.status == .notFound)
                #expect(response.headers[.contentType] == "application/problem+json")
                let problem = try #require(response.json)
                #expect(problem["status"] as? Int == 404)
                #expect(problem["type"] as? String == "https://gateway.dev/problems/not-found")
                #expect(problem["title"] as? String == "Not found")
                #expect(problem["instance"] as? String == "/v1/nothing/here")
            }
        }
    }

    @Test("a wrong method is a 405 with Allow")
    func wrongMethod() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let response = try await client.execute(uri: "/v1/notes/echo?name=x", method: .delete)
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == "GET, HEAD")
                #expect(response.json?["status"] as? Int == 405)
            }
        }
    }

    @Test("malformed JSON is a 400 that says where")
    func malformedJSON() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let response = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json, body: #"{"title": "x",, }"#.buffer)
                #expect(response.status == .badRequest)
                let detail = try #require(response.json?["detail"] as? String)
                #expect(detail.contains("not valid JSON"))
                #expect(detail.contains("line 1, column 15"), "\(detail)")
            }
        }
    }

    @Test("wrong types and missing fields are 422s naming each field")
    func wrongTypes() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let typed = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json, body: #"{"title": 5, "body": "x"}"#.buffer)
                #expect(typed.status == .unprocessableContent)
                let errors = try #require(typed.json?["errors"] as? [[String: String]])
                #expect(errors.first?["pointer"] == "/title")
                #expect(errors.first?["detail"] == "expected a string")

                let missing = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json, body: #"{"title": "t"}"#.buffer)
                #expect(missing.status == .unprocessableContent)
                #expect((missing.json?["errors"] as? [[String: String]])?.first?["pointer"] == "/body")

                let invalid = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json, body: #"{"title": " ", "body": "b"}"#.buffer)
                #expect(invalid.status == .unprocessableContent)
                #expect((invalid.json?["errors"] as? [[String: String]])?.first?["detail"] == "must not be empty")

                let query = try await client.execute(uri: "/v1/notes/notes?limit=abc", method: .get)
                #expect(query.status == .unprocessableContent)
                #expect((query.json?["errors"] as? [[String: String]])?.first?["pointer"] == "query.limit")

                let range = try await client.execute(uri: "/v1/notes/notes?limit=100000", method: .get)
                #expect(range.status == .unprocessableContent)

                let path = try await client.execute(uri: "/v1/notes/notes/not-an-id", method: .get)
                #expect(path.status == .unprocessableContent)
                #expect((path.json?["errors"] as? [[String: String]])?.first?["pointer"] == "path.id")

                let absent = try await client.execute(uri: "/v1/notes/echo", method: .get)
                #expect(absent.status == .unprocessableContent)
                #expect((absent.json?["errors"] as? [[String: String]])?.first?["detail"] == "is required")
            }
        }
    }

    @Test("an oversized body is a 413 and the limit is configurable")
    func oversizedBody() async throws {
        try await TestGateway.with(notes, yaml: "server: { maxBodySize: 1KB }\n" + notesYAML) { gateway in
            try await gateway.test { client in
                let big = #"{"title": "t", "body": ""# + String(repeating: "x", count: 2048) + #""}"#
                let response = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json, body: big.buffer)
                #expect(response.status == .contentTooLarge)
                #expect(response.json?["limit"] as? Int == 1024)
                let small = try await client.execute(uri: "/v1/notes/notes", method: .post, headers: .json, body: #"{"title": "t", "body": "b"}"#.buffer)
                #expect(small.status == .created)
            }
        }
    }

    @Test("an unsupported media type is a 415")
    func unsupportedMediaType() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let response = try await client.execute(uri: "/v1/notes/notes", method: .post,
                                                        headers: [.contentType: "application/x-www-form-urlencoded"], body: "title=x".buffer)
                #expect(response.status == .unsupportedMediaType)
                #expect(response.json?["status"] as? Int == 415)
            }
        }
    }

    @Test("bad percent-encoding in the path or query is a 400")
    func badPercentEncoding() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let query = try await client.execute(uri: "/v1/notes/echo?name=%ZZ", method: .get)
                #expect(query.status == .badRequest)
                let surrogate = try await client.execute(uri: "/v1/notes/echo?name=%ED%A0%80", method: .get)
                #expect(surrogate.status == .badRequest)
                let path = try await client.execute(uri: "/v1/notes/notes/%E0%A4%A", method: .get)
                #expect(path.status == .badRequest)
            }
        }
    }

    @Test("access rules: anonymous callers get 401 for user, scope and admin operations; credentials cannot be accepted without accounts")
    func accessRules() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                for (method, uri) in [(HTTPRequest.Method.get, "/v1/notes/me/notes"), (.get, "/v1/notes/admin/stats"),
                                      (.delete, "/v1/notes/notes/0123456789abcdef0123456789abcdef")] {
                    let response = try await client.execute(uri: uri, method: method)
                    #expect(response.status == .unauthorized, "\(method) \(uri)")
                    #expect(response.headers[.wwwAuthenticate] == "Bearer")
                }
                let withToken = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get, headers: [.authorization: "Bearer forged"])
                #expect(withToken.status == .unauthorized)
            }
        }
    }

    @Test("a disabled plugin's routes answer 404 and it is absent from the OpenAPI document")
    func disabledPlugin() async throws {
        try await TestGateway.with(notes, yaml: "plugins:\n  notes:\n    enabled: false\n") { gateway in
            try await gateway.test { client in
                let response = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get)
                #expect(response.status == .notFound)
                let document = try await client.execute(uri: "/openapi.json", method: .get)
                #expect(!document.text.contains("notes.echo"))
                let plugins = try await client.execute(uri: "/v1/plugins", method: .get)
                #expect((plugins.json?["items"] as? [Any])?.isEmpty == true)
            }
        }
    }

    @Test("a plugin mounted elsewhere answers there and only there")
    func customMount() async throws {
        try await TestGateway.with(notes, yaml: "plugins:\n  notes:\n    mount: /api/n\n") { gateway in
            try await gateway.test { client in
                let moved = try await client.execute(uri: "/api/n/echo?name=x", method: .get)
                #expect(moved.status == .ok)
                let old = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get)
                #expect(old.status == .notFound)
            }
        }
    }

    @Test("the gateway's own endpoints: healthz, readyz, metrics, openapi.json and plugins")
    func gatewayEndpoints() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let health = try await client.execute(uri: "/healthz", method: .get)
                #expect(health.json?["status"] as? String == "ok")
                let ready = try await client.execute(uri: "/readyz", method: .get)
                #expect(ready.status == .ok)
                #expect(ready.json?["database"] as? String == "ok")
                #expect((ready.json?["plugins"] as? [[String: Any]])?.first?["id"] as? String == "notes")
                _ = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get)
                _ = try await client.execute(uri: "/v1/notes/echo", method: .get)
                let admin = try await gateway.register("metrics-reader")
                try await gateway.gateway.accounts.setAdmin(userID: admin.userID, true)
                let metrics = try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(admin.token)"]).text
                #expect(metrics.contains(#"gateway_requests_total{endpoint="notes.echo",status="200"} 1"#))
                #expect(metrics.contains(#"gateway_requests_total{endpoint="notes.echo",status="422"} 1"#))
                #expect(metrics.contains("gateway_request_duration_seconds_bucket"))
                let plugins = try await client.execute(uri: "/v1/plugins", method: .get)
                let first = try #require((plugins.json?["items"] as? [[String: Any]])?.first)
                #expect(first["mount"] as? String == "/v1/notes")
                #expect(first["dialects"] as? [String] == ["legacy"])
                let document = try await client.execute(uri: "/openapi.json", method: .get)
                #expect((document.json?["openapi"] as? String)?.hasPrefix("3.1") == true)
                #expect(document.text.contains("notes.echo"))
            }
        }
    }

    @Test("HEAD answers a GET's headers without a body")
    func head() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let response = try await client.execute(uri: "/v1/notes/echo?name=x", method: .head)
                #expect(response.status == .ok)
                #expect(response.body.readableBytes == 0)
            }
        }
    }

    @Test("CORS: preflight is answered and allowed origins are echoed")
    func cors() async throws {
        try await TestGateway.with(notes, yaml: "server: { cors: { allowOrigins: [\"https://app.example\"] } }\n" + notesYAML) { gateway in
            try await gateway.test { client in
                let preflight = try await client.execute(uri: "/v1/notes/notes", method: .options,
                                                         headers: [.origin: "https://app.example", .accessControlRequestMethod: "POST"])
                #expect(preflight.status == .noContent)
                #expect(preflight.headers[.accessControlAllowMethods]?.contains("POST") == true)
                let allowed = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get, headers: [.origin: "https://app.example"])
                #expect(allowed.headers[.accessControlAllowOrigin] == "https://app.example")
                let other = try await client.execute(uri: "/v1/notes/echo?name=x", method: .get, headers: [.origin: "https://evil.example"])
                #expect(other.headers[.accessControlAllowOrigin] == nil)
            }
        }
    }

    @Test("a dialect route serves the legacy shape, and its errors use the legacy error shape")
    func dialect() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await gateway.test { client in
                let created = try await client.execute(uri: "/legacy/notes", method: .post, body: #"{"t": "Old"}"#.buffer)
                #expect(created.status == .ok)
                #expect(created.json?["code"] as? String == "0")
                let listing = try await client.execute(uri: "/legacy/notes.txt", method: .get)
                #expect(listing.headers[.contentType] == "text/plain; charset=utf-8")
                #expect(listing.text.hasSuffix("\tOld"))
                let bad = try await client.execute(uri: "/legacy/notes", method: .post, body: "not json".buffer)
                #expect(bad.status == .ok)
                #expect(bad.json?["code"] as? Int == 4000)
                let invalid = try await client.execute(uri: "/legacy/notes.txt?n=0", method: .get)
                #expect(invalid.json?["code"] as? Int == 4220)
                let keyed = try await client.execute(uri: "/legacy/notes.txt?apikey=unknown", method: .get)
                #expect(keyed.json?["code"] as? Int == 4010)
            }
        }
    }

    @Test("gateway routes lists operations, dialect routes, WebSockets and gateway endpoints")
    func routeListing() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let routes = gateway.gateway.routes
            #expect(routes.contains { $0.name == "notes.get" && $0.path == "/v1/notes/notes/{id}" && $0.method == "GET" })
            #expect(routes.contains { $0.method == "WS" && $0.path == "/legacy/live" })
            #expect(routes.contains { $0.path == "/legacy/notes.txt" })
            #expect(routes.contains { $0.path == "/healthz" })
        }
    }

    @Test("an in-process call runs through the same pipeline")
    func inProcess() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let ok = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=cli")
            #expect(ok.status == 200)
            #expect(String(buffer: ok.body).contains("hello, cli"))
            let bad = try await gateway.gateway.handle(.get, "/v1/notes/echo")
            #expect(bad.status == 422)
        }
    }

    @Test("plugin configuration reaches the plugin, and a bad value stops start-up with its line")
    func pluginConfiguration() async throws {
        try await TestGateway.with(notes, yaml: "plugins:\n  notes:\n    config: { greeting: bonjour }\n") { gateway in
            let response = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x")
            #expect(String(buffer: response.body).contains("bonjour, x"))
        }
        await #expect(throws: ConfigurationFileError.self) {
            try await TestGateway.with(notes, yaml: "plugins:\n  notes:\n    config:\n      maxNotes: 0\n") { _ in }
        }
        do {
            try await TestGateway.with(notes, yaml: "plugins:\n  notes:\n    config:\n      maxNotes: 0\n") { _ in }
        } catch let error as ConfigurationFileError {
            #expect(error.description == "plugins.yaml:4:17: plugins.notes.config.maxNotes: must be at least 1")
        }
    }
}

@Suite("gateway call")
struct CallRequestTests {
    func operation(_ name: String) async throws -> Route {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try #require(gateway.gateway.operation(named: name)?.operation)
        }
    }

    @Test("name=value pairs fill the path, the query and a JSON body")
    func building() async throws {
        let get = try await operation("notes.get")
        let target = try CallRequest.build(operation: get, mount: "/v1/notes", arguments: [("id", "abc/def")], body: nil)
        #expect(target.target == "/v1/notes/notes/abc%2Fdef")
        #expect(target.body == nil)

        let echo = try await operation("notes.echo")
        let query = try CallRequest.build(operation: echo, mount: "/v1/notes", arguments: [("name", "a b&c")], body: nil)
        #expect(query.target == "/v1/notes/echo?name=a%20b%26c")

        let create = try await operation("notes.create")
        let body = try CallRequest.build(operation: create, mount: "/v1/notes", arguments: [("title", "T"), ("body", "B"), ("tags", #"["x"]"#)], body: nil)
        let json = try JSONSerialization.jsonObject(with: Data(buffer: try #require(body.body))) as? [String: Any]
        #expect(json?["title"] as? String == "T")
        #expect(json?["tags"] as? [String] == ["x"])

        #expect(throws: CallError.self) { try CallRequest.build(operation: get, mount: "/v1/notes", arguments: [], body: nil) }
    }

    @Test("a built call runs through the pipeline like an HTTP request")
    func running() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let create = try #require(gateway.gateway.operation(named: "notes.create"))
            let request = try CallRequest.build(operation: create.operation, mount: create.plugin.mount,
                                                arguments: [("title", "From the CLI"), ("body", "b")], body: nil)
            let response = try await gateway.gateway.handle(.post, request.target, headers: .json, body: request.body)
            #expect(response.status == 201)
            #expect(CallRequest.pretty(String(buffer: response.body)).contains("\"title\" : \"From the CLI\""))
        }
    }
}
