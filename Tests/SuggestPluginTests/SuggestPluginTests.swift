import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import SuggestPlugin
import Testing

let suggest = [PluginRegistration(SuggestPlugin.self)]

/// A gateway with the suggest plugin and a small dictionary loaded.
func withSuggest<R: Sendable>(_ body: @Sendable (TestGateway) async throws -> R) async throws -> R {
    try await TestGateway.with(suggest, yaml: "plugins:\n  suggest: {}\n") { gateway in
        let plugin = try #require(gateway.gateway.plugins.first { $0.id == "suggest" }?.instance as? SuggestPlugin)
        try await plugin.store.replace(dictionary: "test", with: [
            Term(dictionary: "test", keyword: "北京", text: "北京 Beijing", weight: 100),
            Term(dictionary: "test", keyword: "北京大學", text: "北京大學 Peking University", weight: 50),
            Term(dictionary: "test", keyword: "北海", text: "北海", weight: 10),
            Term(dictionary: "test", keyword: "Michael Jackson", text: "Michael Jackson — Thriller", weight: 80),
            Term(dictionary: "test", keyword: "Jack Johnson", text: "Jack Johnson", weight: 30),
        ])
        return try await body(gateway)
    }
}

@Suite("suggestion index")
struct SuggestionIndexTests {
    static let index = SuggestionIndex(terms: [
        Term(dictionary: "a", keyword: "北京", text: "北京", weight: 100),
        Term(dictionary: "a", keyword: "北京大學", text: "北京大學", weight: 50),
        Term(dictionary: "a", keyword: "Michael Jackson", text: "Michael Jackson", weight: 80),
        Term(dictionary: "a", keyword: "Jack Johnson", text: "Jack Johnson", weight: 80),
        Term(dictionary: "b", keyword: "Michael Jackson", text: "Michael Jackson (dup)", weight: 10),
        Term(dictionary: "a", keyword: "Jackal", text: "Jackal", weight: 80),
    ])

    @Test("queries are normalized: NFKC, full-width to ASCII, case folded, spaces collapsed")
    func normalization() {
        #expect(SuggestNormalizer.normalize("  Ｍｉｃｈａｅｌ \t  JACKSON ") == "michael jackson")
        #expect(SuggestNormalizer.normalize("\u{0007}a\u{0000}b") == "a b")
        // The ASCII fast path agrees with the general one on every ASCII character.
        let ascii = String(decoding: (0..<128).map { UInt8($0) } + Array(" Mixed  CASE\tTabs ".utf8), as: UTF8.self)
        #expect(SuggestNormalizer.normalizeFast(ascii).map { $0 + " é" } == SuggestNormalizer.normalize(ascii + "é"), "the general path, forced by one non-ASCII letter")
        // So does the path for ASCII with CJK ideographs, at both ends of both blocks.
        for text in ["北京", " 北京  大學 ", "Ａ北", "iPhone 手机\t壳", "\u{3400}\u{4DBF}\u{4E00}\u{9FFF}", "x\u{0007}中"] {
            #expect(SuggestNormalizer.normalizeFast(text) ?? SuggestNormalizer.normalizeGeneral(text) == SuggestNormalizer.normalizeGeneral(text), "\(text)")
        }
        #expect(SuggestNormalizer.normalizeFast("北京") == "北京")
        #expect(SuggestNormalizer.normalizeFast("Ａ北") == nil, "full-width letters take the general path")
        #expect(SuggestNormalizer.normalizeFast("\u{F900}") == nil, "CJK compatibility ideographs take the general path")
        #expect(SuggestNormalizer.normalizeFast("café") == nil)
        // The bytes the index compares are the normal form's UTF-8, on both paths.
        for text in ["  Ｍｉｃｈａｅｌ \t  JACKSON ", "北京 大學", "café", "", " \t "] {
            #expect(SuggestNormalizer.normalizedBytes(text) == Array(SuggestNormalizer.normalize(text).utf8), "\(text)")
        }
    }

    @Test("one Chinese character suggests the words that start with it")
    func chinese() {
        #expect(Self.index.suggestions(for: "北", limit: 10).map(\.term.keyword) == ["北京", "北京大學"])
    }

    @Test("a prefix of any word matches; equal weights rank whole-keyword matches first, then shorter keywords; duplicates collapse")
    func ranking() {
        let matches = Self.index.suggestions(for: "jack", limit: 10)
        #expect(matches.map(\.term.keyword) == ["Jackal", "Jack Johnson", "Michael Jackson"])
        #expect(matches.last?.wholePrefix == false)
        #expect(Self.index.suggestions(for: "michael", limit: 10).count == 1)
        #expect(Self.index.suggestions(for: "michael", limit: 10).first?.term.weight == 80)
        #expect(Self.index.suggestions(for: "jack", limit: 1).count == 1)
        #expect(Self.index.suggestions(for: "   ", limit: 10).isEmpty)
        #expect(Self.index.suggestions(for: "zzz", limit: 10).isEmpty)
    }

