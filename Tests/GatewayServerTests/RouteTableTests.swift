import GatewayCore
@testable import GatewayServer
import HTTPTypes
import Hummingbird
import Testing

@Suite("route table")
struct RouteTableTests {
    /// A table of named endpoints; each test resolves paths against it.
    func table() throws -> RouteTable<String> {
        var table = RouteTable<String>()
        try table.add(.get, "/healthz", "healthz")
        try table.add(.get, "/v1/notes/notes", "list")
        try table.add(.post, "/v1/notes/notes", "create")
        try table.add(.get, "/v1/notes/notes/{id}", "get")
        try table.add(.delete, "/v1/notes/notes/{id}", "delete")
        try table.add(.get, "/v1/notes/notes/mine", "mine")
        try table.add(.get, "/v1/notes/notes/{id}/history", "history")
        try table.add(.get, "/v1/notes/echo", "echo")
        try table.add(.get, "/v1/notes/echo2", "echo2")
        try table.add(.get, "/v1/notes/ecHo", "ecHo")
        try table.add(.get, "/v1/café/{name}", "unicode")
        // Many literals under one node, of the same and of different lengths.
        for index in 0..<40 { try table.add(.get, "/v1/many/item\(index)", "item\(index)") }
        return table
    }

    func found(_ table: RouteTable<String>, _ method: HTTPRequest.Method, _ path: String) throws -> (String, [String: String])? {
        if case .found(let endpoint, let parameters) = try table.resolve(method, path: Substring(path)) { return (endpoint, parameters) }
        return nil
    }

    @Test("{name...} takes the rest of the path as it came, only where nothing more precise matches; it must come last")
    func restParameters() throws {
        var table = RouteTable<String>()
        try table.add(.get, "/v1/svc/{path...}", "rest")
        try table.add(.get, "/v1/svc/items/{id}", "item")
        try table.add(.get, "/v1/svc/admin/{tail...}", "admin")
        try table.add(.get, "/v1/other", "other")
        #expect(try found(table, .get, "/v1/svc/items/7")?.0 == "item")
        #expect(try found(table, .get, "/v1/svc/items/7/parts")?.1 == ["path": "items/7/parts"], "a deeper path falls back to the rest")
        #expect(try found(table, .get, "/v1/svc/a%2Fb/c%20d/")?.1 == ["path": "a%2Fb/c%20d"], "kept encoded, without trailing slashes")
        #expect(try found(table, .get, "/v1/svc")?.1 == ["path": ""], "zero segments")
        #expect(try found(table, .get, "/v1/svc/admin/x/y")?.0 == "admin")
        #expect(try found(table, .get, "/v1/svc/admin")?.1 == ["tail": ""])
        #expect(try found(table, .get, "/v1/others") == nil)
        guard case .methodNotAllowed = try table.resolve(.post, path: "/v1/svc/anything") else { Issue.record("POST at a rest route"); return }
        #expect(throws: (any Error).self) { try table.add(.get, "/v1/{rest...}/more", "bad") }
        #expect(throws: (any Error).self) { try table.add(.get, "/v1/svc/{other...}", "clash") }
    }

