import GatewayCore
import HTTPTypes
import Hummingbird
import Synchronization

/// One request on its way through the pipeline, as the first stage sees it: the request (its
/// forwarding fields dropped unless a trusted proxy sent them), the client's address, the request
/// id and when it arrived. Made once per request; the later stages read it.
struct Exchange {
    let request: Request
    let context: GatewayRequestContext
    /// `X-Request-Id`: the client's when it sent a usable one, else a new one (``RequestID``).
    let requestID: String
    /// Read once: each read of a request's method copies its pseudo-header fields.
    let method: HTTPRequest.Method
    let start: ContinuousClock.Instant

    /// The client behind trusted proxies; forwarding fields from anyone else are dropped.
    init(_ request: Request, context: GatewayRequestContext, proxies: ProxyTrust) {
        start = .now
        var context = context
        var fields = request.headers
        context.remoteAddress = proxies.client(peer: context.remoteAddress, headers: &fields)
        if fields.count != request.headers.count {
            var head = request.head
            head.headerFields = fields
            self.request = Request(head: head, body: request.body)
        } else {
            self.request = request
        }
        self.context = context
        requestID = RequestID.of(request.headers)
        method = request.method
    }

    /// The request's path, without its query.
    var path: String { request.uri.path }
    /// The client's address (no port).
    var client: String { context.remoteAddress }

    /// The request's query: what follows the first `?` of its target, up to a `#`, as it came.
    /// (A byte search over the target in place was measured against this on `Benchmarks/run`,
    /// 2-core machine, 2026-11-29: pipeline/hello 0.545 and 0.598 with it, 0.647 and 0.575
    /// without — no gain, so Hummingbird's parse is used.)
    static func query(of request: Request) -> Substring {
        request.uri.query.map { Substring($0) } ?? ""
    }
}

/// Request ids (`X-Request-Id`): the client's own when it is 1–128 visible ASCII characters,
/// else a random prefix for this process and a counter, so that ids of several instances do not
/// collide and none costs a system call.
enum RequestID {
    static let field = HTTPField.Name("X-Request-Id")!

    private static let prefix: UInt64 = UInt64.random(in: 1...0x0FFF_FFFF) << 32
    private static let counter = Atomic<UInt64>(0)

    static func of(_ headers: HTTPFields) -> String {
        if let given = headers.value(field), !given.isEmpty, given.utf8.count <= 128,
           given.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) {
            return given
        }
        // Fifteen hex digits (60 bits): a string of up to 15 bytes is held inline.
        return Hex.digits(prefix | (counter.wrappingAdd(1, ordering: .relaxed).oldValue & 0xFFFF_FFFF), count: 15)
    }
}

/// Lower-case hexadecimal text of a number.
enum Hex {
    /// The low `count` hex digits of `value` (at most 16), optionally between double quotes.
    static func digits(_ value: UInt64, count: Int, quoted: Bool = false) -> String {
        let digits: StaticString = "0123456789abcdef"
        let length = quoted ? count + 2 : count
        return String(unsafeUninitializedCapacity: length) { buffer in
            var position = 0
            if quoted { buffer[0] = UInt8(ascii: "\""); position = 1 }
            for shift in stride(from: 4 * (count - 1), through: 0, by: -4) {
                buffer[position] = digits.utf8Start[Int((value >> UInt64(shift)) & 0xF)]
                position += 1
            }
            if quoted { buffer[position] = UInt8(ascii: "\""); position += 1 }
            return position
        }
    }
}

extension HTTPFields {
    /// The value of the field named `name`, as the subscript gives it (the values of several such
    /// fields joined), but one field's value is returned as it is, in one pass and without the
    /// subscript's lazy joining: the pipeline reads a handful of request fields per request.
    func value(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            if found != nil { return self[name] }
            found = field.value
        }
        return found
    }
}
