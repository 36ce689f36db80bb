import Foundation
import GatewayCore
import JWTKit
import Synchronization

/// The keys a `jwt` or `oidc` provider's tokens are verified with: configured ones, or a JWKS
/// fetched from its URL or found by discovery.
///
/// A fetched set is kept for its `Cache-Control: max-age` (bounded to 1 minute – 1 day; 10
/// minutes without one) and refreshed in the background once stale; a token naming a `kid` the
/// set lacks refreshes it at once, at most once per ``unknownKeyInterval`` (a flood of random
/// kids costs one fetch); a token that comes while a fetch is under way waits for it. When the
/// provider cannot be reached, the keys fetched before stay in use, the next attempt waits
/// ``retryInterval``, and a token whose key is not known is answered 503 (it may be good). Each fetched set is a new `JWTKeyCollection` swapped in whole, with every key bound to
/// one algorithm (a JWK without `alg` gets its type's usual one) and none acting as a default for
/// tokens naming another kid.
final class ProviderKeys: Sendable {
    enum Source: Sendable {
        case fixed([ProviderSettings.StaticKey])
        case jwks(String)
        case discovery(issuer: String)
    }

    /// One set of keys: the collection, and each key's algorithm by `kid` ("" for the key a
    /// token without `kid` is verified with).
    struct KeySet: Sendable {
        let collection: JWTKeyCollection
        let algorithms: [String: String]
        let freshUntil: ContinuousClock.Instant
    }

    /// What `/readyz` and `gateway providers` show.
    struct Status: Sendable {
        var keys: Int
        var error: String?
    }

    private struct State {
        var current: KeySet?
        var error: String?
        var lastUnknownKeyRefresh: ContinuousClock.Instant?
        /// After a failed fetch: no other before this.
        var retryAt: ContinuousClock.Instant?
        var refreshing: Task<Void, Never>?
    }

    static let unknownKeyInterval: Duration = .seconds(30)
    static let retryInterval: Duration = .seconds(10)
    static let defaultAge: Duration = .seconds(600)
    static let ageBounds: ClosedRange<Int> = 60...86_400

    let source: Source
    private let transport: ProviderTransport?
    private let baseDirectory: URL
    private let state = Mutex(State())

    init(source: Source, transport: ProviderTransport?, baseDirectory: URL) {
        self.source = source
        self.transport = transport
        self.baseDirectory = baseDirectory
    }

    var status: Status {
        state.withLock { Status(keys: $0.current?.algorithms.count ?? 0, error: $0.error) }
    }

    /// Loads the keys: configured keys must load (an error names the key); a provider that cannot
    /// be reached now is reported by ``status`` and tried again when a token comes.
    func prepare() async throws {
        if case .fixed(let keys) = source {
            let set = try await Self.fixedSet(keys, baseDirectory: baseDirectory)
            state.withLock { $0.current = set }
        } else {
            await refresh()
        }
    }

    /// The collection and the algorithm of the key `kid` names.
    func key(for kid: String?) async throws -> (JWTKeyCollection, algorithm: String) {
        let name = kid ?? ""
        let now = ContinuousClock.now
        let (current, stale, running) = state.withLock { ($0.current, $0.current.map { now > $0.freshUntil } ?? true, $0.refreshing) }
        if let current, let algorithm = current.algorithms[name] {
            if stale { startRefresh(now) }
            return (current.collection, algorithm)
        }
        if let running {
            // A fetch under way may bring the key.
            await running.value
        } else {
            // Unknown kid (or no keys yet): fetch, unless one was made for that reason lately or failed lately.
            let mayRefresh: Bool = state.withLock { state in
                if case .fixed = source { return false }
                if let retry = state.retryAt, now < retry { return false }
                if state.current != nil, let last = state.lastUnknownKeyRefresh, now - last < Self.unknownKeyInterval { return false }
                state.lastUnknownKeyRefresh = now
                return true
            }
            if mayRefresh { await refresh() }
        }
        let (set, error) = state.withLock { ($0.current, $0.error) }
        guard let set else { throw ProviderError.unreachable(error ?? "no keys") }
        guard let algorithm = set.algorithms[name] else {
            // The keys could not be fetched lately: the token may be good.
            if let error { throw ProviderError.unreachable(error) }
            throw TokenRefusal(kid == nil ? "The token names no key (kid), and this provider has no key for such tokens." : "The token's key (kid) is not one of the provider's keys.")
        }
        return (set.collection, algorithm)
    }

