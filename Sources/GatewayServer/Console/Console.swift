import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import Mustache
import NIOCore
import NIOFoundationCompat

/// The admin console at `/admin`: pages rendered on the server from the admin API's replies, for
/// administrators signed in with their gateway account.
///
/// Why this way: the pages are mustache templates (hummingbird-project/swift-mustache) filled
/// from the same JSON the admin API gives, plus one small script for what a page cannot do alone
/// (live charts, the API explorer's calls, copying a secret). No framework, no build step, no
/// CDN: the templates and assets are resources of the binary, the console works offline, and
/// every change it makes is an admin API call — with the administrator's own session, through
/// the whole pipeline, audited — so the console can do nothing the API does not allow.
final class Console: Sendable {
    struct Asset: Sendable {
        var body: ByteBuffer
        var contentType: String
        var etag: String
    }

    /// A signed-in administrator's request.
    struct Session: Sendable {
        var token: String
        var csrf: String
        var username: String
        var displayName: String
        var userID: String
        var address: String
    }

    /// Who a console request comes from: a signed-in administrator, or the reply that sends them elsewhere.
    enum SignedIn: Sendable {
        case session(Session)
        case reply(Response)
    }

    let templates: MustacheLibrary
    let assets: [String: Asset]
    let caller: InternalCaller
    let admin: AdminHandle
    /// Whether cookies are `Secure` (TLS, or an https public URL).
    let secure: Bool
    /// The origin of `server.publicURL`, which changes may come from too (behind a proxy).
    let publicOrigin: String?
    static let contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    /// The largest form the console takes (a configuration text).
    static let maxForm = 2 << 20

    init(templates: MustacheLibrary, assets: [String: Asset], caller: InternalCaller, admin: AdminHandle, secure: Bool, publicURL: String?) {
        self.publicOrigin = ConsoleRequest.origin(of: publicURL)
        self.templates = templates
        self.assets = assets
        self.caller = caller
        self.admin = admin
        self.secure = secure
    }

    /// The templates and assets the package carries as resources, read once per process (every
    /// gateway a process starts shares them).
    static func resources() throws -> (templates: MustacheLibrary, assets: [String: Asset]) {
        try bundled.get()
    }

    private static let bundled = Result { try readResources() }

    private static func readResources() throws -> (templates: MustacheLibrary, assets: [String: Asset]) {
        guard let root = Bundle.module.url(forResource: "Resources", withExtension: nil) else {
            throw GatewayStartupError("the console's resources are missing from the build")
        }
        let files = FileManager.default
        var templates: [String: MustacheTemplate] = [:]
        let templateFolder = root.appendingPathComponent("templates")
        for name in try files.contentsOfDirectory(atPath: templateFolder.path) where name.hasSuffix(".mustache") {
            let text = try String(contentsOf: templateFolder.appendingPathComponent(name), encoding: .utf8)
            do {
                templates[String(name.dropLast(".mustache".count))] = try MustacheTemplate(string: text)
            } catch {
                throw GatewayStartupError("console template \(name): \(error)")
            }
        }
        var assets: [String: Asset] = [:]
        let assetFolder = root.appendingPathComponent("assets")
        for name in try files.contentsOfDirectory(atPath: assetFolder.path) {
            let data = try Data(contentsOf: assetFolder.appendingPathComponent(name))
            let type = name.hasSuffix(".css") ? "text/css; charset=utf-8" : name.hasSuffix(".js") ? "text/javascript; charset=utf-8"
                : name.hasSuffix(".svg") ? "image/svg+xml" : "application/octet-stream"
            assets[name] = Asset(body: ByteBuffer(data: data), contentType: type, etag: "\"\(AdminGatewayOperations.version(of: data).prefix(16))\"")
        }
        return (MustacheLibrary(templates: templates), assets)
    }

    // MARK: Replies

    /// The fields every console reply carries.
    static func securityHeaders(_ headers: inout HTTPFields) {
        headers[HTTPField.Name("Content-Security-Policy")!] = contentSecurityPolicy
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
        headers[HTTPField.Name("Cross-Origin-Opener-Policy")!] = "same-origin"
    }

