import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore
import NIOFoundationCompat

/// The console's pages and the changes they make, each a call of the admin API.
enum ConsolePages {
    /// The console's own sections, in its navigation's order (the plugins' views follow).
    static let sections: [(href: String, label: String)] = [
        ("/admin", "Overview"), ("/admin/traffic", "Live traffic"), ("/admin/operations", "Operations"), ("/admin/users", "Users"),
        ("/admin/keys", "API keys"), ("/admin/providers", "Identity providers"), ("/admin/cache", "Cache"),
        ("/admin/configuration", "Configuration"), ("/admin/audit", "Audit log"),
    ]

    /// An ISO 8601 time as the pages show it: `2026-11-29 12:31:05 UTC`.
    static func time(_ value: JSONValue?) -> String {
        guard let text = value?.stringValue, text.count >= 19 else { return "" }
        return text.prefix(10) + " " + text.dropFirst(11).prefix(8) + " UTC"
    }

    static func bytes(_ count: Int) -> String {
        ByteCountFormatter.string(fromByteCount: Int64(count), countStyle: .binary)
    }

    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds)
        let (days, hours, minutes) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60)
        if days > 0 { return "\(days) d \(hours) h" }
        if hours > 0 { return "\(hours) h \(minutes) min" }
        return minutes > 0 ? "\(minutes) min \(total % 60) s" : "\(total) s"
    }

    /// The `items` of a page reply.
    static func items(_ body: JSONValue?) -> [JSONValue] {
        if case .object(let members)? = body, case .array(let items)? = members["items"] { return items }
        return []
    }

    static func members(_ value: JSONValue) -> [String: JSONValue] {
        if case .object(let members) = value { return members }
        return [:]
    }

    static func text(_ value: JSONValue?) -> String {
        switch value {
        case .string(let text)?: text
        // Whole numbers as integers while they fit exactly; others (a sensor's 1e20) as written.
        case .number(let number)?: number.rounded() == number && abs(number) < 1e15 ? String(Int(number)) : String(number)
        case .bool(let flag)?: flag ? "yes" : "no"
        default: ""
        }
    }

    /// A key as the key tables show it.
    static func key(_ value: JSONValue, owner: String) -> [String: Any] {
        let key = members(value)
        let scopes = key["scopes"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let addresses = key["allowedAddresses"]?.arrayValue?.compactMap(\.stringValue) ?? []
        return ["id": text(key["id"]), "prefix": text(key["prefix"]), "label": text(key["label"]), "owner": owner,
                "scopes": scopes.joined(separator: " "), "allowedAddresses": addresses.joined(separator: ", "), "rate": text(key["rate"]),
                "group": text(key["consumerGroup"]), "expiresAt": time(key["expiresAt"]), "createdAt": time(key["createdAt"]),
                "revoked": key["revoked"] == .bool(true)]
    }

    static func user(_ value: JSONValue) -> [String: Any] {
        let user = members(value)
        return ["username": text(user["username"]), "usernamePath": ConsoleRequest.escaped(text(user["username"])), "displayName": text(user["displayName"]),
                "email": members(user["profile"] ?? .null)["email"]?.stringValue ?? "", "isAdmin": user["isAdmin"] == .bool(true),
                "disabled": user["disabled"] == .bool(true), "consumerGroup": text(user["consumerGroup"]), "createdAt": time(user["createdAt"]),
                "emailVerified": user["emailVerified"] == .bool(true), "id": text(user["id"])]
    }

    /// Words of a field separated by spaces or commas.
    static func words(_ text: String?) -> [String] {
        (text ?? "").split { $0 == " " || $0 == "," || $0 == "\n" || $0 == "\t" }.map(String.init)
    }
}

extension Console {
    typealias Handler = @Sendable (Request, GatewayRequestContext) async throws -> Response

