import Foundation
import GatewayCore
import GatewaySupport

/// A `$regex` in the one syntax both databases answer the same way, and its spelling for each:
/// ICU's syntax, which SQLite's `REGEXP` reads (the gateway provides it: `LinearRegex`, which
/// matches in linear time and reads ICU's spelling of this subset), and PostgreSQL's advanced
/// regular expressions (`~`). The engines differ where a plain reading would not expect it — `\b` is a
/// word boundary in ICU and a backspace in PostgreSQL, `\d` and `\w` take in other scripts'
/// digits and letters in ICU, `$` also matches before a final newline in ICU, `.` matches a
/// newline in PostgreSQL, `[` opens a nested set inside a class in ICU — so the pattern is read
/// once and written out for each, and what cannot mean the same on both is refused with a 400.
///
/// The syntax: literal characters; `.` (any character but a newline); classes `[...]` and
/// `[^...]` with ranges; `^` and `$` (the start and end of the value); `*`, `+`, `?`, `{n}`,
/// `{n,}`, `{n,m}` (lazy forms too); `|`; groups `(...)` and `(?:...)`; `\d` `\D` `\w` `\W` `\s`
/// `\S` (ASCII digits, `[A-Za-z0-9_]`, ASCII white space); `\t` `\n` `\r` `\f` `\v`, `\xhh`,
/// `\uhhhh`; a backslash before any other ASCII punctuation for that character. Case-insensitive
/// matching (`$options: "i"`) folds ASCII letters the same way on both; beyond ASCII it follows
/// each database. The pattern is compiled once here (`LinearRegex`): one whose program would be too
/// large (counted repetitions are written out) is refused.
struct PortableRegex: Sendable, Equatable {
    let icu: String
    let postgres: String

    private static let digit = "0-9", word = "A-Za-z0-9_", space = " \\t\\n\\r\\f\\v"

    init(_ pattern: String, caseInsensitive: Bool = false) throws(QueryProblem) {
        var icu = "", postgres = ""
        func both(_ text: String) { icu += text; postgres += text }
        let characters = Array(pattern)
        var index = 0
        func next() -> Character? { index + 1 < characters.count ? characters[index + 1] : nil }
        /// `\x`: the escape after a backslash, as text both engines read alike (nil: refused).
        func escape(_ character: Character, inClass: Bool) throws(QueryProblem) -> String {
            switch character {
            case "d": return inClass ? Self.digit : "[\(Self.digit)]"
            case "w": return inClass ? Self.word : "[\(Self.word)]"
            case "s": return inClass ? Self.space : "[\(Self.space)]"
            case "D", "W", "S":
                if inClass { throw QueryProblem("\\\(character) is not supported inside a class") }
                let set = character == "D" ? Self.digit : character == "W" ? Self.word : Self.space
                return "[^\(set)]"
            case "t", "n", "r", "f", "v": return "\\\(character)"
            case "x", "u":
                // `index` is at the letter; its hexadecimal digits follow.
                let width = character == "x" ? 2 : 4
                let digits = characters.dropFirst(index + 1).prefix(width)
                guard digits.count == width, digits.allSatisfy(\.isHexDigit) else { break }
                index += width
                return "\\u" + String(repeating: "0", count: 4 - width) + String(digits)
            default:
                if character.isASCII, character.isPunctuation || character.isSymbol || character == " " { return "\\\(character)" }
                if character.isNumber { throw QueryProblem("back-references are not supported") }
            }
            throw QueryProblem("\\\(character) is not supported (see the $regex syntax)")
        }
        var inClass = false
        var classStart = 0
        while index < characters.count {
            let character = characters[index]
            defer { index += 1 }
            if inClass {
                switch character {
                case "\\":
                    guard let following = next() else { throw QueryProblem("a pattern must not end with '\\'") }
                    index += 1
                    both(try escape(following, inClass: true))
                case "]" where index > classStart:
                    inClass = false
                    both("]")
                case "]":
                    throw QueryProblem("a class must not start with ']' (write \\])")
                case "[":
                    throw QueryProblem("'[' inside a class must be escaped (\\[); nested sets and [:classes:] are not supported")
                case "&" where next() == "&", "-" where next() == "-", "~" where next() == "~":
                    throw QueryProblem("'\(character)\(character)' inside a class must be escaped")
                default:
                    both(String(character))
                }
                continue
            }
            switch character {
            case "\\":
                guard let following = next() else { throw QueryProblem("a pattern must not end with '\\'") }
                index += 1
                both(try escape(following, inClass: false))
            case ".":
                both("[^\\n]")
            case "$":
                icu += "\\z"
                postgres += "$"
            case "[":
                inClass = true
                both("[")
                if next() == "^" {
                    both("^")
                    index += 1
                }
                classStart = index + 1
            case "(":
                if next() == "?" {
                    guard index + 2 < characters.count, characters[index + 2] == ":" else {
                        throw QueryProblem("only (?:...) groups are supported")
                    }
                    both("(?:")
                    index += 2
                } else {
                    both("(")
                }
            case "{":
                guard let close = characters[index...].firstIndex(of: "}") else { throw QueryProblem("'{' must be escaped (\\{) unless it starts {n}, {n,} or {n,m}") }
                let body = String(characters[(index + 1) ..< close])
                let bounds = body.split(separator: ",", omittingEmptySubsequences: false)
                guard (1...2).contains(bounds.count), !bounds[0].isEmpty, bounds.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }) else {
                    throw QueryProblem("'{' must be escaped (\\{) unless it starts {n}, {n,} or {n,m}")
                }
                both("{" + body + "}")
                index = close
            case "}":
                throw QueryProblem("'}' must be escaped (\\})")
            default:
                both(String(character))
            }
        }
        if inClass { throw QueryProblem("unbalanced '['") }
        let flags = caseInsensitive ? "(?i)" : ""
        self.icu = flags + icu
        self.postgres = flags + postgres
        do {
            _ = try LinearRegex.cached(self.icu)
        } catch {
            throw QueryProblem(error.description)
        }
    }
}
