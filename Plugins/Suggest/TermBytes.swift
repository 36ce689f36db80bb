import GatewayCore

/// Every term of a ``SuggestionIndex`` as the bytes a native reply writes for it, laid out one
/// after another in a single immutable buffer when the index is built.
///
/// A reply item is `{"highlight":[…]` followed by the term's part, which is the same in every
/// reply: `],"keyword":"…","text":"…","weight":…}`. That part is kept here already written as
/// JSON, escapes and all, together with the text's plain UTF-8 (which the highlight reads). The
/// reply copies it with one `memcpy`. It does not copy the term's strings. Copying a string counts
/// references to its storage, and every thread serving suggestions shares that storage. It also
/// does not scan the text for characters to escape again.
///
/// The buffers are tables of the index's ``IndexMemory`` rather than arrays: reading an array held
/// by a shared object would retain and release the array's storage.
final class TermBytes: @unchecked Sendable {
    // Unchecked: raw memory written while the index is built, only read once it is published.
    /// Where one term's bytes are.
    struct Entry {
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

    /// Holds the two tables' memory.
    private let memory: IndexMemory
    private let storage: IndexTable<UInt8>
    private let entries: IndexTable<Entry>
    /// False when the bytes would not fit 32-bit offsets (more than 4 GiB of terms): then nothing
    /// is kept, and replies are written from the terms' strings.
    let isAvailable: Bool

    /// `byteLimit` bounds the bytes kept (tests lower it to see replies written without them).
    init(terms: [Term], byteLimit: Int = Int(UInt32.max), memory: IndexMemory) {
        self.memory = memory
        if let prepared = Self.prepare(terms, byteLimit: byteLimit, memory: memory) {
            (storage, entries) = prepared
            isAvailable = true
        } else {
            (storage, entries) = (memory.allocate(UInt8.self, count: 0), memory.allocate(Entry.self, count: 0))
            isAvailable = false
        }
    }

    private static func prepare(_ terms: [Term], byteLimit: Int, memory: IndexMemory) -> (IndexTable<UInt8>, IndexTable<Entry>)? {
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
        return (memory.table(bytes), memory.table(entries))
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

    /// The tables' memory, read without touching this object again: a reply reads ten or more
    /// terms, and each access through the object could count a reference to it, an object every
    /// thread serving suggestions shares. Valid while this object lives; nil when the bytes are
    /// not kept.
    var reader: Reader? { isAvailable ? Reader(entries: entries.base, storage: storage.base) : nil }

    struct Reader {
        let entries: UnsafeMutablePointer<Entry>
        let storage: UnsafeMutablePointer<UInt8>

        /// Appends term `term`'s part of a reply item (`],"keyword":"…","text":"…","weight":…}`).
        func writeItemPart(of term: Int, into bytes: inout [UInt8]) {
            let entry = entries[term]
            bytes.append(contentsOf: UnsafeBufferPointer(start: storage + Int(entry.start), count: Int(entry.length)))
        }

        /// The UTF-8 of term `term`'s text.
        func text(of term: Int) -> UnsafeBufferPointer<UInt8> {
            let entry = entries[term]
            return UnsafeBufferPointer(start: storage + Int(entry.textStart), count: Int(entry.textLength))
        }

        /// The bytes of term `term`'s part of a reply item, give or take two: it also reads the
        /// first byte of the part and of the text. A reply asks this of all its terms before
        /// writing any, so that the first reads of their scattered bytes overlap rather than wait
        /// one at a time.
        func itemPartLength(of term: Int) -> Int {
            let entry = entries[term]
            return Int(entry.length) + Int(storage[Int(entry.start)] & 1) + (entry.textLength > 0 ? Int(storage[Int(entry.textStart)] & 1) : 0)
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
