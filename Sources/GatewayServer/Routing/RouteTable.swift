import Foundation
import GatewayCore
import HTTPTypes

/// Maps request paths to endpoints by path template, segment by segment.
///
/// Literal segments win over `{parameter}` segments; a trailing slash is ignored (`/v2/feeds/5/`
/// is `/v2/feeds/5`). Resolution tells apart "no such path" (404) and "path exists, method does
/// not" (405, with the allowed methods), and percent-decodes parameter values, refusing invalid
/// encodings with a 400.
///
/// A template may end in a parameter that takes the rest of the path, `{name...}`: it matches
/// what no other route of the place matches, zero or more segments, and its value is the rest as
/// it came (percent-encoded still, without the leading `/`), for a route that forwards it.
///
/// Why not Hummingbird's router: the table is rebuilt from plugins.yaml on every reload and swapped
/// with the rest of the pipeline's state while requests already running keep the old one, where
/// Hummingbird's is built once with the application; and the pipeline needs what its `Router`
/// does not tell (the allowed methods of a path for a 405, a rest parameter kept encoded, the
/// template of the route that matched, for the OpenAPI document and for redacting secret
/// parameters in logs).
struct RouteTable<Endpoint: Sendable>: Sendable {
    /// A node of the segment tree. Nodes live in one array and refer to each other by index, so
    /// that resolving a path reads them in place: walking a tree of objects would count references
    /// to every node on the way, counts that every thread serving requests contends for.
    private struct Node: Sendable {
        var literals: [Substring: Int] = [:]
        var parameter: (name: String, node: Int)?
        /// A `{name...}` parameter taking the rest of the path, and the node of its routes.
        var rest: (name: String, node: Int)?
        /// Few per node, so searched in order.
        var endpoints: [(method: HTTPRequest.Method, endpoint: Endpoint)] = []
        var template: String?

        func endpoint(for method: HTTPRequest.Method) -> Endpoint? {
            for entry in endpoints where entry.method == method { return entry.endpoint }
            return nil
        }
    }

    /// The nodes; the root is the first.
    private var nodes: [Node] = [Node()]
    /// Whether any template ends in `{name...}` (only then are nodes checked for one).
    private var hasRest = false

    /// The literal edges again, flat, for matching a path's bytes without making a substring or
    /// hashing one per segment: node `n`'s edges are `edges[edgeRanges[n]]`, and an edge's text is
    /// `edgeText[edge.start ..< edge.start + edge.count]`. Plain integers only, so reading them
    /// counts no references. Rebuilt after each `add`.
    private struct Edge: Sendable {
        var start: Int
        var count: Int
        var child: Int
    }
    private var edges: [Edge] = []
    private var edgeRanges: [Range<Int>] = [0..<0]
    private var edgeText: [UInt8] = []

    private mutating func flattenEdges() {
        edges.removeAll(keepingCapacity: true)
        edgeRanges.removeAll(keepingCapacity: true)
        edgeText.removeAll(keepingCapacity: true)
        for node in nodes {
            let first = edges.count
            // Shorter texts first: a path's segment is compared by length before its bytes.
            for (text, child) in node.literals.sorted(by: { ($0.key.utf8.count, $0.key) < ($1.key.utf8.count, $1.key) }) {
                edges.append(Edge(start: edgeText.count, count: text.utf8.count, child: child))
                edgeText.append(contentsOf: text.utf8)
            }
            edgeRanges.append(first..<edges.count)
        }
    }

    /// A path template that clashes with one already added.
    struct Conflict: Error, CustomStringConvertible {
        var description: String
    }

    /// Adds `endpoint` for `method` at `template`. Throws when that method and path are taken, or
    /// when two templates name the same segment's parameter differently.
    mutating func add(_ method: HTTPRequest.Method, _ template: String, _ endpoint: Endpoint) throws {
        var node = 0
        let segments = template.split(separator: "/")
        for (index, segment) in segments.enumerated() {
            if segment.hasPrefix("{") && segment.hasSuffix("...}") {
                let name = String(segment.dropFirst().dropLast(4))
                guard index == segments.count - 1 else {
                    throw Conflict(description: "\(template): {\(name)...} takes the rest of the path and must be the last segment")
                }
                if let existing = nodes[node].rest {
                    guard existing.name == name else {
                        throw Conflict(description: "\(template): {\(name)...} clashes with {\(existing.name)...} at the same place")
                    }
                    node = existing.node
                } else {
                    nodes.append(Node())
                    hasRest = true
                    nodes[node].rest = (name, nodes.count - 1)
                    node = nodes.count - 1
                }
            } else if segment.hasPrefix("{") && segment.hasSuffix("}") {
                let name = String(segment.dropFirst().dropLast())
                if let existing = nodes[node].parameter {
                    guard existing.name == name else {
                        throw Conflict(description: "\(template): parameter {\(name)} clashes with {\(existing.name)} at the same place in \(nodes[existing.node].template ?? "another route")")
                    }
                    node = existing.node
                } else {
                    nodes.append(Node())
                    nodes[node].parameter = (name, nodes.count - 1)
                    node = nodes.count - 1
                }
            } else {
                if let child = nodes[node].literals[segment] {
                    node = child
                } else {
                    nodes.append(Node())
                    nodes[node].literals[segment] = nodes.count - 1
                    node = nodes.count - 1
                }
            }
        }
        guard nodes[node].endpoint(for: method) == nil else {
            throw Conflict(description: "\(method.rawValue) \(template) is declared twice")
        }
        nodes[node].endpoints.append((method, endpoint))
        nodes[node].template = template
        flattenEdges()
    }

