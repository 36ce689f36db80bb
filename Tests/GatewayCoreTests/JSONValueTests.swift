import GatewayCore
import Testing

@Suite("JSON values")
struct JSONValueTests {
    @Test("written with members in key order at every depth (the same text for the same value), escaped, and read back equal")
    func keyOrder() throws {
        let value = JSONValue.object([
            "zeta": .array([.object(["b": .number(2), "a": .null]), .bool(true)]),
            "alpha": .string("quote \" backslash \\ newline \n tab \t é"),
            "Mid": .number(-1.5),
            "mid": .object([:]),
            "日本": .number(3),
        ])
        let text = value.jsonText
        #expect(text == #"{"Mid":-1.5,"alpha":"quote \" backslash \\ newline \n tab \t é","mid":{},"zeta":[{"a":null,"b":2},true],"日本":3}"#)
        #expect(try JSONValue.parse(text) == value)
        // Built in another order, the same text.
        var members: [String: JSONValue] = [:]
        for key in ["日本", "mid", "Mid", "alpha", "zeta"] { members[key] = value.objectValue?[key] }
        #expect(JSONValue.object(members).jsonText == text)
    }
}
