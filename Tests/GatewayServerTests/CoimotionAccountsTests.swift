import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
import NotesFixturePlugin
import Testing

/// The COIMOTION accounts dialect, spoken the way the old SDK speaks it.
@Suite("COIMOTION accounts dialect")
struct CoimotionAccountsTests {
    static let yaml = "auth: { appKeys: [app-1] }\n" + notesYAML

    func call(_ gateway: TestGateway, _ path: String, _ body: [String: Any]) async throws -> [String: Any] {
        let response = try await gateway.gateway.handle(.post, "/coimotion/core/user/\(path)", headers: .json,
                                                        body: ByteBuffer(data: try JSONSerialization.data(withJSONObject: body)))
        #expect(response.status == 200)
        return try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
    }

    func prehash(_ name: String, _ password: String) -> String { AccountStore.prehash(username: name, password: password) }

    @Test("register, log in, read the profile, change the password and log out, as the SDK does")
    func flow() async throws {
        try await TestGateway.with(notes, yaml: Self.yaml) { gateway in
            let guest = try await call(gateway, "profile", ["_key": "app-1"])
            #expect(guest["errCode"] as? Int == 0)
            #expect((guest["value"] as? [String: Any])?["dspName"] as? String == "guest")
            #expect((guest["value"] as? [String: Any])?["isGuest"] as? Int == 1)

            let hash = prehash("mei", "pass1234")
            let registered = try await call(gateway, "register", ["_key": "app-1", "accName": "mei", "passwd": hash, "passwd2": hash])
            #expect(registered["errCode"] as? Int == 0)

            let login = try await call(gateway, "login", ["_key": "app-1", "accName": "mei", "passwd": hash])
            #expect(login["errCode"] as? Int == 0)
            #expect(login["message"] as? String == "Login Ok.")
            let token = try #require(login["token"] as? String)

            let profile = try await call(gateway, "profile", ["_key": "app-1", "token": token])
            #expect((profile["value"] as? [String: Any])?["dspName"] as? String == "mei")
            #expect((profile["value"] as? [String: Any])?["isGuest"] as? Bool == false)

            // The same account and session work in the native API.
            #expect(try await gateway.gateway.handle(.get, "/v1/me", headers: [.authorization: "Bearer \(token)"]).status == 200)
            let native = try await gateway.gateway.handle(.post, "/v1/auth/login", headers: .json,
                                                          body: ByteBuffer(string: #"{"username": "mei", "password": "pass1234"}"#))
            #expect(native.status == 200)

            let newHash = prehash("mei", "newpass99")
            let changed = try await call(gateway, "updPasswd", ["_key": "app-1", "token": token, "oldPasswd": hash, "passwd": newHash, "passwd2": newHash])
            #expect(changed["errCode"] as? Int == 0)
            let rotated = try #require(changed["token"] as? String)
            #expect(rotated != token)
            let stale = try await call(gateway, "profile", ["_key": "app-1", "token": token])
            #expect(stale["token"] as? String == "")
            #expect((stale["value"] as? [String: Any])?["isGuest"] as? Int == 1)

            let logout = try await call(gateway, "logout", ["_key": "app-1", "token": rotated])
            #expect(logout["errCode"] as? Int == 0)
            #expect(logout["token"] as? String == "")
            let after = try await call(gateway, "profile", ["_key": "app-1", "token": rotated])
            #expect((after["value"] as? [String: Any])?["isGuest"] as? Int == 1)
        }
    }

    @Test("errors keep the legacy shape: wrong app key, wrong password, taken name, bad input, a body that is not JSON")
    func errors() async throws {
        try await TestGateway.with(notes, yaml: Self.yaml) { gateway in
            let wrongKey = try await call(gateway, "profile", ["_key": "stolen"])
            #expect(wrongKey["errCode"] as? Int == -1)
            let hash = prehash("lin", "pass1234")
            _ = try await call(gateway, "register", ["_key": "app-1", "accName": "lin", "passwd": hash, "passwd2": hash])
            let taken = try await call(gateway, "register", ["_key": "app-1", "accName": "LIN", "passwd": hash, "passwd2": hash])
            #expect(taken["errCode"] as? Int == 5)
            let mismatch = try await call(gateway, "register", ["_key": "app-1", "accName": "x", "passwd": hash, "passwd2": prehash("x", "other")])
            #expect(mismatch["errCode"] as? Int == 1)
            let plain = try await call(gateway, "login", ["_key": "app-1", "accName": "lin", "passwd": "pass1234"])
            #expect(plain["errCode"] as? Int == 1)
            let wrong = try await call(gateway, "login", ["_key": "app-1", "accName": "lin", "passwd": prehash("lin", "nope")])
            #expect(wrong["errCode"] as? Int == 2)
            #expect((wrong["message"] as? String)?.isEmpty == false)
            let notLoggedIn = try await call(gateway, "updPasswd", ["_key": "app-1", "oldPasswd": hash, "passwd": hash, "passwd2": hash])
            #expect(notLoggedIn["errCode"] as? Int == 2)
            let garbage = try await gateway.gateway.handle(.post, "/coimotion/core/user/login", headers: .json, body: ByteBuffer(string: "{{"))
            #expect(garbage.status == 200)
            #expect(String(buffer: garbage.body).contains("\"errCode\":1"))
        }
    }
}