    /// Foundation's search, which the fast highlight must agree with.
    func foundationHighlight(_ query: String, in text: String) -> [[Int]] {
        let trimmed = query.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, let range = text.range(of: trimmed, options: [.caseInsensitive, .widthInsensitive, .diacriticInsensitive]) else {
            return []
        }
        let start = text.distance(from: text.startIndex, to: range.lowerBound)
        return [[start, start + text.distance(from: range.lowerBound, to: range.upperBound)]]
    }

    @Test("highlights mark the matched part of the text in characters")
    func highlight() {
        #expect(SuggestionIndex.highlight("jack", in: "Michael Jackson") == [[8, 12]])
        #expect(SuggestionIndex.highlight("北京", in: "在北京") == [[1, 3]])
        #expect(SuggestionIndex.highlight("x", in: "abc").isEmpty)
        // The fast path agrees with Foundation's search.
        for (query, text) in [("jack", "Michael Jackson"), (" STAR ", "Star Wars: star"), ("wars:", "Star Wars: x"), ("zz", "abc"), ("", "abc"),
                              ("abcd", "abc"), ("a b", "x A B a b"), ("北京", "在北京"), ("fosse", "Star 80 (1983) — Bob Fosse"),
                              ("don’t", "I Don’t Know — “Someone”"), ("bob f", "Star 80 (1983) — Bob Fosse"), ("电影 a", "老电影 A"), ("\t北", "南北")] {
            let fast = SuggestionIndex.highlightFast(query, in: text)
            let slow = foundationHighlight(query, in: text)
            #expect(fast == slow, "\(query) in \(text)")
        }
        // The span the native API writes is the same highlight, on both paths.
        for (query, text) in [("jack", "Michael Jackson"), ("zz", "abc"), ("Ａ", "ＡＢ"), ("e", "Amélie"), ("a", "a😀"), ("北京", "在北京")] {
            #expect(SuggestionIndex.highlightSpan(query, in: text).pairs == SuggestionIndex.highlight(query, in: text), "\(query) in \(text)")
        }
        #expect(SuggestionIndex.highlightFast("Ａ", in: "ＡＢ") == nil, "full-width letters take Foundation's path")
        #expect(SuggestionIndex.highlightFast("e", in: "Amélie") == nil, "so do letters with diacritics")
        #expect(SuggestionIndex.highlightFast("a", in: "x\r\na") == nil, "and CR LF, one character of two scalars")
        #expect(SuggestionIndex.highlightFast("a", in: "😀a") == nil, "and scalars beyond the Basic Multilingual Plane")
        // A text that begins with the query is answered from its first characters alone, whatever
        // follows (Foundation finds the same first match).
        for (query, text, span) in [("a", "a😀", [[0, 1]]), ("star", "Star 80 (1983) — Bob Fosse", [[0, 4]]), ("e", "e\u{301}x", [[0, 1]]),
                                    ("北京", "北京大學 Ａ", [[0, 2]]), (" STAR ", "star\r\n", [[0, 4]]), ("don’t", "Don’t Look Up", [[0, 5]])] {
            #expect(SuggestionIndex.highlightFast(query, in: text) == span, "\(query) in \(text)")
            #expect(foundationHighlight(query, in: text) == span, "\(query) in \(text)")
        }
    }

    @Test("the fast highlight agrees with Foundation's search on random text, or leaves it to Foundation")
    func highlightAgreesOnRandomText() {
        let alphabet: [String] = ["a", "b", "A", "B", " ", "北", "京", "—", "’", "é", "😀", "\r", "\t", "1"]
        var random = SplitMix(state: 42)
        func randomText(_ length: Int) -> String { (0..<length).map { _ in alphabet.randomElement(using: &random)! }.joined() }
        var checked = 0
        for _ in 0..<3_000 {
            let query = randomText(Int.random(in: 0...3, using: &random))
            let text = randomText(Int.random(in: 0...12, using: &random))
            guard let fast = SuggestionIndex.highlightFast(query, in: text) else { continue }
            let slow = foundationHighlight(query, in: text)
            #expect(fast == slow, "\(query.debugDescription) in \(text.debugDescription)")
            checked += 1
        }
        #expect(checked > 300, "the fast path took too few of the random cases to tell")
    }

