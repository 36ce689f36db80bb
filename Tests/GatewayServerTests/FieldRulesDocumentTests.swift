import Foundation
import GatewayCore
import OpenAPIKit
import Testing

@testable import GatewayServer

/// Inputs whose rules (``FieldRule``, ``ValidatableInput``, ``Route/inputRules``) must
/// reach /openapi.json as JSON Schema keywords.
enum FieldRulesFixtures {
    fileprivate struct Search: Decodable, Sendable, ValidatableInput {
        var q: String
        var limit: Int?
        var sort: String?
        static let fieldRules: [String: FieldRule] = [
            "q": .nonBlank(maxLength: 200),
            "limit": PageQuery.limitRule,
        ]
    }

    fileprivate struct Contact: Decodable, Sendable, ValidatableInput {
        var name: String
        var email: String?
        var phone: String?
        var tags: [String]?
        var age: Int?
        var kind: String?
        static let fieldRules: [String: FieldRule] = [
            "name": .text(1...64),
            "email": .format("email"),
            "phone": .pattern("^\\+?[0-9 ]{3,20}$"),
            "tags": .list(maxCount: 10, of: .text(1...32)),
            "age": .integer(0...150).described("Years."),
        ]
        static let requiredAlternatives = [["email"], ["phone"]]
    }

    fileprivate struct Rename: Decodable, Sendable {
        var title: String?
        enum CodingKeys: String, CodingKey { case title }
        init(from decoder: any Decoder) throws {
            title = try decoder.container(keyedBy: CodingKeys.self).decodeIfGiven(String.self, forKey: .title)
        }
    }

    fileprivate struct Ack: Codable, Sendable { var ok: Bool }

    static let plugin = PluginDescription(
        id: "contacts",
        summary: "Contacts",
        mount: "/v1/contacts/",
        operations: [
            GatewayCore.Route.define("contacts.search", .get, "/search", summary: "Search")
                .query(Search.self)
                .rules(["query.sort": .oneOf(["name", "age"])])
                .returns(Ack.self) { _, _ in Ack(ok: true) },
            GatewayCore.Route.define("contacts.create", .post, "/", summary: "Create")
                .body(Contact.self)
                .rules(["body.age": .integer(18...150), "body": .requiring(["tags"]), "body.kind": .oneOf(["home"])])
                .returns(Ack.self) { _, _ in Ack(ok: true) },
            GatewayCore.Route.define("contacts.rename", .patch, "/{id}", summary: "Rename")
                .path(IDPath.self)
                .rules(["path.id": .pattern("^[0-9]{1,9}$")])
                .body(Rename.self)
                .documentErrors([.notFound], mediaType: "text/html; charset=utf-8")
                .returns(Ack.self) { _, _ in Ack(ok: true) },
        ]
    )

    fileprivate struct IDPath: Decodable, Sendable { var id: String }

    static func document() throws -> [String: Any] {
        let document = OpenAPIDocumentBuilder.document(title: "Gateway", version: "1.0.0", serverURL: "http://127.0.0.1:8080", plugins: [plugin])
        try document.validate()
        let data = try OpenAPIDocumentBuilder.json(document)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// The operation at `path` and `method` of the document's JSON.
    static func operation(_ method: String, _ path: String, in root: [String: Any]) throws -> [String: Any] {
        let paths = try #require(root["paths"] as? [String: Any])
        let item = try #require(paths[path] as? [String: Any], "no path \(path) among \(paths.keys.sorted())")
        return try #require(item[method] as? [String: Any])
    }

    static func parameter(_ name: String, of operation: [String: Any]) throws -> [String: Any] {
        let parameters = try #require(operation["parameters"] as? [[String: Any]])
        let parameter = try #require(parameters.first { $0["name"] as? String == name })
        return try #require(parameter["schema"] as? [String: Any])
    }

    static func jsonBody(of operation: [String: Any]) throws -> [String: Any] {
        let body = try #require(operation["requestBody"] as? [String: Any])
        let content = try #require(body["content"] as? [String: Any])
        let json = try #require(content["application/json"] as? [String: Any])
        return try #require(json["schema"] as? [String: Any])
    }

    /// The object schema among `schema` and its `allOf` parts (the part with `properties`).
    static func objectPart(_ schema: [String: Any]) -> [String: Any]? {
        if schema["properties"] != nil { return schema }
        return (schema["allOf"] as? [[String: Any]])?.first { $0["properties"] != nil }
    }
}

@Suite("Field rules in the OpenAPI document")
struct FieldRulesDocumentTests {
    typealias F = FieldRulesFixtures

