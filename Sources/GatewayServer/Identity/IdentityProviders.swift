import Crypto
import Foundation
import GatewayCore
import HTTPTypes
import JWTKit
import NIOSSL
import Synchronization

/// The identity providers of `auth.providers`: which one a token belongs to, its verification,
/// and the identities verified lately.
///
/// A JWT goes to the `jwt` or `oidc` provider whose issuer its `iss` names (read before the
/// signature is checked, only to choose); a token no such provider takes, or an opaque one, is
/// asked of the `introspection` providers in turn. A verified token is remembered by its SHA-256
/// until its `exp` (so a request with a known token costs a hash and a lookup), an inactive
/// introspected one for a short while; providers that cannot be reached are never remembered.
/// A refused token is a 401 with `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750
/// §3.1) and a problem saying why; a provider that cannot answer makes it a 503.
final class IdentityProviders: Sendable {
    let verifiers: [ProviderVerifier]
    private let byIssuer: [String: ProviderVerifier]
    private let introspectors: [ProviderVerifier]
    private let remembered = Mutex<[SHA256Digest: Remembered]>([:])
    private let now: @Sendable () -> Date

    static let maxRemembered = 100_000
    /// The longest token accepted (a JWT with many claims fits in a few kilobytes).
    static let maxTokenLength = 16_384
    /// How long an inactive introspected token is remembered as such.
    static let inactiveFor: TimeInterval = 60
    /// Introspection calls under way at most: a flood of made-up bearer tokens (each one a call,
    /// asked before any rate limit, since the caller is not known yet) gets 503s beyond it.
    static let maxIntrospecting = 64
    /// At most this many of them for one client address (an IPv6 client by its /64 network): one
    /// client's flood of made-up tokens is answered 429 without taking everyone's share.
    static let maxIntrospectingPerAddress = 8
    private let introspecting = Mutex<(total: Int, byAddress: [String: Int])>((0, [:]))

    private struct Remembered {
        var identity: VerifiedIdentity?
        var refusal: String?
        var until: Date
    }

    init(_ settings: [String: ProviderSettings], baseDirectory: URL, now: @escaping @Sendable () -> Date = Date.init) throws {
        // Everything that can fail is checked before any HTTP client is made (each must be shut down).
        let sorted = settings.sorted(by: { $0.key < $1.key })
        var issuers: [String: String] = [:]
        var authorities: [String: [NIOSSLCertificate]] = [:]
        for (name, provider) in sorted {
            authorities[name] = try ProviderTransport.authorities(provider.ca, baseDirectory: baseDirectory)
            guard provider.type != .introspection, let issuer = provider.issuer else { continue }
            if let other = issuers[issuer] {
                throw GatewayError.badRequest("auth.providers: \(other) and \(name) both take tokens of issuer \(issuer).")
            }
            issuers[issuer] = name
        }
        guard sorted.filter({ $0.value.type == .introspection }).count <= 1 else {
            // An opaque token says nothing of its issuer: asking several endpoints would show each one the others' tokens.
            throw GatewayError.badRequest("auth.providers: at most one provider of type introspection.")
        }
        var verifiers: [ProviderVerifier] = []
        for (name, provider) in sorted {
            let transport = ProviderTransport(authorities: authorities[name])
            let keys: ProviderKeys? = switch provider.type {
            case .oidc: ProviderKeys(source: .discovery(issuer: provider.issuer ?? ""), transport: transport, baseDirectory: baseDirectory)
            case .jwt: ProviderKeys(source: provider.jwks.map { .jwks($0) } ?? .fixed(provider.keys), transport: transport, baseDirectory: baseDirectory)
            case .introspection: nil
            }
            verifiers.append(ProviderVerifier(name: name, settings: provider, keys: keys, transport: transport, now: now))
        }
        var byIssuer: [String: ProviderVerifier] = [:]
        for verifier in verifiers where verifier.keys != nil {
            byIssuer[verifier.settings.issuer ?? ""] = verifier
        }
        self.verifiers = verifiers
        self.byIssuer = byIssuer
        introspectors = verifiers.filter { $0.settings.type == .introspection }
        self.now = now
    }

