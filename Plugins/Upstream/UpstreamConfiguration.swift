import Foundation
import GatewayCore
import HTTPTypes

extension UpstreamPlugin {
    /// An upstream service's entry in plugins.yaml:
    ///
    /// ```yaml
    /// weather:
    ///   type: upstream
    ///   config:
    ///     upstreams: [http://10.0.0.5:8000, http://10.0.0.6:8000]
    ///     balance: least-outstanding
    ///     timeout: 5s
    ///     maxConnections: 64
    ///     access: user
    ///     credential: { header: X-Api-Key, env: WEATHER_KEY }
    ///     healthCheck: { path: /health, interval: 5s }
    ///     routes:
    ///       - { path: /forecast/{city}, methods: [GET], upstreamPath: /v2/forecast/{city}, cache: 60s }
    ///       - { path: /{rest...} }
    /// ```
    public struct Configuration: PluginConfiguration {
        /// The base URLs of the service's instances (`http://host:port`, optionally with a path prefix).
        public var upstreams: [String] = []
        /// How an instance is chosen: `round-robin` or `least-outstanding` (the fewest requests in flight).
        public var balance = "round-robin"
        /// How long an instance may take to answer (until its reply's head; the body may stream longer).
        /// A request whose body streams (an upload) gets an hour instead, its upload included.
        public var timeout = ConfigDuration(seconds: 10)
        /// Further attempts, on another instance where there is one, for an idempotent request
        /// (GET, HEAD, PUT and DELETE without a streamed body) that failed to connect, timed out, or
        /// got 502, 503 or 504.
        public var retries = 1
        /// Connections open to each instance at most; a request finding them all busy waits for
        /// one, within its timeout (HTTP/1.1 carries one request at a time on a connection).
        public var maxConnections = 512
        /// Who may call the routes, unless a route says otherwise: `public`, `user`, `admin` or `scope:NAME`.
        public var access = "public"
        /// Requests to each instance that tell whether it is up; absent, only failures of real requests do.
        public var healthCheck: HealthCheck?
        /// Passive ejection: an instance failing this many requests in a row is left alone for a while.
        public var ejection: Ejection?
        /// The circuit breaker: this many failures in a row, whatever the instance, and the service is
        /// left alone (503 with `Retry-After`) for a while, then tried with one request.
        public var breaker: Breaker?
        /// A credential the gateway adds to every request, read from the environment or a file.
        public var credential: Credential?
        /// Header fields set on or removed from requests to the service.
        public var requestHeaders: HeaderTransform?
        /// Header fields set on or removed from its replies.
        public var responseHeaders: HeaderTransform?
        /// Query parameters set on or removed from requests to the service.
        public var query: QueryTransform?
        /// The service's OpenAPI document (a file, relative to plugins.yaml, or an http(s) URL): its
        /// operations appear in the gateway's document under this plugin's mount.
        public var openapi: String?
        /// The largest request body forwarded (it streams through; 413 beyond). Default 1GB.
        public var maxBodySize = ByteSize(bytes: 1 << 30)
        /// A request field carrying the caller's user id to the service (nil: none); the same as
        /// `identityHeaders: { user: ... }`.
        public var userHeader: String?
        /// Request fields telling the service who the caller is (a client's own are dropped).
        public var identityHeaders: IdentityHeaders?
        /// A short-lived JWT the gateway signs naming the caller, for a service that verifies it
        /// with the gateway's keys at `/.well-known/jwks.json` (needs `auth.signingKeys`).
        public var forwardToken: ForwardToken?
        /// The routes; absent, every path under the mount goes to the same path of the service.
        public var routes: [Route]?

        public static let defaults = Configuration()

        public func validate() throws { _ = try settings(environment: [:], readFile: { _ in nil }, checkSecrets: false) }
    }