    @Test("the importer reads both formats and reports every bad line with its number")
    func importing() {
        let text = "Kick-Ass\tKick-Ass (2010)\t120\n北京 5000 ns\n\nbad line without fields\nX\tY\tnot-a-number\n\tempty\na\tb\tc\td\n"
        let (terms, rejected) = TermImporter.parse(text, dictionary: "d")
        #expect(terms.map(\.keyword) == ["Kick-Ass", "北京"])
        #expect(terms.first?.weight == 120)
        #expect(terms.last?.weight == 5000)
        #expect(rejected.map(\.line) == [4, 5, 6, 7])
    }
}

@Suite("suggest plugin")
struct SuggestPluginTests {
    @Test("the hand-written JSON of a suggestion list is what JSONEncoder writes")
    func fastJSON() throws {
        let value = SuggestPlugin.Suggestions(query: "q \"x\"\n", items: [
            .init(keyword: "北京", text: "北京 \\ Beijing\t", weight: 100, highlight: [[0, 1], [3, 5]]),
            .init(keyword: "a", text: "b", weight: 0.25, highlight: []),
            .init(keyword: "Star", text: "Star Wars", weight: 3, spans: SuggestionIndex.highlightSpan("star", in: "Star Wars")),
        ], tookMicros: 17)
        #expect(value.items[2].spans == .single(0, 4), "one span is held without an array")
        var bytes: [UInt8] = []
        value.writeJSON(into: &bytes)
        let fast = try JSONValue.parse(ByteBuffer(bytes: bytes))
        let encoded = try JSONValue.parse(ByteBuffer(bytes: try JSONCoding.encoder.encode(value)))
        #expect(fast == encoded)
        let decoded = try JSONCoding.decoder.decode(SuggestPlugin.Suggestions.self, from: Data(bytes))
        #expect(decoded.items.map(\.highlight) == [[[0, 1], [3, 5]], [], [[0, 4]]])
    }

    @Test("a reply written from the index's bytes is the reply written from its terms, escapes, highlights and overlay included")
    func repliesFromIndexBytes() throws {
        let terms = [
            Term(dictionary: "a", keyword: "Star Wars", text: "Star Wars (1977) — George Lucas", weight: 90),
            Term(dictionary: "a", keyword: "Stalker", text: "Stalker \"the zone\" \\ Tarkovsky\t\u{1}", weight: 12.5),
            Term(dictionary: "a", keyword: "Amélie", text: "Amélie — Jean-Pierre Jeunet", weight: 40),
            Term(dictionary: "a", keyword: "ａｂｃ", text: "ＡＢＣ full width", weight: 3),
            Term(dictionary: "a", keyword: "smile", text: "😀 smile", weight: 2),
            Term(dictionary: "a", keyword: "北京", text: "北京 Beijing", weight: 100),
            Term(dictionary: "a", keyword: "北京大學", text: "Peking University 北京大學", weight: 1e20),
            Term(dictionary: "a", keyword: "quote\"", text: "ends with a quote\"", weight: 0),
            Term(dictionary: "b", keyword: "Star Wars", text: "Star Wars (dup)", weight: 1),
        ]
        try checkReplies(LayeredIndex(terms: terms))
        // Without the prepared bytes (more than 4 GiB of terms), replies are written from the strings.
        let withoutBytes = SuggestionIndex(terms: terms, termByteLimit: 10)
        #expect(!withoutBytes.termBytes.isAvailable)
        try checkReplies(LayeredIndex(base: withoutBytes))
    }

