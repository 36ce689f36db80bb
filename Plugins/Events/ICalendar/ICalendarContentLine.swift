/// One unfolded content line split into its parts: `NAME;PARAM=value,"quoted";PARAM2=x:VALUE`
/// (RFC 5545 §3.1). Names are upper-cased; parameter values lose their quotes and have their RFC 6868
/// `^` escapes decoded; the value is left as written, since how to unescape it depends on its type.
struct ICalendarContentLine {
    struct Parameter {
        var name: String
        var values: [String]
    }

    /// Why a line could not be split; becomes an `ICalendarProblem`.
    struct Malformed: Error {
        var reason: String
    }

    var name: String
    var parameters: [Parameter]
    var value: String

    /// The first value of a parameter, if present.
    func parameter(_ name: String) -> String? {
        parameters.first { $0.name == name }?.values.first
    }

    private static let semicolon = UInt8(ascii: ";")
    private static let colon = UInt8(ascii: ":")
    private static let comma = UInt8(ascii: ",")
    private static let equals = UInt8(ascii: "=")
    private static let quote = UInt8(ascii: "\"")

    /// Reads just the name, for lines inside components that are skipped.
    static func name(of bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var end = 0
        while end < bytes.count, isNameByte(bytes[end]) { end += 1 }
        guard end > 0 else { return nil }
        return upperCased(bytes, 0..<end)
    }

    init(parsing bytes: UnsafeBufferPointer<UInt8>) throws(Malformed) {
        let count = bytes.count
        var index = 0
        while index < count, Self.isNameByte(bytes[index]) { index += 1 }
        guard index > 0 else {
            throw Malformed(reason: "not a content line (expected NAME:VALUE)")
        }
        guard index < count, bytes[index] == Self.semicolon || bytes[index] == Self.colon else {
            throw Malformed(reason: "not a content line: no ':' after the name")
        }
        name = Self.upperCased(bytes, 0..<index)
        parameters = []
        while bytes[index] == Self.semicolon {
            index += 1
            let nameStart = index
            while index < count, Self.isNameByte(bytes[index]) { index += 1 }
            guard index > nameStart, index < count, bytes[index] == Self.equals else {
                throw Malformed(reason: "\(name): malformed parameter (expected NAME=value)")
            }
            let parameterName = Self.upperCased(bytes, nameStart..<index)
            index += 1
            var values: [String] = []
            while true {
                if index < count, bytes[index] == Self.quote {
                    let valueStart = index + 1
                    index = valueStart
                    while index < count, bytes[index] != Self.quote { index += 1 }
                    guard index < count else {
                        throw Malformed(reason: "\(name): parameter \(parameterName) has an unclosed quote")
                    }
                    values.append(
                        Self.decodeCaretEscapes(String(decoding: UnsafeBufferPointer(rebasing: bytes[valueStart..<index]), as: UTF8.self)))
                    index += 1
                } else {
                    let valueStart = index
                    while index < count, bytes[index] != Self.comma, bytes[index] != Self.semicolon, bytes[index] != Self.colon {
                        index += 1
                    }
                    values.append(
                        Self.decodeCaretEscapes(String(decoding: UnsafeBufferPointer(rebasing: bytes[valueStart..<index]), as: UTF8.self)))
                }
                guard index < count else {
                    throw Malformed(reason: "\(name): not a content line: no ':' before the value")
                }
                if bytes[index] == Self.comma {
                    index += 1
                    continue
                }
                break
            }
            guard bytes[index] == Self.semicolon || bytes[index] == Self.colon else {
                throw Malformed(reason: "\(name): parameter \(parameterName) is followed by unexpected characters")
            }
            parameters.append(Parameter(name: parameterName, values: values))
        }
        value = String(decoding: UnsafeBufferPointer(rebasing: bytes[(index + 1)...]), as: UTF8.self)
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D
    }

    private static func upperCased(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> String {
        String(unsafeUninitializedCapacity: range.count) { output in
            for (offset, byte) in bytes[range].enumerated() {
                output[offset] = byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte
            }
            return range.count
        }
    }

    /// RFC 6868: `^n` is a newline, `^^` a caret and `^'` a double quote inside parameter values.
    private static func decodeCaretEscapes(_ text: String) -> String {
        guard text.utf8.contains(UInt8(ascii: "^")) else { return text }
        var result = ""
        var iterator = text.makeIterator()
        while let character = iterator.next() {
            guard character == "^" else {
                result.append(character)
                continue
            }
            switch iterator.next() {
            case "n"?: result.append("\n")
            case "^"?: result.append("^")
            case "'"?: result.append("\"")
            case let other?: result.append("^"); result.append(other)
            case nil: result.append("^")
            }
        }
        return result
    }
}

/// TEXT values (RFC 5545 §3.3.11): backslash escapes for backslash, semicolon, comma and newline.
enum ICalendarText {
    /// Decodes `\\`, `\;`, `\,`, `\n` and `\N`; any other escaped character stands for itself.
    /// Works on UTF-8 bytes: long DESCRIPTIONs are the bulk of a calendar, and stepping through them a
    /// `Character` at a time costs more than the rest of the parse.
    static func unescape(_ text: Substring) -> String {
        let backslash = UInt8(ascii: "\\")
        guard text.utf8.contains(backslash) else { return String(text) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var escaped = false
        for byte in text.utf8 {
            if escaped {
                escaped = false
                bytes.append(byte == UInt8(ascii: "n") || byte == UInt8(ascii: "N") ? UInt8(ascii: "\n") : byte)
            } else if byte == backslash {
                escaped = true
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func unescape(_ text: String) -> String {
        unescape(text[...])
    }

    /// Splits a TEXT list on the commas that are not escaped, and unescapes each item.
    static func unescapeList(_ text: String) -> [String] {
        var items: [String] = []
        let utf8 = text.utf8
        var itemStart = utf8.startIndex
        var index = utf8.startIndex
        var escaped = false
        while index < utf8.endIndex {
            let byte = utf8[index]
            if escaped {
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: ",") {
                items.append(unescape(text[itemStart..<index]))
                itemStart = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        items.append(unescape(text[itemStart..<utf8.endIndex]))
        return items
    }

    /// The text without leading and trailing spaces and tabs. (Foundation's `trimmingCharacters` goes
    /// through NSString on Linux and cost a fifth of the whole parse.)
    static func trimmed(_ whole: some StringProtocol) -> Substring {
        let text = Substring(whole)
        let utf8 = text.utf8
        var start = utf8.startIndex
        var end = utf8.endIndex
        while start < end, utf8[start] == 0x20 || utf8[start] == 0x09 { start = utf8.index(after: start) }
        while end > start {
            let before = utf8.index(before: end)
            guard utf8[before] == 0x20 || utf8[before] == 0x09 else { break }
            end = before
        }
        return text[start..<end]
    }

    /// Escapes backslash, semicolon, comma and newlines (CRLF, CR or LF all become `\n`).
    static func escape(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "\\": result.append("\\\\")
            case ";": result.append("\\;")
            case ",": result.append("\\,")
            case "\r\n", "\n", "\r": result.append("\\n")
            default: result.append(character)
            }
        }
        return result
    }
}
