import Crypto
import Foundation
import GatewayCore
import SQLKit

/// How the plugin keeps v2 key secrets.
///
/// The trade-off: the Xively v2 API shows a key's owner their keys' secrets again (`GET /v2/keys`
/// lists every key with its `api_key`), and old clients rely on that, so a secret cannot be kept
/// as a hash alone the way the gateway keeps its own keys. It is kept no more readable than that
/// requires: every look-up goes by its SHA-256 (`key_hash`); the readable copy (`sealed_key`) is
/// sealed with AES-GCM and opened only to answer the key's owner (their master key, their session
/// or an administrator); the path that carries a secret (`/v2/keys/{key}`) is written as `***` to
/// logs and traces. The sealing key is derived from `keySecret` in the plugin's configuration when
/// it is set (then a copy of the database alone reveals no secret), else it is a random key kept in
/// the database (`feeds_secrets`), which keeps secrets out of plain sight (a query, an export of
/// the keys table) but not from someone who can read the whole database. Copies sealed with the
/// database's key are sealed again with `keySecret` once it is configured.
struct KeySeal: Sendable {
    /// The key derived from `keySecret`, when configured.
    let configured: SymmetricKey?
    /// The database's own key.
    let stored: SymmetricKey

    /// The form under which secrets are looked up: SHA-256, lowercase hex.
    static func hash(_ secret: String) -> String {
        SHA256.hash(data: Data(secret.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The sealing key of a configured secret.
    static func key(fromSecret secret: String) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: Data(secret.utf8)), info: Data("feeds v2 key secrets".utf8), outputByteCount: 32)
    }

    /// The database's sealing key, made on first use.
    static func storedKey(_ db: any SQLDatabase) async throws -> SymmetricKey {
        if let key = try await readStoredKey(db) { return key }
        let made = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }.base64EncodedString()
        try await db.raw("INSERT INTO feeds_secrets (name, value) VALUES ('key-seal', \(bind: made)) ON CONFLICT (name) DO NOTHING").run()
        guard let key = try await readStoredKey(db) else { throw GatewayError.unavailable("The key store could not be opened.") }
        return key
    }

    private static func readStoredKey(_ db: any SQLDatabase) async throws -> SymmetricKey? {
        guard let row = try await db.raw("SELECT value FROM feeds_secrets WHERE name = 'key-seal'").first(),
              let data = Data(base64Encoded: try row.decode(column: "value", as: String.self)) else { return nil }
        return SymmetricKey(data: data)
    }

    /// `secret` sealed with the configured key if any, else the database's: `cfg:` or `db:` and
    /// the base64 of nonce, ciphertext and tag.
    func seal(_ secret: String) throws -> String {
        let (label, key) = configured.map { ("cfg:", $0) } ?? ("db:", stored)
        guard let combined = try AES.GCM.seal(Data(secret.utf8), using: key).combined else {
            throw GatewayError.unavailable("The key could not be sealed.")
        }
        return label + combined.base64EncodedString()
    }

    /// The secret of a sealed copy; nil when it was sealed with a key this instance lacks.
    func open(_ sealed: String) -> String? {
        let key: SymmetricKey?
        let body: Substring
        if sealed.hasPrefix("cfg:") { (key, body) = (configured, sealed.dropFirst(4)) } else if sealed.hasPrefix("db:") {
            (key, body) = (stored, sealed.dropFirst(3))
        } else {
            return nil
        }
        guard let key, let data = Data(base64Encoded: String(body)), let box = try? AES.GCM.SealedBox(combined: data),
              let plain = try? AES.GCM.open(box, using: key) else { return nil }
        return String(decoding: plain, as: UTF8.self)
    }

    /// Whether a copy is sealed with the database's key while a configured one exists.
    func needsResealing(_ sealed: String) -> Bool { configured != nil && sealed.hasPrefix("db:") }
}
