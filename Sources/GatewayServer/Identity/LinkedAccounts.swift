import Crypto
import Foundation
import GatewayCore
import SQLKit

/// Gateway accounts of callers who sign in at an identity provider, linked by (issuer, subject)
/// in `gateway_identities`: a user renamed at the provider stays the same account, and two
/// providers' subjects never meet.
extension AccountStore {
    struct IdentityLinkRow: Codable {
        var issuer: String
        var subject: String
        var user_id: String
        var provider: String
        var created_at: Double
    }

    /// The account linked to `identity`; with `provision: auto`, one is made (and linked) on
    /// first sight. Nil when none is linked and none may be made.
    func linkedUser(for identity: VerifiedIdentity, provision: ProviderSettings.Provisioning) async throws -> User? {
        if let row = try await linkedRow(issuer: identity.issuer, subject: identity.subject) { return row.user }
        guard provision == .auto else { return nil }
        return try await makeAccount(for: identity)
    }

    private func linkedRow(issuer: String, subject: String) async throws -> UserRow? {
        guard let link = try await database.select().column("*").from("gateway_identities")
            .where("issuer", .equal, issuer).where("subject", .equal, subject)
            .first(decoding: IdentityLinkRow.self) else { return nil }
        return try await userRow(id: link.user_id)
    }

    /// Links an existing account to an identity (for `provision: existing`), replacing an earlier link.
    public func link(userID: String, issuer: String, subject: String, provider: String) async throws {
        guard try await userRow(id: userID) != nil else { throw GatewayError.notFound("No such user.") }
        guard !subject.isEmpty, subject.utf8.count <= 255 else { throw GatewayError.invalid(field: "/subject", "must be 1 to 255 bytes") }
        try await database.delete(from: "gateway_identities").where("issuer", .equal, issuer).where("subject", .equal, subject).run()
        try await database.insert(into: "gateway_identities")
            .model(IdentityLinkRow(issuer: issuer, subject: subject, user_id: userID, provider: provider, created_at: clock.now().timeIntervalSince1970))
            .run()
    }

    /// The identities linked to an account.
    func links(userID: String) async throws -> [IdentityLinkRow] {
        try await database.select().column("*").from("gateway_identities").where("user_id", .equal, userID)
            .orderBy("created_at").all(decoding: IdentityLinkRow.self)
    }

    /// Makes the account of a new identity: named after its username (or, when that name is taken
    /// or unusable, the name and a mark of the identity), with no password (it signs in at its
    /// provider; a password reset can give it one). Two requests making the same account at once
    /// (here or on another instance) end with one: the loser's account is removed.
    private func makeAccount(for identity: VerifiedIdentity) async throws -> User {
        let mark = SHA256.hash(data: Data((identity.issuer + "\n" + identity.subject).utf8)).prefix(4).map { String(format: "%02x", $0) }.joined()
        var base = identity.username.trimmingCharacters(in: .whitespacesAndNewlines)
        if Self.usernameProblem(base) != nil { base = "user" }
        base = String(base.prefix(Self.longestUsername - 9))
        let now = clock.now().timeIntervalSince1970
        var made: UserRow?
        var failure: (any Error)?
        for name in [base, base + "-" + mark, base + "-" + String(Self.newID().prefix(8))] {
            let row = UserRow(id: Self.newID(), username: name, username_key: Self.usernameKey(name), display_name: identity.username,
                              profile: "{}", password_hash: "!", is_admin: 0, disabled: 0, created_at: now, updated_at: now,
                              email_key: nil, options: nil, prehash_name: nil)
            do {
                try await database.insert(into: "gateway_users").model(row).run()
                made = row
                break
            } catch {
                // The name is taken (perhaps by a request making this same account: then it is linked
                // by now), or was for a moment; otherwise the error is the database's, and is told.
                if let linked = try await linkedRow(issuer: identity.issuer, subject: identity.subject) { return linked.user }
                if try await userRow(usernameKey: row.username_key) == nil { failure = error }
            }
        }
        guard let made else { throw failure ?? GatewayError.conflict("No free username for this identity.", duplicate: "username") }
        do {
            try await database.insert(into: "gateway_identities")
                .model(IdentityLinkRow(issuer: identity.issuer, subject: identity.subject, user_id: made.id, provider: identity.provider, created_at: now))
                .run()
            return made.user
        } catch {
            // Linked meanwhile by another request: keep that account.
            try? await database.delete(from: "gateway_users").where("id", .equal, made.id).run()
            if let winner = try await linkedRow(issuer: identity.issuer, subject: identity.subject) { return winner.user }
            throw error
        }
    }
}
