/// Finds where a JSON text first breaks the grammar (RFC 8259), to tell a client the line and
/// column of its mistake. Only called after a decoder has already rejected the text, so it favours
/// clarity over speed.
enum JSONSyntax {
    /// `"unexpected ',' at line 1, column 15"`, or nil when the text is valid JSON.
    static func firstError(in bytes: UnsafeRawBufferPointer) -> String? {
        var scanner = Scanner(bytes: bytes)
        do {
            scanner.skipSpace()
            try scanner.value(depth: 0)
            scanner.skipSpace()
            if scanner.index < bytes.count { throw scanner.unexpected() }
            return nil
        } catch let failure as Failure {
            return failure.message
        } catch {
            return nil
        }
    }

    private struct Failure: Error {
        let message: String
    }

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        func position() -> String {
            var line = 1
            var column = 1
            for offset in 0..<min(index, bytes.count) {
                if bytes[offset] == UInt8(ascii: "\n") {
                    line += 1
                    column = 1
                } else if bytes[offset] & 0xC0 != 0x80 {
                    column += 1
                }
            }
            return "line \(line), column \(column)"
        }

        func unexpected() -> Failure {
            guard let byte = current else { return Failure(message: "the text ends too early at \(position())") }
            let shown = byte >= 0x20 && byte < 0x7F ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x" + String(byte, radix: 16, uppercase: true)
            return Failure(message: "unexpected \(shown) at \(position())")
        }

        mutating func skipSpace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
        }

        mutating func expect(_ literal: String) throws {
            for expected in literal.utf8 {
                guard current == expected else { throw unexpected() }
                index += 1
            }
        }

        mutating func value(depth: Int) throws {
            guard depth < 512 else { throw Failure(message: "nesting deeper than 512 levels at \(position())") }
            switch current {
            case UInt8(ascii: "{"):
                index += 1
                skipSpace()
                if current == UInt8(ascii: "}") { index += 1; return }
                while true {
                    skipSpace()
                    guard current == UInt8(ascii: "\"") else { throw unexpected() }
                    try string()
                    skipSpace()
                    try expect(":")
                    skipSpace()
                    try value(depth: depth + 1)
                    skipSpace()
                    if current == UInt8(ascii: ",") { index += 1; continue }
                    if current == UInt8(ascii: "}") { index += 1; return }
                    throw unexpected()
                }
            case UInt8(ascii: "["):
                index += 1
                skipSpace()
                if current == UInt8(ascii: "]") { index += 1; return }
                while true {
                    skipSpace()
                    try value(depth: depth + 1)
                    skipSpace()
                    if current == UInt8(ascii: ",") { index += 1; continue }
                    if current == UInt8(ascii: "]") { index += 1; return }
                    throw unexpected()
                }
            case UInt8(ascii: "\""): try string()
            case UInt8(ascii: "t"): try expect("true")
            case UInt8(ascii: "f"): try expect("false")
            case UInt8(ascii: "n"): try expect("null")
            case .some(let byte) where byte == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte):
                try number()
            default: throw unexpected()
            }
        }

        mutating func string() throws {
            index += 1
            while let byte = current {
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let escaped = current, "\"\\/bfnrtu".utf8.contains(escaped) else { throw unexpected() }
                    index += 1
                case 0x00..<0x20:
                    throw Failure(message: "a control character inside a string at \(position())")
                default:
                    index += 1
                }
            }
            throw unexpected()
        }

        mutating func number() throws {
            if current == UInt8(ascii: "-") { index += 1 }
            var digits = 0
            while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1; digits += 1 }
            guard digits > 0 else { throw unexpected() }
            if current == UInt8(ascii: ".") {
                index += 1
                digits = 0
                while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1; digits += 1 }
                guard digits > 0 else { throw unexpected() }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                index += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
                digits = 0
                while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1; digits += 1 }
                guard digits > 0 else { throw unexpected() }
            }
        }
    }
}