    /// One route: a method and path under the mount, and where it goes.
    public struct Route: Codable, Sendable {
        /// The path under the mount, with `{name}` parameters and optionally a last `{name...}` that takes the rest.
        public var path: String
        /// Its methods (default GET, POST, PUT, PATCH and DELETE; HEAD goes with GET).
        public var methods: [String]?
        /// The path at the service, with the same parameters (default: the route's path).
        public var upstreamPath: String?
        /// Who may call it (default the plugin's `access`).
        public var access: String?
        /// How long a GET reply is cached (default not at all).
        public var cache: ConfigDuration?
        /// Whether a cached reply serves every caller (`shared`) or only the one it was made for (`per-caller`, the default).
        public var cacheScope: String?
        /// Units of the caller's rate limit one call costs (default 1).
        public var cost: Int?
        /// A timeout of its own.
        public var timeout: ConfigDuration?
        /// The operation's name after the plugin's id (default made of the method and path).
        public var name: String?
        /// One line for the OpenAPI document and `gateway routes`.
        public var summary: String?
        /// Whether a WebSocket opened at the path goes on to the service (`ws://` or `wss://` of its base URL).
        public var websocket: Bool?
        /// Whether path segments may carry `;` parameters (`/items;v=2`), passed on as they came.
        /// Default no: such a path is refused with 400, as a service that drops them would read
        /// another path than the one the gateway routed and authorized.
        public var matrixParameters: Bool?
    }

    public struct HealthCheck: Codable, Sendable {
        /// The path asked (GET) at each instance; a 2xx or 3xx reply means up.
        public var path: String
        public var interval: ConfigDuration?
        public var timeout: ConfigDuration?
        /// Successes in a row that bring a down instance back (default 1).
        public var healthyAfter: Int?
        /// Failures in a row that take an instance down (default 2).
        public var unhealthyAfter: Int?
    }

    public struct Ejection: Codable, Sendable {
        /// Failures in a row (default 3; 0 never ejects).
        public var failures: Int?
        /// How long an ejected instance is left alone (default 30s).
        public var duration: ConfigDuration?
    }

    public struct Breaker: Codable, Sendable {
        /// Failures in a row that open the circuit (default 5; 0: no breaker).
        public var failures: Int?
        /// How long it stays open (default 30s).
        public var openFor: ConfigDuration?
    }

    public struct Credential: Codable, Sendable {
        /// The field it goes in (default `Authorization`).
        public var header: String?
        /// The environment variable holding it.
        public var env: String?
        /// The file holding it (relative to plugins.yaml); surrounding white space is dropped.
        public var file: String?
        /// Text put before it (`"Bearer "`).
        public var prefix: String?
    }

    /// The fields of ``identityHeaders``: `user` the account id, `scopes` the scopes of a key or a
    /// provider's token (space-separated; absent for a session), `credential` the kind of
    /// credential (`session`, `key`, the provider's name), `admin` `true` for an administrator.
    public struct IdentityHeaders: Codable, Sendable {
        public var user: String?
        public var scopes: String?
        public var credential: String?
        public var admin: String?
    }

    /// ``Configuration/forwardToken``: the token's audience (`aud`), lifetime (default 60 s, at
    /// most an hour) and the field that carries it (default `Authorization`, as `Bearer <token>`;
    /// another field carries the bare token). Guests get none.
    public struct ForwardToken: Codable, Sendable {
        public var audience: String
        public var ttl: ConfigDuration?
        public var header: String?
    }

    public struct HeaderTransform: Codable, Sendable {
        public var set: [String: String]?
        public var remove: [String]?
    }

    public struct QueryTransform: Codable, Sendable {
        public var set: [String: String]?
        public var remove: [String]?
    }
}

/// The configuration, checked and resolved.
struct UpstreamSettings: Sendable {
    enum Balance: Sendable { case roundRobin, leastOutstanding }

    struct Route: Sendable {
        var name: String
        var method: HTTPRequest.Method
        var path: String
        var upstreamPath: [PathPart]
        var access: AccessRule
        var cache: CachePolicy
        var cost: Int
        var timeout: Duration
        var summary: String
        /// Whether WebSockets opened at the path go on to the service (GET routes).
        var webSocket: Bool
        /// The route's path, parsed.
        var pathParts: [PathPart]
        /// Whether segments may carry `;` parameters.
        var matrixParameters: Bool
    }

