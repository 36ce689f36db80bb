import Foundation
import GatewayCore
import NIOCore
import NIOConcurrencyHelpers
import SQLKit

/// One permission of a v2 key: which methods, from where, how often, on which feeds and datastreams.
struct LegacyPermission: Sendable, Equatable {
    var accessMethods: [String]
    var sourceIP: String?
    var referer: String?
    /// Seconds that must pass between two requests using this permission.
    var minimumInterval: Int?
    var label: String?
    /// Empty: every feed of the key's owner.
    var resources: [LegacyResource]

    static let methods = ["get", "put", "post", "delete"]
}

struct LegacyResource: Sendable, Equatable {
    var feedID: Int64
    var streamID: String?
}

/// A v2 API key: a gateway API key (its identity, secret and expiry) plus the v2 permissions,
/// which the plugin enforces on every feeds request made with it, in both APIs.
struct LegacyKey: Sendable, Equatable {
    var keyID: String
    /// The secret, sealed (``KeySeal``): shown only to the key's owner.
    var sealedKey: String
    var userID: String?
    var label: String
    var privateAccess: Bool
    var expiresAt: Int64?
    var permissions: [LegacyPermission]
    var created: Int64

    /// A master key: private access, all methods, no restriction. It manages its owner's keys.
    var isMaster: Bool {
        privateAccess && permissions.contains { permission in
            Set(permission.accessMethods) == Set(LegacyPermission.methods) && permission.resources.isEmpty
                && permission.sourceIP == nil && permission.referer == nil && (permission.minimumInterval ?? 0) == 0
        }
    }
}

/// The v2 key model mapped onto the gateway's API keys.
///
/// Creating a v2 key issues a gateway key (scope `feeds:*`, the v2 expiry) for the caller's user
/// and records its v2 permissions beside it; the old API showed keys' secrets in its listings, so
/// the record keeps the secret too, hashed for look-ups and sealed for its owner to read
/// (``KeySeal`` writes the trade-off down). Every feeds request made with such a key must then match one
/// of its permissions: the method, the feed or datastream, the client's address (`source_ip`,
/// exact or CIDR), the `Referer` (`referer`, a prefix), and `minimum_interval` between uses
/// (403 otherwise). Without `private_access` the owner's private feeds stay invisible (404).
final class LegacyKeys: Sendable {
    let store: FeedStore
    let context: PluginContext
    private let cache = NIOLockedValueBox<[String: (expires: ContinuousClock.Instant, key: LegacyKey?)]>([:])
    private let lastUse = NIOLockedValueBox<[String: ContinuousClock.Instant]>([:])
    /// `keySecret` from the configuration.
    private let secret: String?
    private let sealing = NIOLockedValueBox<KeySeal?>(nil)

    init(store: FeedStore, context: PluginContext, secret: String? = nil) {
        self.store = store
        self.context = context
        self.secret = secret
    }

    /// The seal, made on first use; copies sealed with the database's key are sealed again with
    /// the configured one then.
    func seal() async throws -> KeySeal {
        if let made = sealing.withLockedValue({ $0 }) { return made }
        let made = KeySeal(configured: secret.map(KeySeal.key(fromSecret:)), stored: try await KeySeal.storedKey(store.database))
        if made.configured != nil {
            for row in try await store.database.raw("SELECT key_id, sealed_key FROM feeds_keys WHERE sealed_key LIKE 'db:%'").all() {
                let sealed = try row.decode(column: "sealed_key", as: String.self)
                guard made.needsResealing(sealed), let plain = made.open(sealed) else { continue }
                try await store.database.raw("""
                    UPDATE feeds_keys SET sealed_key = \(bind: try made.seal(plain))
                    WHERE key_id = \(bind: try row.decode(column: "key_id", as: String.self)) AND sealed_key = \(bind: sealed)
                    """).run()
            }
        }
        sealing.withLockedValue { $0 = made }
        return made
    }

    // MARK: Storage

    static let columns = "key_id, sealed_key, user_id, label, private_access, expires_at, permissions, created"

    static func decode(_ row: any SQLRow) throws -> LegacyKey {
        let permissions = (try? JSONValue.parse(try row.decode(column: "permissions", as: String.self)))?.arrayValue ?? []
        return LegacyKey(
            keyID: try row.decode(column: "key_id", as: String.self), sealedKey: try row.decode(column: "sealed_key", as: String.self),
            userID: try row.decode(column: "user_id", as: String?.self), label: try row.decode(column: "label", as: String.self),
            privateAccess: try row.decode(column: "private_access", as: Int.self) != 0, expiresAt: try row.decode(column: "expires_at", as: Int64?.self),
            permissions: permissions.compactMap { value in
                var ignored: [GatewayError.FieldError] = []
                return Self.permission(value, pointer: "", problems: &ignored)
            },
            created: try row.decode(column: "created", as: Int64.self))
    }

