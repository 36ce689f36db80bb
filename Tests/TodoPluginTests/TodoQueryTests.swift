import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import SQLKit
@testable import TodoPlugin
import Testing

@Suite("todo queries")
struct TodoQueryTests {
    @Test("where parsing names the offending part and refuses what it cannot translate")
    func parsing() throws {
        func problem(_ text: String) -> String? {
            do {
                _ = try Condition.parse(try JSONValue.parse(text))
                return nil
            } catch let error as QueryProblem {
                return error.message
            } catch {
                return "\(error)"
            }
        }
        #expect(problem(#"{"a.b": {"$gt": 1, "$lt": 5}, "$or": [{"c": 1}, {"d": {"$exists": true}}]}"#) == nil)
        #expect(problem(#"{"a": {"$foo": 1}}"#)?.contains("unknown operator '$foo'") == true)
        #expect(problem(#"{"$where": "1"}"#)?.contains("unknown operator '$where'") == true)
        #expect(problem(#"{"a": {"$gt": [1]}}"#)?.contains("where.a.$gt") == true)
        #expect(problem(#"{"a": {"$gt": true}}"#) != nil)
        #expect(problem(#"{"$or": []}"#)?.contains("non-empty") == true)
        #expect(problem(#"{"a": {"$gt": 1, "b": 2}}"#)?.contains("mixes operators") == true)
        #expect(problem(#"{"x;drop": 1}"#)?.contains("not a field path") == true)
        #expect(problem(#"{"a": {"$options": "i"}}"#)?.contains("needs $regex") == true)
        #expect(problem(#"{"updatedAt": {"$gt": "yesterday"}}"#)?.contains("RFC 3339") == true)
        #expect(problem("[1]")?.contains("JSON object") == true)
        let many = "{" + (0..<70).map { "\"f\($0)\": 1" }.joined(separator: ",") + "}"
        #expect(problem(many)?.contains("more than 64 conditions") == true)
    }

    @Test("regular expressions are bounded by size, not shape: the engine is linear, so nested repetitions pass and large programs do not")
    func regexGuard() {
        for safe in ["^buy", "milk$", "[a-z]+ing", "colou?r", "a{2,5}", "(?:ab)c", "^(foo|bar)$", "\\d{3}-\\d{4}",
                     "(a+)+", "(a*)*b", "(a|aa)*", "(x+x+)+y", "(\\w+\\s?)*$", ".*.*.*x", String(repeating: "a?", count: 32) + String(repeating: "a", count: 32)] {
            #expect(RegexGuard.problem(in: safe) == nil, "\(safe)")
        }
        for unsafe in ["(a)\\1", "(?=a)", "(?<=a)b", "a{1,1000}", "", String(repeating: "a", count: 300), "(", "[a", ")", "a**",
                       "(x{100}){100}", "(?:[a-z]{1,100}){9}"] {
            #expect(RegexGuard.problem(in: unsafe) != nil, "\(unsafe)")
        }
        #expect(RegexGuard.problem(in: "(x{100}){100}")?.contains("steps") == true)
    }

    @Test("timestamps read RFC 3339 with fractions and offsets and are written with milliseconds and Z")
    func timestamps() throws {
        let date = try #require(Timestamps.parse("2013-08-27T05:19:16.123456Z"))
        #expect(Timestamps.format(micros: Timestamps.micros(date)) == "2013-08-27T05:19:16.123Z")
        #expect(Timestamps.parse("2013-08-27T07:19:16+02:00") == Timestamps.parse("2013-08-27T05:19:16Z"))
        #expect(Timestamps.parse("2013-08-27") != nil)
        for bad in ["2013-02-30", "2013-13-01", "2013-08-27T25:00:00Z", "2013-08-27T05:19:16", "yesterday", "2013-08-27T05:19:16.Z"] {
            #expect(Timestamps.parse(bad) == nil, "\(bad)")
        }
        #expect(Timestamps.format(micros: 0) == "1970-01-01T00:00:00.000Z")
    }

