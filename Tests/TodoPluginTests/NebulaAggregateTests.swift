import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
@testable import TodoPlugin
import Testing

/// `POST /1/{tenant}/objects/{bucket}/_aggregate`: every expected value is exact, and the same on
/// SQLite and PostgreSQL.
@Suite("NEC BaaS dialect: aggregation")
struct NebulaAggregateTests {
    static let bucket = "\(NebulaDialectTests.base)/objects/todos"

    /// Five objects, created in this order: fruit and vegetables with a price (one not a number),
    /// a quantity (one missing) and sizes (an array, an empty array, null, missing, a string); the
    /// bucket's schema adds `"done": false`.
    static let items = [
        #"{"description": "a", "kind": "fruit", "price": 3, "qty": 2, "sizes": ["S", "M"], "meta": {"origin": "jp"}}"#,
        #"{"description": "b", "kind": "veg", "price": 1.5, "qty": 4, "sizes": []}"#,
        #"{"description": "c", "kind": "fruit", "price": 5, "qty": 1, "sizes": null}"#,
        #"{"description": "d", "kind": "veg", "price": 2.5}"#,
        #"{"description": "e", "kind": "fruit", "price": "n/a", "qty": 3, "sizes": "L"}"#,
    ]

    /// Runs `body` with the items in the `todos` bucket (readable by everyone).
    func withItems(_ storage: TestStorage, _ body: @Sendable (TestGateway) async throws -> Void) async throws {
        try await withTodo(storage) { gateway in
            for item in Self.items {
                let created = try await gateway.call(.post, Self.bucket, headers: NebulaDialectTests.app, json: item)
                #expect(created.status == 201, "\(created.json.jsonText)")
            }
            try await body(gateway)
        }
    }