    /// A piece of an upstream path template.
    enum PathPart: Sendable, Equatable {
        case text(String)
        case parameter(String)
        case rest(String)
    }

    var targets: [String]
    var balance: Balance
    var timeout: Duration
    var retries: Int
    var maxConnections: Int
    var health: (path: String, interval: Duration, timeout: Duration, healthyAfter: Int, unhealthyAfter: Int)?
    var ejectAfter: Int
    var ejectFor: Duration
    var breakAfter: Int
    var breakFor: Duration
    var credential: HTTPField?
    var requestSet: [HTTPField]
    var requestRemove: [HTTPField.Name]
    var responseSet: [HTTPField]
    var responseRemove: [HTTPField.Name]
    var querySet: [(String, String)]
    var queryRemove: Set<String>
    var maxBodySize: Int
    /// The fields that tell the service who the caller is.
    var identity: [(fact: IdentityFact, name: HTTPField.Name)]
    /// The gateway's signed identity token: its audience, lifetime in seconds, and field.
    var forwardToken: (audience: String, lifetime: Double, field: HTTPField.Name)?
    var routes: [Route]
    /// The routes' paths, to tell whether a path a lenient service reads would lead elsewhere.
    var routeShadows: RouteShadows
}

/// What an identity field tells the service (``UpstreamConfiguration/IdentityHeaders``).
enum IdentityFact: Sendable {
    case user, scopes, credential, admin

    /// The fact about `principal`, or nil when it has none (a guest's user, a session's scopes).
    func value(of principal: Principal) -> String? {
        switch self {
        case .user: principal.userID
        case .scopes: principal.isBoundByScopes ? principal.scopes.sorted().joined(separator: " ") : nil
        case .credential: principal.credentialKind
        case .admin: principal.isAdmin ? "true" : nil
        }
    }
}

/// The paths of an upstream's routes, matched as the gateway's router matches them (literal
/// segments before `{name}`, `{name...}` taking what leads nowhere else) but without regard to
/// case: the route a request path would reach at a service that reads paths leniently.
struct RouteShadows: Sendable {
    private struct Node: Sendable {
        var literals: [String: Int] = [:]
        var parameter: Int?
        var rest: Int?
        /// The route path (lowercased) that ends here.
        var template: String?
    }

    private var nodes = [Node()]
    /// Whether there is one route path only (every path leads to it).
    let isSingle: Bool

    init(paths: [String]) {
        isSingle = Set(paths).count <= 1
        for path in paths {
            var node = 0
            for segment in path.lowercased().split(separator: "/") {
                let next: Int
                if segment.hasPrefix("{") && segment.hasSuffix("...}") {
                    next = nodes[node].rest ?? nodes.count
                    nodes[node].rest = next
                } else if segment.hasPrefix("{") && segment.hasSuffix("}") {
                    next = nodes[node].parameter ?? nodes.count
                    nodes[node].parameter = next
                } else {
                    next = nodes[node].literals[String(segment)] ?? nodes.count
                    nodes[node].literals[String(segment)] = next
                }
                if next == nodes.count { nodes.append(Node()) }
                node = next
            }
            nodes[node].template = path.lowercased()
        }
    }

    /// The (lowercased) path of the route `segments` (lowercased, decoded) reach, or nil.
    func route(for segments: [String]) -> String? {
        var node = 0
        var fallback: Int?
        for segment in segments {
            if let rest = nodes[node].rest { fallback = rest }
            if let next = nodes[node].literals[segment] {
                node = next
            } else if let parameter = nodes[node].parameter {
                node = parameter
            } else {
                return fallback.flatMap { nodes[$0].template }
            }
        }
        if nodes[node].template == nil {
            if let rest = nodes[node].rest { return nodes[rest].template }
            return fallback.flatMap { nodes[$0].template }
        }
        return nodes[node].template
    }
}