    @Test("cursors are base64url without padding and read back; an order's keys lose the spaces around them")
    func cursorsAndOrders() throws {
        // Every length modulo 3 (padding of 0, 1 and 2), and values whose base64 holds + and /.
        for id in ["a", "ab", "abc", "~~~>>>???", "汉字 ü"] {
            let cursor = QueryCursor(values: [.number(1.5), .string("?>~"), .null], id: id)
            let token = cursor.token
            #expect(!token.contains("+") && !token.contains("/") && !token.contains("="), "\(token)")
            #expect(try QueryCursor(token: token, keys: [SortKey(field: .updatedAt, descending: true), SortKey(field: .id, descending: false),
                                                         SortKey(field: .createdAt, descending: false)]) == cursor)
        }
        #expect(Base64URL.encode(Array("~~~>>>???".utf8)) == "fn5-Pj4-Pz8_")
        #expect(Base64URL.decode("fn5-Pj4-Pz8_") == Data("~~~>>>???".utf8))
        #expect(Base64URL.decode("not base64!") == nil)
        #expect(throws: QueryProblem.self) { try QueryCursor(token: "bm90IGpzb24", keys: [SortKey(field: .updatedAt, descending: true)]) }

        let keys = try SortKey.parse(" -updatedAt ,\tdescription\u{3000}, , +done ")
        #expect(keys.map(\.descending) == [true, false, false])
        #expect(keys.map(\.field) == [.updatedAt, try QueryField(parsing: "description"), try QueryField(parsing: "done")])
        #expect(Substring(" \t\u{A0}a b\u{2003}\t").trimmingSpaces == "a b")
        #expect(Substring("\n a \n").trimmingSpaces == "\n a \n", "newlines are not spaces")
        #expect(Substring("   ").trimmingSpaces.isEmpty)
    }

    @Test("a where + order on indexed fields uses the bucket's index, not a scan and a sort", arguments: TestStorage.available)
    func queryPlan(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let plugin = try gateway.todoPlugin
            let store = plugin.service.store
            for index in 0..<300 {
                _ = try await gateway.call(.post, "/v1/todo/buckets/todos/objects", json: #"{"description": "todo \#(index)", "done": \#(index % 3 == 0)}"#)
            }
            var query = ObjectQuery()
            query.condition = try Condition.parse(try JSONValue.parse(#"{"done": false}"#))
            query.order = try SortKey.parse("-updatedAt")
            query.limit = 20
            let actor = Actor(userID: nil, authority: .all)
            let explained = query
            let plan: String
            if storage == .sqlite {
                let rows = try await store.database.raw(store.pageSQL(bucket: "todos", query: query, actor: actor, prefix: "EXPLAIN QUERY PLAN ")).all()
                plan = try rows.map { try $0.decode(column: "detail", as: String.self) }.joined(separator: "\n")
                #expect(!plan.contains("TEMP B-TREE"), "the index gives the order: \(plan)")
            } else {
                // A few hundred rows are cheaper to scan; forbid scans to show the index applies at all.
                plan = try await store.database.transaction { db in
                    try await db.raw("SET LOCAL enable_seqscan = off").run()
                    let rows = try await db.raw(store.pageSQL(bucket: "todos", query: explained, actor: actor, prefix: "EXPLAIN ")).all()
                    return try rows.map { try $0.decode(column: "QUERY PLAN", as: String.self) }.joined(separator: "\n")
                }
            }
            let bucket = try await plugin.service.buckets.bucket("todos")
            let compound = bucket.indexName([.path(["done"]), .updatedAt])
            #expect(plan.contains(compound), "\(storage): \(plan)")

            // And the page is right.
            let page = try await store.query(bucket: "todos", query, actor: actor)
            #expect(page.objects.count == 20)
            #expect(page.objects.allSatisfy { $0.data["done"] == .bool(false) })
            #expect(page.objects.map(\.updatedAt) == page.objects.map(\.updatedAt).sorted(by: >))
        }
    }

    @Test("a guest's list reads the index of what everyone may read, not through private objects", arguments: TestStorage.available)
    func guestPlan(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let plugin = try gateway.todoPlugin
            let store = plugin.service.store
            let owner = try await gateway.register("owner")
            for index in 0..<200 {
                _ = try await gateway.call(.post, "/v1/todo/buckets/todos/objects", token: owner.token, json: #"{"description": "private \#(index)"}"#)
            }
            for index in 0..<5 {
                _ = try await gateway.call(.post, "/v1/todo/buckets/todos/objects", json: #"{"description": "public \#(index)"}"#)
            }
            let guest = Actor(userID: nil, authority: .none)
            // Newest first, and the list's own order (by id) when it names none.
            for (order, index) in [("-updatedAt", "todo_objects_guest"), (nil, "todo_objects_guest_id")] {
                var query = ObjectQuery()
                if let order { query.order = try SortKey.parse(order) }
                query.limit = 20
                let plan: String
                if storage == .sqlite {
                    let rows = try await store.database.raw(store.pageSQL(bucket: "todos", query: query, actor: guest, prefix: "EXPLAIN QUERY PLAN ")).all()
                    plan = try rows.map { try $0.decode(column: "detail", as: String.self) }.joined(separator: "\n")
                } else {
                    let explained = query
                    plan = try await store.database.transaction { db in
                        try await db.raw("SET LOCAL enable_seqscan = off").run()
                        let rows = try await db.raw(store.pageSQL(bucket: "todos", query: explained, actor: guest, prefix: "EXPLAIN ")).all()
                        return try rows.map { try $0.decode(column: "QUERY PLAN", as: String.self) }.joined(separator: "\n")
                    }
                }
                #expect(plan.contains(index + " ") || plan.hasSuffix(index) || plan.contains(index + "\n") || plan.contains(index + " ("), "\(storage), \(order ?? "by id"): \(plan)")
                #expect(!plan.contains("TEMP B-TREE"), "the index gives the order: \(plan)")
                let page = try await store.query(bucket: "todos", query, actor: guest)
                #expect(page.objects.count == 5)
                #expect(page.objects.allSatisfy { ($0.data["description"]?.stringValue ?? "").hasPrefix("public") })
            }
        }
    }
}
