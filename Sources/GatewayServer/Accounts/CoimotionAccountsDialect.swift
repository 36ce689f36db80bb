import Foundation
import GatewayCore
import GatewaySupport

/// The COIMOTION accounts API (`core/user/...`, legacy-apis.md §1) over the same accounts and
/// sessions as the native API. Passwords arrive as the client's prehash
/// `sha1hex(sha1hex(accName) + password)`, which is exactly what the store keeps under bcrypt.
enum CoimotionAccountsDialect {
    struct Profile: Encodable, Sendable {
        var dspName: String
        var isGuest: GuestFlag
    }

    /// The old service answered `1` for guests and `false` for signed-in users; both are kept.
    enum GuestFlag: Encodable, Sendable {
        case guest, member
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .guest: try container.encode(1)
            case .member: try container.encode(false)
            }
        }
    }

    struct Empty: Encodable, Sendable {}

    static func make(store: AccountStore, authenticator: AccountAuthenticator, throttle: LoginThrottle,
                     registration: AuthSettings.Registration, verifications: EmailVerifications) -> Dialect {
        @Sendable func prehash(_ call: Coimotion.Call, _ name: String) throws -> String {
            let value = try call.require(name).lowercased()
            guard value.count == 40, value.allSatisfy(\.isHexDigit) else {
                throw GatewayError.invalid(field: name, "must be the client's SHA-1 prehash (40 hex digits)")
            }
            return value
        }
        return Coimotion.dialect(routes: [
            Route.define(.post, "/coimotion/core/user/register", summary: "Register (accName, passwd, passwd2 as prehashes)")
                .handle(Coimotion.call { call, _ in
                    guard registration == .open else { throw GatewayError.forbidden("Registration is closed.") }
                    let name = try call.require("accName")
                    let password = try prehash(call, "passwd")
                    guard try prehash(call, "passwd2") == password else { throw GatewayError.invalid(field: "passwd2", "does not match passwd") }
                    var profile = call.parameters
                    for reserved in ["accName", "passwd", "passwd2", "dspName"] { profile[reserved] = nil }
                    let user = try await store.register(username: name, secret: .prehashed(password), displayName: call.string("dspName"),
                                                        profile: profile.filter { $0.key.count <= 64 && $0.value.count <= 1000 })
                    verifications.offer(user)
                    return .ok(["accName": user.username], message: "Register Ok.")
                }),
            Route.define(.post, "/coimotion/core/user/login", summary: "Log in; the reply carries the token")
                .handle(Coimotion.call { call, context in
                    let name = try call.require("accName")
                    let password = try prehash(call, "passwd")
                    let user = try await throttle.verify(store, identifier: name, secret: .prehashed(password), address: context.principal.address,
                                                         acceptsEmail: false)
                    guard let user else { throw GatewayError.unauthorized("Login failed: wrong account name or password.") }
                    let session = try await store.createSession(userID: user.id)
                    return .ok(message: "Login Ok.", token: .issue(session.token))
                }),
            Route.define(.post, "/coimotion/core/user/logout", summary: "Log out (always succeeds)")
                .handle(Coimotion.call { call, _ in
                    if let token = call.token, !token.isEmpty {
                        try await store.revokeSession(token: token)
                        authenticator.forget(credential: .sessionToken(token))
                    }
                    return .ok(message: "Logout Ok.", token: .end)
                }),
            Route.define(.post, "/coimotion/core/user/profile", summary: "The profile; a guest without a valid token")
                .handle(Coimotion.call { _, context in
                    guard let userID = context.principal.userID, let user = try await store.user(id: userID) else {
                        return .ok(Profile(dspName: "guest", isGuest: .guest))
                    }
                    return .ok(Profile(dspName: user.displayName, isGuest: .member))
                }),
            Route.define(.post, "/coimotion/core/user/updPasswd", summary: "Change the password (oldPasswd, passwd, passwd2)")
                .access(.user)
                .handle(Coimotion.call { call, context in
                    guard let userID = context.principal.userID, let user = try await store.user(id: userID) else {
                        throw GatewayError.unauthorized("Please log in first.")
                    }
                    let old = try prehash(call, "oldPasswd")
                    let new = try prehash(call, "passwd")
                    guard try prehash(call, "passwd2") == new else { throw GatewayError.invalid(field: "passwd2", "does not match passwd") }
                    let verified = try await throttle.verify(store, user: user, secret: .prehashed(old), address: context.principal.address)
                    guard verified else { throw GatewayError.forbidden("The old password is wrong.") }
                    try await store.setPassword(userID: user.id, secret: .prehashed(new))
                    authenticator.forget(userID: user.id)
                    // Changing the password ends every session; this client gets a fresh one.
                    let session = try await store.createSession(userID: user.id)
                    return .ok(message: "Password updated.", token: .issue(session.token))
                }),
        ])
    }
}