    @Test("merging joins required lists and merges nested objects; `and` lets the later rule win")
    func merging() {
        let merged = FieldRule.list(1...5, of: .text(maxLength: 3)).and(.each(.pattern("^a")))
        guard case .object(let items)? = merged.keywords["items"] else {
            Issue.record("items is not an object: \(merged.keywords)")
            return
        }
        #expect(items["maxLength"] == .number(3))
        #expect(items["pattern"] == .string("^a"))
        #expect(merged.keywords["minItems"] == .number(1))
        let required = FieldRule.requiring(["a", "b"]).and(.requiring(["b", "c"]))
        #expect(required.keywords["required"] == .array([.string("a"), .string("b"), .string("c")]))
        #expect(FieldRule.integer(1...5).and(.integer(2...3)).keywords["minimum"] == .number(2))
    }

    @Test("query parameters carry their type's rules and the operation's, and stay non-nullable")
    func queryRules() throws {
        let search = try F.operation("get", "/v1/contacts/search", in: F.document())
        let q = try F.parameter("q", of: search)
        #expect(q["minLength"] as? Int == 1)
        #expect(q["maxLength"] as? Int == 200)
        #expect(q["pattern"] as? String == "\\S")
        let limit = try F.parameter("limit", of: search)
        #expect(limit["minimum"] as? Int == Int(PageQuery.limits.lowerBound))
        #expect(limit["maximum"] as? Int == Int(PageQuery.limits.upperBound))
        #expect(limit["type"] as? String == "integer")
        let sort = try F.parameter("sort", of: search)
        #expect(sort["enum"] as? [String] == ["name", "age"])
        #expect(sort["type"] as? String == "string")
    }

    @Test("body members carry their rules; optional members may be null; alternatives and `requiring` add required members")
    func bodyRules() throws {
        let create = try F.operation("post", "/v1/contacts", in: F.document())
        let schema = try F.jsonBody(of: create)
        let object = try #require(F.objectPart(schema), "no object part in \(schema)")
        let properties = try #require(object["properties"] as? [String: Any])
        let name = try #require(properties["name"] as? [String: Any])
        #expect(name["maxLength"] as? Int == 64)
        #expect(Set(object["required"] as? [String] ?? []) == ["name", "tags"])

        // A decodeIfPresent member is nullable in a JSON body: null or a string of the format.
        let email = try #require(properties["email"] as? [String: Any])
        let emailText = "\(email)"
        #expect(emailText.contains("email"))
        #expect(emailText.contains("null"))

        let age = try #require(properties["age"] as? [String: Any])
        #expect(age["minimum"] as? Int == 18)  // the operation's rule wins over the type's
        #expect(age["maximum"] as? Int == 150)
        #expect(age["description"] as? String == "Years.")
        // A configured list of values keeps null for a member that may be null.
        let kind = try #require(properties["kind"] as? [String: Any])
        let kinds = try #require(kind["enum"] as? [Any], "no enum in \(kind)")
        #expect(kinds.contains { $0 as? String == "home" })
        #expect(kinds.contains { $0 is NSNull })
        let tags = try #require(properties["tags"] as? [String: Any])
        #expect(tags["maxItems"] as? Int == 10)
        #expect((tags["items"] as? [String: Any])?["maxLength"] as? Int == 32)

        // Email or phone: an anyOf of the two alternatives, each required and not null.
        let parts = try #require(schema["allOf"] as? [[String: Any]], "alternatives need allOf: \(schema)")
        let alternatives = try #require(parts.compactMap { $0["anyOf"] as? [[String: Any]] }.first)
        #expect(alternatives.map { $0["required"] as? [String] ?? [] } == [["email"], ["phone"]])
    }

    @Test("path rules, a never-null member and an error's own media type")
    func pathAndErrors() throws {
        let rename = try F.operation("patch", "/v1/contacts/{id}", in: F.document())
        #expect(try F.parameter("id", of: rename)["pattern"] as? String == "^[0-9]{1,9}$")
        let body = try F.jsonBody(of: rename)
        let object = try #require(F.objectPart(body))
        let title = try #require((object["properties"] as? [String: Any])?["title"] as? [String: Any])
        #expect(title["type"] as? String == "string")  // decodeIfGiven: may be left out, never null
        let responses = try #require(rename["responses"] as? [String: Any])
        let notFound = try #require(responses["404"] as? [String: Any])
        let content = try #require(notFound["content"] as? [String: Any])
        #expect(content.keys.contains("text/html; charset=utf-8"))
        #expect(notFound["description"] as? String == "Not Found")
    }
}
