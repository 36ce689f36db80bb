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

    @Test("strings escape quotes, backslashes and control bytes wherever they fall in an eight-byte word, and nothing else")
    func stringEscapes() throws {
        func expected(_ text: String) -> [UInt8] {
            var out: [UInt8] = [UInt8(ascii: "\"")]
            let hex = Array("0123456789abcdef".utf8)
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), byte]
                case 0x0A: out += Array("\\n".utf8)
                case 0x0D: out += Array("\\r".utf8)
                case 0x09: out += Array("\\t".utf8)
                case ..<0x20: out += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
                default: out.append(byte)
                }
            }
            return out + [UInt8(ascii: "\"")]
        }
        let specials: [Character] = ["\"", "\\", "\n", "\u{01}", "\u{1F}", "\t"]
        let plain: [Character] = [" ", "~", "\u{7F}", "é", "中", "😀", "!", "#", "[", "]"]
        for length in 0...20 {
            for position in 0..<max(length, 1) {
                for special in specials {
                    var characters = (0..<length).map { plain[$0 % plain.count] }
                    if length > 0 { characters[position] = special }
                    let text = String(characters)
                    var written: [UInt8] = []
                    JSONValue.write(string: text, into: &written)
                    #expect(written == expected(text), "\(text.debugDescription)")
                    #expect(try JSONValue.parse(String(decoding: written, as: UTF8.self)) == .string(text))
                }
            }
        }
        // Bytes next to the thresholds: 0x1F is escaped, 0x20 and 0x21 are not, nor 0x5B and 0x5D.
        var written: [UInt8] = []
        JSONValue.write(string: "\u{1F}\u{20}\u{21}\u{5B}\u{5D}abcdefgh", into: &written)
        #expect(String(decoding: written, as: UTF8.self) == "\"\\u001f ![]abcdefgh\"")
    }
}