    func checkReplies(_ index: LayeredIndex) throws {
        let queries = ["s", "st", "STA", " star ", "star wars", "stalker", "ame", "amé", "abc", "ａ", "smi", "北", "北京大", "quote", "zzz", "strar", "\"", ""]
        func check(_ label: String) throws {
            for query in queries {
                let lookup = index.lookup(query, limit: 10)
                let fromBytes = SuggestPlugin.Suggestions(query: query, lookup: lookup, tookMicros: 5)
                let fromTerms = SuggestPlugin.Suggestions(query: query, items: fromBytes.items, tookMicros: 5)
                var written: [UInt8] = []
                fromBytes.writeJSON(into: &written)
                var expected: [UInt8] = []
                fromTerms.writeJSON(into: &expected)
                #expect(String(decoding: written, as: UTF8.self) == String(decoding: expected, as: UTF8.self), "\(label): \(query)")
                #expect(try JSONValue.parse(ByteBuffer(bytes: written)) == JSONValue.parse(ByteBuffer(bytes: try JSONCoding.encoder.encode(fromTerms))))
                #expect(fromBytes.items.map(\.keyword) == index.suggestions(for: query, limit: 10).map(\.term.keyword))
            }
        }
        try check("base only")
        #expect(index.lookup("star", limit: 10).matches.filter { $0.term.keyword == "Star Wars" }.count == 1, "one keyword from two dictionaries is one suggestion")
        #expect(index.lookup("sta", limit: 10).hits.allSatisfy { $0.term >= 0 })
        // Changes answer from the overlay (negative term numbers) merged with the base.
        _ = index.apply(.init(dictionary: "a", keyword: "Stalker"), term: Term(dictionary: "a", keyword: "Stalker", text: "Stalker \"new\"", weight: 95))
        _ = index.apply(.init(dictionary: "a", keyword: "Starman"), term: Term(dictionary: "a", keyword: "Starman", text: "Starman\n(1984)", weight: 91))
        _ = index.apply(.init(dictionary: "a", keyword: "北京"), term: nil)
        try check("with overlay")
        let merged = index.lookup("sta", limit: 10)
        #expect(merged.matches.map(\.term.keyword) == ["Stalker", "Starman", "Star Wars"])
        #expect(merged.hits.filter { $0.term < 0 }.count == 2)
        let reply = SuggestPlugin.Suggestions(query: "sta", lookup: merged, tookMicros: 1)
        #expect(reply.items.map(\.text) == ["Stalker \"new\"", "Starman\n(1984)", "Star Wars (1977) — George Lucas"])
        #expect(reply.items.map(\.spans) == [.single(0, 3), .single(0, 3), .single(0, 3)])
    }

    @Test("GET /v1/suggest answers ranked suggestions with highlights and timing")
    func complete() async throws {
        try await withSuggest { gateway in
            let response = try await gateway.gateway.handle(.get, "/v1/suggest?q=%E5%8C%97&limit=2")
            #expect(response.status == 200)
            let body = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
            #expect(body["query"] as? String == "北")
            let items = try #require(body["items"] as? [[String: Any]])
            #expect(items.map { $0["keyword"] as? String } == ["北京", "北京大學"])
            #expect(items.first?["highlight"] as? [[Int]] == [[0, 1]])
            #expect(body["tookMicros"] is Int)
            #expect(response.headers[HTTPField.Name("X-Cache")!] == "MISS")
        }
    }

    @Test("/metrics reports the index: its terms and the changes waiting for the next rebuild")
    func indexGauges() async throws {
        try await withSuggest { gateway in
            func value(_ name: String) -> Double? {
                let text = String(decoding: gateway.gateway.metrics.render(), as: UTF8.self)
                return text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
            }
            #expect(value("suggest_index_terms") == 5)
            #expect(value("suggest_index_pending_changes") == 0)
            let plugin = try #require(gateway.gateway.plugins.first { $0.id == "suggest" }?.instance as? SuggestPlugin)
            try await plugin.store.upsert(Term(dictionary: "test", keyword: "北投", text: "北投", weight: 5))
            #expect(value("suggest_index_pending_changes") == 1)
            try await plugin.store.reload()
            #expect(value("suggest_index_terms") == 6)
            #expect(value("suggest_index_pending_changes") == 0)
        }
    }

    @Test("bad input gets a clear answer: an empty list or a 4xx problem, never a 500")
    func badInput() async throws {
        try await withSuggest { gateway in
            for (target, status) in [("/v1/suggest", 200), ("/v1/suggest?q=", 200), ("/v1/suggest?q=%20%20", 200), ("/v1/suggest?q=%01%02", 200),
                                     ("/v1/suggest?q=a&limit=-1", 422), ("/v1/suggest?q=a&limit=abc", 422), ("/v1/suggest?q=a&limit=100000", 422),
                                     ("/v1/suggest?q=" + String(repeating: "a", count: 10_000), 422), ("/v1/suggest?q=%ED%A0%80", 400),
                                     ("/v1/suggest?q=%", 400)] {
                let response = try await gateway.gateway.handle(.get, target)
                #expect(response.status == status, "\(target.prefix(60)) -> \(response.status)")
            }
            let empty = try await gateway.gateway.handle(.get, "/v1/suggest?q=%01")
            #expect(String(buffer: empty.body).contains("\"items\":[]"))
        }
    }

