import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import TodoPlugin
import Testing

/// What the official NEC BaaS SDKs call beyond the seed app's flow: long queries, soft delete,
/// looking users up and managing them, groups in ACLs, bucket management, and the old service's
/// answers for what is not served.
@Suite("NEC BaaS dialect: the SDKs' other calls")
struct NebulaCompletionTests {
    static let base = NebulaDialectTests.base
    static let app = NebulaDialectTests.app
    static let master = NebulaDialectTests.master
    static func session(_ token: String) -> HTTPFields { NebulaDialectTests.session(token) }

    /// Registers and signs in a user through the dialect: its id and session token.
    static func user(_ gateway: TestGateway, _ name: String) async throws -> (id: String, token: String) {
        let created = try await gateway.call(.post, "\(base)/users", headers: app,
                                             json: #"{"username": "\#(name)", "email": "\#(name)@example.com", "password": "password-123"}"#)
        #expect(created.status == 201, "\(created.json.jsonText)")
        let login = try await gateway.call(.post, "\(base)/login", headers: app, json: #"{"username": "\#(name)", "password": "password-123"}"#)
        return (try #require(created.json["_id"]?.string), try #require(login.json["sessionToken"]?.string))
    }

    static func descriptions(_ reply: (status: Int, json: JSONValue, headers: HTTPFields)) -> [String] {
        reply.json["results"]?.arrayValue?.compactMap { $0["description"]?.string } ?? []
    }

    @Test("an object created with the client's _id keeps it; the same id again is a 409 duplicate_id, in a _batch too; a malformed _id a 400", arguments: TestStorage.available)
    func chosenID(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let bucket = "\(Self.base)/objects/todos"
            let id = "5f0c1a2b3c4d5e6f70819203"
            let created = try await gateway.call(.post, bucket, headers: Self.app, json: #"{"_id": "\#(id)", "description": "offline"}"#)
            #expect(created.status == 201, "\(created.json.jsonText)")
            #expect(created.json["_id"]?.string == id)
            #expect(try await gateway.call(.get, "\(bucket)/\(id)", headers: Self.app).json["description"]?.string == "offline")
            let again = try await gateway.call(.post, bucket, headers: Self.app, json: #"{"_id": "\#(id)", "description": "twice"}"#)
            #expect(again.status == 409)
            #expect(again.json["reasonCode"]?.string == "duplicate_id")
            #expect(try await gateway.call(.get, "\(bucket)/\(id)", headers: Self.app).json["description"]?.string == "offline", "nothing overwritten")
            // A soft-deleted object still holds its id.
            #expect(try await gateway.call(.delete, "\(bucket)/\(id)?deleteMark=1", headers: Self.app).status == 200)
            #expect(try await gateway.call(.post, bucket, headers: Self.app, json: #"{"_id": "\#(id)", "description": "again"}"#).json["reasonCode"]?.string == "duplicate_id")
            let batch = try await gateway.call(.post, "\(bucket)/_batch", headers: Self.app, json: #"""
                {"requests": [{"op": "insert", "data": {"_id": "\#(id)", "description": "a"}}, {"op": "insert", "data": {"_id": "5f0c1a2b3c4d5e6f70819204", "description": "b"}}]}
                """#)
            #expect(batch.json["results"]?.arrayValue?.compactMap { $0["result"]?.string } == ["conflict", "ok"])
            #expect(batch.json["results"]?.arrayValue?.first?["reasonCode"]?.string == "duplicate_id")
            for bad in [#""5F0C1A2B3C4D5E6F70819203""#, #""short""#, "42", #""../../etc""#] {
                let reply = try await gateway.call(.post, bucket, headers: Self.app, json: #"{"_id": \#(bad), "description": "bad"}"#)
                #expect(reply.status == 400, "\(bad): \(reply.json.jsonText)")
            }
        }
    }

    @Test("POST _query takes the GET's parameters in a body, where and projection as objects or as JSON text", arguments: TestStorage.available)
    func longQuery(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let bucket = "\(Self.base)/objects/todos"
            for (index, text) in ["alpha", "beta", "gamma"].enumerated() {
                _ = try await gateway.call(.post, bucket, headers: Self.app, json: #"{"description": "\#(text)", "n": \#(index)}"#)
            }
            // As the JavaScript SDK sends it: objects, skip 0 and limit -1 always.
            let js = try await gateway.call(.post, "\(bucket)/_query", headers: Self.app,
                                            json: #"{"where": {"n": {"$gte": 1}}, "order": "-n", "skip": 0, "limit": -1, "projection": {"description": 1}}"#)
            #expect(js.status == 200, "\(js.json.jsonText)")
            #expect(Self.descriptions(js) == ["gamma", "beta"])
            #expect(js.json["results"]?.arrayValue?.first?["n"] == nil)
            #expect(js.json["currentTime"]?.string?.hasSuffix("Z") == true)
            // As the Python SDK sends it: where and projection as JSON text, count as 1.
            let python = try await gateway.call(.post, "\(bucket)/_query", headers: Self.app,
                                                json: #"{"where": "{\"n\": {\"$lt\": 2}}", "order": "n", "limit": 1, "count": 1, "projection": "{\"n\": 1}"}"#)
            #expect(python.json["results"]?.arrayValue?.compactMap { $0["n"]?.numberValue } == [0])
            #expect(python.json["count"] == .number(2))
            // Bad bodies are 400s, a wrong media type 415.
            for body in [#"[1]"#, #"{"where": "{bad"}"#, #"{"order": 5}"#, #"{"limit": "many"}"#, #"{"count": "perhaps"}"#, #"{"where": {"a": {"$nope": 1}}}"#] {
                let reply = try await gateway.call(.post, "\(bucket)/_query", headers: Self.app, json: body)
                #expect(reply.status == 400, "\(body): \(reply.json.jsonText)")
                #expect(reply.json["error"]?.string?.isEmpty == false)
            }
            var plain = Self.app
            plain[.contentType] = "text/plain"
            #expect(try await gateway.call(.post, "\(bucket)/_query", headers: plain, json: "{}").status == 415)
        }
    }

    @Test("deleteMark=1 marks objects deleted: hidden unless asked for, in queries, reads, bulk deletes and batches", arguments: TestStorage.available)
    func softDelete(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let bucket = "\(Self.base)/objects/todos"
            var ids: [String] = []
            for text in ["a", "b", "c", "d"] {
                ids.append(try #require(try await gateway.call(.post, bucket, headers: Self.app, json: #"{"description": "\#(text)"}"#).json["_id"]?.string))
            }
            let before = try await gateway.call(.get, "\(bucket)/\(ids[0])", headers: Self.app)
            let marked = try await gateway.call(.delete, "\(bucket)/\(ids[0])?deleteMark=1", headers: Self.app)
            #expect(marked.status == 200)
            #expect(marked.json["_deleted"] == .bool(true))
            #expect(marked.json["description"]?.string == "a")
            #expect(marked.json["etag"] != before.json["etag"])
            #expect(try await gateway.call(.get, "\(bucket)/\(ids[0])", headers: Self.app).status == 404)
            #expect(try await gateway.call(.get, "\(bucket)/\(ids[0])?deleteMark=1", headers: Self.app).json["_deleted"] == .bool(true))
            #expect(try await gateway.call(.delete, "\(bucket)/\(ids[0])?deleteMark=1", headers: Self.app).status == 404, "already marked")
            #expect(Self.descriptions(try await gateway.call(.get, "\(bucket)?order=description", headers: Self.app)) == ["b", "c", "d"])
            let all = try await gateway.call(.get, "\(bucket)?order=description&deleteMark=1", headers: Self.app)
            #expect(Self.descriptions(all) == ["a", "b", "c", "d"])
            #expect(all.json["results"]?.arrayValue?.last?["_deleted"] == nil, "live objects carry no _deleted")
            #expect(try await gateway.call(.post, "\(bucket)/_query", headers: Self.app, json: #"{"deleteMark": 1, "count": 1, "limit": 0}"#).json["count"] == .number(4))

            // Bulk: only objects not yet marked count.
            let bulk = try await gateway.call(.delete, "\(bucket)?where=\(encoded(#"{"description": {"$in": ["a", "b"]}}"#))&deleteMark=1", headers: Self.app)
            #expect(bulk.json == .object(["result": .string("ok"), "deletedObjects": .number(1)]))
            // A batch's deletes with deleteMark=1.
            let batch = try await gateway.call(.post, "\(bucket)/_batch?deleteMark=1", headers: Self.app, json: #"{"requests": [{"op": "delete", "_id": "\#(ids[2])"}]}"#)
            #expect(batch.json["results"]?.arrayValue?.first?["data"]?["_deleted"] == .bool(true))
            #expect(Self.descriptions(try await gateway.call(.get, bucket, headers: Self.app)) == ["d"])
            // The native API does not list them either.
            #expect(try await gateway.call(.get, "/v1/todo/buckets/todos/objects", headers: [:]).json.items.count == 1)

            // Purging the marked ones: a hard delete by where on _deleted.
            let purged = try await gateway.call(.delete, "\(bucket)?where=\(encoded(#"{"_deleted": true}"#))", headers: Self.app)
            #expect(purged.json["deletedObjects"] == .number(3))
            #expect(try await gateway.call(.get, "\(bucket)?deleteMark=1", headers: Self.app).json["results"]?.arrayValue?.count == 1)
            // A client may not set _deleted itself.
            let sneaky = try await gateway.call(.post, bucket, headers: Self.app, json: #"{"description": "e", "_deleted": true}"#)
            #expect(sneaky.json["_deleted"] == nil)
        }
    }

    @Test("users: looked up by the master key, read, changed and deleted by themselves or the master key", arguments: TestStorage.available)
    func users(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let hanako = try await Self.user(gateway, "hanako")
            let taro = try await Self.user(gateway, "taro")

            // Look-ups: the master key only; nobody found is a 404.
            let found = try await gateway.call(.get, "\(Self.base)/users?username=HANAKO", headers: Self.master)
            #expect(found.status == 200)
            #expect(found.json["results"]?.arrayValue?.first?["_id"]?.string == hanako.id)
            #expect(found.json["results"]?.arrayValue?.first?["groups"] == nil, "lists leave groups out")
            #expect(found.json["count"] == nil, "count only on a full listing")
            #expect(try await gateway.call(.get, "\(Self.base)/users?email=taro@example.com", headers: Self.master).json["results"]?.arrayValue?.first?["_id"]?.string == taro.id)
            #expect(try await gateway.call(.get, "\(Self.base)/users?username=nobody", headers: Self.master).status == 404)
            let everyone = try await gateway.call(.get, "\(Self.base)/users?limit=1&skip=1", headers: Self.master)
            #expect(everyone.json["count"] == .number(2))
            #expect(everyone.json["results"]?.arrayValue?.first?["_id"]?.string == taro.id, "oldest first")
            #expect(try await gateway.call(.get, "\(Self.base)/users?username=taro", headers: Self.session(hanako.token)).status == 403)

            // Read: themselves or the master key.
            let mine = try await gateway.call(.get, "\(Self.base)/users/\(hanako.id)", headers: Self.session(hanako.token))
            #expect(mine.json["username"]?.string == "hanako")
            #expect(mine.json["groups"] == .array([]))
            #expect(try await gateway.call(.get, "\(Self.base)/users/\(hanako.id)", headers: Self.session(taro.token)).status == 403)
            #expect(try await gateway.call(.get, "\(Self.base)/users/\(hanako.id)", headers: Self.master).status == 200)
            #expect(try await gateway.call(.get, "\(Self.base)/users/nobody", headers: Self.master).status == 404)

            // Change: options, email, username; etag; duplicates.
            let etag = try #require(mine.json["etag"]?.string)
            let stale = try await gateway.call(.put, "\(Self.base)/users/\(hanako.id)?etag=stale", headers: Self.session(hanako.token), json: #"{"options": {}}"#)
            #expect(stale.status == 409)
            #expect(stale.json["reasonCode"]?.string == "etag_mismatch")
            #expect(stale.json["detail"]?["etag"]?.string == etag)
            #expect(stale.json["detail"]?["_id"]?.string == hanako.id)
            let changed = try await gateway.call(.put, "\(Self.base)/users/\(hanako.id)?etag=\(etag)", headers: Self.session(hanako.token),
                                                 json: #"{"options": {"theme": "dark", "n": 2}, "email": "hana@example.com", "username": "hana"}"#)
            #expect(changed.status == 200, "\(changed.json.jsonText)")
            #expect(changed.json["options"] == .object(["theme": .string("dark"), "n": .number(2)]))
            #expect(changed.json["username"]?.string == "hana")
            #expect(changed.json["etag"]?.string != etag)
            let clash = try await gateway.call(.put, "\(Self.base)/users/\(taro.id)", headers: Self.session(taro.token), json: #"{"email": "hana@example.com"}"#)
            #expect(clash.status == 409)
            #expect(clash.json["reasonCode"]?.string == "duplicate_email")
            #expect(try await gateway.call(.put, "\(Self.base)/users/\(taro.id)", headers: Self.session(taro.token), json: #"{"username": "hana"}"#)
                .json["reasonCode"]?.string == "duplicate_username")
            #expect(try await gateway.call(.put, "\(Self.base)/users/\(taro.id)", headers: Self.session(hanako.token), json: #"{"options": {}}"#).status == 403)
            #expect(try await gateway.call(.put, "\(Self.base)/users/\(taro.id)", headers: Self.session(taro.token), json: #"{"options": 5}"#).status == 400)
            #expect(try await gateway.call(.put, "\(Self.base)/users/\(taro.id)", headers: Self.session(taro.token), json: #"{"isAdmin": true}"#).status == 400)

            // The renamed user still signs in with the password; a new password ends the sessions.
            #expect(try await gateway.call(.post, "\(Self.base)/login", headers: Self.app, json: #"{"username": "hana", "password": "password-123"}"#).status == 200)
            #expect(try await gateway.call(.put, "\(Self.base)/users/\(hanako.id)", headers: Self.master, json: #"{"password": "another-pass-456"}"#).status == 200)
            #expect(try await gateway.call(.get, "\(Self.base)/users/current", headers: Self.session(hanako.token)).status == 401)
            #expect(try await gateway.call(.post, "\(Self.base)/login", headers: Self.app, json: #"{"username": "hana", "password": "another-pass-456"}"#).status == 200)
            #expect(try await gateway.call(.post, "/v1/auth/login", json: #"{"username": "hana", "password": "another-pass-456"}"#).status == 200)

            // Delete: themselves; a second delete is a 404.
            #expect(try await gateway.call(.delete, "\(Self.base)/users/\(taro.id)", headers: Self.session(hanako.token)).status == 401, "hanako's session ended")
            let gone = try await gateway.call(.delete, "\(Self.base)/users/\(taro.id)", headers: Self.session(taro.token))
            #expect(gone.json == .object(["result": .string("ok")]))
            #expect(try await gateway.call(.delete, "\(Self.base)/users/\(taro.id)", headers: Self.master).status == 404)
            #expect(try await gateway.call(.post, "\(Self.base)/login", headers: Self.app, json: #"{"username": "taro", "password": "password-123"}"#).status == 401)
        }
    }

    @Test("request_password_reset: the same answer for a known user, one asked again at once, and nobody", arguments: TestStorage.available)
    func passwordReset(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            _ = try await Self.user(gateway, "hanako")
            for body in [#"{"email": "hanako@example.com"}"#, #"{"username": "hanako"}"#, #"{"username": "nobody"}"#, #"{"email": "nobody@example.com"}"#] {
                let asked = try await gateway.call(.post, "\(Self.base)/request_password_reset", headers: Self.app, json: body)
                #expect(asked.status == 200, "\(body): \(asked.json.jsonText)")
                #expect(asked.json == .object(["result": .string("ok")]))
            }
            #expect(try await gateway.call(.post, "\(Self.base)/request_password_reset", headers: Self.app, json: "{}").status == 400)
        }
    }

    @Test("groups: nested members read objects whose ACL names g:{group}; a removed member no longer does; cycles refused", arguments: TestStorage.available)
    func groups(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let owner = try await Self.user(gateway, "owner")
            let member = try await Self.user(gateway, "member")
            let outsider = try await Self.user(gateway, "outsider")
            let groups = "\(Self.base)/groups"

            let staff = try await gateway.call(.put, "\(groups)/staff", headers: Self.session(owner.token), json: #"{"users": []}"#)
            #expect(staff.status == 200, "\(staff.json.jsonText)")
            #expect(staff.json["ACL"]?["owner"]?.string == owner.id)
            let team = try await gateway.call(.put, "\(groups)/team", headers: Self.session(owner.token), json: #"{"users": ["\#(member.id)"]}"#)
            #expect(team.json["users"] == .array([.string(member.id)]))
            // staff contains team: team's members are staff too.
            let nested = try await gateway.call(.put, "\(groups)/staff/addMembers", headers: Self.session(owner.token), json: #"{"users": [], "groups": ["team"]}"#)
            #expect(nested.json["groups"] == .array([.string("team")]))
            let cycle = try await gateway.call(.put, "\(groups)/team/addMembers", headers: Self.session(owner.token), json: #"{"groups": ["staff"]}"#)
            #expect(cycle.status == 400, "a group may not contain itself")
            #expect(try await gateway.call(.put, "\(groups)/team/addMembers", headers: Self.session(owner.token), json: #"{"users": ["nobody"]}"#).status == 400)
            #expect(try await gateway.call(.put, "\(groups)/team/addMembers", headers: Self.session(outsider.token), json: #"{"users": []}"#).status == 403)
            #expect(try await gateway.call(.get, "\(Self.base)/users/current", headers: Self.session(member.token)).json["groups"]
                    == .array([.string("staff"), .string("team")]))

            // An object readable by g:staff.
            let object = try await gateway.call(.post, "\(Self.base)/objects/notes", headers: Self.session(owner.token),
                                                json: #"{"text": "for staff", "ACL": {"r": ["g:staff"], "w": []}}"#)
            #expect(object.status == 201, "\(object.json.jsonText)")
            #expect(object.json["ACL"]?["r"] == .array([.string("g:staff")]))
            let id = try #require(object.json["_id"]?.string)
            #expect(try await gateway.call(.get, "\(Self.base)/objects/notes/\(id)", headers: Self.session(member.token)).status == 200)
            #expect(try await gateway.call(.get, "\(Self.base)/objects/notes", headers: Self.session(member.token)).json["results"]?.arrayValue?.count == 1)
            #expect(try await gateway.call(.get, "\(Self.base)/objects/notes/\(id)", headers: Self.session(outsider.token)).status == 404)
            #expect(try await gateway.call(.put, "\(Self.base)/objects/notes/\(id)", headers: Self.session(member.token), json: #"{"text": "x"}"#).status == 403,
                    "read, not write")
            // The native API honours the same group entries.
            #expect(try await gateway.call(.get, "/v1/todo/buckets/notes/objects/\(id)", token: member.token).status == 200)

            // Removed from team: no longer staff, no longer a reader.
            let removed = try await gateway.call(.put, "\(groups)/team/removeMembers", headers: Self.session(owner.token), json: #"{"users": ["\#(member.id)"]}"#)
            #expect(removed.json["users"] == .array([]))
            #expect(try await gateway.call(.get, "\(Self.base)/objects/notes/\(id)", headers: Self.session(member.token)).status == 404)

            // Read, list, conditional delete; the deleted group leaves its parents.
            #expect(try await gateway.call(.get, "\(groups)/team", headers: Self.session(owner.token)).json["name"]?.string == "team")
            #expect(try await gateway.call(.get, groups, headers: Self.master).json["results"]?.arrayValue?.compactMap { $0["name"]?.string } == ["staff", "team"])
            let staleDelete = try await gateway.call(.delete, "\(groups)/team?etag=stale", headers: Self.session(owner.token))
            #expect(staleDelete.json["reasonCode"]?.string == "etag_mismatch")
            #expect(staleDelete.json["detail"]?["name"]?.string == "team")
            #expect(try await gateway.call(.delete, "\(groups)/team", headers: Self.session(outsider.token)).status == 403)
            #expect(try await gateway.call(.delete, "\(groups)/team", headers: Self.session(owner.token)).json == .object([:]))
            #expect(try await gateway.call(.get, "\(groups)/staff", headers: Self.master).json["groups"] == .array([]))
            #expect(try await gateway.call(.get, "\(groups)/team", headers: Self.master).status == 404)
            #expect(try await gateway.call(.put, "\(groups)/bad%20name", headers: Self.master, json: "{}").status == 400)
            #expect(try await gateway.call(.put, "\(groups)/anonymous", headers: Self.master, json: "{}").status == 400)
        }
    }

    @Test("the native API serves the same groups at /v1/todo/groups", arguments: TestStorage.available)
    func nativeGroups(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let owner = try await gateway.register("owner")
            let member = try await gateway.register("member")
            let created = try await gateway.call(.put, "/v1/todo/groups/readers", token: owner.token, json: #"{"users": ["\#(member.userID)"]}"#)
            #expect(created.status == 200, "\(created.json.jsonText)")
            #expect(created.json["acl"]?["owner"]?.string == owner.userID)
            let etag = try #require(created.json["etag"]?.string)
            #expect(try await gateway.call(.put, "/v1/todo/groups/readers", token: owner.token, headers: [.ifMatch: "\"stale\""], json: "{}").status == 412)
            #expect(try await gateway.call(.put, "/v1/todo/groups/readers", token: owner.token, headers: [.ifMatch: "\"\(etag)\""],
                                           json: #"{"acl": {"r": ["authenticated"]}}"#).status == 200)
            #expect(try await gateway.call(.get, "/v1/todo/groups/readers", token: member.token).json["users"] == .array([.string(member.userID)]))
            #expect(try await gateway.call(.get, "/v1/todo/groups").json.items.isEmpty, "a guest reads no group of this ACL")
            #expect(try await gateway.call(.get, "/v1/todo/groups", token: member.token).json.items.count == 1)
            // Seen by the dialect too; not by the tenant's master key, as the group was not made through the tenant.
            #expect(try await gateway.call(.get, "\(Self.base)/groups/readers", headers: Self.session(member.token)).json["users"] == .array([.string(member.userID)]))
            #expect(try await gateway.call(.get, "\(Self.base)/groups/readers", headers: Self.master).status == 404)
            let removed = try await gateway.call(.post, "/v1/todo/groups/readers/members/remove", token: owner.token, json: #"{"users": ["\#(member.userID)"]}"#)
            #expect(removed.json["users"] == .array([]))
            #expect(try await gateway.call(.post, "/v1/todo/groups/readers/members", token: owner.token, json: #"{"users": 5}"#).status == 422)
            #expect(try await gateway.call(.delete, "/v1/todo/groups/readers", token: member.token).status == 403)
            #expect(try await gateway.call(.delete, "/v1/todo/groups/readers", token: owner.token).status == 204)
            #expect(try await gateway.call(.get, "/v1/todo/groups/readers", token: owner.token).status == 404)
        }
    }

    @Test("buckets with the master key: create, read, change, list and delete; contentACL decides who creates and the default ACL", arguments: TestStorage.available)
    func buckets(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let buckets = "\(Self.base)/buckets/object"
            #expect(try await gateway.call(.get, buckets, headers: Self.app).status == 403)
            let created = try await gateway.call(.put, "\(buckets)/memo", headers: Self.master, json: "{}")
            #expect(created.status == 200, "\(created.json.jsonText)")
            #expect(created.json["name"]?.string == "memo")
            #expect(created.json["contentACL"]?["c"] == .array([.string("g:authenticated")]))
            #expect(try await gateway.call(.get, "\(buckets)/memo", headers: Self.master).json == created.json)
            // A change needs description, ACL and contentACL.
            #expect(try await gateway.call(.put, "\(buckets)/memo", headers: Self.master, json: #"{"description": "x"}"#).status == 400)
            let changed = try await gateway.call(.put, "\(buckets)/memo", headers: Self.master, json: """
                {"description": "Shared memos", "ACL": {"r": ["g:authenticated"], "w": [], "u": [], "d": [], "admin": []},
                 "contentACL": {"r": ["g:anonymous"], "w": [], "c": ["g:anonymous"], "u": [], "d": []}}
                """)
            #expect(changed.status == 200, "\(changed.json.jsonText)")
            #expect(changed.json["description"]?.string == "Shared memos")
            // Guests may now create, and new objects get the bucket's default ACL.
            let user = try await Self.user(gateway, "writer")
            let memo = try await gateway.call(.post, "\(Self.base)/objects/memo", headers: Self.session(user.token), json: #"{"text": "hello"}"#)
            #expect(memo.status == 201)
            #expect(memo.json["ACL"]?["r"] == .array([.string("g:anonymous")]))
            #expect(try await gateway.call(.post, "\(Self.base)/objects/memo", headers: Self.app, json: #"{"text": "guest"}"#).status == 201)
            let names = try await gateway.call(.get, buckets, headers: Self.master).json["results"]?.arrayValue?.compactMap { $0["name"]?.string } ?? []
            #expect(names.contains("memo") && names.contains("todos"))
            #expect(try await gateway.call(.put, "\(buckets)/todos", headers: Self.master, json: #"{"description": "x", "ACL": {}, "contentACL": {}}"#).status == 409,
                    "a bucket of plugins.yaml is changed there")
            #expect(try await gateway.call(.delete, "\(buckets)/memo", headers: Self.master).json == .object([:]))
            #expect(try await gateway.call(.get, "\(buckets)/memo", headers: Self.master).status == 404)
        }
    }

    @Test("paths joined with // or a trailing / reach their route; files and push answer the old not-found shape, not 405")
    func pathsAndUnserved() async throws {
        try await withTodo { gateway in
            _ = try await gateway.call(.post, "\(Self.base)/objects/todos", headers: Self.app, json: #"{"description": "x"}"#)
            for path in ["\(Self.base)//objects/todos", "\(Self.base)/objects/todos/", "/1/t1//objects//todos//"] {
                let reply = try await gateway.call(.get, path, headers: Self.app)
                #expect(reply.status == 200, "\(path)")
                #expect(reply.json["results"]?.arrayValue?.count == 1)
            }
            for (method, path) in [(HTTPRequest.Method.get, "/files/images"), (.post, "/files/images/a.png"), (.put, "/files/images/a.png/meta"),
                                   (.post, "/push/installations"), (.get, "/push/installations/abc"), (.post, "/push/notifications"), (.get, "/buckets/file")] {
                let reply = try await gateway.call(method, Self.base + path, headers: Self.app, json: method == .get ? nil : "{}")
                #expect(reply.status == 404, "\(method) \(path)")
                #expect(reply.json["error"]?.string?.isEmpty == false)
            }
        }
    }
}