    /// The v2 record of gateway key `keyID`, or nil when it is a plain gateway key (cached briefly).
    func key(id keyID: String) async throws -> LegacyKey? {
        let now = ContinuousClock.now
        if let hit = cache.withLockedValue({ $0[keyID] }), hit.expires > now { return hit.key }
        let key = try await store.database.raw("SELECT \(unsafeRaw: Self.columns) FROM feeds_keys WHERE key_id = \(bind: keyID)").first().map(Self.decode)
        cache.withLockedValue { table in
            if table.count > 10_000 { table.removeAll() }
            table[keyID] = (now + .seconds(5), key)
        }
        return key
    }

    func key(apiKey: String) async throws -> LegacyKey? {
        try await store.database.raw("SELECT \(unsafeRaw: Self.columns) FROM feeds_keys WHERE key_hash = \(bind: KeySeal.hash(apiKey))").first().map(Self.decode)
    }

    func keys(of userID: String?) async throws -> [LegacyKey] {
        let query: SQLQueryString = userID.map { "SELECT \(unsafeRaw: Self.columns) FROM feeds_keys WHERE user_id = \(bind: $0) ORDER BY created, key_id" }
            ?? "SELECT \(unsafeRaw: Self.columns) FROM feeds_keys WHERE user_id IS NULL ORDER BY created, key_id"
        return try await store.database.raw(query).all().map(Self.decode)
    }

    /// The v2 key the caller presents, if any.
    func presented(by principal: Principal) async throws -> LegacyKey? {
        guard case .apiKey(let keyID) = principal.kind else { return nil }
        return try await key(id: keyID)
    }

    /// Issues a gateway key and records the v2 key beside it; returns it with its secret.
    func create(label: String, privateAccess: Bool, expiresAt: Int64?, permissions: [LegacyPermission], userID: String?) async throws -> (key: LegacyKey, secret: String) {
        let seal = try await seal()
        let issued = try await context.accounts.issueKey(
            for: userID, label: label, scopes: ["\(context.pluginID):*"], resources: nil, allowedAddresses: nil,
            expiresAt: expiresAt.map { UTCTimestamp.date(micros: $0) })
        let key = LegacyKey(keyID: issued.id, sealedKey: try seal.seal(issued.secret), userID: userID, label: label, privateAccess: privateAccess,
                            expiresAt: expiresAt, permissions: permissions, created: store.now())
        try await store.database.raw("""
            INSERT INTO feeds_keys (key_id, key_hash, sealed_key, user_id, label, private_access, expires_at, permissions, created)
            VALUES (\(bind: key.keyID), \(bind: KeySeal.hash(issued.secret)), \(bind: key.sealedKey), \(bind: key.userID), \(bind: key.label),
              \(bind: privateAccess ? 1 : 0), \(bind: expiresAt), \(bind: Self.permissionsText(permissions)), \(bind: key.created))
            """).run()
        return (key, issued.secret)
    }

    /// Changes a key's label, private access and permissions (its secret and expiry stay).
    func update(_ key: LegacyKey) async throws {
        try await store.database.raw("""
            UPDATE feeds_keys SET label = \(bind: key.label), private_access = \(bind: key.privateAccess ? 1 : 0),
              permissions = \(bind: Self.permissionsText(key.permissions)) WHERE key_id = \(bind: key.keyID)
            """).run()
        cache.withLockedValue { $0[key.keyID] = nil }
    }

    func delete(_ key: LegacyKey) async throws {
        _ = try await context.accounts.revokeKey(id: key.keyID, of: key.userID)
        try await store.database.raw("DELETE FROM feeds_keys WHERE key_id = \(bind: key.keyID)").run()
        cache.withLockedValue { $0[key.keyID] = nil }
    }

    static func permissionsText(_ permissions: [LegacyPermission]) -> String {
        String(buffer: JSONValue.array(permissions.map(json)).serialized())
    }

    // MARK: JSON

    static func json(_ permission: LegacyPermission) -> JSONValue {
        var members: [String: JSONValue] = ["access_methods": .array(permission.accessMethods.map(JSONValue.string))]
        if let ip = permission.sourceIP { members["source_ip"] = .string(ip) }
        if let referer = permission.referer { members["referer"] = .string(referer) }
        if let interval = permission.minimumInterval { members["minimum_interval"] = .number(Double(interval)) }
        if let label = permission.label { members["label"] = .string(label) }
        if !permission.resources.isEmpty {
            members["resources"] = .array(permission.resources.map { resource in
                var item: [String: JSONValue] = ["feed_id": .number(Double(resource.feedID))]
                if let stream = resource.streamID { item["datastream_id"] = .string(stream) }
                return .object(item)
            })
        }
        return .object(members)
    }

