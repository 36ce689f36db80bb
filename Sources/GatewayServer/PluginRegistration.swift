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
    /// Whether plugins.yaml may switch the type on several times under ids of its own
    /// (`weather: { type: upstream, ... }`); each instance is created with its id as
    /// ``PluginContext/pluginID``, which its operation names and tables then start with.
    public let multipleInstances: Bool

    /// Registers `type`; with `multipleInstances`, plugins.yaml may use it under several ids.
    public init<P: ServicePlugin>(_ type: P.Type, multipleInstances: Bool = false) {
        id = P.id
        self.multipleInstances = multipleInstances
        summary = P.summary
        migrations = P.migrations
        @Sendable func configuration(_ node: ConfigurationNode?) throws -> P.Configuration {
            let node = node ?? ConfigurationNode(empty: ["plugins", P.id, "config"], file: "plugins.yaml")
            do {
                return try Self.decode(P.Configuration.self, from: node)
            } catch let error as ConfigurationError {
                throw node.error(at: error.key, error.message)
            }
        }
        validate = { node in _ = try configuration(node) }
        make = { node, context in
            let decoded = try configuration(node)
            do {
                return try await P(configuration: decoded, context: context)
            } catch let error as ConfigurationError {
                throw (node ?? ConfigurationNode(empty: ["plugins", P.id, "config"], file: "plugins.yaml")).error(at: error.key, error.message)
            }
        }
    }

    /// Decodes a plugin's configuration: with its defaults and its own validation when it is a
    /// ``PluginConfiguration``, else strictly as it is.
    static func decode<C: Decodable>(_ type: C.Type, from node: ConfigurationNode) throws -> C {
        guard let configurable = C.self as? any PluginConfiguration.Type else { return try node.decode(C.self) }
        return try decodeConfiguration(configurable, from: node) as! C
    }

    private static func decodeConfiguration<C: PluginConfiguration>(_ type: C.Type, from node: ConfigurationNode) throws -> C {
        let configuration = try node.decode(C.self, defaults: C.defaults)
        try configuration.validate()
        return configuration
    }

    /// Whether `id` is a valid plugin id: lowercase ASCII letters, digits and `-`, starting with a letter.
    public static func isValidID(_ id: String) -> Bool {
        guard let first = id.unicodeScalars.first, ("a"..."z").contains(first), id.count <= 40 else { return false }
        return id.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }
    }
}

/// One plugin as plugins.yaml switches it on: its id, the type that serves it, and its entry.
public struct PluginInstance: Sendable {
    /// Its id: the key of its entry in plugins.yaml.
    public let id: String
    public let registration: PluginRegistration
    public let settings: PluginSettings

    /// The enabled plugins of `configuration`, in the order of `registrations` (the instances of a
    /// type by id). An entry is served by the type its `type:` names, else by the plugin of its id.
    public static func enabled(_ registrations: [PluginRegistration], in configuration: GatewayConfiguration) -> [PluginInstance] {
        var result: [PluginInstance] = []
        for registration in registrations {
            for (id, settings) in configuration.plugins.sorted(by: { $0.key < $1.key }) where settings.enabled && (settings.type ?? id) == registration.id {
                guard id == registration.id || registration.multipleInstances else { continue }
                result.append(PluginInstance(id: id, registration: registration, settings: settings))
            }
        }
        return result
    }
}
