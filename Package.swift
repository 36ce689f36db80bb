// swift-tools-version: 6.1
import PackageDescription

/// The same strict settings for every target (see STYLE.md): Swift 6 language mode comes from
/// the tools version; these add the upcoming features the project relies on.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

/// The bundled plugins by folder: each `Plugins/<Name>` is a target named `<Name>Plugin` that
/// depends on GatewayCore only. SwiftPM looks for package plugins under Plugins/ by default, hence
/// the explicit path.
let bundledPluginFolders: [String] = ["Events", "Feeds", "Suggest", "Todo", "Transit", "Upstream"]
let bundledPluginTargets = bundledPluginFolders.map { $0 + "Plugin" }
/// Plugins made with `gateway plugin new`: each has a test target `Tests/<Name>PluginTests` with the
/// usual dependencies. (The bundled plugins' test targets are declared below, with their own.)
let scaffoldedPluginTests: [String] = []

/// The libraries a plugin (or a module of the host) imports beside GatewayCore, by module name.
func products(_ names: String...) -> [Target.Dependency] {
    let packages = ["Logging": "swift-log", "Metrics": "swift-metrics", "SQLKit": "sql-kit", "ServiceLifecycle": "swift-service-lifecycle",
                    "NIOCore": "swift-nio", "NIOConcurrencyHelpers": "swift-nio", "NIOWebSocket": "swift-nio", "HTTPTypes": "swift-http-types",
                    "Crypto": "swift-crypto", "Hummingbird": "hummingbird", "HummingbirdTesting": "hummingbird"]
    return names.map { $0 == "GatewayCore" || $0 == "GatewaySupport" ? .target(name: $0) : .product(name: $0, package: packages[$0]!) }
}

/// What a bundled plugin needs beside GatewayCore: every library it imports, and files of its
/// folder that are not sources.
let pluginExtras: [String: (dependencies: [Target.Dependency], exclude: [String])] = [
    "Events": (products("GatewaySupport", "Logging", "NIOCore", "SQLKit", "ServiceLifecycle"), []),
    // v2 key secrets are kept hashed for look-ups and sealed for their owners to read back.
    "Feeds": (products("Crypto", "GatewaySupport", "Metrics", "NIOConcurrencyHelpers", "NIOCore", "SQLKit", "ServiceLifecycle"), []),
    "Suggest": (products("Logging", "Metrics", "NIOCore", "SQLKit", "ServiceLifecycle"), []),
    "Todo": (products("GatewaySupport", "NIOCore", "SQLKit", "ServiceLifecycle"), []),
    "Transit": ([.product(name: "CompressNIO", package: "compress-nio"),
                 .product(name: "SwiftProtobuf", package: "swift-protobuf")] + products("Crypto", "GatewaySupport", "HTTPTypes", "NIOCore", "SQLKit", "ServiceLifecycle"),
                ["Realtime/gtfs-realtime.proto", "Realtime/generate.sh"]),
    // An upstream service's OpenAPI document may be YAML.
    "Upstream": ([.product(name: "Yams", package: "Yams")] + products("HTTPTypes", "Logging", "NIOCore", "ServiceLifecycle"), []),
]

func plugin(_ folder: String) -> Target {
    .target(name: folder + "Plugin", dependencies: ["GatewayCore"] + (pluginExtras[folder]?.dependencies ?? []), path: "Plugins/" + folder,
            exclude: pluginExtras[folder]?.exclude ?? [], swiftSettings: strictSettings)
}

/// The tests of a plugin that `gateway plugin new` scaffolded (bundled plugins list their own).
func pluginTests(_ folder: String) -> Target {
    .testTarget(name: folder + "PluginTests", dependencies: [.target(name: folder + "Plugin"), "GatewayTesting", "GatewayServer"]
                    + products("GatewayCore", "HTTPTypes"),
                swiftSettings: strictSettings)
}