    /// A key as the old API showed it to its owner, with its secret `apiKey`.
    static func json(_ key: LegacyKey, apiKey: String) -> JSONValue {
        var members: [String: JSONValue] = [
            "api_key": .string(apiKey), "label": .string(key.label), "private_access": .bool(key.privateAccess),
            "permissions": .array(key.permissions.map(json)),
        ]
        if let expires = key.expiresAt { members["expires_at"] = .string(UTCTimestamp.format(micros: expires)) }
        return .object(members)
    }

    /// Reads one permission; nil (with its problems added to `problems`) when it is invalid.
    static func permission(_ value: JSONValue, pointer: String, problems: inout [GatewayError.FieldError]) -> LegacyPermission? {
        var found: [GatewayError.FieldError] = []
        defer { problems.append(contentsOf: found) }
        guard case .object(let members) = value else {
            found.append(.init(pointer: pointer, detail: "must be an object"))
            return nil
        }
        var permission = LegacyPermission(accessMethods: [], resources: [])
        if let methods = members["access_methods"]?.arrayValue?.compactMap({ $0.stringValue?.lowercased() }), !methods.isEmpty,
           methods.allSatisfy(LegacyPermission.methods.contains) {
            permission.accessMethods = LegacyPermission.methods.filter(methods.contains)
        } else {
            found.append(.init(pointer: "\(pointer)/access_methods", detail: "must list some of get, put, post, delete"))
        }
        if let ip = members["source_ip"], ip != .null {
            if let text = ip.stringValue, !text.isEmpty, text.count <= 64, text.allSatisfy({ $0.isHexDigit || $0 == "." || $0 == ":" || $0 == "/" }) {
                permission.sourceIP = text
            } else {
                found.append(.init(pointer: "\(pointer)/source_ip", detail: "must be an IP address or a CIDR range"))
            }
        }
        if let referer = members["referer"], referer != .null {
            if let text = referer.stringValue, !text.isEmpty, text.count <= 500 { permission.referer = text } else {
                found.append(.init(pointer: "\(pointer)/referer", detail: "must be a URL prefix"))
            }
        }
        if let interval = members["minimum_interval"], interval != .null {
            if let number = FeedRules.value(interval), number >= 0, number <= 86_400, number == number.rounded() {
                permission.minimumInterval = Int(number)
            } else {
                found.append(.init(pointer: "\(pointer)/minimum_interval", detail: "must be a number of seconds up to 86400"))
            }
        }
        permission.label = members["label"]?.stringValue
        if let resources = members["resources"], resources != .null {
            for (index, item) in (resources.arrayValue ?? []).enumerated() {
                let feedText = item[path: ["feed_id"]].flatMap { $0.stringValue ?? $0.numberValue.map(FeedRules.text) } ?? ""
                guard let feed = FeedRules.feedID(feedText) else {
                    found.append(.init(pointer: "\(pointer)/resources/\(index)/feed_id", detail: "must be a feed id"))
                    continue
                }
                let stream = item[path: ["datastream_id"]]?.stringValue
                if let stream, !FeedRules.isDatastreamID(stream) {
                    found.append(.init(pointer: "\(pointer)/resources/\(index)/datastream_id", detail: "must be a datastream id"))
                }
                permission.resources.append(LegacyResource(feedID: feed, streamID: stream))
            }
            if resources.arrayValue == nil { found.append(.init(pointer: "\(pointer)/resources", detail: "must be an array of {feed_id, datastream_id}")) }
        }
        return found.isEmpty ? permission : nil
    }

    // MARK: Enforcement

