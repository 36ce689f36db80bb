/// The secrets of plugins.yaml (app keys, a dialect's application and master keys) as the host
/// vouches for them.
///
/// A secret that ships with the gateway — the demo keys the shipped plugins.yaml gives legacy
/// clients — is public, so it works only while the gateway listens on a loopback address. On a
/// reachable listener the host generates a replacement at the first start (printed once, stored
/// only as its SHA-256), and from then on only the replacement matches where the shipped value
/// is configured. Plugins compare every configured secret through
/// ``PluginContext/secretMatches(_:configured:)``, which asks ``matches(_:configured:)``.
package struct ConfiguredSecrets: Sendable {
    private let replacements: [String: @Sendable (String) -> Bool]

    /// `replacements`: per configured value that must not be taken as written, the check of
    /// what stands for it.
    package init(replacements: [String: @Sendable (String) -> Bool] = [:]) {
        self.replacements = replacements
    }

    /// Every secret as written in plugins.yaml (a loopback listener, or no shipped secret in use).
    package static let asWritten = ConfiguredSecrets()

    /// Whether a client's `presented` secret is the one `configured` stands for. Compares in
    /// constant time for secrets of one length.
    package func matches(_ presented: String, configured: String) -> Bool {
        if let check = replacements[configured] { return check(presented) }
        return Self.constantTimeEqual(presented, configured)
    }

    /// Whether `configured` was replaced (a shipped secret on a reachable listener).
    package func isReplaced(_ configured: String) -> Bool { replacements[configured] != nil }

    /// Equality of two texts that takes the same time wherever they differ.
    package static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let left = Array(a.utf8), right = Array(b.utf8)
        guard left.count == right.count else { return false }
        var difference: UInt8 = 0
        for index in left.indices { difference |= left[index] ^ right[index] }
        return difference == 0
    }
}
