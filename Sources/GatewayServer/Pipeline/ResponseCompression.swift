import CompressNIO
import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization

/// `server.compression`: replies of a compressible type (JSON, text, XML, JavaScript, YAML, SVG)
/// at least `minimumSize` long are sent gzip- or deflate-coded when the request's
/// `Accept-Encoding` allows it (RFC 9110 §12.5.3, q-values honoured, gzip preferred on a tie).
/// Such replies carry `Vary: Accept-Encoding` whether coded or not; a coded reply's `ETag` becomes
/// weak (the bytes differ from the identity reply's). Already compressed types (images, archives,
/// fonts...), replies with `Content-Encoding` or `Cache-Control: no-transform`, streams of unknown
/// length (server-sent events, feeds' live streams) and WebSocket traffic are left alone.
/// `compression: false` turns it off.
public struct CompressionSettings: Decodable, Sendable, Equatable {
    public var enabled = true
    /// Replies shorter than this go as they are: coding them costs more than it saves.
    public var minimumSize = ByteSize(bytes: 1024)
    /// zlib's level, 1 (fastest) to 9 (smallest).
    public var level = 5

    public init() {}

    enum CodingKeys: String, CodingKey { case enabled, minimumSize, level }

    public init(from decoder: any Decoder) throws {
        if let single = try? decoder.singleValueContainer(), let enabled = try? single.decode(Bool.self) {
            self.enabled = enabled
            return
        }
        let container = try decoder.container(keyedBy: CodingKeys.self)
        enabled = try container.decodeIfPresent(Bool.self, forKey: .enabled) ?? enabled
        minimumSize = try container.decodeIfPresent(ByteSize.self, forKey: .minimumSize) ?? minimumSize
        level = try container.decodeIfPresent(Int.self, forKey: .level) ?? level
        guard (1...9).contains(level) else {
            throw DecodingError.dataCorruptedError(forKey: .level, in: container, debugDescription: "\(level) is not a zlib level (1 fastest to 9 smallest)")
        }
    }
}

/// The compression stage of the pipeline (see ``CompressionSettings``).
struct ResponseCompression: Sendable {
    let minimumSize: Int
    let level: Int32

    init?(_ settings: CompressionSettings) {
        guard settings.enabled else { return nil }
        minimumSize = max(settings.minimumSize.bytes, 1)
        level = Int32(settings.level)
    }

    enum Coding: String, Sendable {
        case gzip, deflate
    }

    static let vary = HTTPField.Name("Vary")!
    static let acceptEncoding = HTTPField.Name("Accept-Encoding")!

    /// Codes `response` when it and the request allow it.
    /// The largest body compressed; the replies of an API are far smaller.
    static let maximumSize = 8 << 20

    func apply(to response: inout Response, request: Request) async throws {
        // Cheap tests first: most replies of an API are short.
        // Large bodies (a proxied download) go as they are: compressing means holding them whole.
        guard let length = response.body.contentLength, length >= minimumSize, length <= Self.maximumSize,
              response.status.code >= 200, response.status != .noContent, response.status != .notModified,
              Self.mayCode(response.headers)
        else { return }
        Self.addVary(to: &response.headers)
        guard let coding = Self.negotiate(request.headers[values: Self.acceptEncoding]) else { return }
        var plain = try await Self.collect(response.body, capacity: length)
        let algorithm: CompressionAlgorithm = coding == .gzip
            ? .gzip(configuration: .init(compressionLevel: level)) : .zlib(configuration: .init(compressionLevel: level))
        let coded = try plain.compress(with: algorithm)
        // Incompressible after all (already coded data sent as JSON text, say): send it as it is.
        guard coded.readableBytes < length else { return }
        response.headers[.contentEncoding] = coding.rawValue
        response.headers[.contentLength] = String(coded.readableBytes)
        if let etag = response.headers[.eTag], !etag.hasPrefix("W/") { response.headers[.eTag] = "W/" + etag }
        response.body = ResponseBody(byteBuffer: coded)
    }