    /// Checks a request made with a v2 key against its permissions: 403 when none allows it.
    /// `feed` and `stream` are the resource the request touches (nil for lists and creates).
    func authorize(_ principal: Principal, method: String, feed: Int64?, stream: String?, referer: String?) async throws {
        guard let key = try await presented(by: principal) else { return }
        let method = method.lowercased()
        for (index, permission) in key.permissions.enumerated() {
            guard permission.accessMethods.contains(method) else { continue }
            if !permission.resources.isEmpty {
                guard let feed, permission.resources.contains(where: { $0.feedID == feed && ($0.streamID == nil || $0.streamID == stream) }) else { continue }
            }
            if let ip = permission.sourceIP, !Self.address(principal.address, matches: ip) { continue }
            if let prefix = permission.referer, !(referer ?? "").hasPrefix(prefix) { continue }
            if let interval = permission.minimumInterval, interval > 0 {
                let slot = "\(key.keyID)#\(index)"
                let now = ContinuousClock.now
                let allowed = lastUse.withLockedValue { table -> Bool in
                    if let last = table[slot], now - last < .seconds(interval) { return false }
                    if table.count > 100_000 { table.removeAll() }
                    table[slot] = now
                    return true
                }
                guard allowed else { throw GatewayError.forbidden("This key may be used once every \(interval) seconds (minimum_interval).") }
            }
            return
        }
        throw GatewayError.forbidden("This key has no permission to \(method) \(feed.map { "feed \($0)" } ?? "this resource")\(stream.map { " datastream \($0)" } ?? "").")
    }

    /// The tag of the `/v2/keys` routes, whose callers ``authorizeManager(_:)`` checks.
    static let managesKeys = "v2-manages-keys"

    /// Who may manage v2 keys: a user's master key, the user's session, or an administrator; a
    /// v2 key belongs to a user, so an owner-less gateway key may not.
    func authorizeManager(_ principal: Principal) async throws {
        if principal.isAnonymous { throw GatewayError.unauthorized("Send a master key in X-ApiKey.") }
        if let presented = try await presented(by: principal) {
            guard presented.isMaster else { throw GatewayError.forbidden("Only a master key (private access, every method, no restriction) manages keys.") }
            return
        }
        if case .apiKey = principal.kind, !principal.isAdmin { throw GatewayError.forbidden("Only a master key manages keys.") }
        guard principal.userID != nil else {
            throw GatewayError.forbidden("v2 keys belong to a user: use a user's master key or session.")
        }
    }

    /// Whether some permission of `key` covers `method` on the resource (methods and resources
    /// only: for filtering lists, without using up a `minimum_interval`).
    static func covers(_ key: LegacyKey, method: String, feed: Int64, stream: String?) -> Bool {
        key.permissions.contains { permission in
            permission.accessMethods.contains(method)
                && (permission.resources.isEmpty || permission.resources.contains { $0.feedID == feed && ($0.streamID == nil || $0.streamID == stream) })
        }
    }

    /// Whether the caller's v2 key hides private feeds (no `private_access`).
    func hidesPrivate(_ principal: Principal) async throws -> Bool {
        guard let key = try await presented(by: principal) else { return false }
        return !key.privateAccess
    }

    /// An exact IPv4/IPv6 address or an IPv4 CIDR range.
    static func address(_ address: String, matches pattern: String) -> Bool {
        guard let slash = pattern.firstIndex(of: "/") else { return address == pattern }
        guard let bits = Int(pattern[pattern.index(after: slash)...]), (0...32).contains(bits),
              let network = ipv4(String(pattern[..<slash])), let value = ipv4(address) else { return false }
        let mask: UInt32 = bits == 0 ? 0 : ~UInt32(0) << (32 - bits)
        return network & mask == value & mask
    }

    static func ipv4(_ text: String) -> UInt32? {
        let parts = text.split(separator: ".")
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard let byte = UInt8(part) else { return nil }
            value = value << 8 | UInt32(byte)
        }
        return value
    }
}

