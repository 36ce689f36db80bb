import Foundation
import GatewayCore
@testable import GatewayServer
import GatewaySupport
import GatewayTesting
import SQLKit
import Testing

/// The engine behind SQLite's `REGEXP`: the same answers as ICU on the syntax it reads, in time
/// linear in the value whatever the pattern.
@Suite("LinearRegex: linear-time matching of the portable regex subset")
struct LinearRegexTests {
    /// ICU (NSRegularExpression), the engine SQLite's `REGEXP` used before, as the reference.
    static func reference(_ pattern: String, _ value: String) -> Bool {
        let expression = try! NSRegularExpression(pattern: pattern)
        return expression.firstMatch(in: value, range: NSRange(value.startIndex..<value.endIndex, in: value)) != nil
    }

    /// A small deterministic generator, so that a failure can be run again.
    struct Generator {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int((state >> 33) % UInt64(bound))
        }
        mutating func pick<T>(_ items: [T]) -> T { items[next(items.count)] }
    }

    /// A pattern in the syntax PortableRegex writes for ICU. Lazy quantifiers only on single
    /// atoms: ICU answers wrongly for a lazy loop over a group that can match nothing
    /// (`^n(?:(x*)*?y)?` does not find "n"), where this engine is right.
    static func pattern(_ generator: inout Generator, depth: Int) -> String {
        let atoms = ["a", "b", "c", "A", "[ab]", "[^a]", "[a-c]", "[^\\n]", "\\.", "[0-9]", "x", "\\n", "\\u00e9", "[\\-x]", "\\{"]
        var text = ""
        for _ in 0...generator.next(3) {
            var atom: String
            switch generator.next(10) {
            case 0 where depth > 0: atom = "(" + pattern(&generator, depth: depth - 1) + "|" + pattern(&generator, depth: depth - 1) + ")"
            case 1 where depth > 0: atom = "(?:" + pattern(&generator, depth: depth - 1) + ")"
            default: atom = generator.pick(atoms)
            }
            let single = !atom.hasPrefix("(")
            switch generator.next(12) {
            case 0: atom += "*"
            case 1: atom += "+"
            case 2: atom += "?"
            case 3: atom += "{\(generator.next(3))}"
            case 4: atom += "{\(generator.next(3)),}"
            case 5:
                let lower = generator.next(3)
                atom += "{\(lower),\(lower + generator.next(3))}"
            case 6 where single: atom += generator.pick(["*?", "+?", "??", "{1,2}?"])
            default: break
            }
            text += atom
        }
        return text
    }

    @Test("the same answers as ICU on 5,000 generated patterns × 20 values (and through UTF-8 bytes)")
    func equivalence() throws {
        var generator = Generator(state: 46)
        let characters: [Character] = ["a", "b", "c", "A", "x", ".", "\n", "1", "é", "-", "{"]
        var compared = 0
        for _ in 0..<5_000 {
            var pattern = Self.pattern(&generator, depth: 2)
            if generator.next(2) == 0 { pattern = "^" + pattern }
            if generator.next(3) == 0 { pattern += "\\z" }
            // ASCII folding only: the values are ASCII and é, whose other case never occurs.
            if generator.next(4) == 0 { pattern = "(?i)" + pattern }
            let regex = try LinearRegex(pattern)
            for _ in 0..<20 {
                let value = String((0..<generator.next(9)).map { _ in generator.pick(characters) })
                let expected = Self.reference(pattern, value)
                #expect(regex.matches(value) == expected, "\(pattern.debugDescription) on \(value.debugDescription)")
                let bytes = Array(value.utf8)
                #expect(bytes.withUnsafeBufferPointer { regex.matches(utf8: $0) } == expected, "\(pattern.debugDescription) on UTF-8 \(value.debugDescription)")
                compared += 1
            }
        }
        #expect(compared == 100_000)
    }

    @Test("hand-picked cases: anchors, classes, escapes, case folding, empty loops")
    func cases() throws {
        let cases: [(String, String, Bool)] = [
            ("^abc\\z", "abc", true), ("^abc\\z", "abcd", false), ("^\\z", "", true), ("^\\z", "a", false), ("\\z", "", true),
            ("(?i)^a[^\\n][0-9]\\z", "Ab1", true), ("(?i)[^a-z]", "ABC", false), ("(?i)[^a-z]", "AB1", true),
            ("(?i)b|Y", "xy", true), ("\\u0041\\u00E9", "Aé", true), ("caf[^\\n]", "café", true), ("a\\z", "a\n", false),
            ("(a*)*b", "aaaa", false), ("(a|aa)*c", "aaac", true), ("x[\\]]", "x]", true), ("[-a]", "-", true), ("[a-]", "-", true),
            ("a{0}b", "b", true), ("(?:)", "", true), ("a||b", "", true), ("\\t\\n\\r\\f\\v", "\t\n\r\u{0C}\u{0B}", true),
            ("[\\u0000-\\u007f]+\\z", "ok", true), ("^[^\\u0000-\\u007f]", "é", true), ("😀", "a😀", true), ("^[^\\n]\\z", "😀", true),
        ]
        for (pattern, value, expected) in cases {
            #expect(try LinearRegex(pattern).matches(value) == expected, "\(pattern) on \(value.debugDescription)")
            #expect(Self.reference(pattern, value) == expected, "ICU: \(pattern) on \(value.debugDescription)")
        }
        // Ill-formed UTF-8 reads as U+FFFD, one scalar.
        let bytes: [UInt8] = [0x61, 0xFF, 0x62]
        #expect(bytes.withUnsafeBufferPointer { try! LinearRegex("^a[^\\n]b\\z").matches(utf8: $0) })
    }

    @Test("a pattern whose DFA has more states than are kept (2^10) still answers as ICU does")
    func manyStates() throws {
        let pattern = "(a|b)*a(a|b){9}\\z"
        let regex = try LinearRegex(pattern)
        var generator = Generator(state: 7)
        for _ in 0..<200 {
            let value = String((0..<(10 + generator.next(300))).map { _ in generator.next(2) == 0 ? "a" : "b" })
            #expect(regex.matches(value) == Self.reference(pattern, value), "\(value)")
        }
    }

    @Test("outside the syntax or too large: refused with a reason")
    func refused() {
        for pattern in ["(", ")", "[a", "[]a]", "a**", "a*+", "*a", "\\d", "\\b", "\\1", ".", "$", "a}", "(?=a)", "(?i", "a(?i)b", "[[]", "\\u12", "\\uD800",
                        "a{2,1}", "a{1001}", "[b-a]"] {
            #expect(throws: LinearRegex.Failure.self, "\(pattern)") { try LinearRegex(pattern) }
        }
        #expect(throws: LinearRegex.Failure.tooLarge(instructions: 10_001)) { try LinearRegex("(a{100}){100}") }
        #expect((try? LinearRegex("[a-z]{1,100}"))?.programSize == 200)
        #expect((try? LinearRegex(String(repeating: "x", count: 999))) != nil)
        #expect((try? LinearRegex(String(repeating: "x", count: 1_000))) == nil)
    }

    @Test("a?ⁿaⁿ, which takes ICU exponential time, takes microseconds (n = 26, 32, 100; values up to 1,024 characters)")
    func pathologicalFamily() throws {
        // ICU, for scale: n = 18 on "a" × 18 already takes a noticeable time.
        let small = 18
        let icuStart = ContinuousClock.now
        #expect(Self.reference(String(repeating: "a?", count: small) + String(repeating: "a", count: small), String(repeating: "a", count: small)))
        let icu = ContinuousClock.now - icuStart
        for n in [26, 32, 100] {
            let regex = try LinearRegex(String(repeating: "a?", count: n) + String(repeating: "a", count: n))
            let values = [String(repeating: "a", count: n), String(repeating: "a", count: n - 1),
                          String((0..<1_024).map { $0 % n == n - 1 ? "b" : "a" }), String(repeating: "a", count: 1_024)]
            let start = ContinuousClock.now
            var answers: [Bool] = []
            for _ in 0..<100 { answers = values.map(regex.matches) }
            let elapsed = ContinuousClock.now - start
            #expect(answers == [true, false, false, true])
            print("a?^\(n)a^\(n): 400 matches in \(elapsed) (program \(regex.programSize) instructions); ICU, n = \(small), one match: \(icu)")
            // Generous (a loaded machine): the point is that it does not grow as 2^n.
            #expect(elapsed < .seconds(2))
        }
    }

    @Test("SQLite's REGEXP uses it, on the pool's connections and on the writer's", arguments: [TestStorage.sqlite])
    func sqliteRegexp(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let sql = database.sql
            try await sql.raw("CREATE TABLE probe_regexp (v, hit INTEGER)").run()
            try await sql.raw("INSERT INTO probe_regexp (v, hit) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 0), ('b', 0), (3, 0)").run()
            let pattern = String(repeating: "a?", count: 32) + String(repeating: "a", count: 32)
            struct Row: Decodable { var v: String }
            // A read (the pool), in time: ICU would take hours on this.
            let rows = try await sql.raw("SELECT v FROM probe_regexp WHERE v REGEXP \(bind: pattern)").all(decoding: Row.self)
            #expect(rows.map(\.v) == [String(repeating: "a", count: 32)])
            // A number is not text: no match, as before.
            #expect(try await sql.raw("SELECT v FROM probe_regexp WHERE v REGEXP '3'").all().isEmpty)
            // A write (on the writer) and a write in a transaction (a session, on the writer too).
            try await sql.raw("UPDATE probe_regexp SET hit = 1 WHERE v REGEXP \(bind: pattern)").run()
            try await sql.transaction { db in try await db.raw("UPDATE probe_regexp SET hit = hit + 1 WHERE v REGEXP '^b\\z'").run() }
            struct Hit: Decodable { var v: String; var hit: Int }
            let hits = try await sql.raw("SELECT v, hit FROM probe_regexp WHERE hit > 0 ORDER BY v").all(decoding: Hit.self)
            #expect(hits.map(\.v) == [String(repeating: "a", count: 32), "b"])
            // A pattern outside the syntax fails the statement (the query language refuses it before).
            await #expect(throws: (any Error).self) { try await sql.raw("SELECT v FROM probe_regexp WHERE v REGEXP '\\d'").all() }
        }
    }
}
