import CompressNIO
import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NotesFixturePlugin
import Testing

@Suite("response compression")
struct CompressionTests {
    static let acceptEncoding = HTTPField.Name("Accept-Encoding")!
    static let vary = HTTPField.Name("Vary")!
    static let xCache = HTTPField.Name("X-Cache")!

    @Test("Accept-Encoding is negotiated by q-values: gzip preferred on a tie, * for unlisted codings, q=0 refuses")
    func negotiation() {
        typealias C = ResponseCompression
        #expect(C.negotiate([]) == nil)
        #expect(C.negotiate(["gzip, deflate, br"]) == .gzip)
        #expect(C.negotiate(["deflate"]) == .deflate)
        #expect(C.negotiate(["gzip;q=0.5, deflate"]) == .deflate)
        #expect(C.negotiate(["gzip;q=0, deflate;q=0"]) == nil)
        #expect(C.negotiate(["identity"]) == nil)
        #expect(C.negotiate(["br"]) == nil)
        #expect(C.negotiate(["*"]) == .gzip)
        #expect(C.negotiate(["*;q=0.1, gzip;q=0"]) == .deflate)
        #expect(C.negotiate(["X-GZIP"]) == .gzip)
        #expect(C.negotiate(["gzip;q=bogus, deflate"]) == .deflate, "an unreadable q is not acceptable")
        #expect(C.negotiate(["br", "deflate"]) == .deflate, "every field of the name counts")
        #expect(C.negotiate([";;,,=, ;q=1"]) == nil)
        #expect(C.isCompressible("application/json; charset=utf-8"))
        #expect(C.isCompressible("application/problem+json"))
        #expect(C.isCompressible("text/html"))
        #expect(!C.isCompressible("text/event-stream"))
        #expect(!C.isCompressible("image/png"))
        #expect(!C.isCompressible("application/zip"))
        #expect(!C.isCompressible("application/gzip"))
        #expect(!C.isCompressible("application/octet-stream"))
    }