    /// The console's endpoints: its pages (GET), its changes (POST) and its assets.
    func endpoints(metrics: GatewayMetrics) -> [(method: HTTPRequest.Method, path: String, endpoint: GatewayEndpoint)] {
        func endpoint(_ method: HTTPRequest.Method, _ path: String, _ name: String, _ handler: @escaping Handler) -> (HTTPRequest.Method, String, GatewayEndpoint) {
            (method, path, GatewayEndpoint(name: "console.\(name)", summary: "The admin console", metrics: metrics, handler: handler))
        }
        /// A page for a signed-in administrator.
        func pageRoute(_ path: String, _ name: String, _ render: @escaping @Sendable (Request, Session) async throws -> Response) -> (HTTPRequest.Method, String, GatewayEndpoint) {
            endpoint(.get, path, name) { [self] request, context in
                switch await session(request, context) {
                case .reply(let response): return response
                case .session(let session): return try await render(request, session)
                }
            }
        }
        /// A change by a signed-in administrator: its form read, its CSRF token and origin checked.
        func changeRoute(_ path: String, _ name: String, _ act: @escaping @Sendable (Request, Session, [String: String]) async throws -> Response) -> (HTTPRequest.Method, String, GatewayEndpoint) {
            endpoint(.post, path, name) { [self] request, context in
                switch await session(request, context) {
                case .reply(let response): return response
                case .session(let session):
                    let form = (request.headers[.contentType] ?? "").hasPrefix("application/json") ? [:] : try await Self.readForm(request)
                    if let refusal = checkChange(request, form: form, session: session) { return refusal }
                    return try await act(request, session, form)
                }
            }
        }
        return [
            endpoint(.get, "/admin/assets/{file}", "asset") { [self] request, _ in asset(request) },
            endpoint(.get, "/admin/login", "login") { [self] request, context in
                if case .session = await session(request, context) { return redirect("/admin") }
                return loginPage(error: nil, username: nil)
            },
            endpoint(.post, "/admin/login", "signIn") { [self] request, context in try await signIn(request, context) },
            changeRoute("/admin/logout", "signOut") { [self] _, session, _ in
                _ = await call(session, .post, "/v1/auth/logout")
                return redirect("/admin/login", cookies: [ConsoleRequest.setCookie(ConsoleRequest.sessionCookie, nil, secure: secure)])
            },
            pageRoute("/admin", "overview") { [self] request, session in try await overview(request, session) },
            pageRoute("/admin/traffic", "traffic") { [self] request, session in
                let plugins = ConsolePages.items(await call(session, .get, "/v1/admin/plugins").body)
                    .map { ["id": ConsolePages.text(ConsolePages.members($0)["id"])] } + [["id": "gateway"]]
                let (context, cookies) = await frame(session, title: "Live traffic", current: "/admin/traffic", request: request, extra: ["plugins": plugins])
                return page("traffic", context, cookies: cookies)
            },
            pageRoute("/admin/live", "live") { [self] _, session in
                var headers = HTTPFields()
                headers[.contentType] = "text/event-stream"
                headers[.cacheControl] = "no-store"
                Self.securityHeaders(&headers)
                // For an hour at most (the page's EventSource then connects again, signed in or not),
                // and only while the session stays an administrator's.
                let stream = AdminGatewayOperations.liveStream(admin: admin, clock: SystemClock(), seconds: 3600) { [self] in
                    let me = await call(session, .get, "/v1/me")
                    return me.status == 200 && ConsolePages.members(me.body ?? .null)["isAdmin"] == .bool(true)
                }
                return Response(status: .ok, headers: headers, body: ResponseBody(asyncSequence: stream))
            },
            pageRoute("/admin/operations", "operations") { [self] request, session in try await operations(request, session) },
            endpoint(.post, "/admin/operations/call", "call") { [self] request, context in try await explorerCall(request, context) },
            pageRoute("/admin/users", "users") { [self] request, session in
                let query = ConsoleRequest.query(request)
                var target = "/v1/admin/users?limit=50"
                if let q = query["q"], !q.isEmpty { target += "&q=" + ConsoleRequest.escaped(q) }
                if let cursor = query["cursor"], !cursor.isEmpty { target += "&cursor=" + ConsoleRequest.escaped(cursor) }
                let reply = await call(session, .get, target)
                guard reply.status == 200 else { return errorPage(.badRequest, Self.problemText(reply.body, status: reply.status), session: session) }
                let next = ConsolePages.members(reply.body ?? .null)["nextCursor"]?.stringValue
                var extra: [String: Any] = ["q": query["q"] ?? "", "qEscaped": ConsoleRequest.escaped(query["q"] ?? ""),
                                            "users": ConsolePages.items(reply.body).map(ConsolePages.user)]
                if let next { extra["next"] = ConsoleRequest.escaped(next) }
                let (context, cookies) = await frame(session, title: "Users", current: "/admin/users", request: request, extra: extra)
                return page("users", context, cookies: cookies)
            },
            changeRoute("/admin/users", "createUser") { [self] _, session, form in
                var body: [String: JSONValue] = ["username": .string(form["username"] ?? ""), "password": .string(form["password"] ?? ""),
                                                 "admin": .bool(form["admin"] == "on")]
                for field in ["displayName", "email", "group"] { if let value = form[field], !value.isEmpty { body[field] = .string(value) } }
                let reply = await call(session, .post, "/v1/admin/users", json: .object(body))
                guard reply.status == 201 || reply.status == 200 else {
                    return redirect("/admin/users", flash: "The user was not created: " + Self.problemText(reply.body, status: reply.status), ok: false)
                }
                let name = form["username"] ?? ""
                return redirect("/admin/users/" + ConsoleRequest.escaped(name), flash: "User \(name) created.", ok: true)
            },
            pageRoute("/admin/users/{username}", "user") { [self] request, session in try await userPage(request, session) },
            changeRoute("/admin/users/{username}", "changeUser") { [self] request, session, form in try await changeUser(request, session, form) },
            pageRoute("/admin/keys", "keys") { [self] request, session in
                try await keysPage(request, session, user: ConsoleRequest.query(request)["user"], created: nil)
            },
            changeRoute("/admin/keys", "createKey") { [self] request, session, form in try await createKey(request, session, form) },
            changeRoute("/admin/keys/{id}/revoke", "revokeKey") { [self] request, session, form in
                let id = request.uri.path.split(separator: "/").dropLast().last.map(String.init) ?? ""
                let reply = await call(session, .delete, "/v1/admin/keys/" + ConsoleRequest.escaped(id.removingPercentEncoding ?? id))
                let back = form["back"].flatMap { $0.hasPrefix("/admin/") && !$0.hasPrefix("//") ? $0 : nil } ?? "/admin/keys"
                guard reply.status == 204 else { return redirect(back, flash: "The key was not revoked: " + Self.problemText(reply.body, status: reply.status), ok: false) }
                return redirect(back, flash: "Key revoked: it is refused from its next request.", ok: true)
            },
            pageRoute("/admin/providers", "providers") { [self] request, session in
                let providers = ConsolePages.items(await call(session, .get, "/v1/admin/providers").body).map { value -> [String: Any] in
                    let provider = ConsolePages.members(value)
                    return ["name": ConsolePages.text(provider["name"]), "type": ConsolePages.text(provider["type"]),
                            "issuer": ConsolePages.text(provider["issuer"]), "status": ConsolePages.text(provider["status"]),
                            "reason": ConsolePages.text(provider["reason"]), "keys": ConsolePages.text(provider["keys"])]
                }
                let (context, cookies) = await frame(session, title: "Identity providers", current: "/admin/providers", request: request,
                                                     extra: ["providers": providers])
                return page("providers", context, cookies: cookies)
            },
            pageRoute("/admin/cache", "cache") { [self] request, session in
                let stats = ConsolePages.members(await call(session, .get, "/v1/admin/cache").body ?? .null)
                func count(_ name: String) -> Int { Int(stats[name]?.numberValue ?? 0) }
                let hitRate = stats["hitRate"]?.numberValue.map { String(format: "%.1f %%", $0 * 100) } ?? "no lookups yet"
                let figures: [String: Any] = [
                    "entries": String(count("entries")), "bytes": ConsolePages.bytes(count("bytes")), "maxEntries": String(count("maxEntries")),
                    "maxBytes": ConsolePages.bytes(count("maxBytes")), "hits": String(count("hits")), "misses": String(count("misses")),
                    "evictions": String(count("evictions")), "hitRate": hitRate,
                ]
                let (context, cookies) = await frame(session, title: "Cache", current: "/admin/cache", request: request, extra: ["stats": figures])
                return page("cache", context, cookies: cookies)
            },
            changeRoute("/admin/cache/purge", "purge") { [self] _, session, form in
                let body: JSONValue = form["scope"] == "all" ? .object(["all": .bool(true)])
                    : .object(["tags": .array(ConsolePages.words(form["tags"]).map(JSONValue.string))])
                let reply = await call(session, .post, "/v1/admin/cache/purge", json: body)
                guard reply.status == 200 else { return redirect("/admin/cache", flash: "Nothing was purged: " + Self.problemText(reply.body, status: reply.status), ok: false) }
                return redirect("/admin/cache", flash: form["scope"] == "all" ? "The whole cache was purged." : "Purged: \(ConsolePages.words(form["tags"]).joined(separator: ", ")).", ok: true)
            },
            pageRoute("/admin/configuration", "configuration") { [self] request, session in try await configurationPage(request, session) },
            changeRoute("/admin/configuration", "editConfiguration") { [self] request, session, form in try await editConfiguration(request, session, form) },
            pageRoute("/admin/audit", "audit") { [self] request, session in
                var target = "/v1/admin/audit?limit=50"
                if let cursor = ConsoleRequest.query(request)["cursor"], !cursor.isEmpty { target += "&cursor=" + ConsoleRequest.escaped(cursor) }
                let reply = await call(session, .get, target)
                guard reply.status == 200 else { return errorPage(.badRequest, Self.problemText(reply.body, status: reply.status), session: session) }
                let entries = ConsolePages.items(reply.body).map { value -> [String: Any] in
                    let entry = ConsolePages.members(value)
                    let detail = entry["detail"].map { String(buffer: $0.serialized()) } ?? ""
                    return ["at": ConsolePages.time(entry["at"]), "actor": ConsolePages.text(entry["actor"]), "actorName": ConsolePages.text(entry["actorName"]),
                            "credential": ConsolePages.text(entry["credential"]), "address": ConsolePages.text(entry["address"]),
                            "action": ConsolePages.text(entry["action"]), "target": ConsolePages.text(entry["target"]), "detail": detail == "{}" ? "" : detail]
                }
                let next = ConsolePages.members(reply.body ?? .null)["nextCursor"]?.stringValue
                var extra: [String: Any] = ["entries": entries]
                if let next { extra["next"] = ConsoleRequest.escaped(next) }
                let (context, cookies) = await frame(session, title: "Audit log", current: "/admin/audit", request: request, extra: extra)
                return page("audit", context, cookies: cookies)
            },
            pageRoute("/admin/plugins/{plugin}/{view}", "pluginView") { [self] request, session in try await pluginPage(request, session, message: nil) },
            changeRoute("/admin/plugins/{plugin}/{view}", "pluginAction") { [self] request, session, form in try await pluginAction(request, session, form) },
        ]
    }

