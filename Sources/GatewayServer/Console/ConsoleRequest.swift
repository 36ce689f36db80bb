import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The console's cookies, forms and CSRF tokens.
///
/// The session cookie holds a gateway session token (made by `POST /v1/auth/login`) and reaches
/// only `/admin`: `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends
/// it), `Secure` when the gateway serves TLS or its public URL is https. The API under /v1 never
/// takes it: the console calls the API in process with the token as `Authorization`, after
/// checking a change's CSRF token.
enum ConsoleRequest {
    static let sessionCookie = "gateway_console"
    /// Before sign-in: the login form's CSRF token, a random value the form repeats.
    static let loginCookie = "gateway_console_login"
    /// The message of the last change, shown once on the page it led to.
    static let flashCookie = "gateway_console_flash"
    static let csrfField = HTTPField.Name("X-CSRF-Token")!

    /// The value of cookie `name`.
    static func cookie(_ name: String, in headers: HTTPFields) -> String? {
        for field in headers[values: .cookie] {
            for pair in field.split(separator: ";") {
                let trimmed = pair.trimmingCharacters(in: .whitespaces)
                guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals] == name else { continue }
                let value = String(trimmed[trimmed.index(after: equals)...])
                return value.isEmpty ? nil : value
            }
        }
        return nil
    }

    /// A `Set-Cookie` value for the console's path; nil `value` deletes the cookie.
    static func setCookie(_ name: String, _ value: String?, secure: Bool, maxAge: Int? = nil) -> String {
        var parts = ["\(name)=\(value ?? "")", "Path=/admin", "HttpOnly", "SameSite=Strict"]
        if value == nil { parts.append("Max-Age=0") } else if let maxAge { parts.append("Max-Age=\(maxAge)") }
        if secure { parts.append("Secure") }
        return parts.joined(separator: "; ")
    }

    /// The CSRF token of a session: derived from its token, which no other site knows, so it
    /// needs no storage and holds on every instance; the token cannot be found from it.
    static func csrfToken(session: String) -> String {
        AccountStore.sha256("gateway-console-csrf:\(session)")
    }

    /// The origin of a public URL (`https://gw.example.com`), without its path.
    static func origin(of url: String?) -> String? {
        guard let url, let components = URLComponents(string: url), let scheme = components.scheme, let host = components.host else { return nil }
        return "\(scheme)://\(host)" + (components.port.map { ":\($0)" } ?? "")
    }

    /// Whether a change comes from the console's own pages: its `Origin` (when the browser sends
    /// one) is the gateway's own, and `Sec-Fetch-Site`, when sent, is not another site.
    /// `publicOrigin`: the origin of `server.publicURL` (a proxy in front may change `Host`).
    static func isSameOrigin(_ headers: HTTPFields, host: String?, publicOrigin: String? = nil) -> Bool {
        if let site = headers[HTTPField.Name("Sec-Fetch-Site")!], site != "same-origin", site != "none" { return false }
        guard let origin = headers[HTTPField.Name("Origin")!] else { return true }
        if let publicOrigin, origin.lowercased() == publicOrigin.lowercased() { return true }
        guard origin != "null", let host, let url = URL(string: origin), let originHost = url.host else { return false }
        let originAuthority = url.port.map { "\(originHost):\($0)" } ?? originHost
        return originAuthority.lowercased() == host.lowercased()
    }

    /// The fields of an `application/x-www-form-urlencoded` body (a name given twice: the last).
    static func form(_ body: ByteBuffer) -> [String: String] {
        form(String(buffer: body))
    }

    /// The fields of `name=value&…` text, percent-decoded (`+` a space).
    static func form(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String {
                String(part).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
            guard let name = parts.first else { continue }
            fields[decode(name)] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return fields
    }

    /// The query's parameters.
    static func query(_ request: Request) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in request.uri.queryParameters { fields[String(name)] = String(value) }
        return fields
    }

    /// `text` for a query string or a path segment.
    static func escaped(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }
}