let package = Package(
    name: "gateway",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "gateway", targets: ["gateway"]),
        // The plugin SDK; the host; the command line (`Gateway.main(plugins:)`); test helpers. A package
        // of your own depends on these to build a gateway with its own plugins (see Examples/).
        .library(name: "GatewayCore", targets: ["GatewayCore"]),
        .library(name: "GatewaySupport", targets: ["GatewaySupport"]),
        .library(name: "GatewayServer", targets: ["GatewayServer"]),
        .library(name: "GatewayCLI", targets: ["GatewayCLI"]),
        .library(name: "GatewayTesting", targets: ["GatewayTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/sql-kit.git", from: "3.36.0"),
        // SQLite: GRDB's pool (one writer, readers beside it under WAL) over the system's libsqlite3
        // (libsqlite3-dev), and its C API through GRDB's own `GRDBSQLite` product.
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/vapor/async-kit.git", from: "1.22.0"),
        .package(url: "https://github.com/vapor/postgres-kit.git", from: "2.17.0"),
        .package(url: "https://github.com/mattpolzin/OpenAPIKit.git", from: "6.4.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        // The HTTP parts Hummingbird's channels carry, seen by the gateway's connection deadlines.
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/weichsel/ZIPFoundation.git", from: "0.9.20"),
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context.git", from: "1.0.0"),
        // OpenTelemetry spans exported by OTLP/HTTP (the gRPC exporter, and its build, left out).
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        // GatewayTesting: certificates made for TLS tests.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        // `swift package generate-documentation --target GatewayCore`: the SDK's DocC catalog.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // JOSE for the tokens of outside identity providers (`auth.providers`).
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        // The admin console's pages: mustache templates rendered on the server.
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
    ],
    targets: [
        .target(
            name: "GatewayCore",
            dependencies: [
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // What the bundled plugins share beside the contract: the COIMOTION dialect kit, SQL
        // statements run without query building, combined writes, a linear-time regex. Not the
        // SDK: a plugin may import it, and nothing in GatewayCore refers to it.
        .target(
            name: "GatewaySupport",
            dependencies: ["GatewayCore"] + products("HTTPTypes", "NIOCore", "SQLKit"),
            swiftSettings: strictSettings
        ),
        .target(
            name: "GatewayServer",
            dependencies: [
                "GatewayCore", "GatewaySupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "PostgresKit", package: "postgres-kit"),
                .product(name: "OpenAPIKit", package: "OpenAPIKit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                // WebSockets to upstream services (an upstream route with websocket: true).
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "AsyncKit", package: "async-kit"),
                .product(name: "JWTKit", package: "jwt-kit"),
                // Client certificates (`server.tls.clientCertificates`): their subject and names.
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Mustache", package: "swift-mustache"),
            ] + products("HTTPTypes", "Logging", "Metrics", "NIOCore", "SQLKit"),
            // The console's templates, stylesheet and script, carried by the binary's bundle.
            resources: [.copy("Console/Resources")],
            swiftSettings: strictSettings
        ),
        .target(
            name: "GatewayTesting",
            dependencies: [
                "GatewayCore", "GatewayServer",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ] + products("HTTPTypes", "Logging", "NIOConcurrencyHelpers", "NIOCore"),
            swiftSettings: strictSettings
        ),
        .target(
            name: "GatewayCLI",
            dependencies: [
                "GatewayCore", "GatewayServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "gateway",
            dependencies: ["GatewayCLI", "GatewayServer"] + bundledPluginTargets.map { .target(name: $0) },
            swiftSettings: strictSettings
        ),

        // A plugin that exists only to prove the contract in tests and benchmarks; never shipped.
        .target(
            name: "NotesFixturePlugin",
            dependencies: ["GatewayCore", .product(name: "NIOFoundationCompat", package: "swift-nio")] + products("Logging", "NIOCore", "SQLKit", "ServiceLifecycle"),
            path: "Tests/NotesFixturePlugin",
            swiftSettings: strictSettings
        ),

        .testTarget(
            name: "GatewayCoreTests",
            dependencies: [
                "GatewayCore", "GatewaySupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ] + products("HTTPTypes"),
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "GatewayServerTests",
            dependencies: [
                "GatewayServer", "GatewaySupport", "GatewayTesting", "NotesFixturePlugin",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "OpenAPIKit", package: "OpenAPIKit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Crypto", package: "swift-crypto"),
            ] + products("GatewayCore", "HTTPTypes", "Hummingbird", "Logging", "NIOCore"),
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "EventsPluginTests",
            dependencies: ["EventsPlugin", "GatewayTesting", "GatewayServer",
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           .product(name: "NIOFoundationCompat", package: "swift-nio")] + products("GatewayCore", "HTTPTypes", "NIOCore", "SQLKit"),
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TransitPluginTests",
            dependencies: ["TransitPlugin", "GatewayTesting", "GatewayServer",
                           .product(name: "Hummingbird", package: "hummingbird"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                           .product(name: "ZIPFoundation", package: "ZIPFoundation"),
                           .product(name: "NIOFoundationCompat", package: "swift-nio")] + products("GatewayCore", "HTTPTypes", "NIOCore", "SQLKit"),
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "UpstreamPluginTests",
            dependencies: ["UpstreamPlugin", "GatewayTesting", "GatewayServer",
                           .product(name: "Hummingbird", package: "hummingbird"),
                           .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                           .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                           .product(name: "AsyncHTTPClient", package: "async-http-client"),
                           .product(name: "JWTKit", package: "jwt-kit"),
                           .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "NIOHTTP1", package: "swift-nio"),
                           .product(name: "NIOWebSocket", package: "swift-nio"),
                           .product(name: "NIOFoundationCompat", package: "swift-nio")] + products("GatewayCore", "HTTPTypes", "HummingbirdTesting", "Logging", "NIOCore"),
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "FeedsPluginTests",
            dependencies: ["FeedsPlugin", "GatewayTesting", "GatewayServer",
                           .product(name: "HummingbirdTesting", package: "hummingbird"),
                           .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                           .product(name: "NIOWebSocket", package: "swift-nio"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           .product(name: "NIOFoundationCompat", package: "swift-nio")] + products("GatewayCore", "HTTPTypes", "Hummingbird", "Logging", "NIOCore", "SQLKit"),
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SuggestPluginTests",
            dependencies: ["SuggestPlugin", "GatewayTesting", "GatewayServer",
                           .product(name: "HummingbirdTesting", package: "hummingbird"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           .product(name: "AsyncHTTPClient", package: "async-http-client"),
                           .product(name: "NIOFoundationCompat", package: "swift-nio")] + products("GatewayCore", "HTTPTypes", "Hummingbird", "NIOCore"),
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TodoPluginTests",
            dependencies: ["TodoPlugin", "GatewayTesting", "GatewayServer",
                           .product(name: "HummingbirdTesting", package: "hummingbird"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           .product(name: "NIOFoundationCompat", package: "swift-nio")] + products("GatewayCore", "HTTPTypes", "NIOCore", "SQLKit"),
            swiftSettings: strictSettings
        ),
        // The security suite: attacks on a gateway started from the shipped plugins.yaml, over real
        // sockets, on SQLite and PostgreSQL (SECURITY.md lists what each test defends).
        .testTarget(
            name: "SecurityTests",
            dependencies: ["GatewayServer", "GatewayTesting"] + bundledPluginTargets.map { .target(name: $0) } + [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ] + products("GatewayCore", "HTTPTypes", "Logging", "NIOWebSocket", "ServiceLifecycle"),
            swiftSettings: strictSettings
        ),
        // Depends on the executable so that `swift test` builds the binary it runs.
        .testTarget(name: "EndToEndTests", dependencies: ["gateway", "GatewayServer", "GatewayTesting",
                                                          .product(name: "AsyncHTTPClient", package: "async-http-client"),
                                                          .product(name: "NIOSSL", package: "swift-nio-ssl"),
                                                          .product(name: "NIOFoundationCompat", package: "swift-nio"),
                                                          .product(name: "NIOHTTP1", package: "swift-nio"),
                                                          .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                                                          .product(name: "Hummingbird", package: "hummingbird"),
                                                          .product(name: "SQLKit", package: "sql-kit")] + products("GatewayCore", "HTTPTypes", "Logging", "NIOCore", "NIOWebSocket"),
                    swiftSettings: strictSettings),

        // Benchmark servers (see Benchmarks/README.md).
        .executableTarget(
            name: "gateway-bench-server",
            dependencies: ["GatewayServer", "NotesFixturePlugin", "SuggestPlugin", "TodoPlugin", "UpstreamPlugin",
                           .product(name: "JWTKit", package: "jwt-kit")] + products("GatewayCore", "Logging", "NIOCore"),
            path: "Benchmarks/Servers/GatewayBenchServer",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "suggest-index-bench",
            dependencies: ["SuggestPlugin"],
            path: "Benchmarks/Servers/SuggestIndexBench",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "transit-bench",
            dependencies: ["GatewayServer", "TransitPlugin", .product(name: "Logging", package: "swift-log")] + products("GatewayCore", "NIOCore"),
            path: "Benchmarks/Servers/TransitBench",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "hello-baseline",
            dependencies: [.product(name: "Hummingbird", package: "hummingbird")],
            path: "Benchmarks/Servers/HelloBaseline",
            swiftSettings: strictSettings
        ),
     ] + bundledPluginFolders.map(plugin) + scaffoldedPluginTests.map(pluginTests)
)

// Fuzzing (Fuzz/README.md, Fuzz/run): with GATEWAY_FUZZ=1 in the environment the package gains the
// libFuzzer executable `gateway-fuzz`, and the project's own modules that read untrusted bytes are
// compiled with coverage instrumentation for it (dependencies are left as they are). Without the
// variable the package is the one above.
if Context.environment["GATEWAY_FUZZ"] == "1" {
    let fuzzer: SwiftSetting = .unsafeFlags(["-sanitize=fuzzer"])
    let instrumented = Set(["GatewayCore", "GatewaySupport", "GatewayServer"] + bundledPluginTargets)
    for target in package.targets where instrumented.contains(target.name) {
        target.swiftSettings = (target.swiftSettings ?? []) + [fuzzer]
    }
    package.targets.append(.executableTarget(
        name: "gateway-fuzz",
        dependencies: ["GatewayCore", "GatewaySupport", "GatewayServer", "EventsPlugin", "FeedsPlugin", "TodoPlugin", "TransitPlugin",
                       .product(name: "SQLKit", package: "sql-kit"),
                       .product(name: "NIOCore", package: "swift-nio"),
                       .product(name: "HTTPTypes", package: "swift-http-types"),
                       .product(name: "JWTKit", package: "jwt-kit")],
        path: "Fuzz/Targets",
        swiftSettings: strictSettings + [fuzzer],
        // libFuzzer itself (its archive without `main`) is named on the command line by Fuzz/run.
        linkerSettings: [.linkedLibrary("stdc++")]
    ))
}
