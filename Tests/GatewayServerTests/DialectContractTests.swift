import Foundation
import GatewayCore
import GatewayServer
import GatewaySupport
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import Testing

/// Dialect routes are declared like operations and the host runs them through the same stages:
/// principal, rate limit, cache, authorization (access rule, key scopes, the plugin's hook).
@Suite("contract: dialect routes and the authorize hook")
struct DialectContractTests {
    static let xCache = HTTPField.Name("X-Cache")!

    func plugin(_ gateway: TestGateway) throws -> NotesPlugin {
        try #require(gateway.gateway.plugins.first { $0.id == "notes" }?.instance as? NotesPlugin)
    }

    func legacy(_ response: InProcessResponse) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
    }

    func createNote(_ gateway: TestGateway, token: String) async throws -> String {
        let created = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: [.contentType: "application/json", .authorization: "Bearer \(token)"],
                                                       body: ByteBuffer(string: #"{"title": "Old", "body": "b"}"#))
        return try #require(try legacy(created)["id"] as? String)
    }

    @Test("a dialect route's access rule is enforced by the host, with the dialect's error shape")
    func accessRule() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let user = try await gateway.register("ada")
            let id = try await createNote(gateway, token: user.token)
            let plugin = try plugin(gateway)
            // A guest: 401 in the legacy shape ({code, msg}), and the handler never ran.
            let guest = try await gateway.gateway.handle(.get, "/legacy/note/\(id)")
            #expect(guest.status == 200)
            #expect(try legacy(guest)["code"] as? Int == 4010)
            #expect(plugin.handlerCalls.count == 0)
            // A key without the plugin's read scope: 403, in the legacy shape.
            let key = try await gateway.createKey(token: user.token, grant: #"{"label": "w", "scopes": ["notes:write"]}"#)
            let scoped = try await gateway.gateway.handle(.get, "/legacy/note/\(id)?apikey=\(key.secret)")
            #expect(try legacy(scoped)["code"] as? Int == 4030)
            // A credential that does not resolve: 401 in the legacy shape.
            let unknown = try await gateway.gateway.handle(.get, "/legacy/note/\(id)?apikey=nope")
            #expect(try legacy(unknown)["code"] as? Int == 4010)
            #expect(plugin.handlerCalls.count == 0)
            // The user: the note, typed input decoded from the path.
            let reader = try await gateway.createKey(token: user.token, grant: #"{"label": "r", "scopes": ["notes:read"]}"#)
            let read = try await gateway.gateway.handle(.get, "/legacy/note/\(id)?apikey=\(reader.secret)")
            #expect(try legacy(read)["t"] as? String == "Old")
            // Typed input that does not validate: 422 in the legacy shape.
            let bad = try await gateway.gateway.handle(.get, "/legacy/note/not-an-id?apikey=\(reader.secret)")
            #expect(try legacy(bad)["code"] as? Int == 4220)
        }
    }

    @Test("the plugin's authorize hook runs for operations and dialect routes alike, before input is decoded")
    func authorizeHook() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let user = try await gateway.register("ada")
            let key = try await gateway.createKey(token: user.token, grant: #"{"label": "r", "scopes": ["notes:read"]}"#)
            let plugin = try plugin(gateway)
            let before = plugin.hookCalls.count
            // `locked` is not even a valid note id: the hook refuses it before decoding would.
            let native = try await gateway.gateway.handle(.get, "/v1/notes/notes/locked")
            #expect(native.status == 403)
            #expect(String(buffer: native.body).contains("This note is locked."))
            let dialect = try await gateway.gateway.handle(.get, "/legacy/note/locked?apikey=\(key.secret)")
            #expect(try legacy(dialect)["code"] as? Int == 4030)
            #expect(try legacy(dialect)["msg"] as? String == "This note is locked.")
            // Untagged routes pass the hook; it still ran for them.
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=x").status == 200)
            #expect(plugin.hookCalls.count == before + 3)
            #expect(plugin.handlerCalls.count == 0)
        }
    }

    @Test("a dialect route is cached by the host: a hit skips the handler, a write to its tag purges it, the hook still decides")
    func cached() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let user = try await gateway.register("ada")
            let id = try await createNote(gateway, token: user.token)
            let plugin = try plugin(gateway)
            let headers: HTTPFields = [.authorization: "Bearer \(user.token)"]
            let miss = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: headers)
            #expect(miss.headers[Self.xCache] == "MISS")
            #expect(miss.headers[.eTag] != nil)
            #expect(miss.headers[.cacheControl] == "private, max-age=30")
            let hit = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: headers)
            #expect(hit.headers[Self.xCache] == "HIT")
            #expect(hit.body == miss.body)
            #expect(plugin.handlerCalls.count == 1)
            // Both Link fields are stored and served again.
            #expect(hit.headers[fields: .link].count == 2)
            // Another caller has an entry of its own (per-principal policy).
            let other = try await gateway.register("bob")
            let second = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: [.authorization: "Bearer \(other.token)"])
            #expect(second.headers[Self.xCache] == "MISS")
            #expect(plugin.handlerCalls.count == 2)
            // A write invalidating the route's tag purges it.
            _ = try await gateway.gateway.handle(.post, "/v1/notes/notes", headers: .json, body: ByteBuffer(string: #"{"title": "new", "body": "b"}"#))
            let after = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: headers)
            #expect(after.headers[Self.xCache] == "MISS")
            // If-None-Match gets a 304 from the cache, as for an operation.
            let etag = try #require(after.headers[.eTag])
            let revalidated = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: [.authorization: "Bearer \(user.token)", .ifNoneMatch: etag])
            #expect(revalidated.status == 304)
        }
    }

    @Test("a dialect route is rate limited by the host, at its declared cost, with the dialect's error shape")
    func rateLimited() async throws {
        let yaml = notesYAML + "    limits: { user: 5/min }\n"
        try await TestGateway.with(notes, yaml: yaml, limits: true) { gateway in
            let user = try await gateway.register("ada")
            let id = try await createNote(gateway, token: user.token)
            let headers: HTTPFields = [.authorization: "Bearer \(user.token)", .cacheControl: "no-store"]
            // The create cost 1 of 5; each read costs 2.
            let first = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: headers)
            #expect(first.headers[HTTPField.Name("X-RateLimit-Remaining")!] == "2")
            #expect(first.headers[HTTPField.Name("RateLimit-Policy")!] != nil)
            let second = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: headers)
            #expect(second.headers[HTTPField.Name("X-RateLimit-Remaining")!] == "0")
            let limited = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: headers)
            #expect(try legacy(limited)["code"] as? Int == 4290)
            #expect(limited.headers[.retryAfter] != nil)
        }
    }

    @Test("a repeated response header survives, from an operation and from a dialect route")
    func repeatedHeader() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let native = try await gateway.gateway.handle(.get, "/v1/notes/links")
            #expect(native.headers[fields: .link].map(\.value) == ["</v1/notes/notes>; rel=\"collection\"", "</v1/notes/echo>; rel=\"related\""])
            let user = try await gateway.register("ada")
            let id = try await createNote(gateway, token: user.token)
            let dialect = try await gateway.gateway.handle(.get, "/legacy/note/\(id)", headers: [.authorization: "Bearer \(user.token)"])
            #expect(dialect.headers[fields: .link].count == 2)
            #expect(dialect.headers[fields: .link].last?.value == "</v1/notes/notes/\(id)>; rel=\"alternate\"")
        }
    }
}

