import GatewayCore

/// Every term of a ``SuggestionIndex`` as the bytes a native reply writes for it, laid out one
/// after another in one array when the index is built.
///
/// A reply item is `{"highlight":[…]` followed by the term's part, which is the same in every
/// reply: `],"keyword":"…","text":"…","weight":…}`. That part is kept here already written as
/// JSON, escapes and all, together with the text's plain UTF-8 (which the highlight reads). The
/// reply copies it with one `memcpy`. It does not copy the term's strings. Copying a string counts
/// references to its storage, and every thread serving suggestions shares that storage. It also
/// does not scan the text for characters to escape again.
struct TermBytes: Sendable {
    /// Where one term's bytes are.
    struct Entry: Sendable {
        /// The term's part of a reply item (from `],"keyword":` to the closing brace).
        var start: UInt32
        var length: UInt32
        /// The text's UTF-8. It lies inside the item's part when the text needed no escape, and
        /// after it otherwise.
        var textStart: UInt32
        var textLength: UInt32
    }

    private static let keywordKey: StaticString = #"],"keyword":"#
    private static let textKey: StaticString = #","text":"#
    private static let weightKey: StaticString = #","weight":"#

    private let storage: [UInt8]
    private let entries: [Entry]
    /// False when the bytes would not fit 32-bit offsets (more than 4 GiB of terms): then nothing
    /// is kept, and replies are written from the terms' strings.
    let isAvailable: Bool

    /// `byteLimit` bounds the bytes kept (tests lower it to see replies written without them).
    init(terms: [Term], byteLimit: Int = Int(UInt32.max)) {
        if let prepared = Self.prepare(terms, byteLimit: byteLimit) {
            (storage, entries) = prepared
            isAvailable = true
        } else {
            (storage, entries) = ([], [])
            isAvailable = false
        }
    }

    private static func prepare(_ terms: [Term], byteLimit: Int) -> ([UInt8], [Entry])? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(terms.count * 48)
        var entries: [Entry] = []
        entries.reserveCapacity(terms.count)
        for term in terms {
            let start = bytes.count
            let writtenText = writeItemPart(keyword: term.keyword, text: term.text, weight: term.weight, into: &bytes)
            // The written text is the plain text between quotes when nothing needed an escape.
            let plain = writtenText.count - 2 == term.text.utf8.count
            let length = bytes.count - start
            var textStart = writtenText.lowerBound + 1
            if !plain {
                textStart = bytes.count
                bytes.append(contentsOf: term.text.utf8)
            }
            guard bytes.count <= byteLimit, let entry = Entry(start: start, length: length, textStart: textStart, textLength: term.text.utf8.count) else { return nil }
            entries.append(entry)
        }
        return (bytes, entries)
    }

    /// Writes a suggestion's part of a reply item, `],"keyword":"…","text":"…","weight":…}`, and
    /// returns where the quoted text is in `bytes`.
    static func writeItemPart(keyword: String, text: String, weight: Double, into bytes: inout [UInt8]) -> Range<Int> {
        JSONValue.write(literal: keywordKey, into: &bytes)
        JSONValue.write(string: keyword, into: &bytes)
        JSONValue.write(literal: textKey, into: &bytes)
        let quotedText = bytes.count
        JSONValue.write(string: text, into: &bytes)
        let textEnd = bytes.count
        JSONValue.write(literal: weightKey, into: &bytes)
        JSONValue.write(number: weight, into: &bytes)
        bytes.append(UInt8(ascii: "}"))
        return quotedText..<textEnd
    }

    /// The bytes, or nil when they are not kept.
    var reader: Reader? { isAvailable ? Reader(entries: entries, storage: storage) : nil }

    struct Reader {
        let entries: [Entry]
        let storage: [UInt8]

        /// Appends term `term`'s part of a reply item (`],"keyword":"…","text":"…","weight":…}`).
        func writeItemPart(of term: Int, into bytes: inout [UInt8]) {
            let entry = entries[term]
            bytes.append(contentsOf: storage[Int(entry.start)..<Int(entry.start + entry.length)])
        }

        /// Calls `body` with the UTF-8 of term `term`'s text.
        func withText<Result>(of term: Int, _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
            let entry = entries[term]
            return storage[Int(entry.textStart)..<Int(entry.textStart + entry.textLength)].withUnsafeBufferPointer(body)
        }

        /// The length of term `term`'s part of a reply item.
        func itemPartLength(of term: Int) -> Int {
            Int(entries[term].length)
        }
    }
}

extension TermBytes.Entry {
    init?(start: Int, length: Int, textStart: Int, textLength: Int) {
        guard let start = UInt32(exactly: start), let length = UInt32(exactly: length),
              let textStart = UInt32(exactly: textStart), let textLength = UInt32(exactly: textLength),
              UInt64(textStart) + UInt64(textLength) <= UInt64(UInt32.max) else { return nil }
        self.init(start: start, length: length, textStart: textStart, textLength: textLength)
    }
}