    /// The results of `pipeline` (a JSON array), expecting a 200.
    static func results(_ gateway: TestGateway, _ pipeline: String, headers: HTTPFields = NebulaDialectTests.app,
                        sourceLocation: SourceLocation = #_sourceLocation) async throws -> [JSONValue] {
        let reply = try await gateway.call(.post, "\(bucket)/_aggregate", headers: headers, json: #"{"pipeline": \#(pipeline)}"#)
        #expect(reply.status == 200, "\(reply.json.jsonText)", sourceLocation: sourceLocation)
        #expect(reply.json.objectValue.map { Array($0.keys) } == ["results"], sourceLocation: sourceLocation)
        return reply.json["results"]?.arrayValue ?? []
    }

    static func json(_ text: String) throws -> [JSONValue] {
        try #require(try JSONValue.parse(text).arrayValue)
    }

    @Test("$group by a field: $sum of 1 and of a field, $avg, $min, $max, $first, $last, $push", arguments: TestStorage.available)
    func groupByField(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let results = try await Self.results(gateway, """
                [{"$group": {"_id": "$kind", "count": {"$sum": 1}, "total": {"$sum": "$price"}, "mean": {"$avg": "$price"},
                             "least": {"$min": "$price"}, "most": {"$max": "$price"}, "first": {"$first": "$description"},
                             "last": {"$last": "$description"}, "names": {"$push": "$description"}, "quantities": {"$push": "$qty"},
                             "origin": {"$first": "$meta.origin"}, "n": {"$count": {}}}},
                 {"$sort": {"_id": 1}}]
                """)
            // Non-numbers are left out of sums and means; strings come after numbers, so "n/a" is
            // fruit's greatest price; a missing quantity is not pushed, a missing origin is null.
            #expect(results == (try Self.json("""
                [{"_id": "fruit", "count": 3, "total": 8, "mean": 4, "least": 3, "most": "n/a", "first": "a", "last": "e",
                  "names": ["a", "c", "e"], "quantities": [2, 1, 3], "origin": "jp", "n": 3},
                 {"_id": "veg", "count": 2, "total": 4, "mean": 2, "least": 1.5, "most": 2.5, "first": "b", "last": "d",
                  "names": ["b", "d"], "quantities": [4], "origin": null, "n": 2}]
                """)))
        }
    }

    @Test("$group by null, by a constant and by an object; $first and $last follow a $sort; no group from no documents", arguments: TestStorage.available)
    func groupByNull(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let all = try await Self.results(gateway, #"[{"$group": {"_id": null, "count": {"$sum": 1}, "total": {"$sum": "$price"}, "mean": {"$avg": "$qty"}}}]"#)
            #expect(all == (try Self.json(#"[{"_id": null, "count": 5, "total": 12, "mean": 2.5}]"#)))
            let constant = try await Self.results(gateway, #"[{"$group": {"_id": "all", "twice": {"$sum": 2}}}]"#)
            #expect(constant == (try Self.json(#"[{"_id": "all", "twice": 10}]"#)))
            let sorted = try await Self.results(gateway, """
                [{"$sort": {"qty": -1}}, {"$group": {"_id": {"k": "$kind"}, "first": {"$first": "$description"}, "last": {"$last": "$description"}}},
                 {"$sort": {"_id.k": 1}}]
                """)
            #expect(sorted == (try Self.json("""
                [{"_id": {"k": "fruit"}, "first": "e", "last": "c"}, {"_id": {"k": "veg"}, "first": "b", "last": "d"}]
                """)))
            let none = try await Self.results(gateway, #"[{"$match": {"kind": "none"}}, {"$group": {"_id": null, "count": {"$sum": 1}}}]"#)
            #expect(none == [])
        }
    }

    @Test("$match before $group filters objects, after $group its groups, after $project its documents", arguments: TestStorage.available)
    func matchAroundGroup(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let groups = try await Self.results(gateway, """
                [{"$match": {"qty": {"$gte": 2}}}, {"$group": {"_id": "$kind", "n": {"$sum": 1}}}, {"$match": {"n": {"$gt": 1}}}]
                """)
            #expect(groups == (try Self.json(#"[{"_id": "fruit", "n": 2}]"#)))
            let byID = try await Self.results(gateway, #"[{"$group": {"_id": "$kind", "n": {"$sum": 1}}}, {"$match": {"_id": "veg"}}]"#)
            #expect(byID == (try Self.json(#"[{"_id": "veg", "n": 2}]"#)))
            let projected = try await Self.results(gateway, """
                [{"$project": {"name": "$description", "cost": "$price", "_id": 0}}, {"$match": {"$or": [{"cost": {"$lt": 2}}, {"name": {"$in": ["e"]}}]}}]
                """)
            #expect(projected == (try Self.json(#"[{"name": "b", "cost": 1.5}, {"name": "e", "cost": "n/a"}]"#)))
            // Dates compare with the documents' createdAt strings, before and after a stage.
            let early = try await Self.results(gateway, #"[{"$match": {"createdAt": {"$gte": "2000-01-01T00:00:00.000Z"}}}, {"$count": "n"}]"#)
            let later = try await Self.results(gateway, """
                [{"$project": {"createdAt": 1}}, {"$match": {"createdAt": {"$gte": "2000-01-01T00:00:00.000Z", "$lt": "3000-01-01"}}}, {"$count": "n"}]
                """)
            #expect(early == (try Self.json(#"[{"n": 5}]"#)))
            #expect(later == early)
            let huge = try await Self.results(gateway, #"[{"$match": {"createdAt": {"$gt": 1e300}}}, {"$count": "n"}]"#)
            #expect(huge == [])
        }
    }

    @Test("$sort on several keys in the order written, then $skip and $limit", arguments: TestStorage.available)
    func sortSkipLimit(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let page = try await Self.results(gateway, """
                [{"$sort": {"kind": -1, "price": 1}}, {"$skip": 1}, {"$limit": 3}, {"$project": {"description": 1, "_id": 0}}]
                """)
            #expect(page == (try Self.json(#"[{"description": "d"}, {"description": "a"}, {"description": "c"}]"#)))
            let byPrice = try await Self.results(gateway, #"[{"$sort": {"price": -1, "kind": 1}}, {"$project": {"d": "$description", "_id": 0}}]"#)
            #expect(byPrice == (try Self.json(#"[{"d": "e"}, {"d": "c"}, {"d": "a"}, {"d": "d"}, {"d": "b"}]"#)))
            let newest = try await Self.results(gateway, #"[{"$sort": {"createdAt": -1, "description": -1}}, {"$limit": 2}, {"$project": {"description": 1, "_id": 0}}]"#)
            #expect(newest == (try Self.json(#"[{"description": "e"}, {"description": "d"}]"#)))
        }
    }

    @Test("$project includes fields (dotted too), excludes fields, renames with $field; a document has _id, createdAt, updatedAt and etag",
          arguments: TestStorage.available)
    func project(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let whole = try await Self.results(gateway, #"[{"$limit": 1}]"#)
            let object = try #require(whole.first?.objectValue)
            #expect(Set(object.keys) == ["description", "done", "kind", "price", "qty", "sizes", "meta", "_id", "createdAt", "updatedAt", "etag"])
            let id = try #require(object["_id"]?.string)
            let read = try await gateway.call(.get, "\(Self.bucket)/\(id)", headers: NebulaDialectTests.app)
            for key in ["_id", "createdAt", "updatedAt", "etag", "meta"] { #expect(object[key] == read.json[key], "\(key)") }

            let included = try await Self.results(gateway, #"[{"$limit": 2}, {"$project": {"description": 1, "meta.origin": 1}}]"#)
            #expect(included.map { $0.objectValue.map { Set($0.keys) } } == [["_id", "description", "meta"], ["_id", "description"]])
            #expect(included.first?["meta"] == .object(["origin": .string("jp")]))
            let excluded = try await Self.results(gateway, """
                [{"$limit": 2}, {"$project": {"_id": 0, "createdAt": 0, "updatedAt": 0, "etag": false, "sizes": 0, "meta.origin": 0}}]
                """)
            #expect(excluded == (try Self.json("""
                [{"description": "a", "done": false, "kind": "fruit", "price": 3, "qty": 2, "meta": {}},
                 {"description": "b", "done": false, "kind": "veg", "price": 1.5, "qty": 4}]
                """)))
            let renamed = try await Self.results(gateway, """
                [{"$limit": 1}, {"$project": {"_id": 0, "name": "$description", "where": "$meta.origin", "none": "$nothing", "fixed": {"$literal": 1},
                                              "pair": ["$kind", "$qty"], "info": {"k": "$kind"}}}]
                """)
            #expect(renamed == (try Self.json(#"[{"name": "a", "where": "jp", "fixed": 1, "pair": ["fruit", 2], "info": {"k": "fruit"}}]"#)))
        }
    }

    @Test("$count names the count, and gives no document when nothing matches", arguments: TestStorage.available)
    func count(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let fruits = try await Self.results(gateway, #"[{"$match": {"kind": "fruit"}}, {"$count": "fruits"}]"#)
            #expect(fruits == (try Self.json(#"[{"fruits": 3}]"#)))
            let none = try await Self.results(gateway, #"[{"$match": {"kind": "none"}}, {"$count": "n"}]"#)
            #expect(none == [])
            let empty = try await Self.results(gateway, "[]")
            #expect(empty.count == 5, "no stage: every object")
        }
    }

    @Test("$unwind an array field: one document per element, which a $match then filters; with preserveNullAndEmptyArrays and includeArrayIndex", arguments: TestStorage.available)
    func unwind(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let project = #"{"$project": {"_id": 0, "description": 1, "sizes": 1, "i": 1}}"#
            let plain = try await Self.results(gateway, #"[{"$unwind": "$sizes"}, \#(project)]"#)
            #expect(plain == (try Self.json("""
                [{"description": "a", "sizes": "S"}, {"description": "a", "sizes": "M"}, {"description": "e", "sizes": "L"}]
                """)))
            let preserved = try await Self.results(gateway, """
                [{"$unwind": {"path": "$sizes", "preserveNullAndEmptyArrays": true, "includeArrayIndex": "i"}}, \(project)]
                """)
            #expect(preserved == (try Self.json("""
                [{"description": "a", "sizes": "S", "i": 0}, {"description": "a", "sizes": "M", "i": 1}, {"description": "b", "i": null},
                 {"description": "c", "sizes": null, "i": null}, {"description": "d", "i": null}, {"description": "e", "sizes": "L", "i": null}]
                """)))
            let matched = try await Self.results(gateway, #"[{"$unwind": "$sizes"}, {"$match": {"sizes": {"$in": ["M", "L"]}}}, \#(project)]"#)
            #expect(matched == (try Self.json(#"[{"description": "a", "sizes": "M"}, {"description": "e", "sizes": "L"}]"#)))
            let counted = try await Self.results(gateway, """
                [{"$unwind": {"path": "$sizes"}}, {"$group": {"_id": "$sizes", "n": {"$sum": 1}}}, {"$sort": {"_id": -1}}]
                """)
            #expect(counted == (try Self.json(#"[{"_id": "S", "n": 1}, {"_id": "M", "n": 1}, {"_id": "L", "n": 1}]"#)))
        }
    }

    @Test("only the objects the caller may read are aggregated; the master key aggregates all", arguments: TestStorage.available)
    func visibility(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            var tokens: [String] = []
            for name in ["hanako", "jiro"] {
                let registered = try await gateway.call(.post, "\(NebulaDialectTests.base)/users", headers: NebulaDialectTests.app,
                                                        json: #"{"username": "\#(name)", "password": "password-123"}"#)
                #expect(registered.status == 201)
                let login = try await gateway.call(.post, "\(NebulaDialectTests.base)/login", headers: NebulaDialectTests.app,
                                                   json: #"{"username": "\#(name)", "password": "password-123"}"#)
                tokens.append(try #require(login.json["sessionToken"]?.string))
            }
            let created = try await gateway.call(.post, Self.bucket, headers: NebulaDialectTests.session(tokens[0]),
                                                 json: #"{"description": "private", "kind": "fruit", "price": 100}"#)
            #expect(created.status == 201)
            let pipeline = #"[{"$group": {"_id": "$kind", "total": {"$sum": "$price"}}}, {"$sort": {"_id": 1}}]"#
            let others = #"[{"_id": "fruit", "total": 8}, {"_id": "veg", "total": 4}]"#
            let mine = #"[{"_id": "fruit", "total": 108}, {"_id": "veg", "total": 4}]"#
            let anonymous = try await Self.results(gateway, pipeline)
            let stranger = try await Self.results(gateway, pipeline, headers: NebulaDialectTests.session(tokens[1]))
            let owner = try await Self.results(gateway, pipeline, headers: NebulaDialectTests.session(tokens[0]))
            let master = try await Self.results(gateway, pipeline, headers: NebulaDialectTests.master)
            #expect(anonymous == (try Self.json(others)))
            #expect(stranger == (try Self.json(others)))
            #expect(owner == (try Self.json(mine)))
            #expect(master == (try Self.json(mine)))
        }
    }

    @Test("bad pipelines are 400s naming the stage and the problem; a body that is not JSON is a 400, one of another type a 415",
          arguments: TestStorage.available)
    func errors(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let cases: [(String, String)] = [
                (#"{"pipeline": [{"$lookup": {"from": "x"}}]}"#, "'$lookup' is not supported"),
                (#"{"pipeline": [{"$match": {}}, {"$out": "x"}]}"#, "pipeline[1]: the stage '$out'"),
                (#"{"pipeline": [{"$facet": {}}]}"#, "$facet"),
                (#"{"pipeline": [{"$limit": -1}]}"#, "pipeline[0] ($limit): must be a whole number from 1"),
                (#"{"pipeline": [{"$skip": 1.5}]}"#, "pipeline[0] ($skip)"),
                (#"{"pipeline": [{"$group": {"n": {"$sum": 1}}}]}"#, "pipeline[0] ($group): needs _id"),
                (#"{"pipeline": [{"$group": {"_id": null, "n": {"$median": "$a"}}}]}"#, "'$median' is not supported"),
                (#"{"pipeline": [{"$group": {"_id": {"$add": [1, 2]}}}]}"#, "'$add' is not supported"),
                (#"{"pipeline": [{"$group": {"_id": null, "a.b": {"$sum": 1}}}]}"#, "pipeline[0] ($group)"),
                (#"{"pipeline": [{"$sort": {"a": 2}}]}"#, "pipeline[0] ($sort): a must be 1"),
                (#"{"pipeline": [{"$sort": {}}]}"#, "pipeline[0] ($sort)"),
                (#"{"pipeline": [{"$project": {"a": 1, "b": 0}}]}"#, "pipeline[0] ($project): either includes"),
                (#"{"pipeline": [{"$project": {"a": 1, "a.b": 1}}]}"#, "collides"),
                (#"{"pipeline": [{"$count": ""}]}"#, "pipeline[0] ($count)"),
                (#"{"pipeline": [{"$count": "$n"}]}"#, "pipeline[0] ($count)"),
                (#"{"pipeline": [{"$unwind": "sizes"}]}"#, "pipeline[0] ($unwind)"),
                (#"{"pipeline": [{"$unwind": {"path": "$sizes", "keep": true}}]}"#, "'keep' is not an option"),
                (#"{"pipeline": [{"$match": {"a": {"$bad": 1}}}]}"#, "pipeline[0] ($match): $match.a.$bad: unknown operator"),
                (#"{"pipeline": [{"$match": {"a'; DROP TABLE todo_objects; --": 1}}]}"#, "pipeline[0] ($match)"),
                (#"{"pipeline": [{"$match": {}, "$limit": 1}]}"#, "pipeline[0] must be an object with one stage"),
                (#"{"pipeline": ["$match"]}"#, "pipeline[0] must be an object"),
                (#"{"pipeline": {"$match": {}}}"#, "pipeline must be an array"),
                (#"{"stages": []}"#, "'stages' is not a field"),
                (#"{"pipeline": [], "options": {"explain": true}}"#, "options.explain is not supported"),
                (#"{"pipeline": [], "options": {"maxTimeMS": "soon"}}"#, "options.maxTimeMS"),
                ("[]", "must be a JSON object"),
                ("{\"pipeline\": [" + Array(repeating: #"{"$limit": 1}"#, count: 33).joined(separator: ",") + "]}", "more than 32 stages"),
                (#"{"pipeline": [{"$match": {"a": "# + String(repeating: #"{"b": "#, count: 22) + "1" + String(repeating: "}", count: 24) + "]}", "nests deeper"),
            ]
            for (body, detail) in cases {
                let reply = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.app, json: body)
                #expect(reply.status == 400, "\(body.prefix(100)): \(reply.status) \(reply.json.jsonText.prefix(300))")
                #expect(reply.json["reasonCode"]?.string == "invalid_argument")
                #expect(reply.json["detail"]?.string?.contains(detail) == true, "\(body.prefix(100)): \(reply.json.jsonText.prefix(300))")
            }
            let allowed = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.app,
                                                 json: #"{"pipeline": [{"$count": "n"}], "options": {"allowDiskUse": true, "maxTimeMS": 1000, "batchSize": 10}}"#)
            #expect(allowed.status == 200)
            #expect(allowed.json == .object(["results": .array([.object(["n": .number(5)])])]))

            let notJSON = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.app, json: "{pipeline")
            #expect(notJSON.status == 400)
            var plain = NebulaDialectTests.app
            plain[.contentType] = "text/plain"
            let wrongType = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: plain, json: #"{"pipeline": []}"#)
            #expect(wrongType.status == 415)
            #expect(wrongType.json["reasonCode"]?.string == "unsupported_media_type")
            let noBucket = try await gateway.call(.post, "\(NebulaDialectTests.base)/objects/nope/_aggregate", headers: NebulaDialectTests.app,
                                                  json: #"{"pipeline": []}"#)
            #expect(noBucket.status == 404)
            let noKey = try await gateway.call(.post, "\(Self.bucket)/_aggregate", json: #"{"pipeline": []}"#)
            #expect(noKey.status == 401)
        }
    }

    @Test("odd pipelines (types mixed in every stage, arrays and objects where scalars belong) give the same results on both databases",
          arguments: TestStorage.available)
    func oddInput(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            let cases: [(String, String)] = [
                (#"[{"$unwind": "$description"}, {"$unwind": "$meta"}, {"$group": {"_id": "$meta", "m": {"$min": "$meta"}, "x": {"$max": "$sizes"}}}]"#,
                 #"[{"_id": {"origin": "jp"}, "m": null, "x": null}]"#),
                (#"[{"$group": {"_id": ["$kind", "$qty"], "s": {"$sum": "$description"}, "a": {"$avg": "$sizes"}, "p": {"$push": {"x": "$sizes"}}}}]"#,
                 """
                 [{"_id": ["fruit", 2], "a": null, "p": [{"x": ["S", "M"]}], "s": 0}, {"_id": ["veg", 4], "a": null, "p": [{"x": []}], "s": 0},
                  {"_id": ["fruit", 1], "a": null, "p": [{"x": null}], "s": 0}, {"_id": ["veg", null], "a": null, "p": [{}], "s": 0},
                  {"_id": ["fruit", 3], "a": null, "p": [{"x": "L"}], "s": 0}]
                 """),
                // null and missing first, then strings, then arrays (which tie: a's origin breaks it).
                (#"[{"$sort": {"sizes": 1, "meta.origin": -1}}, {"$project": {"x.y.z": "$description", "_id": 0}}, {"$unwind": "$x.y.z"}]"#,
                 #"[{"x": {"y": {"z": "c"}}}, {"x": {"y": {"z": "d"}}}, {"x": {"y": {"z": "e"}}}, {"x": {"y": {"z": "a"}}}, {"x": {"y": {"z": "b"}}}]"#),
                (#"[{"$project": {"_id": 0, "s": {"$literal": "$notAField"}}}, {"$match": {"s": "$notAField"}}, {"$skip": 4}, {"$skip": 9007199254740992}]"#,
                 "[]"),
                (#"[{"$project": {"_id": 0, "s": {"$literal": "$notAField"}}}, {"$match": {"s": "$notAField"}}, {"$skip": 4}]"#,
                 #"[{"s": "$notAField"}]"#),
                (#"[{"$match": {"sizes": {"$all": ["S"]}, "description": {"$regex": "^a"}}}, {"$project": {"sizes": 1, "_id": 0}}, {"$match": {"sizes": {"$all": ["M"]}}}]"#,
                 #"[{"sizes": ["S", "M"]}]"#),
                (#"[{"$group": {"_id": "$done", "least": {"$min": "$done"}, "most": {"$max": "$done"}, "d": {"$max": "$description"}}}]"#,
                 #"[{"_id": false, "least": false, "most": false, "d": "e"}]"#),
            ]
            for (pipeline, expected) in cases {
                let results = try await Self.results(gateway, pipeline)
                #expect(results == (try Self.json(expected)), "\(pipeline)")
            }
            // A sum past the largest number cannot be written as JSON.
            let overflow = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.app,
                                                  json: #"{"pipeline": [{"$group": {"_id": "$_id", "t": {"$sum": 1e308}}}, {"$group": {"_id": null, "t": {"$sum": "$t"}}}]}"#)
            #expect(overflow.status == 400, "\(overflow.json.jsonText)")
            // And one past the most negative, which must not turn into a positive number on the way.
            let underflow = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.app,
                                                   json: #"{"pipeline": [{"$group": {"_id": "$_id", "t": {"$sum": -1e308}}}, {"$group": {"_id": null, "t": {"$sum": "$t"}}}]}"#)
            #expect(underflow.status == 400, "\(underflow.json.jsonText)")
        }
    }

    @Test("random pipelines answer 200 or 400, never a 500", arguments: TestStorage.available)
    func fuzz(storage: TestStorage) async throws {
        try await withItems(storage) { gateway in
            var random = SplitMix(state: 20_260_101)
            let values = [#"1"#, #"-1"#, #"0"#, #"1.5"#, #"1e308"#, #""x""#, #""$kind""#, #""$price""#, #""$sizes""#, #""$meta.origin""#, #""$nope""#,
                          #""$createdAt""#, #"null"#, #"true"#, #"[]"#, #"{}"#, #"["$kind", 1]"#, #"{"a": "$qty"}"#, #""$""#, #""$$ROOT""#,
                          #"{"$literal": [1]}"#, #"{"$gt": 1}"#, #""2020-01-01""#]
            let fields = ["kind", "price", "sizes", "meta.origin", "_id", "createdAt", "qty", "nope", "a.b", "kind", "price", "sizes", "qty", "$bad"]
            let accumulators = ["$sum", "$avg", "$min", "$max", "$first", "$last", "$push", "$count", "$addToSet"]
            for _ in 0..<200 {
                func value() -> String { values.randomElement(using: &random)! }
                func field() -> String { fields.randomElement(using: &random)! }
                let stages = (0..<Int.random(in: 1...4, using: &random)).map { _ -> String in
                    switch Int.random(in: 0..<10, using: &random) {
                    case 0: #"{"$match": {"\#(field())": \#(value())}}"#
                    case 1: #"{"$match": {"\#(field())": {"\#(["$gt", "$lte", "$ne", "$in", "$exists", "$all"].randomElement(using: &random)!)": \#(value())}}}"#
                    case 2: #"{"$group": {"_id": \#(value()), "\#(field())": {"\#(accumulators.randomElement(using: &random)!)": \#(value())}}}"#
                    case 3: #"{"$sort": {"\#(field())": \#(Bool.random(using: &random) ? "1" : value()), "\#(field())": -1}}"#
                    case 4: #"{"$\#(["skip", "limit"].randomElement(using: &random)!)": \#(Bool.random(using: &random) ? "2" : value())}"#
                    case 5: #"{"$project": {"\#(field())": \#(value()), "\#(field())": \#(value())}}"#
                    case 6: #"{"$count": "\#(field())"}"#
                    case 7: #"{"$unwind": "$\#(field())"}"#
                    case 8: #"{"$unwind": {"path": \#(value()), "preserveNullAndEmptyArrays": \#(Bool.random(using: &random))}}"#
                    default: #"{"$\#(["lookup", "out", "merge", "sample", "geoNear"].randomElement(using: &random)!)": \#(value())}"#
                    }
                }
                let body = #"{"pipeline": [\#(stages.joined(separator: ", "))]}"#
                let reply = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.master, json: body)
                #expect(reply.status == 200 || reply.status == 400, "\(body): \(reply.status) \(reply.json.jsonText.prefix(300))")
                if reply.status == 200 { #expect(reply.json["results"]?.arrayValue != nil, "\(body)") }
            }
        }
    }

    @Test("results past the plugin's query limit are refused with a 400 that asks for a $limit")
    func cap() async throws {
        try await withItems(.sqlite) { gateway in
            let limit = try gateway.todoPlugin.configuration.maxQueryLimit
            let stages = """
                {"$project": {"n": [\(Array(repeating: "1", count: 60).joined(separator: ","))]}}, {"$unwind": "$n"},
                {"$project": {"n": [\(Array(repeating: "1", count: 10).joined(separator: ","))]}}, {"$unwind": "$n"}
                """
            #expect(5 * 60 * 10 > limit)
            let reply = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.app, json: #"{"pipeline": [\#(stages)]}"#)
            #expect(reply.status == 400)
            #expect(reply.json["detail"]?.string?.contains("$limit") == true, "\(reply.json.jsonText.prefix(300))")
            let limited = try await gateway.call(.post, "\(Self.bucket)/_aggregate", headers: NebulaDialectTests.app,
                                                 json: #"{"pipeline": [\#(stages), {"$limit": \#(limit)}]}"#)
            #expect(limited.json["results"]?.arrayValue?.count == limit)
        }
    }
}
