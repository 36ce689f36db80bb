import Foundation

/// Reads a GTFS table (RFC 4180 CSV) from a file a chunk at a time: a UTF-8 byte order mark,
/// quoted fields with `""` escapes and line breaks inside quotes, CRLF or LF line ends, and
/// surrounding spaces of unquoted fields trimmed. Memory stays bounded by one chunk and one record.
struct CSVReader {
    private let handle: FileHandle
    private var chunk: [UInt8] = []
    private var position = 0
    private var atEnd = false
    private var started = false
    /// The physical line the next record starts on (1-based; the header is line 1).
    private(set) var line = 1
    /// The line the record `next()` returned last started on.
    private(set) var recordLine = 0
    private var field: [UInt8] = []
    /// The bytes read from the file so far.
    private(set) var bytesRead: Int64 = 0
    private static let chunkSize = 1 << 16

    init(url: URL) throws {
        handle = try FileHandle(forReadingFrom: url)
    }

    /// The next record's fields, nil at the end of the file. Blank lines are skipped.
    mutating func next() throws -> [String]? {
        var fields: [String] = []
        field.removeAll(keepingCapacity: true)
        var quoted = false
        var wasQuoted = false
        var any = false
        recordLine = line
        while true {
            guard let byte = try nextByte() else {
                if !any && field.isEmpty && fields.isEmpty { return nil }
                fields.append(finish(wasQuoted))
                return fields
            }
            if quoted {
                if byte == UInt8(ascii: "\"") {
                    if try peekByte() == UInt8(ascii: "\"") {
                        _ = try nextByte()
                        field.append(byte)
                    } else {
                        quoted = false
                    }
                } else {
                    if byte == UInt8(ascii: "\n") { line += 1 }
                    field.append(byte)
                }
                continue
            }
            switch byte {
            case UInt8(ascii: ","):
                fields.append(finish(wasQuoted))
                wasQuoted = false
                any = true
            case UInt8(ascii: "\""):
                // A quote opens a quoted field only at its start (spaces before it allowed).
                if field.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == 9 }) {
                    field.removeAll(keepingCapacity: true)
                    quoted = true
                    wasQuoted = true
                } else {
                    field.append(byte)
                }
                any = true
            case UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                if byte == UInt8(ascii: "\r"), try peekByte() == UInt8(ascii: "\n") { _ = try nextByte() }
                line += 1
                if !any && field.isEmpty && fields.isEmpty {
                    recordLine = line
                    continue   // a blank line
                }
                fields.append(finish(wasQuoted))
                return fields
            default:
                field.append(byte)
                any = true
            }
        }
    }

    private mutating func finish(_ wasQuoted: Bool) -> String {
        defer { field.removeAll(keepingCapacity: true) }
        if wasQuoted { return String(decoding: field, as: UTF8.self) }
        var start = 0
        var end = field.count
        while start < end, field[start] == UInt8(ascii: " ") || field[start] == 9 { start += 1 }
        while end > start, field[end - 1] == UInt8(ascii: " ") || field[end - 1] == 9 { end -= 1 }
        return String(decoding: field[start..<end], as: UTF8.self)
    }

    private mutating func fill() throws {
        guard !atEnd else { return }
        let data = try handle.read(upToCount: Self.chunkSize) ?? Data()
        if data.isEmpty {
            atEnd = true
            chunk = []
        } else {
            chunk = [UInt8](data)
            bytesRead += Int64(data.count)
        }
        position = 0
        if !started {
            started = true
            if chunk.count >= 3, chunk[0] == 0xEF, chunk[1] == 0xBB, chunk[2] == 0xBF { position = 3 }
        }
    }

    private mutating func nextByte() throws -> UInt8? {
        if position >= chunk.count {
            try fill()
            if position >= chunk.count { return nil }
        }
        defer { position += 1 }
        return chunk[position]
    }

    private mutating func peekByte() throws -> UInt8? {
        if position >= chunk.count {
            try fill()
            if position >= chunk.count { return nil }
        }
        return chunk[position]
    }

    func close() {
        try? handle.close()
    }
}

/// A GTFS table: a CSV file whose first record names the columns, in any order.
struct GTFSTable {
    let file: String
    private var reader: CSVReader
    private let columns: [String: Int]
    /// The current record's fields.
    private(set) var fields: [String] = []

