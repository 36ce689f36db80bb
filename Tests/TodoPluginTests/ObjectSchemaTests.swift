import Foundation
import GatewayCore
import Testing
@testable import TodoPlugin

@Suite("todo object schema")
struct ObjectSchemaTests {
    let schema: ObjectSchema = {
        let text = """
        {"type": "object", "required": ["description", "owner/name"], "additionalProperties": false,
         "properties": {
           "description": {"type": "string", "maxLength": 5},
           "done": {"type": "boolean"},
           "tags": {"type": "array", "items": {"type": "string", "minLength": 2}},
           "a~b": {"type": "number", "maximum": 1},
           "owner/name": {"type": "string"},
           "nested": {"type": "object", "properties": {"deep": {"type": "integer"}}}}}
        """
        return try! JSONDecoder().decode(ObjectSchema.self, from: Data(text.utf8))
    }()

    func problems(_ json: String) throws -> [String] {
        schema.problems(with: try JSONValue.parse(json)).map { "\($0.pointer) \($0.detail)" }
    }

    @Test("a valid object has no problems, whatever the order of its members; lengths count characters")
    func valid() throws {
        #expect(try problems(#"{"tags": ["ab", "日本"], "done": true, "owner/name": "x", "description": "héllo", "nested": {"deep": 3}}"#) == [])
        // Five characters in more than five bytes, and five grapheme clusters of several scalars.
        #expect(try problems(#"{"description": "日本語日本", "owner/name": ""}"#) == [])
        #expect(try problems(#"{"description": "👍🏽👍🏽👍🏽👍🏽👍🏽", "owner/name": ""}"#) == [])
    }

    @Test("problems come required first, then by member name, each with its escaped JSON pointer")
    func ordered() throws {
        let found = try problems(#"{"zeta": 1, "tags": ["ok", "x", 3], "description": "too long", "a~b": 2, "done": "yes", "nested": {"deep": 1.5}}"#)
        #expect(found == [
            "/owner~1name is required",
            "/a~0b must be at most 1",
            "/description must be at most 5 characters",
            "/done must be a boolean, not a string",
            "/nested/deep must be an integer, not a number",
            "/tags/1 must be at least 2 characters",
            "/tags/2 must be a string, not a number",
            "/zeta is not a field of this bucket's objects",
        ])
        #expect(try problems("[1]") == ["/ must be an object, not an array"])
    }
}
