import EventsPlugin
import FeedsPlugin
import GatewayServer
import SuggestPlugin
import TodoPlugin
import TransitPlugin
import UpstreamPlugin

/// The plugins compiled into this gateway: one line per plugin. plugins.yaml switches them on.
let bundledPlugins: [PluginRegistration] = [
    PluginRegistration(EventsPlugin.self),
    PluginRegistration(FeedsPlugin.self),
    PluginRegistration(SuggestPlugin.self),
    PluginRegistration(TodoPlugin.self),
    PluginRegistration(TransitPlugin.self),
    // Serves ids of the file's choice: `weather: { type: upstream, config: ... }`.
    PluginRegistration(UpstreamPlugin.self, multipleInstances: true),
]