    /// Opens `url` (the table `file` of a feed) and reads its header; `required` columns must be present.
    init(url: URL, file: String, required: [String]) throws {
        self.file = file
        reader = try CSVReader(url: url)
        guard let header = try reader.next() else { throw GTFSError(file: file, line: 1, "is empty: it has no header line") }
        var columns: [String: Int] = [:]
        for (index, name) in header.enumerated() where columns[name] == nil {
            columns[name.trimmingCharacters(in: .whitespaces)] = index
        }
        self.columns = columns
        for name in required where columns[name] == nil {
            throw GTFSError(file: file, line: 1, "lacks the required column \(name)")
        }
    }

    /// The line the current record starts on.
    var line: Int { reader.recordLine }

    /// The bytes read from the file so far.
    var bytesRead: Int64 { reader.bytesRead }

    /// Moves to the next record; false at the end.
    mutating func next() throws -> Bool {
        guard let record = try reader.next() else {
            reader.close()
            return false
        }
        fields = record
        return true
    }

    func has(_ column: String) -> Bool { columns[column] != nil }

    /// The value of `column` in the current record ("" when the column or the value is missing).
    subscript(_ column: String) -> String {
        guard let index = columns[column], index < fields.count else { return "" }
        return fields[index]
    }

    /// The value, nil when empty.
    func optional(_ column: String) -> String? {
        let value = self[column]
        return value.isEmpty ? nil : value
    }

    /// A required value: a rejection naming the column when empty.
    func required(_ column: String) throws -> String {
        let value = self[column]
        guard !value.isEmpty else { throw GTFSRowError("\(column) is empty") }
        return value
    }

    /// An integer value; nil when empty, a rejection when not a number.
    func int(_ column: String) throws -> Int? {
        let value = self[column]
        if value.isEmpty { return nil }
        guard let number = Int(value) else { throw GTFSRowError("\(column) '\(value.prefix(40))' is not a whole number") }
        return number
    }

    /// A decimal value in `range`; nil when empty.
    func double(_ column: String, in range: ClosedRange<Double>) throws -> Double? {
        let value = self[column]
        if value.isEmpty { return nil }
        guard let number = Double(value), number.isFinite else { throw GTFSRowError("\(column) '\(value.prefix(40))' is not a number") }
        guard range.contains(number) else { throw GTFSRowError("\(column) \(value) is out of range (\(range.lowerBound) to \(range.upperBound))") }
        return number
    }
}

/// A feed that cannot be imported: the file and line say where.
struct GTFSError: Error, CustomStringConvertible {
    var file: String
    var line: Int?
    var message: String

    init(file: String, line: Int?, _ message: String) {
        self.file = file
        self.line = line
        self.message = message
    }

    var description: String {
        if let line { return "\(file) line \(line): \(message)" }
        return "\(file): \(message)"
    }
}

/// One record that cannot be used (rejected and reported; the import goes on unless strict).
struct GTFSRowError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// GTFS field formats.
enum GTFSFormat {
    /// `HH:MM:SS` (or `H:MM:SS`), hours past 24 allowed: seconds after the service day's start.
    static func time(_ text: String) -> Int32? {
        let bytes = Array(text.utf8)
        var parts: [Int32] = [0, 0, 0]
        var part = 0
        var digits = 0
        for byte in bytes {
            if byte == UInt8(ascii: ":") {
                guard digits > 0, part < 2 else { return nil }
                part += 1
                digits = 0
            } else if byte >= 48 && byte <= 57 {
                digits += 1
                guard digits <= (part == 0 ? 3 : 2) else { return nil }
                parts[part] = parts[part] * 10 + Int32(byte - 48)
            } else {
                return nil
            }
        }
        guard part == 2, digits == 2, parts[1] < 60, parts[2] < 60 else { return nil }
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    }

    /// `YYYYMMDD`: days since 1970-01-01.
    static func date(_ text: String) -> Int32? {
        guard text.utf8.count == 8, let number = Int(text) else { return nil }
        let year = number / 10_000, month = number / 100 % 100, day = number % 100
        guard (1900...2200).contains(year), (1...12).contains(month), (1...31).contains(day) else { return nil }
        let days = CivilDate.days(year: year, month: month, day: day)
        guard CivilDate.civil(days).day == day else { return nil }   // 20230231
        return Int32(days)
    }

    /// `HH:MM:SS` from seconds after the service day's start.
    static func formatTime(_ seconds: Int32) -> String {
        let value = Int(seconds)
        return String(format: "%02d:%02d:%02d", value / 3600, value / 60 % 60, value % 60)
    }
}