    /// Fetches the keys now (one fetch at a time: a refresh already under way is waited for).
    func refresh() async {
        let task: Task<Void, Never> = state.withLock { state in
            if let running = state.refreshing { return running }
            let task = Task { await self.fetch() }
            state.refreshing = task
            return task
        }
        await task.value
    }

    private func startRefresh(_ now: ContinuousClock.Instant) {
        state.withLock { state in
            guard state.refreshing == nil, state.retryAt.map({ now >= $0 }) ?? true else { return }
            state.refreshing = Task { await self.fetch() }
        }
    }

    private func fetch() async {
        do {
            let set = try await fetchSet()
            state.withLock { state in
                state.current = set
                state.error = nil
                state.retryAt = nil
                state.refreshing = nil
            }
        } catch {
            state.withLock { state in
                state.error = "\(error)"
                state.retryAt = .now + Self.retryInterval
                state.refreshing = nil
            }
        }
    }

    private func fetchSet() async throws -> KeySet {
        guard let transport else { throw ProviderError.unreachable("no transport") }
        var jwksURL: String
        switch source {
        case .fixed(let keys):
            return try await Self.fixedSet(keys, baseDirectory: baseDirectory)
        case .jwks(let url):
            jwksURL = url
        case .discovery(let issuer):
            let trimmed = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
            let answer = try await transport.get(trimmed + "/.well-known/openid-configuration")
            guard answer.status == 200 else { throw ProviderError.unreachable("discovery answered \(answer.status)") }
            guard let document = try? JSONSerialization.jsonObject(with: answer.body) as? [String: Any] else {
                throw ProviderError.badDocument("the discovery document is not a JSON object")
            }
            // OpenID Connect Discovery §4.3: the document's issuer is exactly the one configured.
            guard document["issuer"] as? String == issuer else {
                throw ProviderError.badDocument("the discovery document names issuer \(document["issuer"] as? String ?? "none"), not \(issuer)")
            }
            guard let url = document["jwks_uri"] as? String else { throw ProviderError.badDocument("the discovery document names no jwks_uri") }
            if let problem = ProviderSettings.transportProblem(url) { throw ProviderError.badDocument("jwks_uri: \(problem)") }
            jwksURL = url
        }
        let answer = try await transport.get(jwksURL)
        guard answer.status == 200 else { throw ProviderError.unreachable("the JWKS answered \(answer.status)") }
        let age = answer.maxAge.map { Duration.seconds(min(max($0, Self.ageBounds.lowerBound), Self.ageBounds.upperBound)) } ?? Self.defaultAge
        return try await Self.jwksSet(answer.body, freshFor: age)
    }

    /// The usable signing keys of a JWKS document: keys for encryption, of a type or curve
    /// jwt-kit does not verify, or without a `kid` (unless the set has only that one) are left out.
    static func jwksSet(_ body: Data, freshFor age: Duration) async throws -> KeySet {
        struct Document: Decodable { let keys: [JWTHeaderField] }
        guard let document = try? JSONDecoder().decode(Document.self, from: body) else {
            throw ProviderError.badDocument("the JWKS is not a JSON object with keys")
        }
        let collection = JWTKeyCollection()
        var algorithms: [String: String] = [:]
        for raw in document.keys {
            guard case .object(let fields) = raw else { continue }
            if case .string(let use) = fields["use"], use != "sig" { continue }
            guard let data = try? JSONEncoder().encode(raw), var jwk = try? JSONDecoder().decode(JWK.self, from: data) else { continue }
            if jwk.algorithm == nil {
                switch (jwk.keyType, jwk.curve?.rawValue) {
                case (.rsa, _): jwk.algorithm = .rs256
                case (.octetKeyPair, "Ed25519"): jwk.algorithm = .eddsa
                case (.ecdsa, "P-256"): jwk.algorithm = .es256
                case (.ecdsa, "P-384"): jwk.algorithm = .es384
                default: continue
                }
            }
            guard let algorithm = jwk.algorithm?.rawValue, JWTAlgorithms.asymmetric.contains(algorithm) else { continue }
            var name = ""
            if case .string(let kid) = fields["kid"] {
                name = kid
            } else if document.keys.count == 1 {
                jwk.keyIdentifier = JWKIdentifier(string: "gateway-default-key")
            } else {
                continue
            }
            do {
                _ = try await collection.add(jwk: jwk, isDefault: name.isEmpty)
                algorithms[name] = algorithm
            } catch {
                continue
            }
        }
        guard !algorithms.isEmpty else { throw ProviderError.badDocument("the JWKS holds no usable signing key") }
        return KeySet(collection: collection, algorithms: algorithms, freshUntil: .now + age)
    }

