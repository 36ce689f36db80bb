import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
@testable import TodoPlugin
import Testing

/// `$regex` means the same on SQLite (ICU) and PostgreSQL: the same patterns over the same
/// values find the same objects on both.
@Suite("$regex: one syntax, the same answers on both databases")
struct PortableRegexTests {
    static let values = ["abc", "ABC", "a\nc", "a.c", "123", "٣", "x y", "end\n", "{x}", "café"]

    /// Pattern, case-insensitive, and the values it must find.
    static let cases: [(String, Bool, [String])] = [
        ("^a.c$", false, ["abc", "a.c"]),                       // `.` is not a newline; `$` is the end
        ("^a.c$", true, ["abc", "ABC", "a.c"]),
        (#"\d"#, false, ["123"]),                                // ASCII digits only
        (#"^\w+$"#, false, ["abc", "ABC", "123"]),               // ASCII word characters only
        (#"\s"#, false, ["a\nc", "x y", "end\n"]),
        ("d$", false, []),                                       // not before a final newline
        (#"\{x\}"#, false, ["{x}"]),
        ("caf.", false, ["café"]),
        ("[^a-z]", false, ["ABC", "a\nc", "a.c", "123", "٣", "x y", "end\n", "{x}", "café"]),
        (#"\x41"#, false, ["ABC"]),
        (#"\u00e9"#, false, ["café"]),
        ("^(?:a|x)", false, ["abc", "a\nc", "a.c", "x y"]),
        ("^[a-c]{3}$", false, ["abc"]),
        (#"[\d\s]"#, false, ["a\nc", "123", "x y", "end\n"]),
        ("b|Y", true, ["abc", "ABC", "x y"]),
    ]

    static let refused = [#"\b"#, "a{", "[[:alpha:]]", "(?=a)", #"(a)\1"#, "[]a]", #"\p{L}"#, "a}", #"[\D]"#, "(?i)a", #"\A"#, #"[a&&b]"#]

    @Test("the same patterns find the same objects", arguments: TestStorage.available)
    func sameAnswers(storage: TestStorage) async throws {
        try await withTodo(storage) { gateway in
            let user = try await gateway.register("regex")
            for value in Self.values {
                let created = try await gateway.call(.post, "/v1/todo/buckets/notes/objects", token: user.token,
                                                     json: JSONValue.object(["v": .string(value)]).jsonText)
                #expect(created.status == 201)
            }
            for (pattern, insensitive, expected) in Self.cases {
                var condition: [String: JSONValue] = ["$regex": .string(pattern)]
                if insensitive { condition["$options"] = .string("i") }
                let query = JSONValue.object(["where": .object(["v": .object(condition)]), "limit": .number(100)]).jsonText
                let reply = try await gateway.call(.post, "/v1/todo/buckets/notes/query", token: user.token, json: query)
                #expect(reply.status == 200, "\(pattern): \(reply.json.jsonText)")
                let found = Set(reply.json.items.compactMap { $0["v"]?.string })
                #expect(found == Set(expected), "\(storage) \(pattern)\(insensitive ? " (i)" : ""): \(found.sorted())")
            }
            for pattern in Self.refused {
                let query = JSONValue.object(["where": .object(["v": .object(["$regex": .string(pattern)])])]).jsonText
                let reply = try await gateway.call(.post, "/v1/todo/buckets/notes/query", token: user.token, json: query)
                #expect(reply.status == 400, "\(pattern) should be refused: \(reply.json.jsonText)")
            }
        }
    }

    @Test("each engine gets its own spelling")
    func spellings() throws {
        let regex = try PortableRegex(#"^a.\d$"#, caseInsensitive: true)
        #expect(regex.icu == #"(?i)^a[^\n][0-9]\z"#)
        #expect(regex.postgres == #"(?i)^a[^\n][0-9]$"#)
        #expect(try PortableRegex(#"[\w-]"#).postgres == "[A-Za-z0-9_-]")
        #expect(try PortableRegex(#"\x41\u00E9"#).icu == #"\u0041\u00E9"#)
    }
}
