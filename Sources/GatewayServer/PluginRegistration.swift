import GatewayCore

/// A compiled-in plugin type, ready to be switched on by plugins.yaml.
///
/// `BundledPlugins.swift` lists one registration per plugin; the host never names a plugin
/// anywhere else.
public struct PluginRegistration: Sendable {
    /// The plugin's id.
    public let id: String
    /// What it is for.
    public let summary: String
    /// Its schema steps.
    public let migrations: [Migration]
    let make: @Sendable (ConfigurationNode?, PluginContext) async throws -> any ServicePlugin
    /// Decodes the plugin's `config:` block without creating the plugin (`gateway check`).
    public let validate: @Sendable (ConfigurationNode?) throws -> Void

    /// Registers `type`.
    public init<P: ServicePlugin>(_ type: P.Type) {
        id = P.id
        summary = P.summary
        migrations = P.migrations
        validate = { node in
            _ = try (node ?? ConfigurationNode(empty: ["plugins", P.id, "config"], file: "plugins.yaml")).decode(P.Configuration.self)
        }
        make = { node, context in
            let configuration = try (node ?? ConfigurationNode(empty: ["plugins", P.id, "config"], file: "plugins.yaml")).decode(P.Configuration.self)
            do {
                return try await P(configuration: configuration, context: context)
            } catch let error as ConfigurationError {
                throw (node ?? ConfigurationNode(empty: ["plugins", P.id, "config"], file: "plugins.yaml")).error(at: error.key, error.message)
            }
        }
    }

    /// Whether `id` is a valid plugin id: lowercase ASCII letters, digits and `-`, starting with a letter.
    public static func isValidID(_ id: String) -> Bool {
        guard let first = id.unicodeScalars.first, ("a"..."z").contains(first), id.count <= 40 else { return false }
        return id.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }
    }
}
