import Foundation
import JWTKit

/// The claims of a token (a JWT's payload, or an RFC 7662 introspection answer) and what a
/// provider's `claims:` settings read from them.
struct TokenClaims: JWTPayload {
    let fields: [String: JWTHeaderField]

    init(fields: [String: JWTHeaderField]) { self.fields = fields }

    init(from decoder: any Decoder) throws {
        fields = try [String: JWTHeaderField](from: decoder)
    }

    func encode(to encoder: any Encoder) throws { try fields.encode(to: encoder) }

    /// The registered claims are checked by ``ProviderVerifier`` with the provider's leeway.
    func verify(using algorithm: some JWTAlgorithm) throws {}

    /// The claim `name`: a top-level claim of that name, else a path through nested objects
    /// (`realm_access.roles`).
    func value(_ name: String) -> JWTHeaderField? {
        if let value = fields[name] { return value }
        guard name.contains(".") else { return nil }
        var current: JWTHeaderField? = .object(fields)
        for part in name.split(separator: ".") {
            guard case .object(let object) = current else { return nil }
            current = object[String(part)]
        }
        return current
    }

    func string(_ name: String) -> String? {
        switch value(name) {
        case .string(let text): text
        case .int(let number): String(number)
        default: nil
        }
    }

    /// A claim as a list: an array of strings, or one string (split at spaces where
    /// `splittingSpaces`, as `scope` is written; `aud` or a role is one value).
    func strings(_ name: String, splittingSpaces: Bool = false) -> [String]? {
        switch value(name) {
        case .string(let text): splittingSpaces ? text.split(separator: " ").map(String.init) : [text]
        case .array(let items): items.compactMap { if case .string(let text) = $0 { text } else { nil } }
        default: nil
        }
    }

    /// A NumericDate claim (seconds since 1970).
    func date(_ name: String) -> Date? {
        switch fields[name] {
        case .int(let seconds): Date(timeIntervalSince1970: Double(seconds))
        case .decimal(let seconds): seconds.isFinite ? Date(timeIntervalSince1970: seconds) : nil
        default: nil
        }
    }

    func bool(_ name: String) -> Bool? {
        if case .bool(let value) = fields[name] { return value }
        return nil
    }
}

/// A caller an identity provider vouches for.
struct VerifiedIdentity: Sendable, Equatable {
    /// The provider's name in plugins.yaml.
    var provider: String
    /// With ``subject``, what links the caller to a gateway account.
    var issuer: String
    var subject: String
    var username: String
    /// The scopes that bound the request (`*` when the provider's tokens are not bound by scopes).
    var scopes: Set<String>
    var isAdmin: Bool
    var groups: [String]
    var expiresAt: Date
}

extension ProviderSettings {
    /// The identity `claims` state, read by this provider's `claims:` settings.
    func identity(named provider: String, issuer: String, claims: TokenClaims, expiresAt: Date) throws -> VerifiedIdentity {
        guard let subject = claims.string(self.claims.subject), !subject.isEmpty, subject.utf8.count <= 255 else {
            throw TokenRefusal("The token names no subject (\(self.claims.subject)).")
        }
        var scopes: Set<String> = ["*"]
        if !self.claims.scopes.isEmpty {
            let listed = claims.strings(self.claims.scopes, splittingSpaces: true)
                ?? (self.claims.scopes == "scope" ? claims.strings("scp", splittingSpaces: true) : nil)
            scopes = Set(listed ?? [])
        }
        let isAdmin = self.claims.admin.map { match in
            (claims.strings(match.claim) ?? []).contains(match.value ?? "")
        } ?? false
        let groups = self.claims.group.map { claims.strings($0.claim) ?? [] } ?? []
        // Shown and used as a name: printable, trimmed, at most 64 characters.
        let named = claims.string(self.claims.username).map { text in
            String(String.UnicodeScalarView(text.unicodeScalars.filter { !$0.properties.isWhitespace || $0 == " " }.filter { $0.properties.generalCategory != .control }))
                .trimmingCharacters(in: .whitespaces).prefix(64)
        }
        let username = named.flatMap { $0.isEmpty ? nil : String($0) } ?? String(subject.prefix(64))
        return VerifiedIdentity(provider: provider, issuer: issuer, subject: subject, username: username, scopes: scopes,
                                isAdmin: isAdmin, groups: groups, expiresAt: expiresAt)
    }
}