    /// The outcome of resolving a request.
    enum Resolution {
        case found(Endpoint, parameters: [String: String])
        case methodNotAllowed(allowed: [String])
        case notFound
    }

    func resolve(_ method: HTTPRequest.Method, path: Substring) throws(GatewayError) -> Resolution {
        // The path's bytes, segment by segment, matched against the flat edges. Captured
        // parameters are byte ranges, made into strings only once the route is known.
        var path = path
        var captured: [(name: String, range: Range<Int>)] = []
        var restName: String?
        let found: Int? = path.withUTF8 { bytes in
            edges.withUnsafeBufferPointer { edges in
                edgeRanges.withUnsafeBufferPointer { ranges in
                    edgeText.withUnsafeBufferPointer { text in
                        var node = 0
                        var position = 0
                        // The deepest `{name...}` passed: where a path that leads nowhere else goes.
                        var fallback: (node: Int, name: String, start: Int, captured: Int)?
                        func takeRest() -> Int? {
                            guard let fallback else { return nil }
                            captured.removeSubrange(fallback.captured...)
                            var end = bytes.count
                            while end > fallback.start && bytes[end - 1] == UInt8(ascii: "/") { end -= 1 }
                            captured.append((fallback.name, fallback.start..<end))
                            restName = fallback.name
                            return fallback.node
                        }
                        while position < bytes.count {
                            var end = position
                            while end < bytes.count && bytes[end] != UInt8(ascii: "/") { end += 1 }
                            let start = position
                            position = end + 1
                            let length = end - start
                            if length == 0 { continue }
                            if hasRest, let rest = nodes[node].rest { fallback = (rest.node, rest.name, start, captured.count) }
                            var next = -1
                            for edge in edges[ranges[node]] where edge.count >= length {
                                if edge.count > length { break }
                                if memcmp(text.baseAddress! + edge.start, bytes.baseAddress! + start, length) == 0 {
                                    next = edge.child
                                    break
                                }
                            }
                            if next >= 0 {
                                node = next
                            } else if let parameter = nodes[node].parameter {
                                captured.append((parameter.name, start..<end))
                                node = parameter.node
                            } else {
                                return takeRest()
                            }
                        }
                        if hasRest && nodes[node].endpoints.isEmpty {
                            if let rest = nodes[node].rest { fallback = (rest.node, rest.name, bytes.count, captured.count) }
                            return takeRest() ?? node
                        }
                        return node
                    }
                }
            }
        }
        guard let node = found else { return .notFound }
        return try nodes.withUnsafeBufferPointer { nodes throws(GatewayError) -> Resolution in
            guard !nodes[node].endpoints.isEmpty, nodes[node].template != nil else { return .notFound }
            let endpoint: Endpoint
            if let exact = nodes[node].endpoint(for: method) {
                endpoint = exact
            } else if method == .head, let get = nodes[node].endpoint(for: .get) {
                endpoint = get
            } else {
                var allowed = nodes[node].endpoints.map(\.method.rawValue)
                if nodes[node].endpoint(for: .get) != nil { allowed.append("HEAD") }
                return .methodNotAllowed(allowed: allowed.sorted())
            }
            var parameters: [String: String] = [:]
            for (name, range) in captured {
                let utf8 = path.utf8
                let raw = Substring(utf8[utf8.index(utf8.startIndex, offsetBy: range.lowerBound) ..< utf8.index(utf8.startIndex, offsetBy: range.upperBound)])
                if name == restName {
                    parameters[name] = String(raw)
                    continue
                }
                guard let value = PercentDecoding.decode(raw) else {
                    throw GatewayError.badRequest("The path segment '\(raw.prefix(80))' is not validly percent-encoded.")
                }
                parameters[name] = value
            }
            return .found(endpoint, parameters: parameters)
        }
    }

