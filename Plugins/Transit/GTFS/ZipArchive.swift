import CompressNIO
import Foundation
import NIOCore

/// A zip archive as a GTFS import reads it: the central directory listed, and each file extracted
/// on its own with its input bounded by the compressed size the directory records, its size and
/// CRC-32 checked. An entry whose data runs past the file, whose deflate stream ends early or
/// late, or that is encrypted, split over disks or compressed another way is an error, never a
/// hang: every step either reads input within the entry, writes output within its size, or stops.
/// (ZIPFoundation 0.9.20 inflates past an entry's end on Linux and spins for ever at the end of a
/// file whose deflate stream is cut short; the fuzz corpus keeps that file.)
struct ZipArchive {
    struct Entry: Sendable {
        var path: String
        var isDirectory: Bool { path.hasSuffix("/") }
        /// 0 stored, 8 deflated.
        var method: UInt16
        var flags: UInt16
        var crc32: UInt32
        var compressedSize: UInt64
        var uncompressedSize: UInt64
        var localHeaderOffset: UInt64
    }

    struct Problem: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    let url: URL
    let entries: [Entry]
    private let size: UInt64

    /// The most entries and central-directory bytes read (a GTFS feed has a dozen files).
    static let maximumEntries = 10_000
    static let maximumDirectoryBytes: UInt64 = 16 << 20
    static let chunkSize = 1 << 16

    init(url: URL) throws {
        self.url = url
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        size = try handle.seekToEnd()
        entries = try Self.readDirectory(handle, size: size)
    }

    /// The files by name, wherever they sit in the archive (feeds are often zipped inside a
    /// folder); the first of a name wins.
    var filesByName: [String: Entry] {
        var files: [String: Entry] = [:]
        for entry in entries where !entry.isDirectory {
            let name = String(entry.path.split(separator: "/", omittingEmptySubsequences: false).last ?? "")
            if !name.isEmpty, files[name] == nil { files[name] = entry }
        }
        return files
    }

    // MARK: The central directory

    private static func readDirectory(_ handle: FileHandle, size: UInt64) throws -> [Entry] {
        // The end-of-directory record: 22 bytes and a comment of up to 65,535 at the end of the file.
        let tailLength = min(size, 22 + 65_535)
        let tail = try read(handle, at: size - tailLength, count: Int(tailLength))
        guard tail.count >= 22, let end = (0...(tail.count - 22)).reversed().first(where: { tail.uint32(at: $0) == 0x0605_4b50 }) else {
            throw Problem("has no end-of-directory record: not a zip archive")
        }
        var count = UInt64(tail.uint16(at: end + 10))
        var directorySize = UInt64(tail.uint32(at: end + 12))
        var directoryOffset = UInt64(tail.uint32(at: end + 16))
        guard tail.uint16(at: end + 4) == 0, tail.uint16(at: end + 6) == 0 else { throw Problem("is split over several disks") }
        if count == 0xFFFF || directorySize == 0xFFFF_FFFF || directoryOffset == 0xFFFF_FFFF {
            // ZIP64: a locator just before the record names the 64-bit record.
            guard end >= 20, tail.uint32(at: end - 20) == 0x0706_4b50 else { throw Problem("has a ZIP64 directory without its locator") }
            let recordOffset = tail.uint64(at: end - 12)
            guard size >= 56, recordOffset <= size - 56 else { throw Problem("has a ZIP64 record past its end") }
            let record = try read(handle, at: recordOffset, count: 56)
            guard record.count == 56, record.uint32(at: 0) == 0x0606_4b50 else { throw Problem("has no ZIP64 end-of-directory record") }
            count = record.uint64(at: 32)
            directorySize = record.uint64(at: 40)
            directoryOffset = record.uint64(at: 48)
        }
        guard count <= UInt64(maximumEntries) else { throw Problem("has more than \(maximumEntries) entries") }
        guard directorySize <= maximumDirectoryBytes, directoryOffset <= size, directorySize <= size - directoryOffset else {
            throw Problem("has a central directory outside the file")
        }
        let directory = try read(handle, at: directoryOffset, count: Int(directorySize))
        var entries: [Entry] = []
        var position = 0
        for _ in 0..<count {
            guard position + 46 <= directory.count, directory.uint32(at: position) == 0x0201_4b50 else {
                throw Problem("has a damaged central directory")
            }
            let nameLength = Int(directory.uint16(at: position + 28)), extraLength = Int(directory.uint16(at: position + 30))
            let commentLength = Int(directory.uint16(at: position + 32))
            let next = position + 46 + nameLength + extraLength + commentLength
            guard next <= directory.count else { throw Problem("has a damaged central directory") }
            let nameBytes = directory[directory.startIndex + position + 46 ..< directory.startIndex + position + 46 + nameLength]
            var entry = Entry(path: String(decoding: nameBytes, as: UTF8.self), method: directory.uint16(at: position + 10),
                              flags: directory.uint16(at: position + 8), crc32: directory.uint32(at: position + 16),
                              compressedSize: UInt64(directory.uint32(at: position + 20)), uncompressedSize: UInt64(directory.uint32(at: position + 24)),
                              localHeaderOffset: UInt64(directory.uint32(at: position + 42)))
            try readZIP64Sizes(directory, extra: position + 46 + nameLength, length: extraLength, into: &entry)
            entries.append(entry)
            position = next
        }
        return entries
    }