    @Test("term management needs an administrator's grant of suggest:write and keeps the index and cache current")
    func terms() async throws {
        try await withSuggest { gateway in
            let put = #"{"keyword": "Taipei 101", "text": "Taipei 101 tower", "weight": 1000}"#
            #expect(try await gateway.gateway.handle(.put, "/v1/suggest/terms", headers: .json, body: ByteBuffer(string: put)).status == 401)
            // The dictionaries are everyone's: a signed-in user without a grant may not change them.
            let editor = try await gateway.register("editor")
            let auth: HTTPFields = [.authorization: "Bearer \(editor.token)", .contentType: "application/json"]
            #expect(try await gateway.gateway.handle(.put, "/v1/suggest/terms", headers: auth, body: ByteBuffer(string: put)).status == 403)
            try await gateway.gateway.accounts.grant(["suggest:write"], to: editor.userID)
            gateway.gateway.forgetCredentials()
            _ = try await gateway.gateway.handle(.get, "/v1/suggest?q=tai")
            #expect(try await gateway.gateway.handle(.put, "/v1/suggest/terms", headers: auth, body: ByteBuffer(string: put)).status == 200)
            let after = try await gateway.gateway.handle(.get, "/v1/suggest?q=tai")
            #expect(String(buffer: after.body).contains("Taipei 101 tower"))
            let dictionaries = try await gateway.gateway.handle(.get, "/v1/suggest/dictionaries")
            let listed = try #require(try JSONSerialization.jsonObject(with: Data(buffer: dictionaries.body)) as? [String: [[String: Any]]])
            #expect(listed["items"]?.contains { $0["name"] as? String == "custom" && $0["terms"] as? Int == 1 } == true)
            #expect(try await gateway.gateway.handle(.delete, "/v1/suggest/terms/custom/Taipei%20101", headers: auth).status == 204)
            #expect(try await gateway.gateway.handle(.delete, "/v1/suggest/terms/custom/Taipei%20101", headers: auth).status == 404)
            #expect(!String(buffer: try await gateway.gateway.handle(.get, "/v1/suggest?q=tai").body).contains("Taipei"))
            let bad = try await gateway.gateway.handle(.put, "/v1/suggest/terms", headers: auth, body: ByteBuffer(string: #"{"keyword": " ", "weight": -1}"#))
            #expect(bad.status == 422)
        }
    }

    @Test("the KKBOX dialect answers keyword<TAB>text lines as text/plain")
    func kkbox() async throws {
        try await withSuggest { gateway in
            let response = try await gateway.gateway.handle(.get, "/ajax/ac_search.php?query=Michael%20J")
            #expect(response.status == 200)
            #expect(response.headers[.contentType] == "text/plain; charset=utf-8")
            #expect(String(buffer: response.body) == "Michael Jackson\tMichael Jackson — Thriller")
            let chinese = try await gateway.gateway.handle(.get, "/ajax/ac_search.php?query=%E5%8C%97%E4%BA%AC")
            #expect(String(buffer: chinese.body).split(separator: "\n").map { $0.split(separator: "\t").first.map(String.init) } == ["北京", "北京大學"])
            let missing = try await gateway.gateway.handle(.get, "/ajax/ac_search.php")
            #expect(missing.status == 200)
            #expect(missing.body.readableBytes == 0)
            let none = try await gateway.gateway.handle(.get, "/ajax/ac_search.php?query=zzzz")
            #expect(none.body.readableBytes == 0)
            let bad = try await gateway.gateway.handle(.get, "/ajax/ac_search.php?query=%E0%A4")
            #expect(bad.status == 400)
        }
    }

    @Test("the shipped demo dictionaries load on both databases; a keyword given twice keeps its last line", arguments: TestStorage.available)
    func shippedDemo(storage: TestStorage) async throws {
        let demo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("data/demo")
        let yaml = "plugins:\n  suggest:\n    config: { dictionaries: [\(demo.path)/movies.tsv, \(demo.path)/jieba-slice.txt] }\n"
        try await TestGateway.with(suggest, yaml: yaml, storage: storage, configure: { $0.loadDemoData = true }) { gateway in
            let response = try await gateway.gateway.handle(.get, "/v1/suggest?q=star&limit=3")
            #expect(response.status == 200)
            // The films rank by their weight, the critics' reviews each had: the most reviewed first.
            let items = try JSONCoding.decoder.decode(SuggestPlugin.Suggestions.self, from: Data(buffer: response.body)).items
            #expect(items.map(\.keyword) == ["Star Trek", "Star Wars: Episode III – Revenge of the Sith", "Star Wars: Episode II – Attack of the Clones"])
            let plugin = try #require(gateway.gateway.plugins.first { $0.id == "suggest" }?.instance as? SuggestPlugin)
            try await plugin.store.replace(dictionary: "twice", with: [
                Term(dictionary: "twice", keyword: "Alpha", text: "first", weight: 1),
                Term(dictionary: "twice", keyword: "Beta", text: "beta", weight: 2),
                Term(dictionary: "twice", keyword: "Alpha", text: "second", weight: 3),
            ])
            let counts = try await plugin.store.dictionaries()
            #expect(counts.first { $0.name == "twice" }?.terms == 2)
            let alpha = try await gateway.gateway.handle(.get, "/v1/suggest?q=alpha")
            #expect(String(buffer: alpha.body).contains("second") && String(buffer: alpha.body).contains("first") == false)
        }
    }

    @Test("configured dictionaries load as demo data; a missing file stops start-up at its line")
    func demoData() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("suggest-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("demo.tsv")
        try "Alpha\tAlpha One\t5\nAlps\tThe Alps\t9\n".write(to: file, atomically: true, encoding: .utf8)
        try await TestGateway.with(suggest, yaml: "plugins:\n  suggest:\n    config: { dictionaries: [\(file.path)] }\n",
                                   configure: { $0.loadDemoData = true }) { gateway in
            let response = try await gateway.gateway.handle(.get, "/v1/suggest?q=al")
            #expect(String(buffer: response.body).contains("The Alps"))
        }
        await #expect(throws: ConfigurationFileError.self) {
            try await TestGateway.with(suggest, yaml: "plugins:\n  suggest:\n    config: { dictionaries: [/nowhere/terms.tsv] }\n") { _ in }
        }
    }

    @Test("1,000 random queries never produce a 500, in either API")
    func fuzz() async throws {
        try await withSuggest { gateway in
            var generator = SystemRandomNumberGenerator()
            let alphabet = Array("aZ北京 %&+=?#\t\u{00}\u{7F}é😀") + ["%E5", "%ZZ", "%ED%A0%80", "%F0%9F%98%80"].flatMap { Array($0) }
            for _ in 0..<1000 {
                let length = Int.random(in: 0...30, using: &generator)
                let raw = String((0..<length).map { _ in alphabet.randomElement(using: &generator)! })
                let query = raw.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
                for target in ["/v1/suggest?q=\(Bool.random() ? raw.replacingOccurrences(of: " ", with: "%20") : query)", "/ajax/ac_search.php?query=\(query)"] {
                    let response = try await gateway.gateway.handle(.get, target)
                    #expect(response.status < 500, "\(target) -> \(response.status)")
                }
            }
        }
    }
}

@Suite("suggestion index at scale")
struct SuggestionIndexScaleTests {
    /// The answer by brute force: every term, ranked, for comparison with the index.
    static func bruteForce(_ terms: [Term], _ query: String, limit: Int) -> [String] {
        let needle = SuggestNormalizer.normalize(query)
        var best: [String: SuggestionIndex.Match] = [:]
        for term in terms {
            let key = SuggestNormalizer.normalize(term.keyword)
            let words = key.split(separator: " ").dropFirst().map(String.init)
            let whole = key.hasPrefix(needle)
            guard whole || words.contains(where: { $0.hasPrefix(needle) }) else { continue }
            let candidate = SuggestionIndex.Match(term: term, wholePrefix: whole)
            if let existing = best[term.keyword], !SuggestionIndex.ranks(candidate, before: existing) { continue }
            best[term.keyword] = candidate
        }
        return best.values.sorted(by: SuggestionIndex.ranks).prefix(limit).map(\.term.keyword)
    }

