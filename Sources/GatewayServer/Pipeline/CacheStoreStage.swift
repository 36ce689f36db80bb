import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore

/// The response cache, written: a successful write invalidates the route's tags (its parameters
/// filled in); a 200 to a read gets a strong `ETag` (the handler's own if it set one) and, where the
/// route is cacheable and the reply's own fields allow (a forwarded `no-store`, `private`,
/// `max-age`, `Set-Cookie`, ...), is stored with `Cache-Control: public|private, max-age` and
/// `X-Cache: MISS`; otherwise it goes out with `no-cache` and `X-Cache: BYPASS`. A client that
/// holds the reply (`If-None-Match`) gets a 304. A dialect's reply keeps its own fields unless its
/// route is cacheable; a streamed reply is never stored.
struct CacheStoreStage {
    let cache: any ResponseCacheStore

    static let noCache = HTTPField(name: .cacheControl, value: "no-cache")
    static let cacheMiss = HTTPField(name: CacheLookupStage.cacheField, value: "MISS")
    static let cacheBypass = HTTPField(name: CacheLookupStage.cacheField, value: "BYPASS")

    func run(_ reply: EncodedReply, call: RouteCall) async -> Response {
        var reply = reply
        let mounted = call.mounted
        if reply.status.kind == .successful && !call.isRead && !mounted.invalidatedTags.isEmpty {
            await cache.invalidate(tags: mounted.invalidatedTags.map { $0.resolve(call.parameters) })
        }
        guard case .bytes(let bytes) = reply.body else {
            if call.isRead && !reply.handlerSet.contains(.cacheControl) { reply.put(Self.noCache) }
            return reply.response()
        }
        guard call.isRead, reply.status == .ok, !(reply.isDialect && call.cacheKey == nil) else { return reply.response() }
        let etag: String
        if reply.handlerSet.contains(.eTag), let given = reply.headers[.eTag] {
            etag = given
        } else {
            etag = Validators.strongETag(bytes)
            reply.put(HTTPField(name: .eTag, value: etag))
        }
        if let key = call.cacheKey, let routeTTL = mounted.cache.ttl, let ttl = ReplyStorability.lifetime(of: reply.handlerFields, ttl: routeTTL) {
            let seconds = Int(ttl.components.seconds)
            reply.put(HTTPField(name: .cacheControl, value: mounted.cache.scope == .shared ? "public, max-age=\(seconds)" : "private, max-age=\(seconds)"))
            reply.put(Self.cacheMiss)
            // What each request sets anew is not stored: its length, age, id and rate-limit fields.
            var stored = HTTPFields()
            for field in reply.headers.httpFields
            where field.name != .contentLength && field.name != CacheLookupStage.ageField && field.name != RequestID.field && !call.limitFields.contains(where: { $0.name == field.name }) {
                stored.append(field)
            }
            await cache.store(key, CachedReply(status: .ok, headers: stored, body: Array(buffer: bytes), etag: etag, storedAt: .now, ttl: ttl,
                                               tags: mounted.storedTags.map { $0.resolve(call.parameters) }))
        } else {
            if !reply.handlerSet.contains(.cacheControl) { reply.put(Self.noCache) }
            reply.put(Self.cacheBypass)
        }
        if Validators.matches(ifNoneMatch: call.exchange.request.headers.value(.ifNoneMatch), etag: etag) {
            return Validators.notModified(&reply.headers)
        }
        return reply.response()
    }
}
