/// Turns a stream of bytes into unfolded content lines (RFC 5545 §3.1), one chunk at a time.
///
/// Lines may end in CRLF, LF or a lone CR; a line that starts with a space or a tab continues the one
/// before it (the space or tab is dropped). A UTF-8 byte order mark at the start is skipped. Only the
/// content line being assembled is held, and never more than `maxLineBytes` of it: past that the rest
/// of the line streams by uncopied and the line is handed on as overlong, so a 100 MB line costs one
/// pass over its bytes and no memory.
struct ICalendarLineReader {
    /// A content line being handed on. `bytes` is only valid during the callback.
    struct Line {
        /// The physical line on which the content line starts.
        var number: Int
        /// The unfolded bytes; for an overlong line, just its first bytes (enough to name it).
        var bytes: UnsafeBufferPointer<UInt8>
        var isOverlong: Bool
    }

    private static let lineFeed: UInt8 = 0x0A
    private static let carriageReturn: UInt8 = 0x0D
    private static let space: UInt8 = 0x20
    private static let tab: UInt8 = 0x09
    /// How much of an overlong line is kept so that its problem can name the property.
    private static let overlongPrefixBytes = 64

    let maxLineBytes: Int
    /// The physical line being read, counted from 1.
    private(set) var physicalLine = 1
    private var buffer: [UInt8] = []
    private var bufferLine = 0
    private var bufferOverlong = false
    private var hasBuffer = false
    private var atLineStart = true
    private var pendingCarriageReturn = false
    private var sawFirstChunk = false

    init(maxLineBytes: Int) {
        self.maxLineBytes = max(1, maxLineBytes)
    }

    /// Reads the next chunk, calling `emit` for each content line completed by it. A content line is
    /// complete only once the next physical line is seen not to continue it, so the last one is emitted
    /// by `finish`.
    mutating func feed(_ chunk: UnsafeRawBufferPointer, emit: (Line) throws -> Void) rethrows {
        let count = chunk.count
        var index = 0
        if !sawFirstChunk {
            sawFirstChunk = true
            if count >= 3, chunk[0] == 0xEF, chunk[1] == 0xBB, chunk[2] == 0xBF { index = 3 }
        }
        if pendingCarriageReturn, index < count {
            pendingCarriageReturn = false
            if chunk[index] == Self.lineFeed { index += 1 }
        }
        while index < count {
            if atLineStart {
                let first = chunk[index]
                if (first == Self.space || first == Self.tab) && hasBuffer {
                    index += 1
                    atLineStart = false
                    continue
                }
                if hasBuffer { try emitBuffer(emit) }
                if first == Self.carriageReturn || first == Self.lineFeed {
                    // A blank line: not allowed by RFC 5545 but common at the end of files; it carries nothing.
                    index = endOfLineBreak(in: chunk, at: index)
                    physicalLine += 1
                    continue
                }
                hasBuffer = true
                bufferLine = physicalLine
                bufferOverlong = false
                buffer.removeAll(keepingCapacity: true)
                atLineStart = false
            }
            let lineBreak = Self.firstLineBreak(in: chunk, from: index)
            append(UnsafeRawBufferPointer(rebasing: chunk[index..<lineBreak]))
            if lineBreak == count { break }
            index = endOfLineBreak(in: chunk, at: lineBreak)
            physicalLine += 1
            atLineStart = true
        }
    }

    /// Emits the last content line, if any.
    mutating func finish(emit: (Line) throws -> Void) rethrows {
        if hasBuffer { try emitBuffer(emit) }
    }

    private mutating func emitBuffer(_ emit: (Line) throws -> Void) rethrows {
        hasBuffer = false
        let number = bufferLine
        let overlong = bufferOverlong
        try buffer.withUnsafeBufferPointer { try emit(Line(number: number, bytes: $0, isOverlong: overlong)) }
    }

    private mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bufferOverlong, !bytes.isEmpty else { return }
        if buffer.count + bytes.count > maxLineBytes {
            bufferOverlong = true
            let keep = min(buffer.count, Self.overlongPrefixBytes)
            buffer.removeSubrange(keep...)
            if keep < Self.overlongPrefixBytes {
                buffer.append(contentsOf: bytes.prefix(Self.overlongPrefixBytes - keep))
            }
            return
        }
        buffer.append(contentsOf: bytes)
    }

    /// The index after the line break at `index` (CR, LF or CRLF). A CR that ends the chunk may be the
    /// first half of a CRLF; the LF is then skipped at the start of the next chunk.
    private mutating func endOfLineBreak(in chunk: UnsafeRawBufferPointer, at index: Int) -> Int {
        guard chunk[index] == Self.carriageReturn else { return index + 1 }
        if index + 1 == chunk.count {
            pendingCarriageReturn = true
            return index + 1
        }
        return chunk[index + 1] == Self.lineFeed ? index + 2 : index + 1
    }

    /// The index of the first CR or LF at or after `start`, or `chunk.count`. Eight bytes are tested at a
    /// time (the classic "has a zero byte" trick on the bytes XORed with CR and with LF), which keeps a
    /// pass over a 100 MB line short even in a debug build.
    private static func firstLineBreak(in chunk: UnsafeRawBufferPointer, from start: Int) -> Int {
        let count = chunk.count
        var index = start
        if let base = chunk.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            let lineFeeds = ones &* UInt64(lineFeed)
            let carriageReturns = ones &* UInt64(carriageReturn)
            while index + 8 <= count {
                let word = base.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                let withLineFeedZeroed = word ^ lineFeeds
                let withCarriageReturnZeroed = word ^ carriageReturns
                let hasLineFeed = (withLineFeedZeroed &- ones) & ~withLineFeedZeroed & highs
                let hasCarriageReturn = (withCarriageReturnZeroed &- ones) & ~withCarriageReturnZeroed & highs
                if hasLineFeed | hasCarriageReturn != 0 { break }
                index += 8
            }
        }
        while index < count {
            let byte = chunk[index]
            if byte == lineFeed || byte == carriageReturn { return index }
            index += 1
        }
        return count
    }
}