    @Test("precomputed answers for large ranges equal the brute-force ranking")
    func matchesBruteForce() {
        var generator = SystemRandomNumberGenerator()
        let letters = Array("abcde")
        var terms: [Term] = []
        for index in 0..<3000 {
            let word = String((0..<Int.random(in: 1...6, using: &generator)).map { _ in letters.randomElement(using: &generator)! })
            let second = String((0..<Int.random(in: 1...4, using: &generator)).map { _ in letters.randomElement(using: &generator)! })
            let keyword = Bool.random(using: &generator) ? word : word + " " + second
            terms.append(Term(dictionary: index % 3 == 0 ? "x" : "y", keyword: keyword, text: keyword,
                              weight: Double(Int.random(in: 0...20, using: &generator))))
        }
        let index = SuggestionIndex(terms: terms)
        // Queries up to eleven bytes: the first seven bytes of each key are searched in a table
        // of their own, the rest in the keys' bytes.
        for query in ["a", "b", "ab", "abc", "e", "dd", "a b", "c", "bad", "eeee", "f", "af", "abcdea", "a bcd", "b e",
                      "abcdeab", "ab cd", "aab bc", "aaa a", "eee eee", "abcde abc"] {
            for limit in [1, 10, 50] {
                // Exact matches come first and typo-tolerant ones only fill up the rest.
                #expect(index.suggestions(for: query, limit: limit).filter { $0.edits == 0 }.map(\.term.keyword)
                        == Self.bruteForce(terms, query, limit: limit), "query \(query) limit \(limit)")
            }
        }
    }

