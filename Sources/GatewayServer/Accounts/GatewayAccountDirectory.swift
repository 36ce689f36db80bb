import Foundation
import GatewayCore

/// The gateway's accounts offered to plugins (``AccountDirectory``): the same store, login
/// throttle and registration policy as the native account API.
struct GatewayAccountDirectory: AccountDirectory {
    let store: AccountStore
    let authenticator: AccountAuthenticator
    let throttle: LoginThrottle
    let registration: AuthSettings.Registration

    func register(username: String, email: String?, password: String) async throws -> AccountRecord {
        guard registration == .open else { throw GatewayError.forbidden("Registration is closed on this gateway.") }
        return Self.record(try await store.register(username: username, secret: .plain(password), email: email))
    }

    func signIn(identifier: String, password: String, address: String) async throws -> AccountSession {
        try await throttle.admit(username: identifier, address: address)
        // An identifier with '@' that names a registered email signs in that account; otherwise it is a username.
        var username = identifier
        if identifier.contains("@"), let user = try await store.user(email: identifier) { username = user.username }
        let user = try await store.verify(username: username, secret: .plain(password))
        throttle.record(username: identifier, address: address, succeeded: user != nil)
        guard let user else { throw GatewayError.unauthorized("The username or password is wrong.") }
        let session = try await store.createSession(userID: user.id)
        return AccountSession(token: session.token, expiresAt: session.expiresAt, account: Self.record(user))
    }

    func signOut(token: String) async throws {
        try await store.revokeSession(token: token)
        authenticator.forget(credential: .sessionToken(token))
    }

    func account(id: String) async throws -> AccountRecord? {
        try await store.user(id: id).map(Self.record)
    }

    static func record(_ user: AccountStore.User) -> AccountRecord {
        AccountRecord(id: user.id, username: user.username, email: user.profile["email"], displayName: user.displayName,
                      createdAt: user.createdAt, updatedAt: user.createdAt)
    }

    func principal(for credential: Credential, address: String) async throws -> Principal {
        try await authenticator.principal(for: credential, address: address)
    }

    func issueKey(for userID: String?, _ request: KeyRequest) async throws -> IssuedKey {
        let issued = try await store.createKey(userID: userID, grant: AccountStore.KeyGrant(
            label: request.label, scopes: request.scopes, resources: request.resources, allowedAddresses: request.allowedAddresses,
            expiresAt: request.expiresAt))
        return IssuedKey(id: issued.key.id, secret: issued.secret)
    }

    func revokeKey(id: String, of userID: String?) async throws -> Bool {
        guard try await store.revokeKey(id: id, userID: userID) else { return false }
        authenticator.forget(userID: userID)
        return true
    }
}
