import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import TodoPlugin
import Testing

@Suite("todo native API")
struct TodoNativeTests {
    @Test("object ids are 24 hex digits and etags version 4 UUIDs, all distinct")
    func idsAndETags() {
        let uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
        var etags = Set<String>()
        var ids = Set<String>()
        let now = Date()
        for _ in 0..<20_000 {
            let etag = ObjectStore.newETag()
            #expect(etag.wholeMatch(of: uuid) != nil, "\(etag)")
            etags.insert(etag)
            let id = ObjectStore.newID(now: now)
            #expect(ObjectStore.isValidID(id), "\(id)")
            ids.insert(id)
        }
        #expect(etags.count == 20_000)
        #expect(ids.count == 20_000)
        // The id starts with the creation time in seconds, big-endian.
        let id = ObjectStore.newID(now: Date(timeIntervalSince1970: 0x5F5E_1000))
        #expect(id.hasPrefix("5f5e1000"))
    }

    @Test("an ACL's stored text and searchable text, on the shortcuts for the common ACLs and the general path alike")
    func aclTexts() throws {
        let shared = ObjectACL(readers: ["u2", "authenticated"], writers: ["u2", "u1"])
        for acl in [ObjectACL.everyone, .ownerOnly, shared, ObjectACL(readers: ["anonymous"], writers: [])] {
            #expect(acl.text == acl.json.jsonText)
            #expect(try ObjectACL(text: acl.text) == acl)
            #expect(acl.searchable == " " + Array(Set(acl.readers + acl.writers)).sorted().joined(separator: " ") + " ")
        }
        #expect(shared.searchable == " authenticated u1 u2 ")
        #expect(throws: (any Error).self) { try ObjectACL(text: "[1]") }
    }

    static let objects = "/v1/todo/buckets/todos/objects"

