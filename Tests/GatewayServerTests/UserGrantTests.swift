import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import Testing

/// Grants (what an administrator lets a user write of the data everyone shares) and master keys
/// held to their scopes, through the account store, the authenticator and the admin API.
@Suite("user grants and master keys")
struct UserGrantTests {
    func headers(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)", .contentType: "application/json"] }

    func scopes(_ response: InProcessResponse) -> [String]? {
        ((try? JSONSerialization.jsonObject(with: Data(buffer: response.body))) as? [String: Any])?["scopes"] as? [String]
    }

    @Test("an administrator sets and reads a user's grants; the principal carries them at once; bad scopes are 422, others 403",
          arguments: TestStorage.available)
    func adminAPI(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            let ada = try await gateway.register("ada")
            gateway.gateway.forgetCredentials()
            let accounts = AccountAuthenticator(store: gateway.gateway.accounts, cacheTTL: .zero)
            #expect(try await accounts.principal(for: .sessionToken(ada.token), address: "127.0.0.1").grants.isEmpty)

            let set = try await gateway.gateway.handle(.put, "/v1/admin/users/ada/grants", headers: headers(root.token),
                                                       body: ByteBuffer(string: #"{"scopes": ["suggest:write", "transit:*"]}"#))
            #expect(set.status == 200)
            #expect(scopes(set) == ["suggest:write", "transit:*"])
            #expect(try await accounts.principal(for: .sessionToken(ada.token), address: "127.0.0.1").grants == ["suggest:write", "transit:*"],
                    "the change reaches the user's next request")
            #expect(scopes(try await gateway.gateway.handle(.get, "/v1/admin/users/ada/grants", headers: headers(root.token))) == ["suggest:write", "transit:*"])
            // A user's key carries its owner's grants (and is still held to its own scopes).
            let key = try await gateway.createKey(token: ada.token, grant: #"{"label": "k", "scopes": ["suggest:read"]}"#)
            let byKey = try await accounts.principal(for: .apiKey(key.secret), address: "127.0.0.1")
            #expect(byKey.grants == ["suggest:write", "transit:*"] && byKey.scopes == ["suggest:read"] && !byKey.isAdmin)

            for bad in [#"{"scopes": ["*"]}"#, #"{"scopes": ["admin"]}"#, #"{"scopes": ["suggest"]}"#] {
                let refused = try await gateway.gateway.handle(.put, "/v1/admin/users/ada/grants", headers: headers(root.token), body: ByteBuffer(string: bad))
                #expect(refused.status == 422, "\(bad)")
            }
            #expect(try await gateway.gateway.handle(.put, "/v1/admin/users/ada/grants", headers: headers(ada.token),
                                                     body: ByteBuffer(string: #"{"scopes": ["notes:write"]}"#)).status == 403)
            #expect(try await gateway.gateway.handle(.get, "/v1/admin/users/nobody/grants", headers: headers(root.token)).status == 404)
            #expect(try await gateway.gateway.handle(.put, "/v1/admin/users/ada/grants", headers: headers(root.token),
                                                     body: ByteBuffer(string: #"{"scopes": []}"#)).status == 200)
            #expect(try await accounts.principal(for: .sessionToken(ada.token), address: "127.0.0.1").grants.isEmpty)

            // Deleting the account deletes its grants.
            try await gateway.gateway.accounts.grant(["notes:write"], to: ada.userID)
            #expect(try await gateway.gateway.accounts.deleteUser(id: ada.userID))
            #expect(try await gateway.gateway.accounts.grants(of: ada.userID).isEmpty)
        }
    }

    @Test("a master key acts as an administrator only with admin or *; its scopes are its grants; a user's key never takes admin")
    func masterKeys() async throws {
        try await TestGateway.with(notes, yaml: notesYAML) { gateway in
            let accounts = AccountAuthenticator(store: gateway.gateway.accounts, cacheTTL: .zero)
            func principal(_ scopes: [String]) async throws -> Principal {
                let (secret, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "m", scopes: scopes))
                return try await accounts.principal(for: .apiKey(secret), address: "127.0.0.1")
            }
            let reader = try await principal(["suggest:read"])
            #expect(!reader.isAdmin && reader.userID == nil && reader.grants == ["suggest:read"])
            #expect(try await principal(["admin"]).isAdmin)
            #expect(try await principal(["*"]).isAdmin)
            #expect(try await !principal(["notes:*"]).isAdmin)
            let ada = try await gateway.register("ada")
            await #expect(throws: GatewayError.self) {
                _ = try await gateway.gateway.accounts.createKey(userID: ada.userID, grant: .init(label: "x", scopes: ["admin"]))
            }
        }
    }
}