    /// The keys of the file: each PEM read as RSA, ECDSA P-256/P-384 or Ed25519, each secret as HMAC.
    static func fixedSet(_ keys: [ProviderSettings.StaticKey], baseDirectory: URL) async throws -> KeySet {
        let collection = JWTKeyCollection()
        var algorithms: [String: String] = [:]
        for (index, key) in keys.enumerated() {
            let name = key.kid ?? ""
            guard algorithms[name] == nil else {
                throw GatewayError.badRequest(name.isEmpty ? "Only one key may lack a kid." : "Two keys have the kid '\(name)'.")
            }
            let kid = key.kid.map { JWKIdentifier(string: $0) }
            let algorithm: String
            if let secret = key.secret {
                algorithm = key.algorithm ?? "HS256"
                let digest: DigestAlgorithm = algorithm == "HS512" ? .sha512 : algorithm == "HS384" ? .sha384 : .sha256
                _ = await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: digest, kid: kid)
            } else {
                let pem: String
                if let file = key.file {
                    let path = file.hasPrefix("/") ? file : baseDirectory.appendingPathComponent(file).path
                    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                        throw GatewayError.badRequest("Key \(index + 1): the file \(path) cannot be read.")
                    }
                    pem = text
                } else {
                    pem = key.pem ?? ""
                }
                algorithm = try await addPublicKey(pem, algorithm: key.algorithm, kid: kid, to: collection, number: index + 1)
            }
            algorithms[name] = algorithm
        }
        return KeySet(collection: collection, algorithms: algorithms, freshUntil: .now + .seconds(86_400 * 365 * 100))
    }

    private static func addPublicKey(_ pem: String, algorithm wanted: String?, kid: JWKIdentifier?, to collection: JWTKeyCollection, number: Int) async throws -> String {
        func digest(_ algorithm: String) -> DigestAlgorithm {
            algorithm.hasSuffix("512") ? .sha512 : algorithm.hasSuffix("384") ? .sha384 : .sha256
        }
        func mismatch(_ usual: String) -> GatewayError {
            GatewayError.badRequest("Key \(number) cannot verify \(wanted ?? usual).")
        }
        if let key = try? Insecure.RSA.PublicKey(pem: pem) {
            let algorithm = wanted ?? "RS256"
            if algorithm.hasPrefix("RS") {
                _ = await collection.add(rsa: key, digestAlgorithm: digest(algorithm), kid: kid)
            } else if algorithm.hasPrefix("PS") {
                _ = await collection.add(pss: key, digestAlgorithm: digest(algorithm), kid: kid)
            } else {
                throw mismatch(algorithm)
            }
            return algorithm
        }
        if let key = try? ES256PublicKey(pem: pem) {
            guard wanted == nil || wanted == "ES256" else { throw mismatch("ES256") }
            _ = await collection.add(ecdsa: key, kid: kid)
            return "ES256"
        }
        if let key = try? ES384PublicKey(pem: pem) {
            guard wanted == nil || wanted == "ES384" else { throw mismatch("ES384") }
            _ = await collection.add(ecdsa: key, kid: kid)
            return "ES384"
        }
        if let key = try? EdDSA.PublicKey(pem: pem) {
            guard wanted == nil || wanted == "EdDSA" else { throw mismatch("EdDSA") }
            _ = await collection.add(eddsa: key, kid: kid)
            return "EdDSA"
        }
        throw GatewayError.badRequest("Key \(number) is not a PEM public key of RSA (2048 bits or more), ECDSA P-256 or P-384, or Ed25519.")
    }
}

/// A token refused for a reason of its own (bad signature, expired, not for this gateway): a 401.
struct TokenRefusal: Error, CustomStringConvertible {
    let description: String
    /// An introspection endpoint said the token is not active (such an answer may be remembered).
    var inactive = false

    init(_ description: String, inactive: Bool = false) {
        self.description = description
        self.inactive = inactive
    }
}
