import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NotesFixturePlugin
import Testing

/// Hostile requests against the notes plugin: every answer must be a 4xx problem document (or a
/// success), never a 500.
@Suite("request fuzzing")
struct RequestFuzzTests {

    static let paths = ["/v1/notes/echo", "/v1/notes/notes", "/v1/notes/notes/0123456789abcdef0123456789abcdef", "/v1/notes/notes/%00",
                        "/v1/notes/notes/..%2F..%2Fetc", "/v1/notes/slow", "/legacy/notes", "/legacy/notes.txt", "/v1/notes/me/notes",
                        "/v1/notes/admin/stats", "//v1//notes//echo", "/v1/notes/notes/" + String(repeating: "a", count: 5000), "/%", "/v1/%zz"]
    static let queries = ["", "?name=x", "?name=%", "?name=%E0%A4", "?limit=-1", "?limit=abc", "?limit=100000", "?limit=1e3", "?ms=-5",
                          "?name=" + String(repeating: "%41", count: 3000), "?&&&=&", "?name=a&name=b", "?cursor=%00|x", "?ms=99999999999999999999"]
    static let bodies: [String?] = [nil, "", "{", "[]", "null", "42", #"{"title": 5}"#, #"{"title": "t", "body": "b"}"#, #"{"title": null, "body": "b"}"#,
                                    #"{"title": "t", "body": "b", "tags": "not-an-array"}"#, String(repeating: "[", count: 10_000),
                                    #"{"title": "\ud800", "body": "b"}"#, "\u{0}\u{1}\u{2}", #"{"t": "legacy"}"#,
                                    "{\"title\": \"" + String(repeating: "x", count: 300) + "\", \"body\": \"b\"}"]
    static let methods: [HTTPRequest.Method] = [.get, .post, .put, .delete, .patch, .head, .options, HTTPRequest.Method("PROPFIND")!, HTTPRequest.Method("BREW")!]
    static let contentTypes: [String?] = [nil, "application/json", "application/json; charset=utf-8", "text/plain", "application/merge-patch+json", "multipart/form-data; boundary=x", "\u{7F}"]

    @Test("2,000 random hostile requests never produce a 500")
    func hostileRequests() async throws {
        try await TestGateway.with(notes, yaml: "server: { maxBodySize: 64KB }\n" + notesYAML) { gateway in
            try await gateway.test { client in
                var rng = SplitMix(state: 0xF0221)
                var statuses: [Int: Int] = [:]
                for _ in 0..<2000 {
                    let method = Self.methods.randomElement(using: &rng)!
                    let uri = Self.paths.randomElement(using: &rng)! + Self.queries.randomElement(using: &rng)!
                    var headers = HTTPFields()
                    if let type = Self.contentTypes.randomElement(using: &rng)! {
                        // Leniently, so that a DEL in the value reaches the gateway as it was written.
                        headers.append(HTTPField(name: .contentType, lenientValue: Array(type.utf8)))
                    }
                    if Bool.random(using: &rng) { headers[.ifMatch] = ["*", "\"x\"", "garbage"].randomElement(using: &rng)! }
                    var body = Self.bodies.randomElement(using: &rng)!.map { ByteBuffer(string: $0) }
                    if Int.random(in: 0..<50, using: &rng) == 0 { body = ByteBuffer(repeating: UInt8(ascii: "x"), count: 100_000) }
                    let response = try await client.execute(uri: uri, method: method, headers: headers, body: body)
                    statuses[Int(response.status.code), default: 0] += 1
                    #expect(response.status.code < 500, "\(method) \(uri.prefix(120)) -> \(response.status.code): \(String(buffer: response.body).prefix(300))")
                    if response.status.code >= 400 && method != .head {
                        let type = response.headers[.contentType] ?? ""
                        #expect(type == "application/problem+json" || uri.hasPrefix("/legacy"), "\(method) \(uri.prefix(120)) -> \(type)")
                    }
                }
                #expect(statuses.keys.contains { $0 >= 400 })
                #expect(statuses.keys.contains { $0 < 300 })
            }
        }
    }
}