    @Test("create, read, replace, merge-patch, field operators and delete, each bumping the etag", arguments: TestStorage.available)
    func lifecycle(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let created = try await gateway.call(.post, Self.objects, json: #"{"description": "buy milk", "tags": ["home"], "due": "2026-12-01"}"#)
            #expect(created.status == 201)
            let id = try #require(created.json["id"]?.string)
            #expect(id.count == 24)
            #expect(created.headers[.location] == "objects/\(id)")
            #expect(created.json["done"] == .bool(false), "the schema's default is applied")
            #expect(created.json["owner"] == .null)
            let etag1 = try #require(created.json["etag"]?.string)
            #expect(created.headers[.eTag] == "\"\(etag1)\"")

            let read = try await gateway.call(.get, "\(Self.objects)/\(id)")
            #expect(read.status == 200)
            #expect(read.json["description"] == .string("buy milk"))

            // A stale If-Match loses; the right one wins and changes the etag.
            let stale = try await gateway.call(.put, "\(Self.objects)/\(id)", headers: [.ifMatch: "\"not-the-etag\""], json: #"{"description": "x"}"#)
            #expect(stale.status == 412)
            let replaced = try await gateway.call(.put, "\(Self.objects)/\(id)", headers: [.ifMatch: "\"\(etag1)\""],
                                                  json: #"{"description": "buy oat milk", "done": true, "id": "ignored", "createdAt": "ignored"}"#)
            #expect(replaced.status == 200)
            let etag2 = try #require(replaced.json["etag"]?.string)
            #expect(etag2 != etag1)
            #expect(replaced.json["tags"] == nil, "a replace drops fields it does not carry")
            #expect(replaced.json["id"]?.string == id)
            #expect(replaced.json["createdAt"] == created.json["createdAt"])

            let patched = try await gateway.call(.patch, "\(Self.objects)/\(id)", headers: [.contentType: "application/merge-patch+json"],
                                                 json: #"{"done": null, "meta": {"color": "red", "size": 1}}"#)
            #expect(patched.status == 200)
            #expect(patched.json["done"] == nil)
            #expect(patched.json["meta"] == .object(["color": .string("red"), "size": .number(1)]))
            let operated = try await gateway.call(.patch, "\(Self.objects)/\(id)",
                                                  json: #"{"$inc": {"meta.size": 2.5, "count": 1}, "$unset": {"meta.color": ""}, "$set": {"done": true}}"#)
            #expect(operated.status == 200)
            #expect(operated.json["meta"] == .object(["size": .number(3.5)]))
            #expect(operated.json["count"] == .number(1))
            #expect(operated.json["done"] == .bool(true))
            #expect(try await gateway.call(.patch, "\(Self.objects)/\(id)", json: #"{"$inc": {"description": 1}}"#).status == 422)
            #expect(try await gateway.call(.patch, "\(Self.objects)/\(id)", json: #"{"$push": {"tags": "x"}}"#).status == 422)
            #expect(try await gateway.call(.patch, "\(Self.objects)/\(id)", json: #"{"done": "yes"}"#).status == 422)

            let etag = try #require(operated.json["etag"]?.string)
            #expect(try await gateway.call(.delete, "\(Self.objects)/\(id)", headers: [.ifMatch: "\"\(etag1)\""]).status == 412)
            #expect(try await gateway.call(.delete, "\(Self.objects)/\(id)", headers: [.ifMatch: "\"\(etag)\""]).status == 204)
            #expect(try await gateway.call(.get, "\(Self.objects)/\(id)").status == 404)
            #expect(try await gateway.call(.delete, "\(Self.objects)/\(id)").status == 404)
        }
    }

    @Test("bad input: a clear 4xx each, with pointers to every offending field, and nothing half-written", arguments: TestStorage.available)
    func badInput(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let schema = try await gateway.call(.post, Self.objects, json: #"{"done": "no", "due": "tomorrow", "tags": ["a", 5], "description": ""}"#)
            #expect(schema.status == 422)
            let pointers = Set(schema.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.string } ?? [])
            #expect(pointers == ["/done", "/due", "/tags/1", "/description"])

            let malformed = try await gateway.call(.post, Self.objects, json: "{\"description\": \"a\",\n \"done\": tru}")
            #expect(malformed.status == 400)
            #expect(malformed.json["detail"]?.string?.contains("line 2") == true)
            #expect(try await gateway.call(.post, Self.objects, json: #"{"description": "a", "description": "b"}"#).status == 400)
            let deep = String(repeating: "[", count: 200) + String(repeating: "]", count: 200)
            #expect(try await gateway.call(.post, Self.objects, json: #"{"description": "a", "x": \#(deep)}"#).status == 400)
            #expect(try await gateway.call(.post, Self.objects, json: #"["not", "an", "object"]"#).status == 422)
            #expect(try await gateway.call(.post, Self.objects, json: #"{"description": "a", "$where": 1}"#).status == 422)
            #expect(try await gateway.call(.post, Self.objects, json: #"{"description": "a", "n": {"$x": 1}}"#).status == 422)
            let big = String(repeating: "x", count: 900)
            #expect(try await gateway.call(.post, Self.objects, json: #"{"description": "a", "tags": ["\#(big)", "\#(big)", "\#(big)"]}"#).status == 413)
            #expect(try await gateway.call(.post, Self.objects, headers: [.contentType: "text/plain"], json: "hello").status == 415)
            #expect(try await gateway.call(.post, "/v1/todo/buckets/nope/objects", json: #"{"a": 1}"#).status == 404)
            #expect(try await gateway.call(.get, "\(Self.objects)/not-an-id").status == 400)
            #expect(try await gateway.call(.get, "\(Self.objects)/ABCDEF0123456789ABCDEF01").status == 400)
            #expect(try await gateway.call(.get, "\(Self.objects)/0123456789abcdef01234567").status == 404)
            #expect(try await gateway.call(.post, Self.objects, json: #"{"description": "a", "acl": {"readers": ["bad id!"]}}"#).status == 422)

            // Nothing above was written.
            let all = try await gateway.call(.get, "\(Self.objects)?count=true")
            #expect(all.json["count"] == .number(0))

            // Queries: a 400 naming the offending part.
            for (query, part) in [("where=" + encoded(#"{"a": {"$near": 1}}"#), "query.where"), ("where=" + encoded("{not json"), "query.where"),
                                  ("where=" + encoded(#"{"a": {"$regex": "(a{100}){100}$"}}"#), "query.where"),
                                  ("where=" + encoded(#"{"a": {"$regex": "(x)\\1"}}"#), "query.where"),
                                  ("where=" + encoded(#"{"a b": 1}"#), "query.where"), ("where=" + encoded(#"{"a": {"$in": 5}}"#), "query.where"),
                                  ("where=" + encoded(String(repeating: #"{"$and": ["#, count: 12) + "{}" + String(repeating: "]}", count: 12)), "query.where"),
                                  ("order=" + encoded("a,,b;drop"), "query.order"), ("limit=0", "query.limit"), ("limit=100000", "query.limit"),
                                  ("cursor=garbage", "query.cursor"), ("skip=-1", "query.skip"), ("fields=a%20b", "query.fields")] {
                let response = try await gateway.call(.get, "\(Self.objects)?\(query)")
                #expect(response.status == 400, "\(query) -> \(response.status) \(response.json.jsonText)")
                let pointer = response.json["errors"]?.arrayValue?.first?["pointer"]?.string
                #expect(pointer == part, "\(query): \(response.json.jsonText)")
            }
        }
    }

    @Test("queries: every operator, nested paths, order, projection, count, skip", arguments: TestStorage.available)
    func queries(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let user = try await gateway.register("quinn")
            let rows = [
                #"{"kind": "a", "rank": 3, "title": "Alpha", "tags": ["x", "y"], "meta": {"score": 10}, "flag": true}"#,
                #"{"kind": "b", "rank": 1, "title": "beta", "tags": ["y"], "meta": {"score": 20}, "flag": false}"#,
                #"{"kind": "a", "rank": 2, "title": "Gamma", "tags": [], "meta": {"score": 30}}"#,
                #"{"kind": "c", "rank": "2", "title": "delta", "meta": {"score": null}}"#,
            ]
            for row in rows { #expect(try await gateway.call(.post, "/v1/todo/buckets/notes/objects", token: user.token, json: row).status == 201) }
            func titles(_ whereJSON: String, order: String = "title") async throws -> [String] {
                let response = try await gateway.call(.get, "/v1/todo/buckets/notes/objects?where=\(encoded(whereJSON))&order=\(order)", token: user.token)
                #expect(response.status == 200, "\(whereJSON): \(response.json.jsonText)")
                return response.json.items.compactMap { $0["title"]?.string }
            }
            #expect(try await titles(#"{"kind": "a"}"#) == ["Alpha", "Gamma"])
            #expect(try await titles(#"{"rank": {"$gte": 2}}"#) == ["Alpha", "Gamma"], "a string \"2\" is not a number")
            #expect(try await titles(#"{"rank": {"$lt": 3, "$gt": 1}}"#) == ["Gamma"])
            #expect(try await titles(#"{"rank": {"$ne": 1}}"#) == ["Alpha", "Gamma", "delta"])
            #expect(try await titles(#"{"kind": {"$in": ["b", "c"]}}"#) == ["beta", "delta"])
            #expect(try await titles(#"{"kind": {"$nin": ["b", "c"]}}"#) == ["Alpha", "Gamma"])
            #expect(try await titles(#"{"tags": {"$all": ["x", "y"]}}"#) == ["Alpha"])
            #expect(try await titles(#"{"tags": {"$all": ["y"]}}"#) == ["Alpha", "beta"])
            #expect(try await titles(#"{"tags": {"$exists": false}}"#) == ["delta"])
            #expect(try await titles(#"{"flag": true}"#) == ["Alpha"])
            #expect(try await titles(#"{"flag": 1}"#) == [], "true is not the number 1")
            #expect(try await titles(#"{"meta.score": {"$gt": 15}}"#) == ["Gamma", "beta"])
            #expect(try await titles(#"{"meta.score": null}"#) == ["delta"])
            #expect(try await titles(#"{"title": {"$regex": "^[a-d]"}}"#) == ["beta", "delta"])
            #expect(try await titles(#"{"title": {"$regex": "^g", "$options": "i"}}"#) == ["Gamma"])
            #expect(try await titles(#"{"rank": {"$not": {"$gte": 2}}}"#) == ["beta", "delta"])
            #expect(try await titles(#"{"$or": [{"kind": "b"}, {"rank": 3}]}"#) == ["Alpha", "beta"])
            #expect(try await titles(#"{"$nor": [{"kind": "b"}, {"rank": 3}]}"#) == ["Gamma", "delta"])
            #expect(try await titles(#"{"$and": [{"kind": "a"}, {"meta.score": {"$lte": 10}}]}"#) == ["Alpha"])
            #expect(try await titles("{}", order: "-meta.score") == ["Gamma", "beta", "Alpha", "delta"])
            #expect(try await titles(#"{"kind": "a"}"#, order: "-rank") == ["Alpha", "Gamma"])

            let page = try await gateway.call(.get, "/v1/todo/buckets/notes/objects?order=title&skip=1&limit=2&count=true&fields=title,meta.score", token: user.token)
            #expect(page.json["count"] == .number(4))
            #expect(page.json.items.map { $0["title"]?.string } == ["Gamma", "beta"])
            #expect(page.json.items.first?["meta"] == .object(["score": .number(30)]))
            #expect(page.json.items.first?["kind"] == nil, "fields projects")
            #expect(page.json.items.first?["id"] != nil, "system fields stay")

            let search = try await gateway.call(.post, "/v1/todo/buckets/notes/query", token: user.token,
                                                json: #"{"where": {"kind": "a"}, "order": "-rank", "count": true, "fields": ["title"]}"#)
            #expect(search.status == 200)
            #expect(search.json.items.map { $0["title"]?.string } == ["Alpha", "Gamma"])
            #expect(try await gateway.call(.post, "/v1/todo/buckets/notes/query", token: user.token, json: #"{"sort": "x"}"#).status == 422)
        }
    }

    @Test("cursor pages are stable while others insert: nothing repeats or goes missing", arguments: TestStorage.available)
    func cursorStability(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let user = try await gateway.register("paging")
            for rank in stride(from: 0, to: 40, by: 2) {
                _ = try await gateway.call(.post, "/v1/todo/buckets/notes/objects", token: user.token, json: #"{"rank": \#(rank)}"#)
            }
            var seen: [Int] = []
            var cursor: String?
            var inserted = 1
            repeat {
                let target = "/v1/todo/buckets/notes/objects?order=-rank&limit=6" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await gateway.call(.get, target, token: user.token)
                #expect(page.status == 200)
                seen += page.json.items.compactMap { $0["rank"]?.numberValue.map(Int.init) }
                cursor = page.json["nextCursor"]?.string
                // Others insert odd ranks everywhere (before and after the cursor) between pages.
                for rank in [inserted, 39 - inserted] {
                    _ = try await gateway.call(.post, "/v1/todo/buckets/notes/objects", token: user.token, json: #"{"rank": \#(rank)}"#)
                }
                inserted += 2
            } while cursor != nil
            let originals = seen.filter { $0 % 2 == 0 }
            #expect(originals == Array(stride(from: 38, through: 0, by: -2)), "every original once, in order")
            #expect(seen == seen.sorted(by: >), "pages continue the order")
            #expect(Set(seen).count == seen.count, "no object twice")
        }
    }

    @Test("another user's object is a 404; an ACL shares it; guests cannot create where the bucket needs a user", arguments: TestStorage.available)
    func access(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let alice = try await gateway.register("alice")
            let bob = try await gateway.register("bob")
            let notes = "/v1/todo/buckets/notes/objects"
            #expect(try await gateway.call(.post, notes, json: #"{"t": 1}"#).status == 401)
            let mine = try await gateway.call(.post, notes, token: alice.token, json: #"{"t": "private"}"#)
            let id = try #require(mine.json["id"]?.string)
            #expect(mine.json["owner"]?.string == alice.userID)
            #expect(try await gateway.call(.get, "\(notes)/\(id)", token: bob.token).status == 404)
            #expect(try await gateway.call(.get, "\(notes)/\(id)").status == 404)
            #expect(try await gateway.call(.put, "\(notes)/\(id)", token: bob.token, json: #"{"t": "mine now"}"#).status == 404)
            #expect(try await gateway.call(.delete, "\(notes)/\(id)", token: bob.token).status == 404)
            #expect(try await gateway.call(.get, notes, token: bob.token).json.items.isEmpty)

            // Only the owner shares; a reader may read, not write; a writer may write, not change the ACL.
            #expect(try await gateway.call(.patch, "\(notes)/\(id)", token: alice.token, json: #"{"acl": {"readers": ["\#(bob.userID)"]}}"#).status == 200)
            #expect(try await gateway.call(.get, "\(notes)/\(id)", token: bob.token).status == 200)
            #expect(try await gateway.call(.get, notes, token: bob.token).json.items.count == 1)
            #expect(try await gateway.call(.put, "\(notes)/\(id)", token: bob.token, json: #"{"t": "x"}"#).status == 403)
            #expect(try await gateway.call(.patch, "\(notes)/\(id)", token: alice.token, json: #"{"acl": {"writers": ["authenticated"]}}"#).status == 200)
            #expect(try await gateway.call(.patch, "\(notes)/\(id)", token: bob.token, json: #"{"t": "edited by bob"}"#).status == 200)
            #expect(try await gateway.call(.patch, "\(notes)/\(id)", token: bob.token, json: #"{"acl": {"readers": ["anonymous"]}}"#).status == 403)
            #expect(try await gateway.call(.get, "\(notes)/\(id)").status == 404, "authenticated does not include guests")

            // The bucket's rules: guests' objects in `todos` are everyone's.
            let shared = try await gateway.call(.post, Self.objects, json: #"{"description": "guest todo"}"#)
            let sharedID = try #require(shared.json["id"]?.string)
            #expect(try await gateway.call(.patch, "\(Self.objects)/\(sharedID)", token: bob.token, json: #"{"done": true}"#).status == 200)
        }
    }

    @Test("query and get replies are cached per caller and purged by any write to the bucket", arguments: TestStorage.available)
    func caching(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let alice = try await gateway.register("alice")
            let notes = "/v1/todo/buckets/notes/objects"
            let cacheHeader = HTTPField.Name("X-Cache")!
            _ = try await gateway.call(.post, notes, token: alice.token, json: #"{"t": 1}"#)
            #expect(try await gateway.call(.get, notes, token: alice.token).headers[cacheHeader] == "MISS")
            let hit = try await gateway.call(.get, notes, token: alice.token)
            #expect(hit.headers[cacheHeader] == "HIT")
            #expect(hit.json.items.count == 1)
            #expect(try await gateway.call(.get, notes).json.items.isEmpty, "another caller does not see alice's cached page")
            _ = try await gateway.call(.post, notes, token: alice.token, json: #"{"t": 2}"#)
            let after = try await gateway.call(.get, notes, token: alice.token)
            #expect(after.headers[cacheHeader] == "MISS")
            #expect(after.json.items.count == 2)
        }
    }

    @Test("a batch runs each operation and reports each result in order", arguments: TestStorage.available)
    func batch(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let first = try await gateway.call(.post, Self.objects, json: #"{"description": "one"}"#)
            let id = try #require(first.json["id"]?.string)
            let body = """
                {"operations": [
                  {"op": "create", "object": {"description": "two"}},
                  {"op": "create", "object": {"done": 1}},
                  {"op": "patch", "id": "\(id)", "object": {"done": true}},
                  {"op": "replace", "id": "\(id)", "ifMatch": "stale", "object": {"description": "x"}},
                  {"op": "delete", "id": "0123456789abcdef01234567"},
                  {"op": "explode"}
                ]}
                """
            let response = try await gateway.call(.post, "/v1/todo/buckets/todos/batch", json: body)
            #expect(response.status == 200)
            let statuses = response.json["results"]?.arrayValue?.compactMap { $0["status"]?.numberValue.map(Int.init) }
            #expect(statuses == [201, 422, 200, 412, 404, 422])
            #expect(try await gateway.call(.get, "\(Self.objects)?count=true").json["count"] == .number(2))
            let tooMany = "{\"operations\": [" + Array(repeating: #"{"op": "delete", "id": "x"}"#, count: 101).joined(separator: ",") + "]}"
            #expect(try await gateway.call(.post, "/v1/todo/buckets/todos/batch", json: tooMany).status == 422)
        }
    }

    @Test("administrators create and delete buckets; declared buckets cannot be deleted", arguments: TestStorage.available)
    func buckets(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let admin = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: admin.userID, true)
            let user = try await gateway.register("plain")
            let spec = #"{"name": "books", "create": "authenticated", "index": ["isbn"], "schema": {"type": "object", "required": ["isbn"]}}"#
            #expect(try await gateway.call(.post, "/v1/todo/buckets", token: user.token, json: spec).status == 403)
            #expect(try await gateway.call(.post, "/v1/todo/buckets", token: admin.token, json: spec).status == 201)
            #expect(try await gateway.call(.post, "/v1/todo/buckets", token: admin.token, json: spec).status == 409)
            #expect(try await gateway.call(.post, "/v1/todo/buckets", token: admin.token, json: #"{"name": "bad name!"}"#).status == 422)
            let list = try await gateway.call(.get, "/v1/todo/buckets")
            #expect(list.json.items.compactMap { $0["name"]?.string } == ["books", "notes", "todos"])
            #expect(try await gateway.call(.post, "/v1/todo/buckets/books/objects", token: user.token, json: #"{"title": "x"}"#).status == 422)
            #expect(try await gateway.call(.post, "/v1/todo/buckets/books/objects", token: user.token, json: #"{"isbn": "123"}"#).status == 201)
            let deleted = try await gateway.call(.delete, "/v1/todo/buckets/books", token: admin.token)
            #expect(deleted.json["deletedObjects"] == .number(1))
            #expect(try await gateway.call(.get, "/v1/todo/buckets/books/objects", token: user.token).status == 404)
            #expect(try await gateway.call(.delete, "/v1/todo/buckets/todos", token: admin.token).status == 409)
        }
    }

    @Test("100 concurrent conditional updates carrying the same etag: exactly one wins", arguments: TestStorage.available)
    func concurrentConditionalUpdates(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let created = try await gateway.call(.post, Self.objects, json: #"{"description": "contended"}"#)
            let id = try #require(created.json["id"]?.string)
            let etag = try #require(created.json["etag"]?.string)
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<100 {
                    group.addTask {
                        try await gateway.call(.patch, "\(Self.objects)/\(id)", headers: [.ifMatch: "\"\(etag)\""],
                                               json: #"{"description": "writer \#(index)"}"#).status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 200 }.count == 1)
            #expect(statuses.filter { $0 == 412 }.count == 99)
            // Unconditional increments all count: none is lost.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<50 {
                    group.addTask { _ = try await gateway.call(.patch, "\(Self.objects)/\(id)", json: #"{"$inc": {"n": 1}}"#) }
                }
                try await group.waitForAll()
            }
            #expect(try await gateway.call(.get, "\(Self.objects)/\(id)").json["n"] == .number(50))
        }
    }

    @Test("200 concurrent creates by a guest and a user (inserted together on PostgreSQL): each stored once, whole, with its owner", arguments: TestStorage.available)
    func concurrentCreates(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let user = try await gateway.register("casey")
            let created = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for index in 0..<200 {
                    group.addTask {
                        let reply = try await gateway.call(.post, Self.objects, token: index % 2 == 0 ? user.token : nil,
                                                           json: #"{"description": "todo \#(index)", "tags": ["t\#(index)"]}"#)
                        #expect(reply.status == 201, "\(reply.json.jsonText)")
                        return (index, reply.json["id"]?.string ?? "")
                    }
                }
                return try await group.reduce(into: [Int: String]()) { $0[$1.0] = $1.1 }
            }
            #expect(Set(created.values).count == 200)
            for (index, id) in created {
                let read = try await gateway.call(.get, "\(Self.objects)/\(id)", token: user.token)
                #expect(read.status == 200)
                #expect(read.json["description"]?.string == "todo \(index)")
                #expect(read.json["tags"] == .array([.string("t\(index)")]))
            }
            // The guest sees the guest's 100 and none of the user's.
            #expect(try await gateway.call(.get, "\(Self.objects)?count=true&limit=1").json["count"] == .number(100))
            #expect(try await gateway.call(.get, "\(Self.objects)?count=true&limit=1", token: user.token).json["count"] == .number(200))
        }
    }
}

@Suite("todo in the OpenAPI document")
struct TodoOpenAPITests {
    @Test("a batch's reply is described: a result per operation, with its status and the object or the problem")
    func batchReply() async throws {
        try await withTodo { gateway in
            let document = try await gateway.openAPIDocument()
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            let operation = try #require(paths["/v1/todo/buckets/{bucket}/batch"]?["post"] as? [String: Any])
            let reply = ((((operation["responses"] as? [String: Any])?["200"] as? [String: Any])?["content"] as? [String: Any])?["application/json"] as? [String: Any])?["schema"] as? [String: Any]
            let results = ((reply?["properties"] as? [String: Any])?["results"] as? [String: Any])?["items"] as? [String: Any]
            let members = try #require(results?["properties"] as? [String: Any], "\(reply ?? [:])")
            #expect(Set(members.keys) == ["status", "object", "problem"])
            #expect(results?["required"] as? [String] == ["status"])
        }
    }

    @Test("an object is described by its bucket's JSON Schema, with the system members, in requests and replies")
    func bucketSchemas() async throws {
        try await withTodo { gateway in
            let document = try await gateway.openAPIDocument()
            let schemas = try #require((document["components"] as? [String: Any])?["schemas"] as? [String: Any])
            let todos = try #require(schemas["todo.todos"] as? [String: Any])
            let parts = try #require(todos["allOf"] as? [[String: Any]])
            #expect(parts.first?["required"] as? [String] == ["description"])
            #expect((parts.last?["properties"] as? [String: Any])?.keys.contains("etag") == true)
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            func schema(_ path: String, _ method: String, response status: String? = nil) -> [String: Any]? {
                let operation = paths[path]?[method] as? [String: Any]
                let content = status.map { ((operation?["responses"] as? [String: Any])?[$0] as? [String: Any])?["content"] }
                    ?? (operation?["requestBody"] as? [String: Any])?["content"]
                return ((content as? [String: Any])?["application/json"] as? [String: Any])?["schema"] as? [String: Any]
            }
            // An object is one of the configured buckets' schemas (the bucket is in the path), or any object of an unconfigured bucket.
            func alternatives(_ schema: [String: Any]?) -> [[String: Any]] { (schema?["anyOf"] as? [[String: Any]]) ?? (schema?["oneOf"] as? [[String: Any]]) ?? (schema.map { [$0] } ?? []) }
            #expect(alternatives(schema("/v1/todo/buckets/{bucket}/objects/{id}", "get", response: "200")).contains { $0["$ref"] as? String == "#/components/schemas/todo.todos" })
            #expect(alternatives(schema("/v1/todo/buckets/{bucket}/objects", "post")).contains { $0["required"] as? [String] == ["description"] })
            let page = try #require(schema("/v1/todo/buckets/{bucket}/objects", "get", response: "200")?["properties"] as? [String: Any])
            #expect(alternatives((page["items"] as? [String: Any])?["items"] as? [String: Any]).contains { $0["$ref"] as? String == "#/components/schemas/todo.todos" })
        }
    }
}
