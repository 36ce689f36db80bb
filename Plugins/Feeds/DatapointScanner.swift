import Foundation
import GatewayCore
import NIOCore

/// A fast reader for the common datapoints body — `{"datapoints": [{"at": "…", "value": "…"}, …]}`
/// or a bare array of such objects — straight from the bytes, without building a JSON tree.
///
/// It accepts only well-formed bodies whose every datapoint is valid (members `at` and `value`
/// only, no escapes in strings, a parseable time, a finite number). For anything else it answers
/// nil and the caller parses the body the general way, which reports every problem precisely.
enum DatapointScanner {
    static func scan(_ buffer: ByteBuffer, now: Int64) -> [Datapoint]? {
        buffer.withUnsafeReadableBytes { raw in
            var scanner = Scanner(bytes: raw.bindMemory(to: UInt8.self), now: now)
            return scanner.body()
        }
    }

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        let now: Int64
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>, now: Int64) {
            self.bytes = bytes
            self.now = now
        }

        mutating func skipSpace() {
            while index < bytes.count, bytes[index] == 32 || bytes[index] == 10 || bytes[index] == 13 || bytes[index] == 9 { index += 1 }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        /// A string without escapes: the range of its content.
        mutating func string() -> Range<Int>? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    return start..<(index - 1)
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
                index += 1
            }
            return nil
        }

        /// A bare JSON number: the range of its text. Only JSON's grammar
        /// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`) is a number: `.5`, `+1`, `01` or `1.`
        /// are not, and the general reading refuses them.
        mutating func number() -> Range<Int>? {
            skipSpace()
            let start = index
            func digits() -> Int {
                let first = index
                while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
                return index - first
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            let integerStart = index
            let integerDigits = digits()
            guard integerDigits > 0, integerDigits == 1 || bytes[integerStart] != UInt8(ascii: "0") else { return nil }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits() > 0 else { return nil }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digits() > 0 else { return nil }
            }
            return start..<index
        }

        mutating func body() -> [Datapoint]? {
            skipSpace()
            guard index < bytes.count else { return nil }
            let wrapped = bytes[index] == UInt8(ascii: "{")
            if wrapped {
                index += 1
                guard let key = string(), equals(key, "datapoints"), take(UInt8(ascii: ":")) else { return nil }
            }
            guard let points = array() else { return nil }
            if wrapped, !take(UInt8(ascii: "}")) { return nil }
            skipSpace()
            return index == bytes.count ? points : nil
        }

        mutating func array() -> [Datapoint]? {
            guard take(UInt8(ascii: "[")) else { return nil }
            var points: [Datapoint] = []
            points.reserveCapacity(bytes.count / 48)
            if take(UInt8(ascii: "]")) { return points }
            repeat {
                guard let point = datapoint() else { return nil }
                points.append(point)
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]")) ? points : nil
        }

        mutating func datapoint() -> Datapoint? {
            guard take(UInt8(ascii: "{")) else { return nil }
            var at: Int64?
            var value: Double?
            repeat {
                guard let key = string(), take(UInt8(ascii: ":")) else { return nil }
                if equals(key, "at"), at == nil {
                    guard let text = string(), let micros = UTCTimestamp.parse(bytes: UnsafeBufferPointer(rebasing: bytes[text])) else { return nil }
                    at = micros
                } else if equals(key, "value"), value == nil {
                    skipSpace()
                    guard index < bytes.count else { return nil }
                    let text = bytes[index] == UInt8(ascii: "\"") ? string() : number()
                    guard let text, let parsed = Self.decimal(UnsafeBufferPointer(rebasing: bytes[text])) else { return nil }
                    value = parsed
                } else {
                    return nil
                }
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")), let value else { return nil }
            return Datapoint(at: at ?? now, value: value)
        }

        func equals(_ range: Range<Int>, _ word: StaticString) -> Bool {
            guard range.count == word.utf8CodeUnitCount else { return false }
            let expected = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
            for offset in 0..<range.count where bytes[range.lowerBound + offset] != expected[offset] { return false }
            return true
        }

        /// A finite decimal number: exact fast path for up to 15 significant digits and a small
        /// scale (one correctly rounded division), otherwise the system's parser.
        static func decimal(_ text: UnsafeBufferPointer<UInt8>) -> Double? {
            guard !text.isEmpty, text.count <= 64 else { return nil }
            var index = 0
            var negative = false
            if text[0] == 45 || text[0] == 43 {
                negative = text[0] == 45
                index = 1
            }
            var mantissa: Int64 = 0
            var digits = 0
            var scale = 0
            var seenDot = false
            var simple = true
            let start = index
            while index < text.count {
                let byte = text[index]
                if byte >= 48, byte <= 57 {
                    if digits < 15 {
                        mantissa = mantissa * 10 + Int64(byte - 48)
                        if mantissa > 0 { digits += 1 }
                        if seenDot { scale += 1 }
                    } else {
                        simple = false
                    }
                } else if byte == 46, !seenDot {
                    seenDot = true
                } else {
                    simple = false
                    break
                }
                index += 1
            }
            guard index > start + (seenDot ? 1 : 0) || !simple else { return nil }
            if simple, scale <= 22 {
                let powers: [Double] = [1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22]
                let value = Double(mantissa) / powers[scale]
                return negative ? -value : value
            }
            return FeedRules.value(String(decoding: text, as: UTF8.self))
        }
    }
}