    func page(_ template: String, _ context: [String: Any], status: HTTPResponse.Status = .ok, cookies: [String] = []) -> Response {
        let html = templates.render(context, withTemplate: template) ?? "<!doctype html><title>Console</title><p>Missing page \(template)."
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        Self.securityHeaders(&headers)
        for cookie in cookies { headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    func redirect(_ location: String, cookies: [String] = []) -> Response {
        var headers = HTTPFields()
        headers[.location] = location
        headers[.cacheControl] = "no-store"
        Self.securityHeaders(&headers)
        for cookie in cookies { headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return Response(status: .seeOther, headers: headers)
    }

    /// A redirect after a change, with its message shown once on the next page.
    func redirect(_ location: String, flash: String, ok: Bool) -> Response {
        let value = (ok ? "ok:" : "error:") + String(flash.prefix(400))
        return redirect(location, cookies: [ConsoleRequest.setCookie(ConsoleRequest.flashCookie, ConsoleRequest.escaped(value), secure: secure, maxAge: 60)])
    }

    func errorPage(_ status: HTTPResponse.Status, _ message: String, session: Session?) -> Response {
        var context: [String: Any] = ["title": "\(status.code) \(status.reasonPhrase)", "status": Int(status.code), "message": message,
                                      "version": GatewayVersion.current]
        if let session {
            context["user"] = ["username": session.username, "displayName": session.displayName]
            context["csrf"] = session.csrf
        }
        return page("error", context, status: status)
    }

    // MARK: Calls to the API

    /// One call of the API with the administrator's session, through the whole pipeline.
    func call(_ session: Session, _ method: HTTPRequest.Method, _ target: String, json: JSONValue? = nil) async -> (status: Int, body: JSONValue?, raw: CallOutcome) {
        var fields: HTTPFields = [.authorization: "Bearer \(session.token)"]
        if json != nil { fields[.contentType] = "application/json" }
        let outcome = await caller.call(method, target, fields: fields, body: json?.serialized(), from: session.address)
        let body = outcome.body.readableBytes == 0 ? nil : try? JSONDecoder().decode(JSONValue.self, from: Data(buffer: outcome.body))
        return (outcome.status, body, outcome)
    }

    /// The `detail` of a problem reply, with its field errors.
    static func problemText(_ body: JSONValue?, status: Int) -> String {
        guard case .object(let members)? = body else { return "The gateway answered \(status)." }
        var text = members["detail"]?.stringValue ?? members["title"]?.stringValue ?? "The gateway answered \(status)."
        if case .array(let errors)? = members["errors"] {
            let details = errors.compactMap { error -> String? in
                guard case .object(let fields) = error else { return nil }
                return [fields["pointer"]?.stringValue, fields["detail"]?.stringValue].compactMap { $0 }.joined(separator: " ")
            }
            if !details.isEmpty { text += " (" + details.joined(separator: "; ") + ")" }
        }
        return text
    }

    /// Who holds the console cookie: an administrator's session, or the reply that sends them elsewhere.
    func session(_ request: Request, _ context: GatewayRequestContext) async -> SignedIn {
        guard let token = ConsoleRequest.cookie(ConsoleRequest.sessionCookie, in: request.headers) else {
            return .reply(redirect("/admin/login"))
        }
        var session = Session(token: token, csrf: ConsoleRequest.csrfToken(session: token), username: "", displayName: "", userID: "",
                              address: context.remoteAddress)
        let me = await call(session, .get, "/v1/me")
        guard me.status == 200, case .object(let user)? = me.body else {
            // Expired, ended elsewhere, or the account disabled: sign in again.
            return .reply(redirect("/admin/login", cookies: [ConsoleRequest.setCookie(ConsoleRequest.sessionCookie, nil, secure: secure)]))
        }
        session.username = user["username"]?.stringValue ?? ""
        session.displayName = user["displayName"]?.stringValue ?? session.username
        session.userID = user["id"]?.stringValue ?? ""
        guard user["isAdmin"] == .bool(true) else {
            return .reply(errorPage(.forbidden, "The console is for administrators; \(session.username) is not one.", session: nil))
        }
        return .session(session)
    }

    /// A change's checks: the session's CSRF token in the form (or `X-CSRF-Token`), and a request
    /// from the console's own origin.
    func checkChange(_ request: Request, form: [String: String], session: Session) -> Response? {
        let sent = form["csrf"] ?? request.headers[ConsoleRequest.csrfField] ?? ""
        guard ConfiguredSecrets.constantTimeEqual(sent, session.csrf), ConsoleRequest.isSameOrigin(request.headers, host: request.head.authority, publicOrigin: publicOrigin) else {
            return errorPage(.forbidden, "This change did not come from the console's own page (its CSRF token is missing or wrong). Reload the page and try again.",
                             session: session)
        }
        return nil
    }

    static func readForm(_ request: Request) async throws -> [String: String] {
        var request = request
        let body = try await request.collectBody(upTo: maxForm)
        return ConsoleRequest.form(body)
    }

    /// The common fields of a page.
    func frame(_ session: Session, title: String, current: String, request: Request, extra: [String: Any] = [:]) async -> ([String: Any], [String]) {
        var context: [String: Any] = [
            "title": title, "csrf": session.csrf, "version": GatewayVersion.current,
            "user": ["username": session.username, "displayName": session.displayName],
        ]
        var nav: [[String: Any]] = ConsolePages.sections.map { ["href": $0.href, "label": $0.label, "current": $0.href == current] }
        for view in (try? admin.gateway().pluginViews()) ?? [] {
            let href = "/admin/plugins/\(view.plugin)/\(view.id)"
            nav.append(["href": href, "label": "\(view.plugin): \(view.title)", "current": href == current])
        }
        context["nav"] = nav
        var cookies: [String] = []
        if let flash = ConsoleRequest.cookie(ConsoleRequest.flashCookie, in: request.headers)?.removingPercentEncoding {
            let ok = flash.hasPrefix("ok:")
            context["flash"] = ["ok": ok, "text": String(flash.drop { $0 != ":" }.dropFirst())]
            cookies.append(ConsoleRequest.setCookie(ConsoleRequest.flashCookie, nil, secure: secure))
        }
        context.merge(extra) { $1 }
        return (context, cookies)
    }
}

extension JSONValue {
    /// The value as mustache reads it: objects as dictionaries, arrays as arrays, numbers that are
    /// whole as integers, null as nothing.
    var mustache: Any? {
        switch self {
        case .null: nil
        case .bool(let flag): flag
        case .number(let number): number.rounded() == number && abs(number) < 1e15 ? Int(number) : number
        case .string(let text): text
        case .array(let elements): elements.compactMap(\.mustache)
        case .object(let members): members.compactMapValues(\.mustache)
        }
    }
}
