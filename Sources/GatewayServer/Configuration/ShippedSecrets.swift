import Crypto
import Foundation
import GatewayCore
import Logging
import SQLKit
import Yams

/// The secrets that ship with the gateway — the demo keys the repository's plugins.yaml gives
/// legacy clients, public strings — and what becomes of them.
///
/// On a loopback listener (with no trusted proxy in front) they work as written: a newcomer's `swift run gateway serve` and the
/// README's examples. On any other address a shipped secret would let anyone in, so at the first
/// start there the gateway generates a replacement for each one the configuration uses, prints
/// it once, and stores only its SHA-256 (table `gateway_generated_secrets`); from then on only
/// the replacement matches where the shipped value is configured (``ConfiguredSecrets``). An
/// operator who wants keys of their own writes them in plugins.yaml (`${NAME}` from the
/// environment): those are taken as written. `gateway check` reports the same.
enum ShippedSecrets {
    /// Every secret the repository's plugins.yaml, README and examples name. A test checks that
    /// each key-like value of the shipped plugins.yaml is here.
    static let values: Set<String> = ["demo-app-key", "demo-master-key-change-me"]

    /// One use of a shipped secret in a configuration.
    struct Use: Equatable, Sendable {
        var value: String
        /// The key path, such as `plugins.todo.config.tenants.tutorial.apps[0].masterKey`.
        var path: String
        /// The file and line, such as `plugins.yaml:128`, where known.
        var location: String?
    }

    /// Whether `host` (`server.host`) is reachable only from this machine.
    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" || bare == "::1" { return true }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// The shipped secrets `configuration` uses: in `auth.appKeys` and in any plugin's `config:`.
    static func uses(in configuration: GatewayConfiguration) -> [Use] {
        var uses: [Use] = []
        for (index, key) in configuration.auth.appKeys.enumerated() where values.contains(key) {
            uses.append(Use(value: key, path: "auth.appKeys[\(index)]", location: nil))
        }
        for id in configuration.plugins.keys.sorted() {
            guard let settings = configuration.plugins[id], settings.enabled, let config = settings.config, let node = config.node else { continue }
            walk(node, path: "plugins.\(id).config", file: config.context?.file, substitution: config.context?.substitution, into: &uses)
        }
        return uses
    }

    private static func walk(_ node: Node, path: String, file: String?, substitution: ConfigurationSubstitution?, into uses: inout [Use]) {
        switch node {
        case .scalar(let scalar):
            let text = (try? substitution?.substitute(scalar.string).text) ?? scalar.string
            if values.contains(text) {
                uses.append(Use(value: text, path: path, location: scalar.mark.map { "\(file ?? "plugins.yaml"):\($0.line)" }))
            }
        case .mapping(let mapping):
            for (key, value) in mapping { walk(value, path: path + "." + (key.string ?? "?"), file: file, substitution: substitution, into: &uses) }
        case .sequence(let sequence):
            for (index, value) in sequence.enumerated() { walk(value, path: path + "[\(index)]", file: file, substitution: substitution, into: &uses) }
        case .alias:
            break
        }
    }

    /// Whether clients from other machines reach the listener of `server`: it listens beyond
    /// loopback, or a proxy forwards to it (`trustedProxies`: a loopback listener behind nginx on
    /// the same host is as reachable as the proxy).
    static func isReachable(_ server: ServerSettings) -> Bool {
        !isLoopback(server.host) || !server.trustedProxies.isEmpty
    }

    /// A line for `gateway check` or the log about each use: what happens to it on `server`.
    static func report(_ uses: [Use], server: ServerSettings) -> [String] {
        let host = server.trustedProxies.isEmpty ? server.host : "\(server.host) behind trusted proxies"
        return uses.map { use in
            let place = [use.location, use.path].compactMap { $0 }.joined(separator: ": ")
            return !isReachable(server)
                ? "\(place): '\(use.value)' is a demo secret that ships with the gateway; it works only while server.host is a loopback address"
                : "\(place): '\(use.value)' is a demo secret that ships with the gateway; on server.host \(host) it does not work: a replacement is generated at the first start and printed once"
        }
    }

    /// The secrets of `configuration` as this listener may accept them: as written on loopback;
    /// elsewhere each shipped secret in use is replaced, by the one generated at an earlier start
    /// or by a new one, which `announce` gets (with the uses it replaces) this once.
    static func secrets(for configuration: GatewayConfiguration, database: any SQLDatabase, clock: any WallClock,
                        announce: (_ value: String, _ replacement: String, _ uses: [Use]) -> Void) async throws -> ConfiguredSecrets {
        let uses = uses(in: configuration)
        guard !uses.isEmpty, isReachable(configuration.server) else { return .asWritten }
        var replacements: [String: @Sendable (String) -> Bool] = [:]
        for value in Set(uses.map(\.value)).sorted() {
            struct Row: Decodable { var sha256: String }
            var digest = try await database.select().column("sha256").from("gateway_generated_secrets").where("shipped", .equal, value)
                .first(decoding: Row.self)?.sha256
            if digest == nil {
                let replacement = "gs_" + AccountStore.randomToken(bytes: 24)
                let hashed = sha256(replacement)
                do {
                    try await database.insert(into: "gateway_generated_secrets").columns("shipped", "sha256", "created_at")
                        .values(SQLBind(value), SQLBind(hashed), SQLBind(clock.now().timeIntervalSince1970)).run()
                    digest = hashed
                    announce(value, replacement, uses.filter { $0.value == value })
                } catch {
                    // Another instance generated one at the same moment: theirs stands (and they printed it).
                    digest = try await database.select().column("sha256").from("gateway_generated_secrets").where("shipped", .equal, value)
                        .first(decoding: Row.self)?.sha256
                    guard digest != nil else { throw error }
                }
            }
            let expected = digest ?? ""
            replacements[value] = { presented in ConfiguredSecrets.constantTimeEqual(sha256(presented), expected) }
        }
        return ConfiguredSecrets(replacements: replacements)
    }

    static func sha256(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

extension GatewayConfiguration {
    /// Where this configuration uses a demo secret that ships with the gateway, and what becomes
    /// of it on `server.host`: one line each (`gateway check` prints them, `serve` logs them).
    public var shippedSecretWarnings: [String] {
        ShippedSecrets.report(ShippedSecrets.uses(in: self), server: server)
    }
}
