// swift-tools-version: 6.1
import PackageDescription

/// A gateway of your own: this package depends on the gateway's package, adds one plugin, and gets
/// the whole command line (`serve`, `check`, `call`, `import`, ...) from `Gateway.main(plugins:)`.
/// In a project of your own, replace `path: "../.."` with the gateway repository's URL and a version.
/// The same strict settings for every target, as in the gateway's own package.
let settings: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("MemberImportVisibility")]

let package = Package(
    name: "greeter-gateway",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "gateway", path: "../.."),
    ],
    targets: [
        .target(
            name: "GreeterPlugin",
            dependencies: [.product(name: "GatewayCore", package: "gateway")],
            swiftSettings: settings
        ),
        .executableTarget(
            name: "greeter-gateway",
            dependencies: [
                "GreeterPlugin",
                .product(name: "GatewayServer", package: "gateway"),
                .product(name: "GatewayCLI", package: "gateway"),
            ],
            swiftSettings: settings
        ),
        .testTarget(
            name: "GreeterPluginTests",
            dependencies: [
                "GreeterPlugin",
                .product(name: "GatewayCore", package: "gateway"),
                .product(name: "GatewayServer", package: "gateway"),
                .product(name: "GatewayTesting", package: "gateway"),
            ],
            swiftSettings: settings
        ),
    ]
)
