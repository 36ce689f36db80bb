import Foundation
import GatewayCore
import NIOCore
import Testing

@Suite("operation input decoding")
struct OperationInputTests {
    struct Path: Codable, Sendable { var id: String }
    struct Query: Codable, Sendable {
        var limit: Int?
        var tags: [String]?
        var exact: Bool?
        var since: Date?
    }
    struct Body: Codable, Sendable, ValidatableInput {
        var title: String
        var count: Int
        var nested: Nested?
        struct Nested: Codable, Sendable { var values: [Double] }
        func validate() -> [GatewayError.FieldError] {
            count < 0 ? [.init(pointer: "/count", detail: "must not be negative")] : []
        }
    }
    struct Output: Codable, Sendable, Equatable {
        var id: String
        var limit: Int?
        var tags: [String]?
        var title: String
    }

    static let operation = Route.define("test.op", .post, "/items/{id}", summary: "test")
        .path(Path.self).query(Query.self).body(Body.self)
        .returns(Output.self) { input, _ in
            Output(id: input.path.id, limit: input.query.limit, tags: input.query.tags, title: input.body.title)
        }

    static let context = OperationContext(
        principal: .anonymous(address: "127.0.0.1"), requestID: "r", logger: .init(label: "t"), headers: [:],
        plugin: PluginContextFixture.make())

    func call(query: [(String, String)] = [], body: String?, contentType: String? = "application/json") async throws -> RouteReply {
        try await Self.operation(
            RouteRequest(pathParameters: ["id": "a b"], queryParameters: query.map { (name: $0.0, value: $0.1) },
                             body: body.map { ByteBuffer(string: $0) } ?? ByteBuffer(), contentType: contentType),
            context: Self.context)
    }

    func problem(query: [(String, String)] = [], body: String?, contentType: String? = "application/json") async -> GatewayError? {
        do {
            _ = try await call(query: query, body: body, contentType: contentType)
            return nil
        } catch {
            return error as? GatewayError
        }
    }