    // MARK: Pages

    func asset(_ request: Request) -> Response {
        let name = request.uri.path.split(separator: "/").last.map(String.init) ?? ""
        var headers = HTTPFields()
        Self.securityHeaders(&headers)
        guard let asset = assets[name] else { return Response(status: .notFound, headers: headers) }
        headers[.eTag] = asset.etag
        headers[.cacheControl] = "no-cache"
        if request.headers[.ifNoneMatch] == asset.etag { return Response(status: .notModified, headers: headers) }
        headers[.contentType] = asset.contentType
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: asset.body))
    }

    func loginPage(error: String?, username: String?, status: HTTPResponse.Status = .ok) -> Response {
        let token = AccountStore.randomToken(bytes: 16)
        var context: [String: Any] = ["title": "Sign in", "csrf": token, "version": GatewayVersion.current, "providers": [Any]()]
        if let error { context["error"] = error }
        if let username { context["username"] = username }
        return page("login", context, status: status, cookies: [ConsoleRequest.setCookie(ConsoleRequest.loginCookie, token, secure: secure, maxAge: 3600)])
    }

    /// The sign-in form: the gateway's own login (its throttle included), then only an administrator's session is kept.
    func signIn(_ request: Request, _ context: GatewayRequestContext) async throws -> Response {
        let form = try await Self.readForm(request)
        guard let expected = ConsoleRequest.cookie(ConsoleRequest.loginCookie, in: request.headers), let sent = form["csrf"],
              ConfiguredSecrets.constantTimeEqual(expected, sent), ConsoleRequest.isSameOrigin(request.headers, host: request.head.authority, publicOrigin: publicOrigin)
        else {
            return loginPage(error: "The sign-in form expired or did not come from this page. Try again.", username: form["username"], status: .forbidden)
        }
        let username = form["username"] ?? ""
        let body: JSONValue = .object(["username": .string(username), "password": .string(form["password"] ?? "")])
        let outcome = await caller.call(.post, "/v1/auth/login", fields: [.contentType: "application/json"], body: body.serialized(), from: context.remoteAddress)
        let reply = try? JSONDecoder().decode(JSONValue.self, from: Data(buffer: outcome.body))
        guard outcome.status == 200, let token = ConsolePages.members(reply ?? .null)["token"]?.stringValue else {
            let message = outcome.status == 401 ? "The username or password is wrong." : Self.problemText(reply, status: outcome.status)
            return loginPage(error: message, username: username, status: HTTPResponse.Status(code: outcome.status == 200 ? 500 : outcome.status))
        }
        let session = Session(token: token, csrf: ConsoleRequest.csrfToken(session: token), username: username, displayName: username, userID: "",
                              address: context.remoteAddress)
        let me = await call(session, .get, "/v1/me")
        guard ConsolePages.members(me.body ?? .null)["isAdmin"] == .bool(true) else {
            _ = await call(session, .post, "/v1/auth/logout")
            return loginPage(error: "The console is for administrators; \(username) is not one.", username: username, status: .forbidden)
        }
        return redirect("/admin", cookies: [ConsoleRequest.setCookie(ConsoleRequest.sessionCookie, token, secure: secure),
                                            ConsoleRequest.setCookie(ConsoleRequest.loginCookie, nil, secure: secure)])
    }

    func overview(_ request: Request, _ session: Session) async throws -> Response {
        async let plugins = call(session, .get, "/v1/admin/plugins")
        async let instances = call(session, .get, "/v1/admin/instances")
        let pluginRows = ConsolePages.items(await plugins.body).map { value -> [String: Any] in
            let plugin = ConsolePages.members(value)
            var row: [String: Any] = ["id": ConsolePages.text(plugin["id"]), "summary": ConsolePages.text(plugin["summary"]),
                                      "mount": ConsolePages.text(plugin["mount"]), "status": ConsolePages.text(plugin["status"]),
                                      "operations": Int(plugin["operations"]?.numberValue ?? 0),
                                      "dialects": (plugin["dialects"]?.arrayValue ?? []).map { ConsolePages.members($0).compactMapValues(\.mustache) }]
            if let reason = plugin["reason"]?.stringValue, !reason.isEmpty { row["reason"] = reason }
            return row
        }
        let instanceRows = ConsolePages.items(await instances.body).map { value -> [String: Any] in
            let instance = ConsolePages.members(value)
            return ["id": ConsolePages.text(instance["id"]), "host": ConsolePages.text(instance["host"]), "pid": ConsolePages.text(instance["pid"]),
                    "version": ConsolePages.text(instance["version"]), "startedAt": ConsolePages.time(instance["startedAt"]),
                    "seenAt": ConsolePages.time(instance["seenAt"]), "rate": String(format: "%.1f/s", instance["rate"]?.numberValue ?? 0),
                    "current": instance["current"] == .bool(true)]
        }
        let storage: String = switch try? admin.gateway().running().storage {
        case .sqlite(let path)?: "SQLite: " + URL(fileURLWithPath: path).lastPathComponent
        case .postgres(let url)?: "PostgreSQL: " + (URL(string: url)?.host ?? "") + (URL(string: url)?.path ?? "")
        case nil: ""
        }
        let (context, cookies) = await frame(session, title: "Overview", current: "/admin", request: request, extra: [
            "uptime": ConsolePages.duration(Date().timeIntervalSince(admin.startedAt)),
            "startedAt": ConsolePages.time(.string(ISO8601DateFormatter().string(from: admin.startedAt))), "storage": storage,
            "plugins": pluginRows, "instances": instanceRows,
        ])
        return page("overview", context, cookies: cookies)
    }

    func operations(_ request: Request, _ session: Session) async throws -> Response {
        let document = ConsolePages.members(await call(session, .get, "/openapi.json").body ?? .null)
        var operations: [[String: Any]] = []
        for (path, item) in ConsolePages.members(document["paths"] ?? .null).sorted(by: { $0.key < $1.key }) {
            for method in ["get", "post", "put", "patch", "delete"] {
                guard let operation = ConsolePages.members(item)[method].map(ConsolePages.members) else { continue }
                let parameters = (operation["parameters"]?.arrayValue ?? []).compactMap { value -> [String: Any]? in
                    let parameter = ConsolePages.members(value)
                    guard let location = parameter["in"]?.stringValue, location == "path" || location == "query" else { return nil }
                    return ["name": ConsolePages.text(parameter["name"]), "location": location, "required": parameter["required"] == .bool(true)]
                }
                let name = ConsolePages.text(operation["operationId"])
                operations.append(["name": name, "method": method.uppercased(), "path": path, "summary": ConsolePages.text(operation["summary"]),
                                   "plugin": String(name.prefix { $0 != "." }), "parameters": parameters,
                                   "hasBody": operation["requestBody"] != nil])
            }
        }
        let (context, cookies) = await frame(session, title: "Operations", current: "/admin/operations", request: request, extra: ["operations": operations])
        return page("operations", context, cookies: cookies)
    }

    /// The API explorer's call: any route of the gateway with the administrator's session; the
    /// reply as it came (status, fields, body as text).
    func explorerCall(_ request: Request, _ context: GatewayRequestContext) async throws -> Response {
        let session: Session
        switch await self.session(request, context) {
        case .reply: return json(.object(["status": .number(401), "headers": .array([]), "body": .string("Sign in again: the session ended.")]), status: .unauthorized)
        case .session(let found): session = found
        }
        if let refusal = checkChange(request, form: [:], session: session) { return refusal }
        var request = request
        let body = try await request.collectBody(upTo: Self.maxForm)
        guard case .object(let fields)? = try? JSONDecoder().decode(JSONValue.self, from: Data(buffer: body)),
              let methodName = fields["method"]?.stringValue, let method = HTTPRequest.Method(methodName.uppercased()),
              ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"].contains(method.rawValue),
              let path = fields["path"]?.stringValue, path.hasPrefix("/"), !path.hasPrefix("//"), !path.hasPrefix("/admin"), path.utf8.count <= 4000
        else {
            return json(.object(["status": .number(400), "headers": .array([]),
                                 "body": .string("Send {method, path, body}: a method, and a path of this gateway starting with /.")]), status: .badRequest)
        }
        var headers: HTTPFields = [.authorization: "Bearer \(session.token)"]
        let payload = fields["body"]?.stringValue.flatMap { $0.isEmpty ? nil : ByteBuffer(string: $0) }
        if payload != nil { headers[.contentType] = "application/json" }
        let outcome = await caller.call(method, path, fields: headers, body: payload, from: session.address)
        let text = String(decoding: outcome.body.readableBytesView.prefix(1 << 20), as: UTF8.self)
        return json(.object(["status": .number(Double(outcome.status)),
                             "headers": .array(outcome.headers.map { JSONValue.array([.string($0.name.canonicalName), .string($0.value)]) }),
                             "body": .string(text)]))
    }

    func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        Self.securityHeaders(&headers)
        return Response(status: status, headers: headers, body: .init(byteBuffer: value.serialized()))
    }

    /// The last but `offset` segment of the path, percent-decoded.
    static func segment(_ request: Request, fromEnd offset: Int = 0) -> String {
        let parts = request.uri.path.split(separator: "/")
        guard parts.count > offset else { return "" }
        let part = String(parts[parts.count - 1 - offset])
        return part.removingPercentEncoding ?? part
    }

    func userPage(_ request: Request, _ session: Session) async throws -> Response {
        let username = Self.segment(request)
        let reply = await call(session, .get, "/v1/admin/users/" + ConsoleRequest.escaped(username))
        guard reply.status == 200, let body = reply.body else {
            return errorPage(reply.status == 404 ? .notFound : .badRequest, Self.problemText(reply.body, status: reply.status), session: session)
        }
        var account = ConsolePages.user(body)
        account["isSelf"] = (account["id"] as? String) == session.userID
        let keys = ConsolePages.items(await call(session, .get, "/v1/admin/keys?user=" + ConsoleRequest.escaped(username)).body)
            .map { ConsolePages.key($0, owner: username) }
        let (context, cookies) = await frame(session, title: "User \(username)", current: "/admin/users", request: request,
                                             extra: ["account": account, "keys": keys, "back": "/admin/users/" + ConsoleRequest.escaped(username)])
        return page("user", context, cookies: cookies)
    }

    func changeUser(_ request: Request, _ session: Session, _ form: [String: String]) async throws -> Response {
        let username = Self.segment(request)
        let target = "/v1/admin/users/" + ConsoleRequest.escaped(username)
        let here = "/admin/users/" + ConsoleRequest.escaped(username)
        let change: (JSONValue?, String)
        switch form["action"] ?? "" {
        case "enable": change = (.object(["disabled": .bool(false)]), "\(username) can sign in again.")
        case "disable": change = (.object(["disabled": .bool(true)]), "\(username) is disabled: their sessions and keys are refused.")
        case "make-admin": change = (.object(["admin": .bool(true)]), "\(username) is an administrator.")
        case "unmake-admin": change = (.object(["admin": .bool(false)]), "\(username) is no longer an administrator.")
        case "set-group": change = (.object(["group": .string(form["group"] ?? "")]), (form["group"] ?? "").isEmpty ? "\(username) is in no group." : "\(username) is in group \(form["group"] ?? "").")
        case "set-password": change = (.object(["password": .string(form["password"] ?? "")]), "\(username)'s password is changed; their sessions ended.")
        case "delete":
            let reply = await call(session, .delete, target)
            guard reply.status == 204 else { return redirect(here, flash: "Not deleted: " + Self.problemText(reply.body, status: reply.status), ok: false) }
            return redirect("/admin/users", flash: "User \(username) deleted.", ok: true)
        default:
            return redirect(here, flash: "Unknown action.", ok: false)
        }
        let reply = await call(session, .patch, target, json: change.0)
        guard reply.status == 200 else { return redirect(here, flash: "Not changed: " + Self.problemText(reply.body, status: reply.status), ok: false) }
        return redirect(here, flash: change.1, ok: true)
    }

    /// The keys of `user` (nil: the master keys), with the secret of one just `created`.
    func keysPage(_ request: Request, _ session: Session, user: String?, created: [String: Any]?) async throws -> Response {
        let user = user.flatMap { $0.isEmpty ? nil : $0 }
        let reply = await call(session, .get, "/v1/admin/keys" + (user.map { "?user=" + ConsoleRequest.escaped($0) } ?? ""))
        guard reply.status == 200 else { return errorPage(reply.status == 404 ? .notFound : .badRequest, Self.problemText(reply.body, status: reply.status), session: session) }
        let keys = ConsolePages.items(reply.body).map { ConsolePages.key($0, owner: user ?? "master key") }
        var extra: [String: Any] = ["keys": keys, "back": "/admin/keys" + (user.map { "?user=" + ConsoleRequest.escaped($0) } ?? "")]
        if let user { extra["filterUser"] = user }
        if let created { extra["created"] = created }
        let (context, cookies) = await frame(session, title: "API keys", current: "/admin/keys", request: request, extra: extra)
        return page("keys", context, cookies: cookies)
    }

    func createKey(_ request: Request, _ session: Session, _ form: [String: String]) async throws -> Response {
        var body: [String: JSONValue] = ["label": .string(form["label"] ?? ""), "scopes": .array(ConsolePages.words(form["scopes"]).map(JSONValue.string))]
        if let user = form["user"], !user.isEmpty { body["user"] = .string(user) }
        let addresses = ConsolePages.words(form["allowedAddresses"])
        if !addresses.isEmpty { body["allowedAddresses"] = .array(addresses.map(JSONValue.string)) }
        if let rate = form["rate"], !rate.isEmpty { body["rate"] = .string(rate) }
        if let group = form["group"], !group.isEmpty { body["group"] = .string(group) }
        if let date = form["expiresAt"], !date.isEmpty { body["expiresAt"] = .string(date + "T23:59:59Z") }
        if form["ownLimit"] == "on" { body["ownLimit"] = .bool(true) }
        let reply = await call(session, .post, "/v1/admin/keys", json: .object(body))
        let back = "/admin/keys" + ((form["user"]).flatMap { $0.isEmpty ? nil : "?user=" + ConsoleRequest.escaped($0) } ?? "")
        guard reply.status == 201, case .object(let created)? = reply.body else {
            return redirect(back, flash: "The key was not created: " + Self.problemText(reply.body, status: reply.status), ok: false)
        }
        let key = ConsolePages.members(created["key"] ?? .null)
        // The secret is shown on this page only: it is not kept anywhere the console can read again.
        return try await keysPage(request, session, user: form["user"], created: ["secret": ConsolePages.text(created["secret"]), "id": ConsolePages.text(key["id"]),
                                                              "label": ConsolePages.text(key["label"])])
    }

    func configurationPage(_ request: Request, _ session: Session) async throws -> Response {
        let reply = await call(session, .get, "/v1/admin/configuration")
        guard reply.status == 200 else { return errorPage(HTTPResponse.Status(code: reply.status), Self.problemText(reply.body, status: reply.status), session: session) }
        let configuration = ConsolePages.members(reply.body ?? .null)
        let pending = configuration["restartPending"]?.arrayValue?.compactMap(\.stringValue) ?? []
        var extra: [String: Any] = ["file": ConsolePages.text(configuration["file"]), "text": ConsolePages.text(configuration["text"]),
                                    "configVersion": ConsolePages.text(configuration["version"]), "errors": [Any](), "hasErrors": false]
        if !pending.isEmpty { extra["report"] = ["status": "running", "changes": [String](), "restartNeeded": pending] }
        let (context, cookies) = await frame(session, title: "Configuration", current: "/admin/configuration", request: request, extra: extra)
        return page("configuration", context, cookies: cookies)
    }

    /// Validate or apply an edited plugins.yaml: errors are shown at their lines, with the text as edited.
    func editConfiguration(_ request: Request, _ session: Session, _ form: [String: String]) async throws -> Response {
        let text = (form["text"] ?? "").replacingOccurrences(of: "\r\n", with: "\n")
        var body: [String: JSONValue] = ["text": .string(text)]
        if let version = form["baseVersion"], !version.isEmpty { body["baseVersion"] = .string(version) }
        var extra: [String: Any] = ["text": text, "configVersion": form["baseVersion"] ?? "", "errors": [Any](), "hasErrors": false]
        var status: HTTPResponse.Status = .ok
        var flash: (ok: Bool, text: String)?
        let validation = await call(session, .post, "/v1/admin/configuration/validate", json: .object(["text": .string(text)]))
        let checked = ConsolePages.members(validation.body ?? .null)
        let errors = (checked["errors"]?.arrayValue ?? []).map(ConsolePages.members)
        if validation.status != 200 {
            flash = (false, Self.problemText(validation.body, status: validation.status))
            status = HTTPResponse.Status(code: validation.status)
        } else if !errors.isEmpty {
            let located = errors.map { error -> [String: Any] in
                ["line": Int(error["line"]?.numberValue ?? 0), "column": Int(error["column"]?.numberValue ?? 0),
                 "message": (error["keyPath"]?.stringValue).map { $0.isEmpty ? "" : $0 + ": " }.map { $0 + ConsolePages.text(error["message"]) } ?? ConsolePages.text(error["message"])]
            }
            extra["errors"] = located
            extra["hasErrors"] = true
            var messages: [Int: String] = [:]
            for error in located { if let line = error["line"] as? Int, line > 0 { messages[line] = error["message"] as? String } }
            extra["lines"] = text.split(separator: "\n", omittingEmptySubsequences: false).enumerated().map { index, line -> [String: Any] in
                var entry: [String: Any] = ["number": index + 1, "text": String(line)]
                if let message = messages[index + 1] { entry["error"] = message }
                return entry
            }
            flash = (false, form["intent"] == "apply" ? "Not applied: the text has an error; the running configuration stays." : "The text has an error.")
            status = .unprocessableContent
        } else if form["intent"] == "apply" {
            let applied = await call(session, .put, "/v1/admin/configuration", json: .object(body))
            guard applied.status == 200 else {
                flash = (false, Self.problemText(applied.body, status: applied.status))
                extra["flash"] = ["ok": false, "text": flash?.text ?? ""]
                let (context, cookies) = await frame(session, title: "Configuration", current: "/admin/configuration", request: request, extra: extra)
                return page("configuration", context, status: HTTPResponse.Status(code: applied.status), cookies: cookies)
            }
            let report = ConsolePages.members(applied.body ?? .null)
            let changes = report["changes"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let restart = report["restartNeeded"]?.arrayValue?.compactMap(\.stringValue) ?? []
            var message = changes.isEmpty ? "Applied: nothing changes live." : "Applied: " + changes.joined(separator: ", ") + "."
            if !restart.isEmpty { message += " Needs a restart: " + restart.joined(separator: ", ") + "." }
            return redirect("/admin/configuration", flash: message, ok: true)
        } else {
            let changes = checked["changes"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let restart = checked["restartNeeded"]?.arrayValue?.compactMap(\.stringValue) ?? []
            extra["report"] = ["status": "valid", "changes": changes, "restartNeeded": restart]
            flash = (true, "Valid." + (changes.isEmpty ? " Applying it changes nothing live." : " Applying it changes: " + changes.joined(separator: ", ") + "."))
        }
        let (context, cookies) = await frame(session, title: "Configuration", current: "/admin/configuration", request: request, extra: extra)
        var shown = context
        if let flash { shown["flash"] = ["ok": flash.ok, "text": flash.text] }
        shown["file"] = admin.configurationFile?.url.lastPathComponent ?? "plugins.yaml"
        return page("configuration", shown, status: status, cookies: cookies)
    }

    func pluginPage(_ request: Request, _ session: Session, message: (ok: Bool, text: String)?) async throws -> Response {
        let plugin = Self.segment(request, fromEnd: 1)
        let view = Self.segment(request)
        let query = request.uri.query ?? ""
        let reply = await call(session, .get, "/v1/admin/plugins/\(ConsoleRequest.escaped(plugin))/views/\(ConsoleRequest.escaped(view))"
                                   + (query.isEmpty ? "" : "?arguments=" + ConsoleRequest.escaped(query)))
        guard reply.status == 200, case .object(let document)? = reply.body else {
            return errorPage(reply.status == 404 ? .notFound : HTTPResponse.Status(code: reply.status), Self.problemText(reply.body, status: reply.status), session: session)
        }
        let formAction = "/admin/plugins/\(ConsoleRequest.escaped(plugin))/\(ConsoleRequest.escaped(view))"
        let sections = (document["sections"]?.arrayValue ?? []).map { value -> [String: Any] in
            let section = ConsolePages.members(value)
            var entry: [String: Any] = [:]
            // Its own key: a missing `title` would be the page's, found by mustache in the context around.
            if let title = section["title"]?.stringValue, !title.isEmpty { entry["sectionTitle"] = title }
            switch section["kind"]?.stringValue {
            case "figures":
                entry["figures"] = (section["figures"]?.arrayValue ?? []).map { ConsolePages.members($0).compactMapValues(\.mustache) }
            case "table":
                entry["table"] = ["columns": section["columns"]?.arrayValue?.compactMap(\.stringValue) ?? [],
                                  "rows": (section["rows"]?.arrayValue ?? []).map { row -> [String: Any] in
                                      let members = ConsolePages.members(row)
                                      return ["cells": members["cells"]?.arrayValue?.map { ConsolePages.text($0) } ?? [],
                                              "actions": (members["actions"]?.arrayValue ?? []).map { action -> [String: Any] in
                                                  let fields = ConsolePages.members(action)
                                                  return ["label": ConsolePages.text(fields["label"]), "action": ConsolePages.text(fields["action"]),
                                                          "arguments": ConsolePages.members(fields["arguments"] ?? .null).sorted { $0.key < $1.key }
                                                              .map { ["name": $0.key, "value": ConsolePages.text($0.value)] }]
                                              }]
                                  }]
            case "chart":
                let points = (section["points"]?.arrayValue ?? []).map { point -> JSONValue in
                    let fields = ConsolePages.members(point)
                    let at = fields["at"]?.stringValue.flatMap(UTCTimestamp.date)?.timeIntervalSince1970 ?? 0
                    return .array([.number(at), fields["value"] ?? .null])
                }
                entry["chart"] = ["id": "chart-" + ConsolePages.text(section["title"]).lowercased().filter { $0.isLetter || $0.isNumber },
                                  "label": ConsolePages.text(section["label"]), "points": String(buffer: JSONValue.array(points).serialized()),
                                  "last": points.last.map { ConsolePages.text($0.arrayValue?.last) } ?? ""]
            case "form":
                // A form without an action shows the view again with its fields as the arguments.
                entry["form"] = ["action": ConsolePages.text(section["action"]), "show": ConsolePages.text(section["action"]).isEmpty,
                                 "submitLabel": ConsolePages.text(section["submitLabel"]),
                                 "fields": (section["fields"]?.arrayValue ?? []).map { ConsolePages.members($0).compactMapValues(\.mustache) }]
            default:
                if let text = section["text"]?.stringValue, !text.isEmpty { entry["text"] = text }
            }
            return entry
        }
        let title = ConsolePages.text(document["title"])
        var extra: [String: Any] = ["plugin": plugin, "viewTitle": title, "sections": sections, "formAction": formAction]
        if let refresh = document["refresh"]?.numberValue { extra["refresh"] = Int(refresh) }
        var (context, cookies) = await frame(session, title: "\(plugin): \(title)", current: formAction, request: request, extra: extra)
        if let message { context["flash"] = ["ok": message.ok, "text": message.text] }
        return page("plugin", context, cookies: cookies)
    }

    /// An action of a plugin's view (its form's fields are its arguments): the page again, with the action's message.
    func pluginAction(_ request: Request, _ session: Session, _ form: [String: String]) async throws -> Response {
        let plugin = Self.segment(request, fromEnd: 1)
        let view = Self.segment(request)
        guard let action = form["action"], !action.isEmpty else { return redirect(request.uri.path, flash: "No action was named.", ok: false) }
        var arguments = form
        arguments["csrf"] = nil
        arguments["action"] = nil
        let reply = await call(session, .post, "/v1/admin/plugins/\(ConsoleRequest.escaped(plugin))/views/\(ConsoleRequest.escaped(view))/actions/\(ConsoleRequest.escaped(action))",
                               json: .object(["arguments": .object(arguments.mapValues(JSONValue.string))]))
        let here = "/admin/plugins/\(ConsoleRequest.escaped(plugin))/\(ConsoleRequest.escaped(view))"
        guard reply.status == 200 else { return redirect(here, flash: Self.problemText(reply.body, status: reply.status), ok: false) }
        return redirect(here, flash: ConsolePages.text(ConsolePages.members(reply.body ?? .null)["message"]), ok: true)
    }
}
