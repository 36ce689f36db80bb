import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import Testing

extension InProcessResponse {
    var object: [String: Any] { ((try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any]) ?? [:] }
}

@Suite("POST /v1/batch")
struct BatchTests {
    func batch(_ gateway: TestGateway, _ json: String, headers: HTTPFields = [:]) async throws -> InProcessResponse {
        var fields = headers
        fields[.contentType] = "application/json"
        return try await gateway.gateway.handle(.post, "/v1/batch", headers: fields, body: ByteBuffer(string: json))
    }

    @Test("calls by operation name or by path, concurrently, each with its own status, fields and body, in the order given")
    func calls() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let (token, _) = try await gateway.register("batcher")
            let reply = try await batch(gateway, """
                {"calls": [
                  {"id": "hello", "operation": "notes.echo", "input": {"name": "Ada"}},
                  {"id": "create", "method": "POST", "path": "/v1/notes/notes", "body": {"title": "t", "body": "b"}},
                  {"id": "list", "method": "GET", "path": "/v1/notes/notes?limit=5", "dependsOn": ["create"]},
                  {"id": "missing", "operation": "notes.get", "input": {"id": "0123456789abcdef0123456789abcdef"}},
                  {"id": "mine", "method": "GET", "path": "/v1/notes/me/notes"},
                  {"id": "skipped", "method": "GET", "path": "/v1/notes/echo?name=x", "dependsOn": ["missing"]}
                ]}
                """, headers: [.authorization: "Bearer \(token)"])
            #expect(reply.status == 200)
            let results = reply.object["results"] as? [[String: Any]] ?? []
            #expect(results.map { $0["id"] as? String } == ["hello", "create", "list", "missing", "mine", "skipped"])
            #expect(results.map { $0["status"] as? Int } == [200, 201, 200, 404, 200, 424])
            #expect((results[0]["body"] as? [String: Any])?["greeting"] as? String == "hello, Ada")
            #expect((results[1]["headers"] as? [String: String])?["location"]?.hasPrefix("/v1/notes/notes/") == true)
            let listed = ((results[2]["body"] as? [String: Any])?["items"] as? [[String: Any]]) ?? []
            #expect(listed.count == 1, "the list ran after the create it depends on")
            #expect((results[3]["body"] as? [String: Any])?["status"] as? Int == 404)
            #expect((results[4]["body"] as? [String: Any])?["items"] != nil, "the caller's session reached the call")
            #expect((results[5]["body"] as? [String: Any])?["type"] as? String == "https://gateway.dev/problems/failed-dependency")
        }
    }

    @Test("each call is authorized and rate-limited on its own")
    func perCallPolicies() async throws {
        try await TestGateway.with(notes, yaml: "limits: { anonymous: 4/min }\n" + notesYAML, limits: true) { gateway in
            // The administrator's call alone first: calls run side by side, so in one batch with the
            // others it could meet the limit before its authorization.
            let guest = try await batch(gateway, #"{"calls": [{"method": "GET", "path": "/v1/notes/admin/stats"}]}"#)
            #expect((guest.object["results"] as? [[String: Any]])?.first?["status"] as? Int == 401, "a guest is not an administrator")
            let reply = try await batch(gateway, """
                {"calls": [{"method": "GET", "path": "/v1/notes/echo?name=a"}, {"method": "GET", "path": "/v1/notes/echo?name=b"},
                           {"method": "GET", "path": "/v1/notes/echo?name=c"}, {"method": "GET", "path": "/v1/notes/echo?name=d"},
                           {"method": "GET", "path": "/v1/notes/echo?name=e"}]}
                """)
            let statuses = (reply.object["results"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? Int }
            #expect(statuses.count == 5)
            #expect(statuses.filter { $0 == 429 }.count >= 1, "the calls spend the caller's limit: \(statuses)")
            #expect(statuses.allSatisfy { $0 == 200 || $0 == 429 }, "\(statuses)")
        }
    }

    @Test("bad batches are 422 problems naming the member: no calls, too many, both forms, unknown operation or dependency, a circle, a nested batch")
    func badInput() async throws {
        try await TestGateway.with(notes, yaml: notesYAML + "batch: { maxCalls: 3 }\n") { gateway in
            func pointer(_ json: String) async throws -> (Int, String?) {
                let reply = try await batch(gateway, json)
                let errors = reply.object["errors"] as? [[String: Any]]
                return (reply.status, errors?.first?["pointer"] as? String)
            }
            #expect(try await pointer(#"{"calls": []}"#) == (422, "/calls"))
            #expect(try await pointer(#"{"calls": [{"path": "/a", "method": "GET"}, {"path": "/b", "method": "GET"}, {"path": "/c", "method": "GET"}, {"path": "/d", "method": "GET"}]}"#) == (422, "/calls"))
            #expect(try await pointer(#"{"calls": [{"operation": "notes.echo", "method": "GET", "path": "/x"}]}"#) == (422, "/calls/0"))
            #expect(try await pointer(#"{"calls": [{"operation": "nothing.here"}]}"#) == (422, "/calls/0/operation"))
            #expect(try await pointer(#"{"calls": [{"method": "GET", "path": "/x", "dependsOn": ["y"]}]}"#) == (422, "/calls/0/dependsOn/0"))
            #expect(try await pointer(#"{"calls": [{"id": "a", "method": "GET", "path": "/x", "dependsOn": ["b"]}, {"id": "b", "method": "GET", "path": "/y", "dependsOn": ["a"]}]}"#).0 == 422)
            #expect(try await pointer(#"{"calls": [{"method": "POST", "path": "/v1/batch"}]}"#) == (422, "/calls/0/path"))
            #expect(try await pointer(#"{"calls": [{"method": "GET", "path": "http://elsewhere/"}]}"#) == (422, "/calls/0/path"))
            #expect(try await pointer(#"{"calls": [{"method": "BREW", "path": "/x"}]}"#) == (422, "/calls/0/method"))
            #expect(try await pointer(#"{"calls": [{"id": "a", "method": "GET", "path": "/x"}, {"id": "a", "method": "GET", "path": "/y"}]}"#) == (422, "/calls/1/id"))
            let notJSON = try await gateway.gateway.handle(.post, "/v1/batch", headers: .json, body: ByteBuffer(string: "{"))
            #expect(notJSON.status == 400)
        }
    }
}

@Suite("composite endpoints")
struct CompositeTests {
    static let yaml = notesYAML + """
        composites:
          impatient:
            path: /v1/views/impatient/{id}
            steps:
              note: { operation: notes.get, input: { id: "{{request.path.id}}" } }
              slow: { operation: notes.slow, input: { ms: "{{request.query.delay}}" }, optional: true, timeout: 200ms }
            reply:
              title: "{{note/title}}"
              slow: "{{slow}}"
          note-view:
            path: /v1/views/notes/{id}
            summary: A note with a greeting for its title
            steps:
              note: { operation: notes.get, input: { id: "{{request.path.id}}" } }
              greeting: { method: GET, path: "/v1/notes/echo?name={{note/title}}" }
              slow: { operation: notes.slow, input: { ms: "{{request.query.delay}}" }, optional: true, timeout: 20s }
            reply:
              title: "{{note/title}}"
              greeting: "{{greeting/greeting}}"
              line: "{{note/title}} ({{note.status}})"
              slow: "{{slow}}"

        """

    @Test("steps in parallel where they can, inputs from the request and earlier replies, the reply in its declared shape")
    func composes() async throws {
        try await TestGateway.with(notes, yaml: Self.yaml) { gateway in
            let created = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: .json,
                                                           body: ByteBuffer(string: #"{"title": "Café & co", "body": "b"}"#))
            let id = try #require(created.object["id"] as? String)
            let reply = try await gateway.gateway.handle(.get, "/v1/views/notes/\(id)?delay=10")
            #expect(reply.status == 200)
            #expect(reply.object["title"] as? String == "Café & co")
            #expect(reply.object["greeting"] as? String == "hello, Café & co", "a reference in a path is percent-encoded")
            #expect(reply.object["line"] as? String == "Café & co (200)")
            #expect((reply.object["slow"] as? [String: Any])?["greeting"] as? String == "done")
            #expect(reply.object["errors"] == nil)

            // An optional step that times out: 200, its problem under errors, its value null.
            let partial = try await gateway.gateway.handle(.get, "/v1/views/impatient/\(id)?delay=10000")
            #expect(partial.status == 200)
            #expect(partial.object["title"] as? String == "Café & co")
            #expect(partial.object["slow"] is NSNull)
            let errors = partial.object["errors"] as? [String: Any]
            #expect((errors?["slow"] as? [String: Any])?["status"] as? Int == 504)

            // A required step that fails: its status, every problem under errors, dependents not made.
            let missing = try await gateway.gateway.handle(.get, "/v1/views/notes/0123456789abcdef0123456789abcdef?delay=1")
            #expect(missing.status == 404)
            #expect(missing.headers[.contentType] == "application/problem+json")
            let problems = missing.object["errors"] as? [String: Any]
            #expect((problems?["note"] as? [String: Any])?["status"] as? Int == 404)
            #expect((problems?["greeting"] as? [String: Any])?["status"] as? Int == 424)
        }
    }

    @Test("composites are operations: in /openapi.json, in the route list, callable by name in a batch; their access rule applies")
    func described() async throws {
        let yaml = Self.yaml + "    access: user\n"
        try await TestGateway.with(notes, yaml: yaml) { gateway in
            let document = try await gateway.openAPIDocument()
            let item = (document["paths"] as? [String: Any])?["/v1/views/notes/{id}"] as? [String: Any]
            #expect((item?["get"] as? [String: Any])?["operationId"] as? String == "composite.note-view")
            #expect(gateway.gateway.routes.contains { $0.name == "composite.note-view" })
            #expect(gateway.gateway.operation(named: "composite.note-view") != nil)
            let guest = try await gateway.gateway.handle(.get, "/v1/views/notes/x")
            #expect(guest.status == 401)
        }
    }

    @Test("templates, compiled once: JSON pointers with ~1 and ~0 and array indices, references in text and in paths (percent-encoded), literals untouched")
    func templates() throws {
        var environment = CompositeService.Environment(path: ["id": "a b"], query: [(name: "q", value: "x/y")], body: nil)
        environment.values["venue"] = .object(["a/b": .string("slash"), "m~n": .string("tilde"), "stops": .array([.object(["name": .string("First")]), .null]),
                                               "lat": .number(25.03)])
        let template = CompiledTemplate(.object([
            "slash": .string("{{venue/a~1b}}"), "tilde": .string("{{venue/m~0n}}"), "first": .string("{{venue/stops/0/name}}"),
            "missing": .string("{{venue/stops/5/name}}"), "lat": .string("{{venue/lat}}"), "line": .string("at {{venue/lat}} for {{request.path.id}}"),
            "plain": .string("no {{ reference"), "list": .array([.string("{{request.query.q}}"), .number(1), .bool(true)]),
        ]))
        let value = template.evaluate(environment)
        #expect(value == .object([
            "slash": .string("slash"), "tilde": .string("tilde"), "first": .string("First"), "missing": .null, "lat": .number(25.03),
            "line": .string("at 25.03 for a b"), "plain": .string("no {{ reference"), "list": .array([.string("x/y"), .number(1), .bool(true)]),
        ]))
        let path = CompiledTemplate(.string("/v1/stops?near={{venue/lat}}&name={{request.path.id}}&q={{request.query.q}}"))
        #expect(path.text(environment, encoded: true) == "/v1/stops?near=25.03&name=a%20b&q=x%2Fy")
        #expect(CompiledTemplate(.string("/v1/plain")).text(environment, encoded: true) == "/v1/plain")
        #expect(CompositeReference.parse("venue/a~1b/~0")?.tokens == ["a/b", "~"])
    }

    @Test("plugins.yaml: a reference to no step, a circle, an unknown parameter, a bad reference and an unknown operation are refused")
    func badDefinitions() async throws {
        func problem(_ composite: String) -> String {
            do {
                _ = try GatewayConfiguration.parse(Data((notesYAML + "composites:\n  view:\n" + composite).utf8), file: "plugins.yaml", knownPlugins: ["notes"])
                return "no error"
            } catch {
                return "\(error)"
            }
        }
        #expect(problem("    path: /v1/v/{id}\n    steps:\n      a: { operation: notes.get, input: { id: \"{{b/id}}\" } }\n").contains("no step is named 'b'"))
        #expect(problem("    path: /v1/v/{id}\n    steps:\n      a: { operation: notes.get, input: { id: \"{{b/id}}\" } }\n      b: { operation: notes.get, input: { id: \"{{a/id}}\" } }\n").contains("circle"))
        #expect(problem("    path: /v1/v/{id}\n    steps:\n      a: { operation: notes.get, input: { id: \"{{request.path.other}}\" } }\n").contains("not a parameter"))
        #expect(problem("    path: /v1/v\n    steps:\n      a: { method: GET, path: \"/v1/notes/echo?name={{request.nothing}}\" }\n").contains("is not a reference"))
        #expect(problem("    path: /v1/v\n    steps:\n      a: { operation: notes.echo, method: GET }\n").contains("either operation"))
        #expect(problem("    path: /v1/v\n    steps:\n      a: { method: GET, path: /v1/notes/echo }\n") == "no error")
        await #expect(throws: (any Error).self) {
            try await TestGateway.with(notes, yaml: notesYAML + "composites:\n  view:\n    path: /v1/v\n    steps:\n      a: { operation: notes.nothing }\n") { _ in }
        }
    }
}