    @Test("path, query and body decode into their declared types")
    func decodes() async throws {
        let reply = try await call(query: [("limit", "5"), ("tags", "a,b"), ("exact", "true"), ("since", "2024-05-01T10:00:00Z")],
                                   body: #"{"title": "t", "count": 1}"#)
        #expect(reply.status == 201)
        guard case .json(let value) = reply.body, let output = value as? Output else {
            Issue.record("expected a JSON output")
            return
        }
        #expect(output == Output(id: "a b", limit: 5, tags: ["a", "b"], title: "t"))
    }

    @Test("repeated query parameters fill an array")
    func repeatedParameters() async throws {
        let reply = try await call(query: [("tags", "x"), ("tags", "y")], body: #"{"title": "t", "count": 1}"#)
        guard case .json(let value) = reply.body else { return }
        #expect((value as? Output)?.tags == ["x", "y"])
    }

    @Test("a repeated scalar parameter takes its last value; a repeated list keeps its order among other parameters")
    func repeatedScalarAndInterleavedList() async throws {
        let reply = try await call(query: [("limit", "3"), ("tags", "x"), ("limit", "7"), ("other", "z"), ("tags", "y")],
                                   body: #"{"title": "t", "count": 1}"#)
        guard case .json(let value) = reply.body, let output = value as? Output else {
            Issue.record("expected a JSON output")
            return
        }
        #expect(output.limit == 7)
        #expect(output.tags == ["x", "y"])
    }

    @Test("a query value of the wrong type is a 422 naming the parameter", arguments: [
        ("limit", "ten", "query.limit"), ("limit", "99999999999999999999999", "query.limit"), ("exact", "perhaps", "query.exact"),
        ("since", "yesterday", "query.since"),
    ])
    func wrongQueryType(name: String, value: String, pointer: String) async {
        let error = await problem(query: [(name, value)], body: #"{"title": "t", "count": 1}"#)
        #expect(error?.status == 422)
        #expect(error?.errors.first?.pointer == pointer)
    }

    @Test("body problems: malformed is 400, wrong type / missing / null / invalid are 422 with JSON pointers")
    func bodyProblems() async {
        #expect(await problem(body: #"{"title": "#)?.status == 400)
        #expect(await problem(body: nil)?.status == 400)
        #expect(await problem(body: "")?.status == 400)
        let wrong = await problem(body: #"{"title": "t", "count": "many"}"#)
        #expect(wrong?.status == 422)
        #expect(wrong?.errors.first == .init(pointer: "/count", detail: "expected an integer"))
        let nested = await problem(body: #"{"title": "t", "count": 1, "nested": {"values": [1, "x"]}}"#)
        #expect(nested?.errors.first?.pointer == "/nested/values/1")
        let missing = await problem(body: #"{"count": 1}"#)
        #expect(missing?.errors.first == .init(pointer: "/title", detail: "is required"))
        let null = await problem(body: #"{"title": null, "count": 1}"#)
        #expect(null?.errors.first?.detail == "expected a string, found null")
        let invalid = await problem(body: #"{"title": "t", "count": -1}"#)
        #expect(invalid?.status == 422)
        #expect(invalid?.errors.first == .init(pointer: "/count", detail: "must not be negative"))
        let deep = await problem(body: String(repeating: "[", count: 100_000))
        #expect(deep?.status == 400)
    }

    @Test("a body of another media type is a 415")
    func mediaType() async {
        let error = await problem(body: "title=t", contentType: "application/x-www-form-urlencoded")
        #expect(error?.status == 415)
        #expect(error?.headers[HTTPField.Name("Accept-Post")!] == "application/json")
    }

    @Test("problem types: quota problems use the IANA type and carry the violated policy")
    func problemTypes() {
        let quota = GatewayError.quotaExceeded(policy: "user", retryAfter: 7)
        #expect(quota.type == "https://iana.org/assignments/http-problem-types#quota-exceeded")
        #expect(quota.headers[.retryAfter] == "7")
        #expect(quota.extensions["violated-policies"] == .strings(["user"]))
        #expect(GatewayError.notFound("x").type.hasSuffix("/not-found"))
        #expect(GatewayError.methodNotAllowed("PUT", allowed: ["GET", "HEAD"]).headers[.allow] == "GET, HEAD")
    }

    @Test("principals: limit keys and resource restrictions")
    func principals() {
        let key = Principal(kind: .apiKey(keyID: "k1"), userID: "u1", scopes: ["feeds:read"], resources: ["feeds": ["504"]], address: "::1")
        #expect(key.limitKey == "key:k1")
        #expect(key.mayAccess(resource: "504", of: "feeds"))
        #expect(!key.mayAccess(resource: "505", of: "feeds"))
        #expect(key.mayAccess(resource: "anything", of: "todo"))
        #expect(Principal.anonymous(address: "10.0.0.1").limitKey == "addr:10.0.0.1")
    }

    @Test("timestamps are RFC 3339 UTC, with fractions only when present")
    func timestamps() {
        #expect(UTCTimestamp.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00Z")
        #expect(UTCTimestamp.format(Date(timeIntervalSince1970: 0.5)) == "1970-01-01T00:00:00.500Z")
        #expect(UTCTimestamp.date("2024-05-01T12:00:00+02:00") == Date(timeIntervalSince1970: 1_714_557_600))
        #expect(UTCTimestamp.date("2024-05-01") == nil)
        // RFC 3339 and nothing after it; fractions of any length, `Z` or an offset.
        #expect(UTCTimestamp.date("1910-08-08T10:39:10.961877-04:15") != nil)
        #expect(UTCTimestamp.date("2024-05-01t12:00:00z") == Date(timeIntervalSince1970: 1_714_564_800))
        // Impossible fields are refused, not rolled over (a schemathesis case: minute 99 was read as 13:39).
        for impossible in ["2024-01-01T12:99:00Z", "2024-01-01T24:00:00Z", "2024-02-30T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-01T00:00:00+02:99"] {
            #expect(UTCTimestamp.date(impossible) == nil, "\(impossible)")
        }
        for bad in ["1910-08-08T10:39:10.961877-04:15*", "2024-05-01T12:00:00Z ", "2024-05-01T12:00:00", "2024-05-01T12:00:00.Z",
                    "2024-05-01T12:00:00+0200", "2024-05-01 12:00:00Z", "2024-05-01T12:00:00+02:00:00", "+2024-05-01T12:00:00Z"] {
            #expect(UTCTimestamp.date(bad) == nil, "\(bad)")
        }
        // Whole seconds are written without a calendar: the same text Foundation writes, in any year.
        var generator = SystemRandomNumberGenerator()
        let samples = [-62_135_596_800, -1, 0, 951_782_400, 4_107_542_399, 253_402_300_799]
            + (0 ..< 2_000).map { _ in Int64.random(in: -62_135_596_800 ... 253_402_300_799, using: &generator) }
        for seconds in samples {
            let date = Date(timeIntervalSince1970: Double(seconds))
            #expect(UTCTimestamp.format(date) == date.formatted(Date.ISO8601FormatStyle()), "\(seconds)")
        }
    }

    /// A validated query of reference type, and outputs that write themselves (a struct and a class).
    final class ClassQuery: Codable, Sendable, ValidatableInput {
        let limit: Int?
        func validate() -> [GatewayError.FieldError] {
            (limit ?? 1) > 0 ? [] : [.init(pointer: "limit", detail: "must be positive"), .init(pointer: "limit", detail: "really")]
        }
    }
    struct Written: Codable, Sendable, JSONWritable {
        var limit: Int
        func writeJSON(into bytes: inout [UInt8]) { bytes += Array(#"{"limit":\#(limit),"by":"struct"}"#.utf8) }
    }
    final class WrittenClass: Codable, Sendable, JSONWritable {
        let words: [String]
        init(words: [String]) { self.words = words }
        func writeJSON(into bytes: inout [UInt8]) { bytes += Array(#"{"words":\#(words.count),"by":"class"}"#.utf8) }
    }

    @Test("validation and self-writing outputs prepared once per operation work for structs and classes alike")
    func preparedValidationAndWriting() async throws {
        let structOutput = Route.define("test.struct", .get, "/s", summary: "s").query(ClassQuery.self)
            .returns(Written.self) { input, _ in Written(limit: input.query.limit ?? 1) }
        let classOutput = Route.define("test.class", .get, "/c", summary: "c").query(ClassQuery.self)
            .returns(WrittenClass.self) { input, _ in WrittenClass(words: Array(repeating: "w", count: input.query.limit ?? 1)) }
        for (operation, expected) in [(structOutput, #"{"limit":3,"by":"struct"}"#), (classOutput, #"{"words":3,"by":"class"}"#)] {
            let reply = try await operation(RouteRequest(queryParameters: [(name: "limit", value: "3")]), context: Self.context)
            guard case .bytes(let bytes, let type) = reply.body else {
                Issue.record("expected written bytes")
                continue
            }
            #expect(String(buffer: bytes) == expected && type == "application/json")
            do {
                _ = try await operation(RouteRequest(queryParameters: [(name: "limit", value: "0")]), context: Self.context)
                Issue.record("a limit of 0 passed validation")
            } catch let error as GatewayError {
                #expect(error.status == 422)
                #expect(error.errors.map(\.pointer) == ["query.limit", "query.limit"])
            }
        }
        // Outputs that do not write themselves are encoded by the host.
        let plain = try await Self.operation(
            RouteRequest(pathParameters: ["id": "x"], body: ByteBuffer(string: #"{"title": "t", "count": 1}"#), contentType: "application/json"),
            context: Self.context)
        guard case .json = plain.body else {
            Issue.record("expected an output for the host to encode")
            return
        }
    }

    @Test("a reply sent whole carries its JSON encoded and its body's content type in its fields")
    func wholeReplies() throws {
        let json = RouteReply(status: .badRequest, headers: [.retryAfter: "1"], body: .json(["code": 3]))
        let (jsonFields, jsonBody) = json.whole()
        #expect(String(buffer: jsonBody) == #"{"code":3}"# && jsonFields[.contentType] == "application/json" && jsonFields[.retryAfter] == "1")
        let typed = RouteReply(body: .bytes(ByteBuffer(string: "<x/>"), contentType: "application/xml"))
        #expect(typed.whole().headers[.contentType] == "application/xml" && String(buffer: typed.whole().body) == "<x/>")
        let plain = RouteReply.text("hi")
        #expect(plain.whole().headers[.contentType] == "text/plain; charset=utf-8" && String(buffer: plain.whole().body) == "hi")
    }

    @Test("a raw handler of a method with a body reads it; of a GET it reads none; a WebSocket is not called as HTTP")
    func rawRoutes() async throws {
        let post = Route.define("test.raw", .post, "/raw", summary: "raw").handle { request, _ in RouteReply(body: request.body) }
        #expect(post.io.hasBody && post.bodyMediaTypes == ["*/*"])
        let echoed = try await post(RouteRequest(method: .post, path: "/raw", body: ByteBuffer(string: "abc")), context: Self.context)
        #expect(String(buffer: echoed.bytes) == "abc")
        let get = Route.define("test.rawget", .get, "/raw", summary: "raw").handle { _, _ in RouteReply() }
        #expect(!get.io.hasBody && get.bodyMediaTypes.isEmpty)
        let socket = Route.define(.get, "/live", summary: "live").socket { _, _, _ in }
        #expect(socket.isWebSocket)
        await #expect(throws: GatewayError.self) { _ = try await socket(RouteRequest(), context: Self.context) }
    }
}