extension UpstreamPlugin.Configuration {
    static let defaultMethods: [HTTPRequest.Method] = [.get, .post, .put, .patch, .delete]

    /// The settings, or the first problem as a ``ConfigurationError`` naming its key. Secrets are
    /// read only when `checkSecrets` (at start; `gateway check` checks their shape).
    func settings(environment: [String: String], readFile: (String) -> String?, checkSecrets: Bool, pluginID: String = "upstream") throws -> UpstreamSettings {
        guard !upstreams.isEmpty else { throw ConfigurationError(key: "upstreams", "give at least one base URL, such as http://127.0.0.1:9000") }
        var targets: [String] = []
        for (index, text) in upstreams.enumerated() {
            guard let url = URL(string: text), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), let host = url.host, !host.isEmpty,
                  url.query == nil, url.fragment == nil else {
                throw ConfigurationError(key: "upstreams[\(index)]", "\"\(text.prefix(80))\" is not an http(s) base URL, such as http://127.0.0.1:9000")
            }
            var base = text
            while base.hasSuffix("/") { base.removeLast() }
            targets.append(base)
        }
        let balance: UpstreamSettings.Balance
        switch self.balance {
        case "round-robin": balance = .roundRobin
        case "least-outstanding": balance = .leastOutstanding
        default: throw ConfigurationError(key: "balance", "\"\(self.balance.prefix(40))\" is not a balancing rule (use round-robin or least-outstanding)")
        }
        guard timeout.seconds > 0 else { throw ConfigurationError(key: "timeout", "must be more than 0, such as 10s") }
        guard (0...5).contains(retries) else { throw ConfigurationError(key: "retries", "must be between 0 and 5") }
        guard (1...65_535).contains(maxConnections) else { throw ConfigurationError(key: "maxConnections", "must be between 1 and 65535") }
        let defaultAccess = try Self.accessRule(access, key: "access")

        var health: (String, Duration, Duration, Int, Int)?
        if let check = healthCheck {
            guard check.path.hasPrefix("/") else { throw ConfigurationError(key: "healthCheck.path", "must start with /, such as /health") }
            let interval = check.interval?.duration ?? .seconds(10)
            let timeout = check.timeout?.duration ?? .seconds(2)
            guard interval >= .milliseconds(100) else { throw ConfigurationError(key: "healthCheck.interval", "must be at least 100ms") }
            guard timeout > .zero else { throw ConfigurationError(key: "healthCheck.timeout", "must be more than 0") }
            let up = check.healthyAfter ?? 1, down = check.unhealthyAfter ?? 2
            guard (1...100).contains(up) else { throw ConfigurationError(key: "healthCheck.healthyAfter", "must be between 1 and 100") }
            guard (1...100).contains(down) else { throw ConfigurationError(key: "healthCheck.unhealthyAfter", "must be between 1 and 100") }
            health = (check.path, interval, timeout, up, down)
        }
        let ejectAfter = ejection?.failures ?? 3
        guard (0...1000).contains(ejectAfter) else { throw ConfigurationError(key: "ejection.failures", "must be between 0 and 1000") }
        let ejectFor = ejection?.duration?.duration ?? .seconds(30)
        guard ejectFor > .zero else { throw ConfigurationError(key: "ejection.duration", "must be more than 0") }
        let breakAfter = breaker?.failures ?? 5
        guard (0...1000).contains(breakAfter) else { throw ConfigurationError(key: "breaker.failures", "must be between 0 and 1000") }
        let breakFor = breaker?.openFor?.duration ?? .seconds(30)
        guard breakFor > .zero else { throw ConfigurationError(key: "breaker.openFor", "must be more than 0") }

