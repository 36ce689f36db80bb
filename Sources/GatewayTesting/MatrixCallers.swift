import GatewayCore
import GatewayServer
import HTTPTypes

/// The kinds of caller an authorization matrix test tries every operation as.
public enum MatrixCaller: String, CaseIterable, Sendable {
    case anonymous, userA, userB, readKey, writeKey, otherResourceKey, revokedToken, expiredToken, disabledUser, admin
    /// A third user, whom an administrator granted `<plugin>:write` (``AccountStore/grant(_:to:)``):
    /// the grant reaches the data everyone shares, and nothing of A's.
    case grantedUser
}

/// One of each ``MatrixCaller``, set up on a test gateway: users A and B, an administrator, A's
/// keys (`<plugin>:read`, `<plugin>:write`, and `<plugin>:*` restricted to other resources), a
/// revoked and an expired session, a disabled user, and a user granted `<plugin>:write`.
public struct MatrixCallers: Sendable {
    public let a: (token: String, userID: String)
    public let b: (token: String, userID: String)
    public let admin: (token: String, userID: String)
    private let tokens: [MatrixCaller: String]
    private let keys: [MatrixCaller: String]

    /// Registers the callers. `clock` must be the gateway's clock (the expired session is made by
    /// moving it past `auth.sessionTTL`, which the gateway must set to 1h); `otherResources` is
    /// the JSON array of resources the restricted key may touch.
    public static func prepare(_ gateway: TestGateway, clock: TestClock, plugin: String, otherResources: String) async throws -> MatrixCallers {
        let expiring = try await gateway.register("expiring")
        clock.advance(by: 2 * 3600)
        let a = try await gateway.register("alice")
        let b = try await gateway.register("bob")
        let revoked = try await gateway.register("revoked")
        _ = try await gateway.gateway.handle(.post, "/v1/auth/logout", headers: [.authorization: "Bearer \(revoked.token)"])
        let disabled = try await gateway.register("disabled")
        try await gateway.gateway.accounts.setDisabled(userID: disabled.userID, true)
        let admin = try await gateway.register("root")
        try await gateway.gateway.accounts.setAdmin(userID: admin.userID, true)
        let granted = try await gateway.register("granted")
        try await gateway.gateway.accounts.grant(["\(plugin):write"], to: granted.userID)
        let readKey = try await gateway.createKey(token: a.token, grant: #"{"label": "r", "scopes": ["\#(plugin):read"]}"#)
        let writeKey = try await gateway.createKey(token: a.token, grant: #"{"label": "w", "scopes": ["\#(plugin):write"]}"#)
        let otherKey = try await gateway.createKey(
            token: a.token, grant: #"{"label": "o", "scopes": ["\#(plugin):*"], "resources": {"\#(plugin)": \#(otherResources)}}"#)
        gateway.gateway.forgetCredentials()
        return MatrixCallers(
            a: a, b: b, admin: admin,
            tokens: [.userA: a.token, .userB: b.token, .revokedToken: revoked.token, .expiredToken: expiring.token,
                     .disabledUser: disabled.token, .admin: admin.token, .grantedUser: granted.token],
            keys: [.readKey: readKey.secret, .writeKey: writeKey.secret, .otherResourceKey: otherKey.secret])
    }

    /// The headers `caller` sends (JSON content type included).
    public func headers(_ caller: MatrixCaller) -> HTTPFields {
        var fields: HTTPFields = [.contentType: "application/json"]
        if let token = tokens[caller] { fields[.authorization] = "Bearer \(token)" }
        if let key = keys[caller] { fields[HTTPField.Name("X-Api-Key")!] = key }
        return fields
    }
}

extension MatrixCaller {
    /// One row of an authorization matrix: the status each caller expects. Revoked, expired and
    /// disabled credentials always get 401. The user granted `<plugin>:write` expects what B does
    /// (see ``Swift/Dictionary/granting(_:)`` for a write the grant opens).
    public static func row(_ anonymous: Int, _ a: Int, _ b: Int, _ read: Int, _ write: Int, _ other: Int, _ admin: Int) -> [MatrixCaller: Int] {
        [.anonymous: anonymous, .userA: a, .userB: b, .readKey: read, .writeKey: write, .otherResourceKey: other,
         .revokedToken: 401, .expiredToken: 401, .disabledUser: 401, .admin: admin, .grantedUser: b]
    }
}

extension Dictionary where Key == MatrixCaller, Value == Int {
    /// The row with `status` for the user granted `<plugin>:write`: a write to shared data that an
    /// administrator's grant opens.
    public func granting(_ status: Int) -> Self {
        var row = self
        row[.grantedUser] = status
        return row
    }
}
