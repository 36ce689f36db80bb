import Foundation
import GatewayCore
import SQLKit
@testable import GatewayServer
import GatewayTesting
import NIOHTTP1
import Synchronization
import Testing

/// A dialect's master key and the demo secrets that ship with the gateway: what an attacker who
/// read the repository's plugins.yaml can do with them (nothing beyond its own tenant).
@Suite("security: tenant master keys and shipped demo secrets")
struct TenantAttackTests {
    static let tenant = "/1/tutorial"
    static let app = [("X-Application-Id", "demo-app"), ("X-Application-Key", "demo-app-key")]
    static let master = [("X-Application-Id", "demo-app"), ("X-Application-Key", "demo-master-key-change-me")]

    /// A second tenant beside the shipped one.
    static func withOtherTenant(_ yaml: String) -> String {
        let app = "            - { id: demo-app, key: demo-app-key, masterKey: demo-master-key-change-me }\n"
        let other = "        other:\n          apps:\n            - { id: other-app, key: other-app-key-1, masterKey: other-master-key-123456 }\n"
        return yaml.replacingOccurrences(of: app, with: app + other)
    }

    @Test("the shipped master key cannot list, read, change or take over an administrator or a native user", arguments: securityStorages)
    func masterKeyCannotTakeOverAccounts(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage) { gateway in
            let admin = try await gateway.administrator("root", password: "the admin's password")
            let native = try await gateway.register("native-user", password: "native password 1")

            // The attack as found: look the administrator up, then set its password.
            let lookup = try await gateway.send(.GET, "\(Self.tenant)/users?username=root", headers: Self.master)
            #expect(lookup.status == 404, "\(lookup.body)")
            let listing = try await gateway.send(.GET, "\(Self.tenant)/users", headers: Self.master)
            #expect(listing.status == 200)
            let listed = (listing.json?["results"] as? [[String: Any]])?.compactMap { $0["_id"] as? String } ?? []
            #expect(!listed.contains(admin.userID) && !listed.contains(native.userID), "\(listing.body)")
            for target in [admin.userID, native.userID] {
                let read = try await gateway.send(.GET, "\(Self.tenant)/users/\(target)", headers: Self.master)
                #expect(read.status == 404)
                let change = try await gateway.send(.PUT, "\(Self.tenant)/users/\(target)", headers: Self.master, json: #"{"password": "attacker's password"}"#)
                #expect(change.status == 404)
                let delete = try await gateway.send(.DELETE, "\(Self.tenant)/users/\(target)", headers: Self.master)
                #expect(delete.status == 404)
            }
            let takeover = try await gateway.send(.POST, "/v1/auth/login", json: #"{"username": "root", "password": "attacker's password"}"#)
            #expect(takeover.status == 401)
            let owner = try await gateway.send(.POST, "/v1/auth/login", json: #"{"username": "root", "password": "the admin's password"}"#)
            #expect(owner.status == 200)
        }
    }

    @Test("the master key administers the tenant's own members, until one becomes an administrator; another tenant's key reaches none of them",
          arguments: securityStorages)
    func masterKeyAdministersItsMembers(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.withOtherTenant) { gateway in
            let signedUp = try await gateway.send(.POST, "\(Self.tenant)/users", headers: Self.app,
                                                  json: #"{"username": "tenant-user", "password": "tenant password 1"}"#)
            #expect(signedUp.status == 201)
            let memberID = try #require(signedUp.json?["_id"] as? String)

            let found = try await gateway.send(.GET, "\(Self.tenant)/users?username=tenant-user", headers: Self.master)
            #expect(found.status == 200)
            let listing = try await gateway.send(.GET, "\(Self.tenant)/users", headers: Self.master)
            #expect((listing.json?["count"] as? Int) == 1)
            let changed = try await gateway.send(.PUT, "\(Self.tenant)/users/\(memberID)", headers: Self.master, json: #"{"options": {"plan": "gold"}}"#)
            #expect(changed.status == 200, "\(changed.body)")

            // Another tenant's master key: the member is not its to see.
            let otherMaster = [("X-Application-Id", "other-app"), ("X-Application-Key", "other-master-key-123456")]
            let foreign = try await gateway.send(.PUT, "/1/other/users/\(memberID)", headers: otherMaster, json: #"{"password": "attacker's password"}"#)
            #expect(foreign.status == 404)

            // Made an administrator later: out of the tenant's reach at once.
            try await gateway.gateway.accounts.setAdmin(userID: memberID, true)
            let promoted = try await gateway.send(.PUT, "\(Self.tenant)/users/\(memberID)", headers: Self.master, json: #"{"password": "attacker's password"}"#)
            #expect(promoted.status == 404)
            let after = try await gateway.send(.GET, "\(Self.tenant)/users", headers: Self.master)
            #expect((after.json?["count"] as? Int) == 0, "\(after.body)")
        }
    }

    @Test("an administrator adds an account to a tenant's realm; the CLI's store call is what `gateway user realm` runs", arguments: securityStorages)
    func administratorAddsMembers(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage) { gateway in
            let native = try await gateway.register("joins-later", password: "joins later 123")
            #expect(try await gateway.send(.GET, "\(Self.tenant)/users/\(native.userID)", headers: Self.master).status == 404)
            try await gateway.gateway.accounts.addRealmMember(native.userID, to: "nebula/tutorial")
            #expect(try await gateway.gateway.accounts.realms(of: native.userID) == ["nebula/tutorial"])
            #expect(try await gateway.send(.GET, "\(Self.tenant)/users/\(native.userID)", headers: Self.master).status == 200)
            #expect(try await gateway.gateway.accounts.removeRealmMember(native.userID, from: "nebula/tutorial"))
            #expect(try await gateway.send(.GET, "\(Self.tenant)/users/\(native.userID)", headers: Self.master).status == 404)
        }
    }

    @Test("the master key reaches the objects, groups and buckets made through its tenant, and none of a native user's or another tenant's",
          arguments: securityStorages)
    func masterKeyStaysInItsTenantsObjects(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, edit: Self.withOtherTenant) { gateway in
            // A native user's private todo and group, in the bucket the dialect shares (`todos`).
            let native = try await gateway.register("native-owner", password: "native password 1")
            let bearer = [("Authorization", "Bearer \(native.token)")]
            let created = try await gateway.send(.POST, "/v1/todo/buckets/todos/objects", headers: bearer, json: #"{"description": "native secret"}"#)
            #expect(created.status == 201, "\(created.body)")
            let nativeID = try #require(created.json?["id"] as? String)
            let group = try await gateway.send(.PUT, "/v1/todo/groups/friends", headers: bearer, json: #"{"users": ["\#(native.userID)"]}"#)
            #expect(group.status == 200 || group.status == 201, "\(group.body)")

            // A member of the tenant and an object made through the tenant.
            let signedUp = try await gateway.send(.POST, "\(Self.tenant)/users", headers: Self.app, json: #"{"username": "tenant-member", "password": "tenant password 1"}"#)
            let memberID = try #require(signedUp.json?["_id"] as? String)
            let login = try await gateway.send(.POST, "\(Self.tenant)/login", headers: Self.app, json: #"{"username": "tenant-member", "password": "tenant password 1"}"#)
            let session = Self.app + [("X-Session-Token", try #require(login.json?["sessionToken"] as? String))]
            let tenantObject = try await gateway.send(.POST, "\(Self.tenant)/objects/todos", headers: session, json: #"{"description": "the member's"}"#)
            #expect(tenantObject.status == 201, "\(tenantObject.body)")
            let tenantID = try #require(tenantObject.json?["_id"] as? String)

            // The attack: the shipped master key on the native user's object, every way there is.
            let path = "\(Self.tenant)/objects/todos/\(nativeID)"
            #expect(try await gateway.send(.GET, path, headers: Self.master).status == 404)
            #expect(try await gateway.send(.PUT, path, headers: Self.master, json: #"{"description": "changed by the attacker"}"#).status == 404)
            #expect(try await gateway.send(.DELETE, path, headers: Self.master).status == 404)
            let listing = try await gateway.send(.GET, "\(Self.tenant)/objects/todos", headers: Self.master)
            let listed = (listing.json?["results"] as? [[String: Any]])?.compactMap { $0["_id"] as? String } ?? []
            #expect(listed == [tenantID], "\(listing.body)")
            let aggregated = try await gateway.send(.POST, "\(Self.tenant)/objects/todos/_aggregate", headers: Self.master,
                                                    json: #"{"pipeline": [{"$group": {"_id": null, "n": {"$sum": 1}}}]}"#)
            #expect(((aggregated.json?["results"] as? [[String: Any]])?.first?["n"] as? Int) == 1, "\(aggregated.body)")
            // (A batch delete of it: the object is still there at the end.)
            _ = try await gateway.send(.POST, "\(Self.tenant)/objects/todos/_batch", headers: Self.master,
                                       json: #"{"requests": [{"op": "delete", "_id": "\#(nativeID)"}]}"#)
            let members = try await gateway.send(.PUT, "\(Self.tenant)/groups/friends/addMembers", headers: Self.master, json: #"{"users": ["\#(memberID)"]}"#)
            #expect(members.status == 403 || members.status == 404, "\(members.body)")

            // What the tenant made stays its master key's to administer, and only its.
            let otherMaster = [("X-Application-Id", "other-app"), ("X-Application-Key", "other-master-key-123456")]
            #expect(try await gateway.send(.GET, "/1/other/objects/todos/\(tenantID)", headers: otherMaster).status == 404)
            #expect(try await gateway.send(.GET, "\(Self.tenant)/objects/todos/\(tenantID)", headers: Self.master).status == 200)
            let changed = try await gateway.send(.PUT, "\(Self.tenant)/objects/todos/\(tenantID)", headers: Self.master, json: #"{"done": true}"#)
            #expect(changed.status == 200, "\(changed.body)")
            let bucket = try await gateway.send(.PUT, "\(Self.tenant)/buckets/object/tenantbox", headers: Self.master,
                                                json: #"{"description": "the tenant's", "contentACL": {"c": []}}"#)
            #expect(bucket.status == 200, "\(bucket.body)")
            #expect(try await gateway.send(.DELETE, "/1/other/buckets/object/tenantbox", headers: otherMaster).status == 403)
            #expect(try await gateway.send(.DELETE, "\(Self.tenant)/buckets/object/todos", headers: Self.master).status == 409)

            // A delete of "everything" through the master key takes the tenant's objects only.
            let wiped = try await gateway.send(.DELETE, "\(Self.tenant)/objects/todos", headers: Self.master)
            #expect((wiped.json?["deletedObjects"] as? Int) == 1, "\(wiped.body)")
            let survivor = try await gateway.send(.GET, "/v1/todo/buckets/todos/objects/\(nativeID)", headers: bearer)
            #expect(survivor.status == 200)
            #expect((survivor.json?["description"] as? String) == "native secret", "\(survivor.body)")
            #expect(try await gateway.send(.DELETE, "\(Self.tenant)/buckets/object/tenantbox", headers: Self.master).status == 200)
        }
    }

    // MARK: Shipped secrets

    /// The shipped plugins.yaml served on every address instead of loopback.
    static func reachable(_ yaml: String) -> String {
        yaml.replacingOccurrences(of: #"host: "${GATEWAY_HOST:-127.0.0.1}""#, with: #"host: "0.0.0.0""#)
    }

    @Test("on a reachable listener the shipped demo keys do not work; the replacement printed once does, across restarts", arguments: securityStorages)
    func demoSecretsReplacedWhenReachable(storage: TestStorage) async throws {
        #expect(Self.reachable(ShippedGateway.shippedYAML) != ShippedGateway.shippedYAML, "the shipped file's server.host line changed")
        let announced = Mutex<[String]>([])
        try await storage.withFreshLocation { location, directory in
            var configuration = try GatewayConfiguration.parse(Data(Self.reachable(ShippedGateway.shippedYAML).utf8), file: "plugins.yaml",
                                                               knownPlugins: ShippedGateway.registrations.map(\.id),
                                                               instanceTypes: ShippedGateway.registrations.filter(\.multipleInstances).map(\.id))
            configuration.storage = location
            configuration.auth.bcryptCost = 10
            #expect(configuration.shippedSecretWarnings.count == 3, "\(configuration.shippedSecretWarnings)")
            #expect(configuration.shippedSecretWarnings.allSatisfy { $0.contains("does not work") })
            var options = Gateway.Options(baseDirectory: ShippedGateway.root)
            options.logger = TestStorage.quietLogger
            options.loadDemoData = false
            options.announceSecret = { line in announced.withLock { $0.append(line) } }
            let settings = configuration, started = options

            @Sendable func replacement(of shipped: String) throws -> String {
                let line = try #require(announced.withLock { $0 }.first { $0.contains("'\(shipped)'") })
                let start = try #require(line.range(of: "clients now send: "))
                return String(line[start.upperBound...].prefix { !$0.isWhitespace })
            }
            let gateway = try await Gateway.start(configuration: settings, registrations: ShippedGateway.registrations, options: started)
            do {
                try await withServing(gateway) { port in
                    let client = ShippedGateway(test: TestGateway(gateway: gateway, storage: storage), port: port)
                    #expect(announced.withLock { $0.count } == 2, "one replacement per shipped secret in use")
                    // The public strings are refused.
                    #expect(try await client.send(.GET, "\(Self.tenant)/users", headers: Self.master).status == 401)
                    #expect(try await client.send(.GET, "\(Self.tenant)/objects/todos", headers: Self.app).status == 401)
                    let coimotion = try await client.send(.POST, "/coimotion/twShow/show/catList", json: #"{"_key": "demo-app-key"}"#)
                    #expect((coimotion.json?["errCode"] as? Int) != 0, "\(coimotion.body)")
                    // The replacement works where the shipped value is configured (the app key and the master key are one string each).
                    let masterKey = try replacement(of: "demo-master-key-change-me"), appKey = try replacement(of: "demo-app-key")
                    #expect(try await client.send(.GET, "\(Self.tenant)/users", headers: [("X-Application-Id", "demo-app"), ("X-Application-Key", masterKey)]).status == 200)
                    #expect(try await client.send(.GET, "\(Self.tenant)/objects/todos", headers: [("X-Application-Id", "demo-app"), ("X-Application-Key", appKey)]).status == 200)
                    let accepted = try await client.send(.POST, "/coimotion/twShow/show/catList", json: #"{"_key": "\#(appKey)"}"#)
                    #expect((accepted.json?["errCode"] as? Int) == 0, "\(accepted.body)")
                }
            } catch {
                await gateway.shutdown()
                throw error
            }
            await gateway.shutdown()
            // Only the digest is stored, and a second start announces nothing new: the same replacement still works.
            let masterKey = try replacement(of: "demo-master-key-change-me")
            let again = try await Gateway.start(configuration: settings, registrations: ShippedGateway.registrations, options: started)
            do {
                let stored = try await again.accounts.database.select().column("sha256").from("gateway_generated_secrets").all()
                #expect(stored.count == 2)
                try await withServing(again) { port async throws in
                    let client = ShippedGateway(test: TestGateway(gateway: again, storage: storage), port: port)
                    #expect(try await client.send(.GET, "\(Self.tenant)/users", headers: [("X-Application-Id", "demo-app"), ("X-Application-Key", masterKey)]).status == 200)
                    #expect(try await client.send(.GET, "\(Self.tenant)/users", headers: Self.master).status == 401)
                }
                #expect(announced.withLock { $0.count } == 2)
            } catch {
                await again.shutdown()
                throw error
            }
            await again.shutdown()
        }
    }

    @Test("on loopback the shipped demo keys work as written, and `gateway check` says they work only there")
    func demoSecretsOnLoopback() async throws {
        try await ShippedGateway.with { gateway in
            #expect(try await gateway.send(.GET, "\(Self.tenant)/users", headers: Self.master).status == 200)
            let warnings = try GatewayConfiguration.parse(Data(ShippedGateway.shippedYAML.utf8), file: "plugins.yaml",
                                                          knownPlugins: ShippedGateway.registrations.map(\.id),
                                                          instanceTypes: ShippedGateway.registrations.filter(\.multipleInstances).map(\.id)).shippedSecretWarnings
            #expect(warnings.count == 3 && warnings.allSatisfy { $0.contains("only while server.host is a loopback address") }, "\(warnings)")
        }
        // Behind a proxy a loopback listener is as reachable as the proxy.
        let proxied = ShippedGateway.shippedYAML.replacingOccurrences(of: "  # trustedProxies: [10.0.0.0/8]", with: "  trustedProxies: [10.0.0.0/8]")
        #expect(proxied != ShippedGateway.shippedYAML)
        let behindProxy = try GatewayConfiguration.parse(Data(proxied.utf8), file: "plugins.yaml", knownPlugins: ShippedGateway.registrations.map(\.id),
                                                         instanceTypes: ShippedGateway.registrations.filter(\.multipleInstances).map(\.id))
        #expect(behindProxy.shippedSecretWarnings.count == 3 && behindProxy.shippedSecretWarnings.allSatisfy { $0.contains("does not work") })
        #expect(ShippedSecrets.isLoopback("127.0.0.1") && ShippedSecrets.isLoopback("localhost") && ShippedSecrets.isLoopback("::1"))
        #expect(!ShippedSecrets.isLoopback("0.0.0.0") && !ShippedSecrets.isLoopback("::") && !ShippedSecrets.isLoopback("10.0.0.1"))
    }

    /// Every key-like value of the shipped plugins.yaml must be known as a shipped secret, or it
    /// would work on a reachable listener.
    @Test("every secret the shipped plugins.yaml names is known as a shipped secret")
    func shippedSecretsAreKnown() {
        let keyLike = try! Regex(#"(?m)(?:\b(?:key|masterKey|secret|password|token)\s*:\s*|appKeys:\s*\[)\s*"?([A-Za-z0-9_.-]*[A-Za-z][A-Za-z0-9_.-]*)"?"#)
        var found: Set<String> = []
        for match in ShippedGateway.shippedYAML.matches(of: keyLike) {
            if let value = match.output[1].substring.map(String.init) { found.insert(value) }
        }
        #expect(!found.isEmpty)
        #expect(found.isSubset(of: ShippedSecrets.values), "\(found.subtracting(ShippedSecrets.values))")
    }
}