/// The COIMOTION kit's error codes: one documented code per problem kind.
@Suite("contract: the COIMOTION kit")
struct CoimotionKitTests {
    @Test("every problem kind has its errCode, and the app-key problem is -1", arguments: GatewayError.Kind.allCases)
    func errorCodes(kind: GatewayError.Kind) {
        let expected: [GatewayError.Kind: Coimotion.ErrorCode] = [
            .unknownApplication: .unknownApplication, .badRequest: .invalidInput, .invalid: .invalidInput, .contentTooLarge: .invalidInput,
            .unsupportedMediaType: .invalidInput, .unauthorized: .notSignedIn, .forbidden: .forbidden, .notFound: .notFound, .gone: .notFound,
            .conflict: .conflict, .preconditionFailed: .conflict, .quotaExceeded: .tooManyRequests,
        ]
        let error = GatewayError.sample(of: kind)
        #expect(error.kind == kind)
        #expect(Coimotion.ErrorCode(error) == expected[kind] ?? .other)
    }

    @Test("an error is HTTP 200 with errCode and message; a 401 ends the session")
    func renderedErrors() throws {
        let missingKey = Coimotion.renderError(.unknownApplication("The app key is missing."))
        #expect(missingKey.status == .ok)
        #expect(String(buffer: missingKey.bytes) == #"{"errCode":-1,"message":"The app key is missing."}"#)
        let signedOut = Coimotion.renderError(.unauthorized("Please log in first."))
        #expect(String(buffer: signedOut.bytes) == #"{"errCode":2,"message":"Please log in first.","token":""}"#)
        let reply = try Coimotion.response(.ok(["accName": "mei"], message: "Register Ok.", token: .issue("t1")))
        #expect(String(buffer: reply.bytes) == #"{"errCode":0,"message":"Register Ok.","value":{"accName":"mei"},"token":"t1"}"#)
    }
}

extension GatewayError {
    /// An error of `kind`, made with its public constructor.
    static func sample(of kind: Kind) -> GatewayError {
        switch kind {
        case .badRequest: .badRequest("x")
        case .unauthorized: .unauthorized()
        case .forbidden: .forbidden("x")
        case .unknownApplication: .unknownApplication("x")
        case .notFound: .notFound("x")
        case .methodNotAllowed: .methodNotAllowed("PUT", allowed: ["GET"])
        case .notAcceptable: .notAcceptable("x")
        case .conflict: .conflict("x")
        case .gone: .gone("x")
        case .preconditionFailed: .preconditionFailed("x")
        case .contentTooLarge: .contentTooLarge(limit: 1)
        case .unsupportedMediaType: .unsupportedMediaType("text/plain", accepted: ["application/json"])
        case .invalid: .invalid("x")
        case .quotaExceeded: .quotaExceeded(policy: "user", retryAfter: 1)
        case .internalError: .internalError()
        case .badGateway: .badGateway("x")
        case .unavailable: .unavailable("x")
        case .gatewayTimeout: .gatewayTimeout("x")
        case .failedDependency: .failedDependency("x")
        }
    }
}