    @Test("literal segments, byte for byte, and literals before parameters")
    func literals() throws {
        let table = try table()
        #expect(try found(table, .get, "/healthz")?.0 == "healthz")
        #expect(try found(table, .get, "/v1/notes/echo")?.0 == "echo")
        #expect(try found(table, .get, "/v1/notes/echo2")?.0 == "echo2")
        #expect(try found(table, .get, "/v1/notes/ecHo")?.0 == "ecHo")
        #expect(try found(table, .get, "/v1/notes/notes/mine")?.0 == "mine")
        #expect(try found(table, .get, "/v1/notes/notes/mind")?.0 == "get")
        #expect(try found(table, .get, "/v1/notes/notes/mind")?.1 == ["id": "mind"])
        for index in [0, 9, 10, 39] { #expect(try found(table, .get, "/v1/many/item\(index)")?.0 == "item\(index)") }
        for path in ["/v1/many/item40", "/v1/many/item", "/v1/many/item100", "/v1/notes/ech", "/v1/notes/echo3", "/", "", "/v2", "/healthz/x"] {
            guard case .notFound = try table.resolve(.get, path: Substring(path)) else {
                Issue.record("\(path) should not be found")
                continue
            }
        }
    }

    @Test("trailing and doubled slashes are ignored; a path may be a substring of a longer text")
    func slashes() throws {
        let table = try table()
        #expect(try found(table, .get, "/v1/notes/echo/")?.0 == "echo")
        #expect(try found(table, .get, "//v1//notes///echo")?.0 == "echo")
        let text = "/v1/notes/notes/7?ignored"
        let path = text[..<text.firstIndex(of: "?")!]
        guard case .found(let endpoint, let parameters) = try table.resolve(.get, path: path) else {
            Issue.record("a substring path should resolve")
            return
        }
        #expect(endpoint == "get")
        #expect(parameters == ["id": "7"])
    }

    @Test("parameters are captured and percent-decoded, in any script; bad escapes are a 400")
    func parameters() throws {
        let table = try table()
        #expect(try found(table, .get, "/v1/notes/notes/a%20b/history")?.1 == ["id": "a b"])
        #expect(try found(table, .get, "/v1/notes/notes/%E4%B8%AD")?.1 == ["id": "中"])
        #expect(try found(table, .get, "/v1/café/日本")?.1 == ["name": "日本"])
        #expect(try found(table, .get, "/v1/caf%C3%A9/x") == nil)
        #expect(throws: GatewayError.self) { try table.resolve(.get, path: "/v1/notes/notes/%zz") }
        #expect(throws: GatewayError.self) { try table.resolve(.get, path: "/v1/notes/notes/%C3") }
    }

    @Test("another method at a known path is a 405 naming the allowed ones; HEAD falls back to GET")
    func methods() throws {
        let table = try table()
        #expect(try found(table, .head, "/v1/notes/echo")?.0 == "echo")
        #expect(try found(table, .delete, "/v1/notes/notes/5")?.0 == "delete")
        guard case .methodNotAllowed(let allowed) = try table.resolve(.put, path: "/v1/notes/notes") else {
            Issue.record("PUT should be refused")
            return
        }
        #expect(allowed == ["GET", "HEAD", "POST"])
        guard case .notFound = try table.resolve(.get, path: "/v1/notes") else {
            Issue.record("a path with no endpoint of its own is not found")
            return
        }
    }

    @Test("cache tags take the path's parameters: each {name} replaced, unknown names and stray braces kept")
    func tags() {
        let parameters = ["bucket": "todos", "id": "日本", "empty": ""]
        let resolved = ["todo:buckets", "todo:bucket:{bucket}", "{bucket}/{id}/x", "a{missing}b", "{empty}|",
                        "open{bucket", "close}{bucket}}", "é{id}é"].map { TagTemplate($0).resolve(parameters) }
        #expect(resolved == ["todo:buckets", "todo:bucket:todos", "todos/日本/x", "a{missing}b", "|", "open{bucket", "close}todos}", "é日本é"])
    }

    @Test("clashing templates are refused")
    func conflicts() throws {
        var table = try table()
        #expect(throws: RouteTable<String>.Conflict.self) { try table.add(.get, "/v1/notes/echo", "again") }
        #expect(throws: RouteTable<String>.Conflict.self) { try table.add(.get, "/v1/notes/notes/{other}/x", "renamed") }
    }
}

@Suite("pipeline helpers")
struct PipelineHelperTests {
    @Test("a request field's value reads as HTTPTypes' subscript: one value as it is, several joined, names without case")
    func fieldValue() {
        var fields: HTTPFields = [.contentType: "application/json", .accept: "text/html"]
        fields.append(HTTPField(name: .accept, value: "application/json"))
        fields.append(HTTPField(name: HTTPField.Name("X-API-KEY")!, value: "secret"))
        for name in [HTTPField.Name.contentType, .accept, .authorization, HTTPField.Name("x-api-key")!, .cookie] {
            #expect(fields.value(name) == fields[name], "\(name)")
        }
        #expect(fields.value(.accept) == "text/html, application/json")
        #expect(fields.value(HTTPField.Name("x-api-key")!) == "secret")
        #expect(fields.value(.authorization) == nil)
    }

    @Test("percent-decoding: escapes and plus signs, invalid escapes and UTF-8 refused, long values whole")
    func percentDecoding() throws {
        #expect(PercentDecoding.decode("a%20b+c") == "a b+c")
        #expect(PercentDecoding.decode("a%20b+c", plusIsSpace: true) == "a b c")
        #expect(PercentDecoding.decode("%2B%41%42%e4%b8%ad") == "+AB中")
        for bad in ["%", "%4", "%zz", "%C3", "%ED%A0%80", "%FF"] { #expect(PercentDecoding.decode(Substring(bad)) == nil, "\(bad)") }
        let long = String(repeating: "%E6%97%A5", count: 5000)
        #expect(PercentDecoding.decode(Substring(long)) == String(repeating: "日", count: 5000))
        let pairs = try PercentDecoding.queryParameters("a=1&b=x%20y&&c&q=%E5%8C%97+%E4%BA%AC")
        #expect(pairs.map(\.name) == ["a", "b", "c", "q"])
        #expect(pairs.map(\.value) == ["1", "x y", "", "北 京"])
        #expect(throws: GatewayError.self) { try PercentDecoding.queryParameters("ok=1&bad=%zz") }
        // Only the first `=` splits a pair; empty names and values, a leading or trailing `&`, a
        // slice of a longer string and a short (inline) string all split as the whole string would.
        let edges = try PercentDecoding.queryParameters("&=x&a=&b=c=d&e%3D=%26&")
        #expect(edges.map(\.name) == ["", "a", "b", "e="])
        #expect(edges.map(\.value) == ["x", "", "c=d", "&"])
        let url = "/v1/suggest?limit=10&q=sta"
        let sliced = try PercentDecoding.queryParameters(url[url.index(after: url.firstIndex(of: "?")!)...])
        #expect(sliced.map(\.name) == ["limit", "q"] && sliced.map(\.value) == ["10", "sta"])
        #expect(PercentDecoding.decode(url.dropFirst(4).prefix(7)) == "suggest")
        // The bad pair is named in the problem, whatever comes after it.
        for bad in ["a=%", "a=%4", "%zz=1", "x=%C3&y=2"] {
            do {
                _ = try PercentDecoding.queryParameters(Substring(bad))
                Issue.record("\(bad) was accepted")
            } catch {
                #expect(error.status == 400)
                #expect(error.detail.contains(bad.split(separator: "&")[0]), "\(error.detail)")
            }
        }
    }

    @Test("a request's query is what follows the first ? of its target, up to a #, as Hummingbird's URI reads it")
    func requestQuery() {
        for target in ["/v1/suggest?limit=10&q=%E5%8C%97%E4%BA%AC", "/a", "/a?", "/a?x=1?y=2", "/a?x=1#frag", "/a#frag?x=1", "/?q=%20+"] {
            let request = Request(head: HTTPRequest(method: .get, scheme: "http", authority: "gateway.test", path: target), body: .init(buffer: .init()))
            #expect(Exchange.query(of: request) == Substring(request.uri.query ?? ""), "\(target)")
        }
    }
}
