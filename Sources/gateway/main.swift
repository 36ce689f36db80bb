import GatewayCLI
import GatewayServer

await Gateway.main(plugins: bundledPlugins)
