import GatewayCLI
import GatewayServer
import GreeterPlugin

// The same command line as the `gateway` executable, with this package's plugin compiled in.
await Gateway.main(plugins: [PluginRegistration(GreeterPlugin.self)])
