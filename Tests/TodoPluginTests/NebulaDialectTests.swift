import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdTesting
import NIOCore
@testable import TodoPlugin
import Testing

@Suite("NEC BaaS dialect")
struct NebulaDialectTests {
    static let app: HTTPFields = [HTTPField.Name("X-Application-Id")!: "app1", HTTPField.Name("X-Application-Key")!: "app1-key-123"]
    static let master: HTTPFields = [HTTPField.Name("X-Application-Id")!: "app1", HTTPField.Name("X-Application-Key")!: "app1-master-key-123456"]
    static let base = "/1/t1"

    static func session(_ token: String) -> HTTPFields {
        var fields = app
        fields[HTTPField.Name("X-Session-Token")!] = token
        return fields
    }

    @Test("the seed app's flow, speaking only the dialect over a real socket: list by updatedAt, add, delete", arguments: TestStorage.available)
    func seedFlow(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            try await gateway.test(.live) { client in
                func send(_ method: HTTPRequest.Method, _ path: String, _ body: String? = nil) async throws -> (Int, JSONValue) {
                    var headers = Self.app
                    if body != nil { headers[.contentType] = "application/json" }
                    let response = try await client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
                    return (Int(response.status.code), try JSONValue.parse(response.body))
                }
                let list = "\(Self.base)/objects/todos?order=updatedAt&limit=-1&count=1"
                var (status, reply) = try await send(.get, list)
                #expect(status == 200)
                #expect(reply["results"] == .array([]))
                #expect(reply["count"] == .number(0))
                #expect(reply["currentTime"]?.string?.hasSuffix("Z") == true)

                var ids: [String] = []
                for text in ["牛乳を買う", "Write the report", "Call mom"] {
                    (status, reply) = try await send(.post, "\(Self.base)/objects/todos", #"{"description": "\#(text)"}"#)
                    #expect(status == 201)
                    let id = try #require(reply["_id"]?.string)
                    #expect(id.count == 24)
                    #expect(reply["description"]?.string == text)
                    #expect(reply["etag"]?.string?.count == 36)
                    let created = try #require(reply["createdAt"]?.string)
                    #expect(created.count == 24 && created.hasSuffix("Z") && created.dropLast(4).hasSuffix("."), "like 2013-08-27T05:19:16.000Z: \(created)")
                    #expect(reply["ACL"]?["r"] == .array([.string("g:anonymous")]))
                    #expect(reply["id"] == nil && reply["acl"] == nil && reply["owner"] == nil, "only the old field set")
                    ids.append(id)
                }
                (status, reply) = try await send(.get, list)
                #expect(reply["count"] == .number(3))
                #expect(reply["results"]?.arrayValue?.compactMap { $0["_id"]?.string } == ids, "ascending updatedAt")

                // Touch the first: it moves to the end.
                (status, _) = try await send(.put, "\(Self.base)/objects/todos/\(ids[0])", #"{"description": "牛乳を2本買う"}"#)
                #expect(status == 200)
                (_, reply) = try await send(.get, list)
                #expect(reply["results"]?.arrayValue?.compactMap { $0["_id"]?.string } == [ids[1], ids[2], ids[0]])

                // Swipe to delete.
                (status, reply) = try await send(.delete, "\(Self.base)/objects/todos/\(ids[1])")
                #expect(status == 200)
                #expect(reply == .object([:]))
                (_, reply) = try await send(.get, list)
                #expect(reply["results"]?.arrayValue?.compactMap { $0["_id"]?.string } == [ids[2], ids[0]])
            }
        }
    }

    @Test("users, login with username or email, users/current and logout share the gateway's accounts", arguments: TestStorage.available)
    func accounts(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let register = #"{"username": "taro", "email": "taro@example.com", "password": "password-123"}"#
            let created = try await gateway.call(.post, "\(Self.base)/users", headers: Self.app, json: register)
            #expect(created.status == 201)
            #expect(created.json["username"]?.string == "taro")
            #expect(created.json["email"]?.string == "taro@example.com")
            let taken = try await gateway.call(.post, "\(Self.base)/users", headers: Self.app, json: register)
            #expect(taken.status == 409)
            #expect(taken.json["reasonCode"]?.string == "duplicate_username")
            #expect(taken.json["error"]?.string?.isEmpty == false)
            #expect(try await gateway.call(.post, "\(Self.base)/users", headers: Self.app, json: #"{"username": "x", "email": "nope", "password": "password-123"}"#).status == 400)

            let wrong = try await gateway.call(.post, "\(Self.base)/login", headers: Self.app, json: #"{"username": "taro", "password": "nope-nope"}"#)
            #expect(wrong.status == 401)
            #expect(wrong.json["reasonCode"]?.string == "unauthorized")
            let login = try await gateway.call(.post, "\(Self.base)/login", headers: Self.app, json: #"{"email": "TARO@example.com", "password": "password-123"}"#)
            #expect(login.status == 200)
            let token = try #require(login.json["sessionToken"]?.string)
            #expect((login.json["expire"]?.numberValue ?? 0) > Date().timeIntervalSince1970)

            let current = try await gateway.call(.get, "\(Self.base)/users/current", headers: Self.session(token))
            #expect(current.json["_id"] == created.json["_id"])
            #expect(try await gateway.call(.get, "\(Self.base)/users/current", headers: Self.app).status == 401)

            // The same account signs in natively.
            #expect(try await gateway.call(.post, "/v1/auth/login", json: #"{"username": "taro", "password": "password-123"}"#).status == 200)

            // An object created with a session is its owner's alone.
            let mine = try await gateway.call(.post, "\(Self.base)/objects/todos", headers: Self.session(token), json: #"{"description": "private"}"#)
            let id = try #require(mine.json["_id"]?.string)
            #expect(mine.json["ACL"]?["owner"] == created.json["_id"])
            #expect(mine.json["ACL"]?["r"] == .array([]))
            #expect(try await gateway.call(.get, "\(Self.base)/objects/todos/\(id)", headers: Self.app).status == 404)
            #expect(try await gateway.call(.get, "\(Self.base)/objects/todos/\(id)", headers: Self.master).status == 200, "the master key bypasses ACLs")
            #expect(try await gateway.call(.get, "\(Self.base)/objects/todos/\(id)", headers: Self.session(token)).status == 200)

            #expect(try await gateway.call(.delete, "\(Self.base)/login", headers: Self.session(token)).status == 200)
            gateway.gateway.forgetCredentials()
            #expect(try await gateway.call(.get, "\(Self.base)/users/current", headers: Self.session(token)).status == 401)
        }
    }

    @Test("queries, updates with $set/$inc/$unset and $full_update, ?etag=, _batch and query delete", arguments: TestStorage.available)
    func objects(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let bucket = "\(Self.base)/objects/todos"
            var ids: [String] = []
            for (index, text) in ["alpha", "beta", "gamma", "delta"].enumerated() {
                let reply = try await gateway.call(.post, bucket, headers: Self.app, json: #"{"description": "\#(text)", "n": \#(index), "done": \#(index % 2 == 0)}"#)
                ids.append(try #require(reply.json["_id"]?.string))
            }
            let query = try await gateway.call(.get, "\(bucket)?where=\(encoded(#"{"done": true}"#))&order=-n&projection=\(encoded(#"{"description": 1}"#))", headers: Self.app)
            #expect(query.json["results"]?.arrayValue?.compactMap { $0["description"]?.string } == ["gamma", "alpha"])
            #expect(query.json["results"]?.arrayValue?.first?["n"] == nil)
            #expect(query.json["results"]?.arrayValue?.first?["_id"] != nil)
            #expect(query.json["count"] == nil, "count only with count=1")
            let paged = try await gateway.call(.get, "\(bucket)?order=n&skip=1&limit=2&count=1", headers: Self.app)
            #expect(paged.json["results"]?.arrayValue?.compactMap { $0["description"]?.string } == ["beta", "gamma"])
            #expect(paged.json["count"] == .number(4))

            let object = try await gateway.call(.get, "\(bucket)/\(ids[0])", headers: Self.app)
            let etag = try #require(object.json["etag"]?.string)
            let mismatch = try await gateway.call(.put, "\(bucket)/\(ids[0])?etag=00000000-0000-0000-0000-000000000000", headers: Self.app, json: #"{"n": 9}"#)
            #expect(mismatch.status == 409)
            #expect(mismatch.json["reasonCode"]?.string == "etag_mismatch")
            #expect(mismatch.json["detail"]?["etag"]?.string == etag, "the detail is the current version, as the SDKs read it")
            #expect(mismatch.json["detail"]?["_id"]?.string == ids[0])
            let updated = try await gateway.call(.put, "\(bucket)/\(ids[0])?etag=\(etag)", headers: Self.app,
                                                 json: #"{"extra": "x", "$inc": {"n": 5}, "$unset": {"done": ""}}"#)
            #expect(updated.status == 200)
            #expect(updated.json["n"] == .number(5))
            #expect(updated.json["done"] == nil)
            #expect(updated.json["extra"]?.string == "x")
            #expect(updated.json["etag"]?.string != etag)
            let full = try await gateway.call(.put, "\(bucket)/\(ids[0])", headers: Self.app, json: #"{"$full_update": {"description": "replaced"}}"#)
            #expect(full.json["n"] == nil && full.json["extra"] == nil)
            #expect(full.json["done"] == nil, "a full update replaces every field")
            #expect(try await gateway.call(.put, "\(bucket)/\(ids[0])", headers: Self.app, json: #"{"$full_update": {"done": 3}}"#).status == 400)

            let batch = """
                {"requests": [
                  {"op": "insert", "data": {"description": "epsilon"}},
                  {"op": "update", "_id": "\(ids[1])", "data": {"$set": {"done": true}}},
                  {"op": "delete", "_id": "\(ids[2])", "etag": "stale"},
                  {"op": "delete", "_id": "\(ids[3])"}
                ]}
                """
            let batched = try await gateway.call(.post, "\(bucket)/_batch", headers: Self.app, json: batch)
            #expect(batched.status == 200)
            #expect(batched.json["results"]?.arrayValue?.compactMap { $0["result"]?.string } == ["ok", "ok", "conflict", "ok"])
            #expect(batched.json["results"]?.arrayValue?[2]["reasonCode"]?.string == "etag_mismatch")

            let deleted = try await gateway.call(.delete, "\(bucket)?where=\(encoded(#"{"done": true}"#))", headers: Self.app)
            #expect(deleted.json["deletedObjects"] == .number(2), "beta (set by the batch) and gamma (its delete failed)")
            let rest = try await gateway.call(.get, "\(bucket)?order=description", headers: Self.app)
            #expect(rest.json["results"]?.arrayValue?.compactMap { $0["description"]?.string } == ["epsilon", "replaced"])
        }
    }

    @Test("bad input answers in the old error shape with the old status codes")
    func errors() async throws {
        try await withTodo { gateway in
            let bucket = "\(Self.base)/objects/todos"
            let cases: [(HTTPRequest.Method, String, HTTPFields, String?, Int, String)] = [
                (.get, bucket, [:], nil, 401, "unauthorized"),
                (.get, bucket, [HTTPField.Name("X-Application-Id")!: "app1", HTTPField.Name("X-Application-Key")!: "wrong-key"], nil, 401, "unauthorized"),
                (.get, "/1/nope/objects/todos", Self.app, nil, 404, "not_found"),
                (.get, "\(Self.base)/objects/nope", Self.app, nil, 404, "not_found"),
                (.post, bucket, Self.app, "{bad json", 400, "invalid_argument"),
                (.post, bucket, Self.app, #"{"done": true}"#, 400, "invalid_argument"),
                (.get, "\(bucket)?where=\(encoded(#"{"a": {"$bad": 1}}"#))", Self.app, nil, 400, "invalid_argument"),
                (.get, "\(bucket)?limit=abc", Self.app, nil, 400, "invalid_argument"),
                (.get, "\(bucket)/xyz", Self.app, nil, 400, "invalid_argument"),
                (.post, bucket, Self.app, #"{"description": "a", "blob": "\#(String(repeating: "x", count: 3000))"}"#, 413, "request_entity_too_large"),
            ]
            for (method, path, headers, body, status, reason) in cases {
                let reply = try await gateway.call(method, path, headers: headers, json: body)
                #expect(reply.status == status, "\(method) \(path.prefix(80)): \(reply.status) \(reply.json.jsonText.prefix(200))")
                #expect(reply.json["reasonCode"]?.string == reason, "\(path.prefix(80)): \(reply.json.jsonText.prefix(200))")
                #expect(reply.json.objectValue.map { Set($0.keys) } == ["error", "reasonCode", "detail"])
            }
            var plain = Self.app
            plain[.contentType] = "text/plain"
            #expect(try await gateway.call(.post, bucket, headers: plain, json: "x").status == 415)
        }
    }
}