extension XivelyDialect {
    /// `/v2/keys`: a user's keys, managed with one of their master keys (or their session, or by
    /// administrators). Who may manage keys is the authorize hook's ``LegacyKeys/authorizeManager(_:)``
    /// (tag ``LegacyKeys/managesKeys``).
    func keyRoutes(_ list: Routes) {
        let keys = service.keys
        func add(_ method: HTTPRequest.Method, _ path: String, _ summary: String, _ handler: @escaping Handler) {
            // The key in the path is its secret: logs and traces show `***` for it.
            list.add(method, path, summary, access: .user, tags: [LegacyKeys.managesKeys], secret: path.contains("{key}") ? "key" : nil, handler)
        }
        /// The user whose keys the caller manages (the hook admitted it).
        @Sendable func manager(_ principal: Principal) async throws -> String? {
            if let presented = try await keys.presented(by: principal) { return presented.userID }
            return principal.userID
        }
        @Sendable func owned(_ request: RouteRequest, _ principal: Principal) async throws -> LegacyKey {
            let owner = try await manager(principal)
            let apiKey = Self.strip(request.pathParameters["key"])
            guard let key = try await keys.key(apiKey: apiKey), key.userID == owner || principal.isAdmin else {
                throw GatewayError.notFound("No key '\(apiKey.prefix(12))…'.")
            }
            return key
        }
        /// `{"key": {label, private_access, expires_at, permissions}}` (the wrapper may be left out).
        @Sendable func draft(_ request: RouteRequest, creating: Bool) throws -> (label: String?, privateAccess: Bool?, expiresAt: Int64?, permissions: [LegacyPermission]?) {
            var body = try Self.json(request)
            if let inner = body[path: ["key"]], case .object = inner { body = inner }
            guard case .object(let members) = body else { throw GatewayError.invalid(field: "/key", "must be an object") }
            var problems: [GatewayError.FieldError] = []
            var label: String?
            if let value = members["label"] {
                if let text = value.stringValue, !text.isEmpty, text.count <= 200 { label = text } else { problems.append(.init(pointer: "/key/label", detail: "must be 1 to 200 characters")) }
            } else if creating {
                problems.append(.init(pointer: "/key/label", detail: "is required"))
            }
            var privateAccess: Bool?
            if let value = members["private_access"] {
                switch value {
                case .bool(let flag): privateAccess = flag
                case .string("true"): privateAccess = true
                case .string("false"): privateAccess = false
                default: problems.append(.init(pointer: "/key/private_access", detail: "must be true or false"))
                }
            }
            var expiresAt: Int64?
            if let value = members["expires_at"], value != .null {
                if let text = value.stringValue, let micros = UTCTimestamp.parse(text), micros > keys.store.now() { expiresAt = micros } else {
                    problems.append(.init(pointer: "/key/expires_at", detail: "must be a time in the future"))
                }
            }
            var permissions: [LegacyPermission]?
            if let value = members["permissions"] {
                let list = value.arrayValue ?? []
                if list.isEmpty { problems.append(.init(pointer: "/key/permissions", detail: "must hold at least one permission")) }
                permissions = list.enumerated().compactMap { index, item in LegacyKeys.permission(item, pointer: "/key/permissions/\(index)", problems: &problems) }
            } else if creating {
                problems.append(.init(pointer: "/key/permissions", detail: "is required"))
            }
            guard problems.isEmpty else { throw FeedService.invalid(problems) }
            return (label, privateAccess, expiresAt, permissions)
        }

        add(.get, "/v2/keys", "List your keys ({\"keys\": [...]}; a master key)") { _, context, _ in
            let owner = try await manager(context.principal)
            let seal = try await keys.seal()
            // The old API shows the owner each key's secret: the only place a sealed copy is opened.
            return Self.json(.object(["keys": .array(try await keys.keys(of: owner).map { LegacyKeys.json($0, apiKey: seal.open($0.sealedKey) ?? "") })]))
        }
        add(.post, "/v2/keys", "Create a key ({\"key\": {label, private_access, expires_at, permissions}}; 201 + Location)") { request, context, _ in
            let owner = try await manager(context.principal)
            let parts = try draft(request, creating: true)
            // A key makes no key that outlives it: without an expiry the new one expires with it.
            var expiresAt = parts.expiresAt
            if let limit = try await keys.presented(by: context.principal)?.expiresAt {
                if let asked = expiresAt, asked > limit {
                    throw FeedService.invalid([.init(pointer: "/key/expires_at", detail: "must not be later than the expiry of the key that creates it")])
                }
                expiresAt = expiresAt ?? limit
            }
            let created = try await keys.create(label: parts.label ?? "", privateAccess: parts.privateAccess ?? false, expiresAt: expiresAt,
                                                permissions: parts.permissions ?? [], userID: owner)
            return RouteReply(status: .created, headers: [.location: "\(Self.base(request))/v2/keys/\(created.secret)"])
        }
        add(.get, "/v2/keys/{key}", "Read a key") { request, context, _ in
            // The caller sent the secret in the path: it is shown back without opening the sealed copy.
            Self.json(.object(["key": LegacyKeys.json(try await owned(request, context.principal), apiKey: Self.strip(request.pathParameters["key"]))]))
        }
        add(.put, "/v2/keys/{key}", "Change a key's label, private access and permissions") { request, context, _ in
            var key = try await owned(request, context.principal)
            let parts = try draft(request, creating: false)
            if let label = parts.label { key.label = label }
            if let privateAccess = parts.privateAccess { key.privateAccess = privateAccess }
            if let permissions = parts.permissions { key.permissions = permissions }
            try await keys.update(key)
            return RouteReply(status: .ok)
        }
        add(.delete, "/v2/keys/{key}", "Delete (revoke) a key") { request, context, _ in
            try await keys.delete(try await owned(request, context.principal))
            return RouteReply(status: .ok)
        }
    }
}