        var credentialField: HTTPField?
        if let credential {
            guard let name = HTTPField.Name(credential.header ?? "Authorization") else {
                throw ConfigurationError(key: "credential.header", "is not a header field name")
            }
            guard (credential.env == nil) != (credential.file == nil) else {
                throw ConfigurationError(key: "credential", "give either env (an environment variable) or file")
            }
            if checkSecrets {
                var secret: String?
                if let variable = credential.env {
                    secret = environment[variable]
                    guard let found = secret, !found.isEmpty else { throw ConfigurationError(key: "credential.env", "the environment variable \(variable) is not set") }
                } else if let file = credential.file {
                    secret = readFile(file)?.trimmingCharacters(in: .whitespacesAndNewlines)
                    guard let found = secret, !found.isEmpty else { throw ConfigurationError(key: "credential.file", "\(file) cannot be read or is empty") }
                }
                let value = (credential.prefix ?? "") + (secret ?? "")
                guard value.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F }) else {
                    throw ConfigurationError(key: credential.env != nil ? "credential.env" : "credential.file", "holds characters a header field cannot carry")
                }
                credentialField = HTTPField(name: name, value: value)
            }
        }
        func fields(_ transform: UpstreamPlugin.HeaderTransform?, key: String) throws -> ([HTTPField], [HTTPField.Name]) {
            var set: [HTTPField] = []
            for (name, value) in (transform?.set ?? [:]).sorted(by: { $0.key < $1.key }) {
                guard let field = HTTPField.Name(name) else { throw ConfigurationError(key: "\(key).set.\(name)", "is not a header field name") }
                set.append(HTTPField(name: field, value: value))
            }
            var remove: [HTTPField.Name] = []
            for (index, name) in (transform?.remove ?? []).enumerated() {
                guard let field = HTTPField.Name(name) else { throw ConfigurationError(key: "\(key).remove[\(index)]", "is not a header field name") }
                remove.append(field)
            }
            return (set, remove)
        }
        let (requestSet, requestRemove) = try fields(requestHeaders, key: "requestHeaders")
        let (responseSet, responseRemove) = try fields(responseHeaders, key: "responseHeaders")
        var identity: [(fact: IdentityFact, name: HTTPField.Name)] = []
        let told: [(IdentityFact, String?, String)] = [
            (.user, identityHeaders?.user ?? userHeader, identityHeaders?.user != nil ? "identityHeaders.user" : "userHeader"),
            (.scopes, identityHeaders?.scopes, "identityHeaders.scopes"), (.credential, identityHeaders?.credential, "identityHeaders.credential"),
            (.admin, identityHeaders?.admin, "identityHeaders.admin"),
        ]
        for (fact, text, key) in told {
            guard let text else { continue }
            guard let name = HTTPField.Name(text) else { throw ConfigurationError(key: key, "is not a header field name") }
            identity.append((fact, name))
        }
        var signedIdentity: (audience: String, lifetime: Double, field: HTTPField.Name)?
        if let forwardToken {
            let audience = forwardToken.audience.trimmingCharacters(in: .whitespaces)
            guard !audience.isEmpty, audience.utf8.count <= 256 else { throw ConfigurationError(key: "forwardToken.audience", "give the service's name, 1 to 256 characters") }
            let lifetime = forwardToken.ttl?.seconds ?? 60
            guard (1...3600).contains(lifetime) else { throw ConfigurationError(key: "forwardToken.ttl", "must be between 1s and 1h") }
            guard let field = HTTPField.Name(forwardToken.header ?? "Authorization") else {
                throw ConfigurationError(key: "forwardToken.header", "is not a header field name")
            }
            if let credential, field.canonicalName == (HTTPField.Name(credential.header ?? "Authorization")?.canonicalName ?? "") {
                throw ConfigurationError(key: "forwardToken.header", "\(field.rawName) already carries credential: give the token another field")
            }
            if identity.contains(where: { $0.name == field }) {
                throw ConfigurationError(key: "forwardToken.header", "\(field.rawName) is one of identityHeaders")
            }
            signedIdentity = (audience, lifetime, field)
        }
        guard maxBodySize.bytes > 0 else { throw ConfigurationError(key: "maxBodySize", "must be more than 0") }
        if let openapi, openapi.trimmingCharacters(in: .whitespaces).isEmpty {
            throw ConfigurationError(key: "openapi", "give a file or an http(s) URL")
        }

        var routes: [UpstreamSettings.Route] = []
        var names = Set<String>()
        let declared = self.routes ?? [UpstreamPlugin.Route(path: "/{path...}")]
        guard !declared.isEmpty else { throw ConfigurationError(key: "routes", "give at least one route, or leave routes out to forward every path") }
        for (index, route) in declared.enumerated() {
            let key = "routes[\(index)]"
            let parameters = try Self.parameters(of: route.path, key: "\(key).path")
            let upstreamText = route.upstreamPath ?? route.path
            let upstream = try Self.template(upstreamText, key: "\(key).upstreamPath")
            for part in upstream {
                switch part {
                case .parameter(let name), .rest(let name):
                    guard parameters.contains(name) else {
                        throw ConfigurationError(key: "\(key).upstreamPath", "{\(name)} is not a parameter of the route's path \(route.path)")
                    }
                case .text: break
                }
            }
            let methods: [HTTPRequest.Method]
            if let given = route.methods {
                guard !given.isEmpty else { throw ConfigurationError(key: "\(key).methods", "give at least one method") }
                methods = try given.enumerated().map { offset, text in
                    guard let method = HTTPRequest.Method(text.uppercased()), [.get, .post, .put, .patch, .delete, .options].contains(method) else {
                        throw ConfigurationError(key: "\(key).methods[\(offset)]", "\"\(text.prefix(20))\" is not one of GET, POST, PUT, PATCH, DELETE, OPTIONS")
                    }
                    return method
                }
            } else {
                methods = Self.defaultMethods
            }
            let access = try route.access.map { try Self.accessRule($0, key: "\(key).access") } ?? defaultAccess
            if let cost = route.cost, !(0...1000).contains(cost) { throw ConfigurationError(key: "\(key).cost", "must be between 0 and 1000") }
            if let ttl = route.cache, ttl.seconds <= 0 { throw ConfigurationError(key: "\(key).cache", "must be more than 0, such as 60s") }
            let scope: CachePolicy.Scope
            switch route.cacheScope ?? "per-caller" {
            case "per-caller": scope = .perPrincipal
            case "shared": scope = .shared
            default: throw ConfigurationError(key: "\(key).cacheScope", "use shared or per-caller")
            }
            if let timeout = route.timeout, timeout.seconds <= 0 { throw ConfigurationError(key: "\(key).timeout", "must be more than 0") }
            if route.websocket == true && !methods.contains(.get) {
                throw ConfigurationError(key: "\(key).websocket", "a WebSocket opens with a GET: add GET to the route's methods")
            }
            if let name = route.name, !name.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }) || name.isEmpty {
                throw ConfigurationError(key: "\(key).name", "use lowercase letters, digits and -")
            }
            for method in methods {
                var name = "\(pluginID)." + (route.name.map { methods.count > 1 ? "\($0)-\(method.rawValue.lowercased())" : $0 }
                                             ?? Self.operationName(method: method, path: route.path))
                if !names.insert(name).inserted {
                    guard route.name == nil else { throw ConfigurationError(key: "\(key).name", "\(name) is taken by another route") }
                    var counter = 2
                    while !names.insert("\(name)-\(counter)").inserted { counter += 1 }
                    name += "-\(counter)"
                }
                let cache: CachePolicy = method == .get ? route.cache.map { CachePolicy(ttl: $0.duration, scope: scope) } ?? .none : .none
                routes.append(UpstreamSettings.Route(
                    name: name, method: method, path: route.path, upstreamPath: upstream, access: access, cache: cache, cost: route.cost ?? 1,
                    timeout: route.timeout?.duration ?? timeout.duration,
                    summary: route.summary ?? "\(method.rawValue) \(upstreamText) at the upstream service",
                    webSocket: route.websocket == true && method == .get,
                    pathParts: try Self.template(route.path, key: "\(key).path"), matrixParameters: route.matrixParameters == true))
            }
        }
        return UpstreamSettings(
            targets: targets, balance: balance, timeout: timeout.duration, retries: retries, maxConnections: maxConnections, health: health,
            ejectAfter: ejectAfter, ejectFor: ejectFor, breakAfter: breakAfter, breakFor: breakFor, credential: credentialField,
            requestSet: requestSet, requestRemove: requestRemove, responseSet: responseSet, responseRemove: responseRemove,
            querySet: (query?.set ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, queryRemove: Set(query?.remove ?? []),
            maxBodySize: maxBodySize.bytes, identity: identity, forwardToken: signedIdentity, routes: routes, routeShadows: RouteShadows(paths: routes.map(\.path)))
    }

    static func accessRule(_ text: String, key: String) throws -> AccessRule {
        switch text {
        case "public": return .public
        case "user": return .user
        case "admin": return .admin
        default:
            if text.hasPrefix("scope:"), text.count > 6, text.count < 100 { return .scope(String(text.dropFirst(6))) }
            if text.hasPrefix("granted:"), text.count > 8, text.count < 100 { return .granted(String(text.dropFirst(8))) }
            throw ConfigurationError(key: key, "\"\(text.prefix(40))\" is not an access rule (use public, user, admin, scope:NAME or granted:NAME)")
        }
    }

    /// The parameter names of a route path; checks its shape.
    static func parameters(of path: String, key: String) throws -> [String] {
        let parts = try template(path, key: key)
        var names: [String] = []
        for part in parts {
            switch part {
            case .parameter(let name), .rest(let name):
                guard !names.contains(name) else { throw ConfigurationError(key: key, "{\(name)} appears twice") }
                names.append(name)
            case .text(let text):
                guard !text.contains("{") && !text.contains("}") else { throw ConfigurationError(key: key, "a parameter must be a whole segment, such as /items/{id}") }
            }
        }
        return names
    }

    /// A path template as text and parameters, segment by segment.
    static func template(_ path: String, key: String) throws -> [UpstreamSettings.PathPart] {
        guard path.hasPrefix("/"), path.count < 500, !path.contains("?"), !path.contains("#"), !path.contains("//") else {
            throw ConfigurationError(key: key, "\"\(path.prefix(80))\" is not a path (start with /, no ? or #)")
        }
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        var parts: [UpstreamSettings.PathPart] = []
        for (index, segment) in segments.enumerated() {
            if segment.hasPrefix("{") && segment.hasSuffix("...}") {
                let name = String(segment.dropFirst().dropLast(4))
                guard index == segments.count - 1 else { throw ConfigurationError(key: key, "{\(name)...} takes the rest of the path and must come last") }
                guard Self.isName(name) else { throw ConfigurationError(key: key, "{\(name)...} is not a parameter name (letters, digits, _)") }
                parts.append(.rest(name))
            } else if segment.hasPrefix("{") && segment.hasSuffix("}") {
                let name = String(segment.dropFirst().dropLast())
                guard Self.isName(name) else { throw ConfigurationError(key: key, "{\(name)} is not a parameter name (letters, digits, _)") }
                parts.append(.parameter(name))
            } else {
                parts.append(.text(String(segment)))
            }
        }
        return parts
    }

    private static func isName(_ name: String) -> Bool {
        !name.isEmpty && name.count <= 40 && name.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_") }
    }

    /// `get-forecast-city` for GET /forecast/{city}; `get` for the mount itself.
    static func operationName(method: HTTPRequest.Method, path: String) -> String {
        let words = path.split(separator: "/").map { segment -> String in
            let bare = segment.trimmingCharacters(in: CharacterSet(charactersIn: "{}.")).lowercased()
            return String(bare.unicodeScalars.map { ("a"..."z").contains($0) || ("0"..."9").contains($0) ? Character($0) : "-" })
        }.filter { !$0.isEmpty }
        return ([method.rawValue.lowercased()] + words).joined(separator: "-")
    }
}
