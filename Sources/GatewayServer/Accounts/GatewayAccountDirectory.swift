import Foundation
import GatewayCore

/// The gateway's accounts offered to plugins (``AccountDirectory``): the same store, login
/// throttle and registration policy as the native account API.
struct GatewayAccountDirectory: AccountDirectory {
    let store: AccountStore
    let authenticator: AccountAuthenticator
    let throttle: LoginThrottle
    let registration: AuthSettings.Registration
    let resets: PasswordResets

    func register(username: String, email: String?, password: String) async throws -> AccountRecord {
        guard registration == .open else { throw GatewayError.forbidden("Registration is closed on this gateway.") }
        let user = try await store.register(username: username, secret: .plain(password), email: email)
        resets.verifications.offer(user)
        return Self.record(user)
    }

    func signIn(identifier: String, password: String, address: String) async throws -> (token: String, expiresAt: Date, account: AccountRecord) {
        // An identifier with '@' that names a registered email signs in that account; otherwise it is a username.
        let user = try await throttle.verify(store, identifier: identifier, secret: .plain(password), address: address, acceptsEmail: true)
        guard let user else { throw GatewayError.unauthorized("The username or password is wrong.") }
        let session = try await store.createSession(userID: user.id)
        return (token: session.token, expiresAt: session.expiresAt, account: Self.record(user))
    }

    func signOut(token: String) async throws {
        try await store.revokeSession(token: token)
        authenticator.forget(credential: .sessionToken(token))
    }

    func account(id: String) async throws -> AccountRecord? {
        try await store.user(id: id).map(Self.record)
    }

    func accounts(username: String?, email: String?, skip: Int, limit: Int) async throws -> (accounts: [AccountRecord], total: Int?) {
        let found = try await store.users(username: username, email: email, skip: max(0, skip), limit: max(0, min(limit, 1_000)))
        return (found.users.map(Self.record), found.total)
    }

    func updateAccount(id: String, username: String?, email: String?, password: String?, options value: JSONValue?) async throws -> AccountRecord {
        var options: String?
        if let value {
            guard case .object = value else { throw GatewayError.invalid(field: "/options", "must be a JSON object") }
            options = value.jsonText
            guard options!.utf8.count <= 64 * 1024 else { throw GatewayError.invalid(field: "/options", "must be at most 64 KB of JSON") }
        }
        if let password, let problem = AccountStore.passwordProblem(password) { throw GatewayError.invalid(field: "/password", problem) }
        let before = try await store.user(id: id)
        var user = try await store.updateUser(id: id, username: username, email: email, options: options)
        // A new address is unverified until its owner opens the link mailed to it.
        if user.email != before?.email { resets.verifications.offer(user) }
        if let password {
            try await store.setPassword(userID: id, secret: .plain(password))
            authenticator.forget(userID: id)
            user = try await store.user(id: id) ?? user
        }
        return Self.record(user)
    }

    func requestPasswordReset(username: String?, email: String?) async throws {
        resets.request(username: username, email: email)
    }

    func deleteAccount(id: String) async throws -> Bool {
        guard try await store.deleteUser(id: id) else { return false }
        authenticator.forget(userID: id)
        return true
    }

    static func record(_ user: AccountStore.User) -> AccountRecord {
        AccountRecord(id: user.id, username: user.username, email: user.email, displayName: user.displayName,
                      createdAt: user.createdAt, updatedAt: user.updatedAt,
                      options: user.options.flatMap { try? JSONValue.parse($0) } ?? .object([:]))
    }

    func principal(for credential: Credential, address: String) async throws -> Principal {
        try await authenticator.principal(for: credential, address: address)
    }

    func issueKey(for userID: String?, label: String, scopes: [String], resources: [String: [String]]?, allowedAddresses: [String]?,
                  expiresAt: Date?) async throws -> (id: String, secret: String) {
        let issued = try await store.createKey(userID: userID, grant: AccountStore.KeyGrant(
            label: label, scopes: scopes, resources: resources, allowedAddresses: allowedAddresses, expiresAt: expiresAt))
        return (id: issued.key.id, secret: issued.secret)
    }

    func revokeKey(id: String, of userID: String?) async throws -> Bool {
        guard try await store.revokeKey(id: id, userID: userID) else { return false }
        authenticator.forget(userID: userID)
        return true
    }
}
