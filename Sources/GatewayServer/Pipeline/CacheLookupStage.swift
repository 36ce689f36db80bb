import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore

/// The response cache, read: for a GET or HEAD of a cacheable route (and a caller the plugin's
/// `cacheAdmits` lets use it), the reply's key, and a fresh stored reply served at once with
/// `X-Cache: HIT` and its `Age` — or a 304 when the client holds it (`If-None-Match`). The
/// request's `Cache-Control` is obeyed: `no-store` bypasses the cache, `no-cache` skips the
/// lookup, `max-age` bounds the age it accepts.
struct CacheLookupStage {
    let cache: any ResponseCacheStore

    static let cacheField = HTTPField.Name("X-Cache")!
    static let ageField = HTTPField.Name("Age")!

    func run(_ call: inout RouteCall) async -> Response? {
        let mounted = call.mounted
        guard call.isRead, mounted.cache.isCacheable, !call.cacheControl.contains("no-store"), await mounted.cacheAdmits(call.principal) else {
            return nil
        }
        let key = Self.key(call)
        call.cacheKey = key
        guard !call.cacheControl.contains("no-cache"), let hit = await GatewayTracing.span("cache lookup", { await cache.lookup(key) }) else {
            return nil
        }
        let age = ContinuousClock.now - hit.storedAt
        guard age < hit.ttl, Self.maxAge(call.cacheControl).map({ age <= .seconds($0) }) ?? true else { return nil }
        // A stored reply has no rate-limit or Age fields and no name twice, so fields are appended
        // without a search; only its X-Cache (MISS when stored) is replaced.
        var headers = FieldList(capacity: hit.headers.count + call.limitFields.count + 4)
        headers.append(HTTPField(name: .contentLength, value: String(hit.body.count)))
        for field in hit.headers { headers.append(field) }
        headers.append(contentsOf: call.limitFields)
        headers[Self.cacheField] = "HIT"
        headers.append(HTTPField(name: Self.ageField, value: String(age.components.seconds)))
        if Validators.matches(ifNoneMatch: call.exchange.request.headers.value(.ifNoneMatch), etag: hit.etag) {
            return Validators.notModified(&headers)
        }
        return Response(status: hit.status, headers: headers.httpFields, body: .init(byteBuffer: ByteBuffer(bytes: hit.body)))
    }

    /// The route, the path, the query (in a fixed order: the order of parameters does not change
    /// the answer, so it must not split the cache), the fields the policy varies on, and the
    /// principal for a per-principal cache.
    static func key(_ call: RouteCall) -> String {
        let mounted = call.mounted
        var key = mounted.name
        key += "|" + call.exchange.path
        for pair in call.query.sorted(by: { ($0.name, $0.value) < ($1.name, $1.value) }) { key += "|\(pair.name)=\(pair.value)" }
        for header in mounted.cache.vary {
            if let field = HTTPField.Name(header) { key += "|\(header):\(call.exchange.request.headers[field] ?? "")" }
        }
        if mounted.cache.scope == .perPrincipal { key += "|@" + call.principal.limitKey }
        return key
    }

    /// The `max-age` of a request's `Cache-Control`.
    static func maxAge(_ cacheControl: String) -> Int? {
        guard let range = cacheControl.range(of: "max-age=") else { return nil }
        return Int(cacheControl[range.upperBound...].prefix { $0.isNumber })
    }
}

/// Entity tags and conditional requests (RFC 9110 §8.8.3, §13.1.2).
enum Validators {
    /// A strong validator derived from the body: the top 52 bits of its XXH64, stable across
    /// instances and restarts (thirteen hex digits and the quotes: a string held inline).
    static func strongETag(_ bytes: ByteBuffer) -> String {
        Hex.digits(bytes.withUnsafeReadableBytes { XXHash64.hash($0) } >> 12, count: 13, quoted: true)
    }

    /// Whether `If-None-Match` names `etag` (weakly compared) or is `*`.
    static func matches(ifNoneMatch header: String?, etag: String) -> Bool {
        guard let header else { return false }
        if header.trimmingCharacters(in: .whitespaces) == "*" { return true }
        let bare = etag.hasPrefix("W/") ? String(etag.dropFirst(2)) : etag
        return header.split(separator: ",").contains { candidate in
            var value = candidate.trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("W/") { value.removeFirst(2) }
            return value == bare
        }
    }

    /// A 304 for a reply whose fields are `headers`: without a body, so without its length and type.
    static func notModified(_ headers: inout FieldList) -> Response {
        headers[.contentLength] = nil
        headers[.contentType] = nil
        return Response(status: .notModified, headers: headers.httpFields, body: .init())
    }
}