    /// Every route, for `gateway routes`.
    func allRoutes() -> [(method: HTTPRequest.Method, template: String, endpoint: Endpoint)] {
        var result: [(HTTPRequest.Method, String, Endpoint)] = []
        for node in nodes {
            guard let template = node.template else { continue }
            for (method, endpoint) in node.endpoints { result.append((method, template, endpoint)) }
        }
        return result.sorted { ($0.1, $0.0.rawValue) < ($1.1, $1.0.rawValue) }
    }
}

/// Percent-decoding of URL parts (RFC 3986) into UTF-8 text.
enum PercentDecoding {
    /// Decodes `%XX` escapes (and `+` as space when `plusIsSpace`); nil when an escape is malformed
    /// or the bytes are not UTF-8 (a lone surrogate, say).
    static func decode(_ text: Substring, plusIsSpace: Bool = false) -> String? {
        if let decoded = text.utf8.withContiguousStorageIfAvailable({ decode(UnsafeBufferPointer(rebasing: $0[...]), plusIsSpace: plusIsSpace) }) {
            return decoded
        }
        var copy = String(text)
        return copy.withUTF8 { decode($0, plusIsSpace: plusIsSpace) }
    }

    /// `decode(_:plusIsSpace:)` over UTF-8 bytes (the bytes of a string, so valid UTF-8 themselves).
    static func decode(_ text: UnsafeBufferPointer<UInt8>, plusIsSpace: Bool) -> String? {
        var escaped = false
        for byte in text where byte == UInt8(ascii: "%") || (plusIsSpace && byte == UInt8(ascii: "+")) {
            escaped = true
            break
        }
        // Bytes cut from a string at ASCII delimiters are valid UTF-8 already.
        if !escaped { return String(decoding: text, as: UTF8.self) }
        // Decoded bytes are never more than the encoded ones: decode into a temporary buffer and
        // validate it as UTF-8 in place, without an array per value.
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: text.count) { bytes -> String? in
            var length = 0
            var index = 0
            while index < text.count {
                let byte = text[index]
                switch byte {
                case UInt8(ascii: "%"):
                    guard index + 2 < text.count, let high = hexValue(text[index + 1]), let low = hexValue(text[index + 2]) else { return nil }
                    bytes[length] = high << 4 | low
                    index += 3
                case UInt8(ascii: "+") where plusIsSpace:
                    bytes[length] = UInt8(ascii: " ")
                    index += 1
                default:
                    bytes[length] = byte
                    index += 1
                }
                length += 1
            }
            return String(validating: UnsafeBufferPointer(rebasing: bytes[..<length]), as: UTF8.self)
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Splits and decodes a query string (`a=1&b=x%20y`); throws 400 naming the first bad pair.
    static func queryParameters(_ query: Substring) throws(GatewayError) -> [(name: String, value: String)] {
        if query.isEmpty { return [] }
        if let result = query.utf8.withContiguousStorageIfAvailable({ queryParameters(UnsafeBufferPointer(rebasing: $0[...])) }) {
            return try result.get()
        }
        var copy = String(query)
        return try copy.withUTF8 { queryParameters($0) }.get()
    }

    /// The pairs of a query string's bytes, split at `&` and `=` without index arithmetic on strings.
    private static func queryParameters(_ bytes: UnsafeBufferPointer<UInt8>) -> Result<[(name: String, value: String)], GatewayError> {
        var result: [(name: String, value: String)] = []
        var separators = 0
        for byte in bytes where byte == UInt8(ascii: "&") { separators += 1 }
        result.reserveCapacity(separators + 1)
        var start = 0
        while start < bytes.count {
            var end = start
            var equals = -1
            while end < bytes.count && bytes[end] != UInt8(ascii: "&") {
                if equals < 0 && bytes[end] == UInt8(ascii: "=") { equals = end }
                end += 1
            }
            defer { start = end + 1 }
            if end == start { continue }
            let nameEnd = equals < 0 ? end : equals
            guard let name = decode(UnsafeBufferPointer(rebasing: bytes[start..<nameEnd]), plusIsSpace: true),
                  let value = equals < 0 ? "" : decode(UnsafeBufferPointer(rebasing: bytes[(equals + 1)..<end]), plusIsSpace: true) else {
                let pair = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
                return .failure(GatewayError.badRequest("The query parameter '\(pair.prefix(80))' is not validly percent-encoded."))
            }
            result.append((name, value))
        }
        return .success(result)
    }
}

/// Percent-encoding of a URL's query components (RFC 3986: everything but the unreserved characters).
enum PercentEncoding {
    static func component(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let digits: [Character] = Array("0123456789ABCDEF")
                result.append("%")
                result.append(digits[Int(byte >> 4)])
                result.append(digits[Int(byte & 0xF)])
            }
        }
        return result
    }
}
