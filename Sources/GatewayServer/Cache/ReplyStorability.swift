import Foundation
import HTTPTypes

/// What a reply's own fields allow the response cache, a shared cache in RFC 9111's terms: a
/// handler's reply (a service's, for a forwarded route) is stored only when they allow it, and for
/// no longer than they say.
enum ReplyStorability {
    /// How long a reply with `fields` may be kept when its route allows `ttl`, or nil when it must
    /// not be stored: it sets a cookie (`Set-Cookie` is for the one caller it answered); its
    /// `Cache-Control` says `no-store`, `private` or `no-cache` (the gateway does not revalidate),
    /// or a `max-age`/`s-maxage` that cannot be read or that has passed (`Age` counted); it
    /// varies on `*`; or, without a max-age, its `Expires` cannot be read or has passed. Otherwise
    /// `ttl`, shortened to what `s-maxage` (else `max-age`, else `Expires`) leaves.
    static func lifetime(of fields: HTTPFields, ttl: Duration, now: Date = Date()) -> Duration? {
        if fields.isEmpty { return ttl }
        if fields[.setCookie] != nil { return nil }
        if fields[values: .vary].contains(where: { $0.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == "*" } }) {
            return nil
        }
        var maxAge: Int?
        var sharedMaxAge: Int?
        for value in fields[values: .cacheControl] {
            for directive in value.split(separator: ",") {
                let parts = directive.split(separator: "=", maxSplits: 1)
                let name = (parts.first ?? "").trimmingCharacters(in: .whitespaces).lowercased()
                let argument = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) : nil
                switch name {
                case "no-store", "private", "no-cache":
                    return nil
                case "max-age", "s-maxage":
                    guard let argument, !argument.isEmpty, argument.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
                    let seconds = Int(argument.prefix(10)) ?? Int.max
                    if name == "max-age" { maxAge = min(maxAge ?? .max, seconds) } else { sharedMaxAge = min(sharedMaxAge ?? .max, seconds) }
                default:
                    continue
                }
            }
        }
        var limit: Duration?
        if let seconds = sharedMaxAge ?? maxAge {
            let age = fields[.age].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) } ?? 0
            limit = .seconds(seconds - min(age, seconds))
        } else if let expires = fields[.expires] {
            guard let date = httpDate(expires) else { return nil }
            let reference = fields[.date].flatMap(httpDate) ?? now
            limit = .seconds(max(0, Int(date.timeIntervalSince(reference))))
        }
        guard let limit else { return ttl }
        guard limit > .zero else { return nil }
        return min(limit, ttl)
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form RFC 9110 §5.6.7 has senders use.
    static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text.trimmingCharacters(in: .whitespaces))
    }
}