    @Test("keys longer than 255 bytes are found by their short and long prefixes")
    func longKeys() {
        let long = String(repeating: "ab", count: 150)
        let terms = [Term(dictionary: "d", keyword: long, text: "long", weight: 1),
                     Term(dictionary: "d", keyword: String(long.prefix(7)), text: "seven", weight: 2),
                     Term(dictionary: "d", keyword: String(long.prefix(8)) + "x", text: "other", weight: 3)]
        let index = SuggestionIndex(terms: terms)
        #expect(index.suggestions(for: String(long.prefix(7)), limit: 10).map(\.term.text) == ["other", "seven", "long"])
        #expect(index.suggestions(for: String(long.prefix(9)), limit: 10).filter { $0.edits == 0 }.map(\.term.text) == ["long"])
        #expect(index.suggestions(for: long, limit: 10).map(\.term.text) == ["long"])
        #expect(index.suggestions(for: long + "b", limit: 10).filter { $0.edits == 0 }.isEmpty)
    }

    @Test("the full demo dictionary of the shipped data set answers one-character queries from precomputed ranges")
    func demoDictionary() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("data/demo/movies.tsv"), encoding: .utf8)
        let (terms, rejected) = TermImporter.parse(text, dictionary: "movies")
        #expect(rejected.isEmpty)
        let index = SuggestionIndex(terms: terms)
        let result = index.suggestions(for: "t", limit: 10).map(\.term.keyword)
        #expect(result == Self.bruteForce(terms, "t", limit: 10))
        #expect(result.count == 10)
    }
}

@Suite("typo tolerance")
struct TypoToleranceTests {
    static let index = SuggestionIndex(terms: [
        Term(dictionary: "m", keyword: "Star Wars", text: "Star Wars (1977)", weight: 10),
        Term(dictionary: "m", keyword: "Stardust", text: "Stardust (2007)", weight: 5),
        Term(dictionary: "m", keyword: "Strange Days", text: "Strange Days (1995)", weight: 1),
        Term(dictionary: "m", keyword: "The Matrix", text: "The Matrix (1999)", weight: 20),
        Term(dictionary: "m", keyword: "Interstellar", text: "Interstellar (2014)", weight: 30),
        Term(dictionary: "c", keyword: "北京", text: "北京", weight: 1),
    ])

    @Test("one edit is forgiven from four letters, ranked after every exact match")
    func oneEdit() {
        let result = Self.index.suggestions(for: "strar", limit: 10)
        #expect(result.map(\.term.keyword).contains("Star Wars"))
        #expect(result.allSatisfy { $0.edits <= 1 })
        let mixed = Self.index.suggestions(for: "stra", limit: 10)
        #expect(mixed.first?.term.keyword == "Strange Days")
        #expect(mixed.first?.edits == 0)
        #expect(mixed.dropFirst().allSatisfy { $0.edits == 1 })
        #expect(Self.index.suggestions(for: "mtarix", limit: 10).isEmpty == false)
        #expect(Self.index.suggestions(for: "teh", limit: 10).isEmpty)
    }

    @Test("two edits are forgiven from eight letters; swapped neighbours count as one edit")
    func twoEdits() {
        #expect(Self.index.suggestions(for: "intrestelar", limit: 10).map(\.term.keyword) == ["Interstellar"])
        #expect(Self.index.suggestions(for: "matirx", limit: 10).map(\.term.keyword) == ["The Matrix"])
    }

    @Test("non-Latin queries are matched exactly")
    func chineseExact() {
        #expect(Self.index.suggestions(for: "北亰", limit: 10).isEmpty)
    }

    /// The smallest edit distance (optimal string alignment: insertions, deletions, substitutions
    /// and swaps of neighbours) between `query` and any prefix of `key`.
    static func prefixDistance(_ query: [UInt8], _ key: [UInt8]) -> Int {
        var table = [[Int]](repeating: [Int](repeating: 0, count: key.count + 1), count: query.count + 1)
        for i in 0...query.count { table[i][0] = i }
        for j in 0...key.count { table[0][j] = j }
        for i in stride(from: 1, through: query.count, by: 1) {
            for j in stride(from: 1, through: key.count, by: 1) {
                let cost = query[i - 1] == key[j - 1] ? 0 : 1
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, query[i - 1] == key[j - 2], query[i - 2] == key[j - 1] {
                    table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
                }
            }
        }
        return table[query.count].min()!
    }