    @Test("a reply may be coded when its type is compressible, it is not coded yet and no Cache-Control directive is no-transform; Vary is added once")
    func mayCode() {
        typealias C = ResponseCompression
        func fields(_ pairs: [(HTTPField.Name, String)]) -> HTTPFields { HTTPFields(pairs.map { HTTPField(name: $0.0, value: $0.1) }) }
        #expect(C.mayCode(fields([(.contentType, "application/json")])))
        #expect(C.mayCode(fields([(.cacheControl, "no-cache"), (.contentType, "Text/HTML; charset=utf-8"), (.eTag, "\"x\"")])))
        #expect(!C.mayCode(fields([])), "no type: left alone")
        #expect(!C.mayCode(fields([(.contentType, "image/png")])))
        #expect(!C.mayCode(fields([(.contentType, "application/json"), (.contentEncoding, "br")])))
        #expect(!C.mayCode(fields([(.contentEncoding, "gzip"), (.contentType, "application/json")])))
        #expect(!C.mayCode(fields([(.contentType, "application/json"), (.cacheControl, "public, No-Transform")])))
        #expect(!C.mayCode(fields([(.cacheControl, "max-age=60"), (.contentType, "application/json"), (.cacheControl, " no-transform ")])),
                "every Cache-Control field counts")
        #expect(C.mayCode(fields([(.contentType, "application/json"), (.cacheControl, "x-no-transform-later, max-age=5")])),
                "a directive is matched whole, not as part of another")
        #expect(C.listContains("max-age=5, no-transform", "no-transform") && C.listContains("NO-TRANSFORM=1", "no-transform"))
        #expect(!C.listContains("", "no-transform") && !C.listContains("no-transforms", "no-transform") && !C.listContains("no-transfor", "no-transform"))
        var headers = fields([(Self.vary, "Origin")])
        C.addVary(to: &headers)
        #expect(headers[values: Self.vary] == ["Origin", "Accept-Encoding"])
        C.addVary(to: &headers)
        #expect(headers[values: Self.vary] == ["Origin", "Accept-Encoding"], "already there: not added again")
        var star = fields([(Self.vary, "*")])
        C.addVary(to: &star)
        #expect(star[values: Self.vary] == ["*"])
        var mixed = fields([(Self.vary, "origin, ACCEPT-ENCODING")])
        C.addVary(to: &mixed)
        #expect(mixed[values: Self.vary] == ["origin, ACCEPT-ENCODING"])
    }

    static func inflate(_ body: ByteBuffer, _ coding: String) throws -> ByteBuffer {
        var body = body
        return try body.decompress(with: coding == "gzip" ? .gzip() : .zlib())
    }

    /// Fills the notes list so that its JSON is several kilobytes.
    static func fill(_ gateway: TestGateway) async throws {
        for index in 0..<40 {
            let created = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: .json,
                                                           body: ByteBuffer(string: #"{"title": "note \#(index)", "body": "a body that repeats itself, as JSON does"}"#))
            #expect(created.status == 201)
        }
    }

    @Test("a large JSON reply is gzip- or deflate-coded as asked, with Vary and a weak ETag; a cache hit too; If-None-Match still answers 304")
    func codedReplies() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await Self.fill(gateway)
            let plain = try await gateway.gateway.handle(.get, "/v1/notes/notes")
            #expect(plain.headers[.contentEncoding] == nil)
            #expect(plain.headers[Self.vary] == "Accept-Encoding", "the reply depends on Accept-Encoding even when not coded")
            #expect(plain.body.readableBytes > 2048)
            let strong = try #require(plain.headers[.eTag])
            #expect(!strong.hasPrefix("W/"))

            for (asked, coding) in [("gzip, deflate", "gzip"), ("deflate", "deflate"), ("gzip;q=0.2, deflate;q=0.9", "deflate")] {
                let coded = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [Self.acceptEncoding: asked])
                #expect(coded.status == 200)
                #expect(coded.headers[Self.xCache] == "HIT")
                #expect(coded.headers[.contentEncoding] == coding, "\(asked)")
                #expect(coded.headers[Self.vary] == "Accept-Encoding")
                #expect(coded.headers[.eTag] == "W/" + strong)
                #expect(coded.headers[.contentLength] == String(coded.body.readableBytes))
                #expect(coded.body.readableBytes < plain.body.readableBytes / 3)
                #expect(try Self.inflate(coded.body, coding) == plain.body)
            }
            // Revalidation with the weak tag (or the strong one) is still a 304.
            let revalidated = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [Self.acceptEncoding: "gzip", .ifNoneMatch: "W/" + strong])
            #expect(revalidated.status == 304)
            #expect(revalidated.body.readableBytes == 0)

            // HEAD gets the coded reply's fields and no body.
            let head = try await gateway.gateway.handle(.head, "/v1/notes/notes", headers: [Self.acceptEncoding: "gzip"])
            #expect(head.headers[.contentEncoding] == "gzip")
            #expect(head.body.readableBytes == 0)

            // Small replies and problems go as they are.
            let small = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [Self.acceptEncoding: "gzip"])
            #expect(small.headers[.contentEncoding] == nil)
            #expect(small.headers[Self.vary] == nil)
            let problem = try await gateway.gateway.handle(.get, "/v1/notes/notes?limit=nope", headers: [Self.acceptEncoding: "gzip"])
            #expect(problem.status == 400 || problem.status == 422)
            #expect(problem.headers[.contentEncoding] == nil)

            // The gateway's own endpoints too: the OpenAPI document.
            let document = try await gateway.gateway.handle(.get, "/openapi.json", headers: [Self.acceptEncoding: "gzip"])
            #expect(document.headers[.contentEncoding] == "gzip")
            _ = try JSONValue.parse(try Self.inflate(document.body, "gzip"))
        }
    }

    @Test("compression: false turns it off; minimumSize and level are read, a bad level is an error at its line")
    func settings() async throws {
        try await TestGateway.with(notes, yaml: notesYAML + "\nserver:\n  compression: false\n") { gateway in
            try await Self.fill(gateway)
            let reply = try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [Self.acceptEncoding: "gzip"])
            #expect(reply.headers[.contentEncoding] == nil)
            #expect(reply.headers[Self.vary] == nil)
        }
        try await TestGateway.with(notes, yaml: notesYAML + "\nserver:\n  compression: { minimumSize: 1MB, level: 9 }\n") { gateway in
            try await Self.fill(gateway)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/notes", headers: [Self.acceptEncoding: "gzip"]).headers[.contentEncoding] == nil)
        }
        #expect(throws: ConfigurationFileError.self) {
            try GatewayConfiguration.parse(Data("server:\n  compression: { level: 12 }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
        let parsed = try GatewayConfiguration.parse(Data("server:\n  compression: { minimumSize: 2KB, level: 1 }\n".utf8), file: "plugins.yaml", knownPlugins: [])
        #expect(parsed.server.compression.minimumSize.bytes == 2048)
        #expect(parsed.server.compression.level == 1)
        #expect(parsed.server.compression.enabled)
    }

    @Test("over a real socket: the coded bytes arrive with their length and decode to the plain reply")
    func overTheWire() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            try await Self.fill(gateway)
            try await gateway.test(.live) { client in
                let plain = try await client.execute(uri: "/v1/notes/notes", method: .get)
                let coded = try await client.execute(uri: "/v1/notes/notes", method: .get, headers: [Self.acceptEncoding: "gzip"])
                #expect(coded.headers[.contentEncoding] == "gzip")
                #expect(coded.headers[.contentLength] == String(coded.body.readableBytes))
                #expect(try Self.inflate(coded.body, "gzip") == plain.body)
            }
        }
    }
}