    /// The 64-bit sizes and offset of the ZIP64 extra field (id 1), for the fields that say 0xFFFFFFFF.
    private static func readZIP64Sizes(_ directory: Data, extra start: Int, length: Int, into entry: inout Entry) throws {
        var position = start
        while position + 4 <= start + length {
            let id = directory.uint16(at: position), size = Int(directory.uint16(at: position + 2))
            guard position + 4 + size <= start + length else { throw Problem("has a damaged extra field") }
            if id == 1 {
                var field = position + 4
                func next() throws -> UInt64 {
                    guard field + 8 <= position + 4 + size else { throw Problem("has a short ZIP64 field") }
                    defer { field += 8 }
                    return directory.uint64(at: field)
                }
                if entry.uncompressedSize == 0xFFFF_FFFF { entry.uncompressedSize = try next() }
                if entry.compressedSize == 0xFFFF_FFFF { entry.compressedSize = try next() }
                if entry.localHeaderOffset == 0xFFFF_FFFF { entry.localHeaderOffset = try next() }
            }
            position += 4 + size
        }
    }

    // MARK: Extracting

    /// Passes the entry's uncompressed bytes to `consumer`, a chunk at a time; throws ``Problem``
    /// when the entry is not what its directory record says.
    func extract(_ entry: Entry, consumer: (Data) throws -> Void) throws {
        guard entry.flags & 1 == 0 else { throw Problem("is encrypted") }
        guard entry.method == 0 || entry.method == 8 else { throw Problem("is compressed with method \(entry.method) (only stored and deflated are read)") }
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        guard entry.localHeaderOffset <= size, size - entry.localHeaderOffset >= 30 else { throw Problem("has a local header past its end") }
        let header = try Self.read(handle, at: entry.localHeaderOffset, count: 30)
        guard header.uint32(at: 0) == 0x0403_4b50 else { throw Problem("has no local header where its directory says") }
        let dataOffset = entry.localHeaderOffset + 30 + UInt64(header.uint16(at: 26)) + UInt64(header.uint16(at: 28))
        guard dataOffset <= size, entry.compressedSize <= size - dataOffset else { throw Problem("has data past the end of the file") }
        try handle.seek(toOffset: dataOffset)

        var remaining = entry.compressedSize
        var produced: UInt64 = 0
        var checksum = CRC32()
        func emit(_ data: Data) throws {
            produced += UInt64(data.count)
            guard produced <= entry.uncompressedSize else { throw Problem("holds more than the \(entry.uncompressedSize) bytes it declares") }
            checksum.update(data)
            try consumer(data)
        }
        func readInput() throws -> Data {
            let data = try handle.read(upToCount: Int(min(UInt64(Self.chunkSize), remaining))) ?? Data()
            guard !data.isEmpty else { throw Problem("ends before its data does") }
            remaining -= UInt64(data.count)
            return data
        }

        if entry.method == 0 {
            guard entry.compressedSize == entry.uncompressedSize else { throw Problem("is stored with two different sizes") }
            while remaining > 0 { try emit(try readInput()) }
        } else {
            try inflate(readInput: readInput, remaining: { remaining }, emit: emit)
        }
        guard produced == entry.uncompressedSize else { throw Problem("ends after \(produced) of the \(entry.uncompressedSize) bytes it declares") }
        guard checksum.value == entry.crc32 else { throw Problem("fails its CRC-32 check") }
    }

    /// Inflates a raw deflate stream given at most the entry's compressed bytes. Each round either
    /// consumes input, writes a full output buffer, or ends the loop.
    private func inflate(readInput: () throws -> Data, remaining: () -> UInt64, emit: (Data) throws -> Void) throws {
        let decompressor = try ZlibDecompressor(algorithm: .deflate)
        var input = ByteBufferAllocator().buffer(capacity: Self.chunkSize)
        var output = ByteBufferAllocator().buffer(capacity: Self.chunkSize)
        enum Outcome { case returned, outputFull, needsInput }
        while true {
            if input.readableBytes == 0, remaining() > 0 {
                input.clear()
                input.writeBytes(try readInput())
            }
            let outcome: Outcome
            do {
                try decompressor.inflate(from: &input, to: &output)
                outcome = .returned
            } catch let error as CompressNIOError where error == .bufferOverflow {
                outcome = .outputFull
            } catch let error as CompressNIOError where error == .inputBufferOverflow {
                outcome = .needsInput
            } catch {
                throw Problem("is not a valid deflate stream")
            }
            if output.readableBytes > 0 {
                try emit(Data(output.readableBytesView))
                output.clear()
            }
            switch outcome {
            case .outputFull:
                continue
            case .returned where input.readableBytes > 0:
                return // the stream ended before the input (what follows is not read)
            case .returned, .needsInput:
                if remaining() == 0 && input.readableBytes == 0 { return }
            }
        }
    }

    private static func read(_ handle: FileHandle, at offset: UInt64, count: Int) throws -> Data {
        try handle.seek(toOffset: offset)
        return try handle.read(upToCount: count) ?? Data()
    }
}

/// CRC-32 (ISO-HDLC, as zip and gzip use it).
struct CRC32 {
    private(set) var value: UInt32 = 0

    private static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        return crc
    }

    mutating func update(_ data: Data) {
        var crc = ~value
        Self.table.withUnsafeBufferPointer { table in
            data.withUnsafeBytes { bytes in
                for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
            }
        }
        value = ~crc
    }
}

private extension Data {
    func uint16(at offset: Int) -> UInt16 {
        UInt16(self[startIndex + offset]) | UInt16(self[startIndex + offset + 1]) << 8
    }

    func uint32(at offset: Int) -> UInt32 {
        UInt32(uint16(at: offset)) | UInt32(uint16(at: offset + 2)) << 16
    }

    func uint64(at offset: Int) -> UInt64 {
        UInt64(uint32(at: offset)) | UInt64(uint32(at: offset + 4)) << 32
    }
}