    /// How `provider`'s callers become accounts.
    func provisioning(of provider: String) -> ProviderSettings.Provisioning {
        verifiers.first { $0.name == provider }?.settings.provision ?? .none
    }
    var isEmpty: Bool { verifiers.isEmpty }

    /// Loads every provider's keys (see ``ProviderKeys/prepare()``).
    func prepare() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for verifier in verifiers {
                guard let keys = verifier.keys else { continue }
                group.addTask {
                    do {
                        try await keys.prepare()
                    } catch {
                        throw GatewayError.badRequest("auth.providers.\(verifier.name): \(error)")
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    func shutdown() async {
        for verifier in verifiers { await verifier.transport?.shutdown() }
    }

    /// Whether `token` looks like a JWT (three base64url parts); only those go to `jwt` and `oidc` providers.
    static func isJWT(_ token: String) -> Bool {
        var dots = 0
        for byte in token.utf8 {
            if byte == UInt8(ascii: ".") { dots += 1; continue }
            let ok = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D || byte == 0x5F
            if !ok { return false }
        }
        return dots == 2
    }

    /// Whether some provider introspects opaque tokens.
    var introspects: Bool { !introspectors.isEmpty }

    /// The caller `token` stands for, or a 401 saying why not (503 when a provider cannot answer).
    func identify(_ token: String, address: String = "") async throws -> VerifiedIdentity {
        guard token.utf8.count <= Self.maxTokenLength else { throw Self.refusal("The token is too long.") }
        let digest = SHA256.hash(data: Data(token.utf8))
        let now = now()
        if let known = remembered.withLock({ $0[digest] }), known.until > now {
            if let identity = known.identity { return identity }
            throw Self.refusal(known.refusal ?? "The token is not active.")
        }
        do {
            let identity = try await verify(token, address: address)
            remember(digest, Remembered(identity: identity, until: identity.expiresAt), now: now)
            return identity
        } catch let busy as IntrospectionsBusy where busy.fromOneAddress {
            throw GatewayError.quotaExceeded(policy: "introspection", retryAfter: 1,
                                             detail: "Too many tokens from this address are being checked with the identity provider; retry shortly.")
        } catch let refusal as TokenRefusal {
            if refusal.inactive { remember(digest, Remembered(refusal: refusal.description, until: now.addingTimeInterval(Self.inactiveFor)), now: now) }
            throw Self.refusal(refusal.description)
        } catch is ProviderError {
            // What failed (addresses, TLS errors) is the operator's business: /readyz shows it to administrators.
            throw GatewayError.unavailable("The identity provider cannot verify this token now; try again shortly.", retryAfter: 5)
        }
    }

    /// More introspections under way than allowed: in all, or from one address.
    private struct IntrospectionsBusy: Error {
        var fromOneAddress: Bool
    }

    private func verify(_ token: String, address: String) async throws -> VerifiedIdentity {
        if Self.isJWT(token) {
            guard let (header, claims, _) = try? DefaultJWTParser().parse(Array(token.utf8), as: TokenClaims.self) else {
                throw TokenRefusal("The token is malformed.")
            }
            if let issuer = claims.string("iss"), let verifier = byIssuer[issuer] {
                return try await verifier.verify(jwt: token, header: header)
            }
            if introspectors.isEmpty {
                throw TokenRefusal("No provider of this gateway issues tokens of \(claims.string("iss").map { String($0.prefix(200)) } ?? "no issuer").")
            }
        }
        guard let introspector = introspectors.first else { throw TokenRefusal("The token is unknown.") }
        let client = ClientAddressKey.key(for: address, ipv6Prefix: 64)
        let refusal: IntrospectionsBusy? = introspecting.withLock { state in
            if state.byAddress[client, default: 0] >= Self.maxIntrospectingPerAddress { return IntrospectionsBusy(fromOneAddress: true) }
            guard state.total < Self.maxIntrospecting else { return IntrospectionsBusy(fromOneAddress: false) }
            state.total += 1
            state.byAddress[client, default: 0] += 1
            return nil
        }
        if let refusal {
            if refusal.fromOneAddress { throw refusal }
            throw ProviderError.unreachable("too many introspections under way")
        }
        defer {
            introspecting.withLock { state in
                state.total -= 1
                let left = state.byAddress[client, default: 1] - 1
                state.byAddress[client] = left > 0 ? left : nil
            }
        }
        return try await introspector.introspect(token)
    }

    private func remember(_ digest: SHA256Digest, _ entry: Remembered, now: Date) {
        remembered.withLock { table in
            if table.count >= Self.maxRemembered {
                table = table.filter { $0.value.until > now }
                if table.count >= Self.maxRemembered { table.removeAll(keepingCapacity: true) }
            }
            table[digest] = entry
        }
    }

    /// A 401 for a refused bearer token (RFC 6750 §3.1).
    static func refusal(_ reason: String) -> GatewayError {
        // A quoted-string of printable ASCII without quote or backslash (RFC 6750 §3).
        let description = String(String.UnicodeScalarView(reason.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F && $0 != "\"" && $0 != "\\" }))
        return GatewayError.unauthorized(reason).adding(headers: [.wwwAuthenticate: "Bearer error=\"invalid_token\", error_description=\"\(description)\""])
    }

    /// Each provider's keys, for `/readyz` and `gateway providers`.
    func statuses() -> [(name: String, type: String, status: ProviderKeys.Status?)] {
        verifiers.map { ($0.name, $0.settings.type.rawValue, $0.keys?.status) }
    }

    /// One provider as `/readyz` and `/v1/admin/providers` show it.
    struct State: Codable, Sendable {
        var name: String
        var type: String
        /// `ok`, or `degraded` while its keys cannot be fetched (those fetched before stay in use;
        /// a provider with none refuses its tokens with 503).
        var status: String
        var keys: Int?
        /// Why, for administrators only (it may name hosts and TLS errors).
        var reason: String?
    }

    /// Each provider's state; `reasons`: with why a degraded one is.
    func states(reasons: Bool) -> [State] {
        statuses().map { provider in
            let failing = provider.status.map { $0.error != nil || $0.keys == 0 } ?? false
            return State(name: provider.name, type: provider.type, status: failing ? "degraded" : "ok", keys: provider.status?.keys,
                         reason: reasons ? provider.status?.error : nil)
        }
    }
}

/// One identity provider as `gateway providers` shows it.
public struct ProviderReport: Sendable {
    public var name: String
    public var type: String
    /// The issuer, or the introspection endpoint.
    public var source: String
    /// Keys loaded (nil for introspection).
    public var keys: Int?
    /// Why the keys could not be loaded, if they could not.
    public var error: String?
}

extension Gateway {
    /// The providers of `configuration`, each with its keys fetched now.
    public static func providerReport(_ configuration: GatewayConfiguration, baseDirectory: URL) async throws -> [ProviderReport] {
        let identities = try IdentityProviders(configuration.auth.providers, baseDirectory: baseDirectory)
        var reports: [ProviderReport] = []
        for verifier in identities.verifiers {
            var report = ProviderReport(name: verifier.name, type: verifier.settings.type.rawValue,
                                        source: verifier.settings.issuer ?? verifier.settings.endpoint ?? "")
            if let keys = verifier.keys {
                do {
                    try await keys.prepare()
                } catch {
                    report.error = "\(error)"
                }
                let status = keys.status
                report.keys = status.keys
                report.error = report.error ?? status.error
            }
            reports.append(report)
        }
        await identities.shutdown()
        return reports
    }
}