    @Test("the typo walk finds exactly the keywords within the allowed edits, as brute force does")
    func typoWalkMatchesBruteForce() {
        var generator = SystemRandomNumberGenerator()
        let letters = Array("abcdefgh")
        func word(_ lengths: ClosedRange<Int>) -> String {
            String((0..<Int.random(in: lengths, using: &generator)).map { _ in letters.randomElement(using: &generator)! })
        }
        var terms: [Term] = []
        for index in 0..<600 {
            let keyword = Bool.random(using: &generator) ? word(3...8) : word(3...8) + " " + word(2...6)
            terms.append(Term(dictionary: "d", keyword: keyword, text: keyword, weight: Double(index % 7)))
        }
        let index = SuggestionIndex(terms: terms)
        var compared = 0
        for _ in 0..<300 {
            let query = word(4...9)
            let allowed = query.count >= 8 ? 2 : 1
            let needle = Array(query.utf8)
            var expected = Set<String>()
            for term in terms {
                let words = term.keyword.split(separator: " ").indices.map { term.keyword.split(separator: " ")[$0...].joined(separator: " ") }
                if words.contains(where: { Self.prefixDistance(needle, Array($0.utf8)) <= allowed }) { expected.insert(term.keyword) }
            }
            guard expected.count < 40 else { continue }
            compared += 1
            let found = index.suggestions(for: query, limit: 50)
            #expect(Set(found.map(\.term.keyword)) == expected, "query \(query)")
            #expect(found.allSatisfy { $0.edits <= allowed })
        }
        #expect(compared > 100)
    }
}

@Suite("layered suggestion index")
struct LayeredIndexTests {
    static let base = [
        Term(dictionary: "a", keyword: "Michael Jackson", text: "MJ", weight: 80),
        Term(dictionary: "a", keyword: "Jack Johnson", text: "JJ", weight: 30),
        Term(dictionary: "a", keyword: "北京", text: "北京", weight: 100),
    ]

    @Test("single changes show at once and answer exactly as a rebuilt index would")
    func overlay() {
        let index = LayeredIndex(terms: Self.base)
        _ = index.apply(.init(dictionary: "a", keyword: "Jackal"), term: Term(dictionary: "a", keyword: "Jackal", text: "Jackal", weight: 90))
        _ = index.apply(.init(dictionary: "a", keyword: "Jack Johnson"), term: Term(dictionary: "a", keyword: "Jack Johnson", text: "JJ", weight: 95))
        _ = index.apply(.init(dictionary: "a", keyword: "Michael Jackson"), term: nil)
        _ = index.apply(.init(dictionary: "a", keyword: "北京大學"), term: Term(dictionary: "a", keyword: "北京大學", text: "北大", weight: 50))
        let final = [
            Term(dictionary: "a", keyword: "Jack Johnson", text: "JJ", weight: 95), Term(dictionary: "a", keyword: "北京", text: "北京", weight: 100),
            Term(dictionary: "a", keyword: "Jackal", text: "Jackal", weight: 90), Term(dictionary: "a", keyword: "北京大學", text: "北大", weight: 50),
        ]
        let rebuilt = SuggestionIndex(terms: final)
        for query in ["jack", "j", "mich", "北", "北京大", "jakc", "zzz"] {
            #expect(index.suggestions(for: query, limit: 10).map(\.term) == rebuilt.suggestions(for: query, limit: 10).map(\.term), "\(query)")
        }
        #expect(index.suggestions(for: "jack", limit: 10).map(\.term.keyword) == ["Jack Johnson", "Jackal"])
        #expect(index.pendingChanges == 4)
    }

    @Test("past the threshold one background rebuild is asked for; its base absorbs the changes it saw, unless a reset came first")
    func rebuild() {
        let index = LayeredIndex(terms: Self.base)
        var asked = 0
        for number in 0...LayeredIndex.rebuildThreshold {
            let term = Term(dictionary: "b", keyword: "term \(number)", text: "t", weight: Double(number))
            if index.apply(.init(dictionary: "b", keyword: term.keyword), term: term) { asked += 1 }
        }
        #expect(asked == 1)
        let position = index.position
        _ = index.apply(.init(dictionary: "b", keyword: "late"), term: Term(dictionary: "b", keyword: "late", text: "t", weight: 1_000))
        let all = Self.base + (0...LayeredIndex.rebuildThreshold).map { Term(dictionary: "b", keyword: "term \($0)", text: "t", weight: Double($0)) }
        index.rebuilt(SuggestionIndex(terms: all), through: position)
        #expect(index.pendingChanges == 1, "only the change after the rebuild began stays in the overlay")
        #expect(index.suggestions(for: "late", limit: 1).first?.term.weight == 1_000)
        #expect(index.suggestions(for: "term 25", limit: 1).first?.term.keyword == "term 256")

        let stale = index.position
        index.reset(to: SuggestionIndex(terms: Self.base))
        index.rebuilt(SuggestionIndex(terms: all), through: stale)
        #expect(index.suggestions(for: "term", limit: 1).isEmpty, "a rebuild begun before a reset is discarded")
    }
}