    /// The coding `Accept-Encoding` prefers among gzip and deflate, or nil for identity. Each
    /// coding's weight is its own entry's `q`, else `*`'s, else 0 (not acceptable).
    static func negotiate(_ values: [String]) -> Coding? {
        guard !values.isEmpty else { return nil }
        var weights: [String: Double] = [:]
        for value in values {
            for entry in value.split(separator: ",") {
                let parts = entry.split(separator: ";")
                guard let name = parts.first?.trimmingCharacters(in: .whitespaces).lowercased(), !name.isEmpty else { continue }
                var q = 1.0
                for parameter in parts.dropFirst() {
                    let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                    if pair.count == 2, pair[0].lowercased() == "q" { q = Double(pair[1]).map { min(max($0, 0), 1) } ?? 0 }
                }
                weights[name == "x-gzip" ? "gzip" : name] = q
            }
        }
        func weight(_ coding: Coding) -> Double { weights[coding.rawValue] ?? weights["*"] ?? 0 }
        let gzip = weight(.gzip), deflate = weight(.deflate)
        if gzip > 0 && gzip >= deflate { return .gzip }
        if deflate > 0 { return .deflate }
        return nil
    }

    /// Text-like types that shrink when coded; every other type (images, audio, video, archives,
    /// fonts, `application/octet-stream`) is compressed already or unknown.
    static func isCompressible(_ contentType: String) -> Bool {
        let type = MediaType.essence(of: contentType)
        // Most replies of an API: decided without the comparisons below.
        if type == "application/json" { return true }
        if type == "text/event-stream" { return false }
        if type.hasPrefix("text/") { return true }
        if type.hasSuffix("+json") || type.hasSuffix("+xml") { return true }
        return ["application/json", "application/xml", "application/javascript", "application/x-javascript", "application/yaml",
                "application/x-yaml", "application/geo+json", "application/x-ndjson", "application/graphql-response+json",
                "image/svg+xml", "application/wasm"].contains(type)
    }

    static func addVary(to headers: inout HTTPFields) {
        for field in headers where field.name == vary {
            if Self.listContains(field.value, "accept-encoding") || Self.listContains(field.value, "*") { return }
        }
        headers.append(HTTPField(name: vary, value: "Accept-Encoding"))
    }

    /// Whether a reply with these fields may be coded: of a compressible type, not coded already,
    /// and without `Cache-Control: no-transform`. One pass over the fields, each read as it is
    /// (`HTTPFields`' subscript by name joins every field of the name into a new string), since
    /// every reply of the minimum size or more is asked this.
    static func mayCode(_ headers: HTTPFields) -> Bool {
        var compressible = false
        for field in headers {
            switch field.name {
            case .contentEncoding: return false
            case .contentType: if !compressible { compressible = isCompressible(field.value) }
            case .cacheControl: if listContains(field.value, "no-transform") { return false }
            default: continue
            }
        }
        return compressible
    }

    /// Whether the comma-separated `list` (a field's value) has `token` as one of its elements,
    /// ASCII case ignored, blanks around an element ignored and a directive's `=value` with it.
    /// `token` is lowercase.
    static func listContains(_ list: String, _ token: String) -> Bool {
        var list = list, token = token
        return list.withUTF8 { list in
            token.withUTF8 { wanted in
                func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
                var start = 0
                while start <= list.count {
                    var end = start
                    while end < list.count && list[end] != UInt8(ascii: ",") { end += 1 }
                    // The element's name: blanks around it and a directive's `=value` left out.
                    var first = start, last = end
                    if let equals = list[first..<last].firstIndex(of: UInt8(ascii: "=")) { last = equals }
                    while first < last && isBlank(list[first]) { first += 1 }
                    while last > first && isBlank(list[last - 1]) { last -= 1 }
                    if last - first == wanted.count {
                        var same = true
                        for offset in 0..<wanted.count {
                            let byte = list[first + offset]
                            if (byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte) != wanted[offset] { same = false; break }
                        }
                        if same { return true }
                    }
                    start = end + 1
                }
                return false
            }
        }
    }

    /// A body of known length, read into one buffer.
    static func collect(_ body: ResponseBody, capacity: Int) async throws -> ByteBuffer {
        let collector = Collector(capacity: capacity)
        try await body.write(CollectingWriter(collector: collector))
        return collector.buffer.withLock { $0 }
    }

    private final class Collector: Sendable {
        let buffer: Mutex<ByteBuffer>
        init(capacity: Int) { buffer = Mutex(ByteBufferAllocator().buffer(capacity: capacity)) }
    }

    private struct CollectingWriter: ResponseBodyWriter {
        let collector: Collector
        mutating func write(_ buffer: ByteBuffer) async throws {
            var buffer = buffer
            collector.buffer.withLock { _ = $0.writeBuffer(&buffer) }
        }
        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }
}
