import GatewayCore
import HTTPTypes
import Testing

/// The access rules as the host enforces them: scopes only narrow keys, grants open shared data,
/// and a key — master or not — is held to its scopes.
@Suite("access rules")
struct AccessRuleTests {
    static let guest = Principal.anonymous(address: "192.0.2.1")
    static let user = Principal(kind: .user, userID: "u1", address: "192.0.2.1")
    static let grantedUser = Principal(kind: .user, userID: "u2", address: "192.0.2.1", grants: ["suggest:write"])
    static let admin = Principal(kind: .user, userID: "u3", isAdmin: true, address: "192.0.2.1")

    static func key(_ scopes: Set<String>, owner: String? = "u1", grants: Set<String> = [], admin: Bool = false) -> Principal {
        Principal(kind: .apiKey(keyID: "k"), userID: owner, isAdmin: admin, scopes: scopes, address: "192.0.2.1", grants: grants)
    }

    /// The status `rule` gives `principal` for `method` on plugin `suggest`: 200 when allowed.
    static func status(_ rule: AccessRule, _ principal: Principal, _ method: HTTPRequest.Method = .put) -> Int {
        do {
            try rule.enforce(principal: principal, plugin: "suggest", method: method)
            return 200
        } catch let error as GatewayError {
            return Int(error.status.code)
        } catch {
            return 500
        }
    }

    @Test("a signed-in user holds no scope: .scope admits users (it narrows keys), .granted needs an administrator or a grant")
    func usersHoldNoScope() {
        let write = AccessRule.scope("suggest:write")
        let shared = AccessRule.granted("suggest:write")
        #expect(Self.status(write, Self.guest) == 401)
        #expect(Self.status(write, Self.user) == 200)
        #expect(Self.status(shared, Self.guest) == 401)
        #expect(Self.status(shared, Self.user) == 403)
        #expect(Self.status(shared, Self.grantedUser) == 200)
        #expect(Self.status(shared, Self.admin) == 200)
        #expect(Self.status(.granted("transit:write"), Self.grantedUser) == 403, "a grant reaches only what it names")
        #expect(Self.status(shared, Principal(kind: .user, userID: "u4", address: "", grants: ["suggest:*"])) == 200)
    }

    @Test("a key needs the scope among its own, whatever its owner was granted")
    func keysAreNarrowed() {
        let shared = AccessRule.granted("suggest:write")
        #expect(Self.status(shared, Self.key(["suggest:read"], grants: ["suggest:write"])) == 403)
        #expect(Self.status(shared, Self.key(["suggest:write"], grants: ["suggest:write"])) == 200)
        #expect(Self.status(shared, Self.key(["suggest:write"])) == 403, "a key gets nothing its owner lacks")
        #expect(Self.status(.scope("suggest:write"), Self.key(["suggest:read"])) == 403)
        #expect(Self.status(.public, Self.key(["todo:read"]), .get) == 403, "every route bounds a key by its plugin scope")
    }

    @Test("a master key is held to its scopes: admin covers administrators' routes only, * everything, its scopes are its grants")
    func masterKeys() {
        let readOnly = Self.key(["suggest:read"], owner: nil, grants: ["suggest:read"])
        #expect(Self.status(.admin, readOnly, .post) == 403)
        #expect(Self.status(.granted("suggest:write"), readOnly) == 403)
        #expect(Self.status(.user, readOnly, .get) == 403)
        #expect(Self.status(.public, readOnly, .get) == 200)

        let operations = Self.key(["admin"], owner: nil, grants: ["admin"], admin: true)
        #expect(Self.status(.admin, operations, .post) == 200)
        #expect(Self.status(.public, operations, .get) == 403, "admin does not read plugin data")
        #expect(Self.status(.granted("suggest:write"), operations) == 403)

        let editor = Self.key(["suggest:write"], owner: nil, grants: ["suggest:write"])
        #expect(Self.status(.granted("suggest:write"), editor) == 200, "the operator granted what it named")
        #expect(Self.status(.admin, editor, .post) == 403)

        let root = Self.key(["*"], owner: nil, grants: ["*"], admin: true)
        for rule in [AccessRule.admin, .granted("suggest:write"), .scope("suggest:write"), .user, .public] {
            #expect(Self.status(rule, root) == 200, "\(rule)")
        }
        #expect(Principal.covers(["suggest:*"], "suggest:write") && !Principal.covers(["suggest:*"], "admin") && Principal.covers(["*"], "admin"))
    }
}
