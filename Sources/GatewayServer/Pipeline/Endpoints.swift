import GatewayCore
import Hummingbird
import Logging
import NIOCore

/// The request context of the gateway's Hummingbird application.
public struct GatewayRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The client's address (no port): the socket's peer, or behind `server.trustedProxies` the
    /// address they forwarded.
    public internal(set) var remoteAddress: String
    /// The client certificate the connection's TLS handshake verified (`server.tls.clientCertificates`).
    public internal(set) var clientCertificate: ClientCertificate?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress.map(Self.text(of:)) ?? "local"
        clientCertificate = ConnectionCertificate.current?.certificate
    }

    /// An address as text without a port. IPv4, the common case, is written directly: NIO's
    /// `ipAddress` goes through `inet_ntop` and `printf`, a noticeable share of a small request.
    static func text(of address: SocketAddress) -> String {
        guard case .v4(let v4) = address else { return address.ipAddress ?? "local" }
        // sockaddr_in: family (2 bytes), port (2), then the address in network order (4).
        // At most 15 bytes ("255.255.255.255"): a small string, written in place without allocating.
        return withUnsafeBytes(of: v4.address) { raw in
            String(unsafeUninitializedCapacity: 15) { buffer in
                var position = 0
                for offset in 4..<8 {
                    if offset != 4 { buffer[position] = UInt8(ascii: "."); position += 1 }
                    let octet = raw[offset]
                    if octet >= 100 { buffer[position] = UInt8(ascii: "0") + octet / 100; position += 1 }
                    if octet >= 10 { buffer[position] = UInt8(ascii: "0") + octet / 10 % 10; position += 1 }
                    buffer[position] = UInt8(ascii: "0") + octet % 10
                    position += 1
                }
                return position
            }
        }
    }

    /// A context for a request made in-process (`gateway call`), not over a socket.
    public init(logger: Logger, remoteAddress: String) {
        struct LocalSource: RequestContextSource { let logger: Logger }
        coreContext = .init(source: LocalSource(logger: logger))
        self.remoteAddress = remoteAddress
        // A composite's or a batch's inner call runs in its request's task: the same connection.
        clientCertificate = ConnectionCertificate.current?.certificate
    }

    /// The body is collected by the pipeline itself, against the configured limit.
    public var maxUploadSize: Int { .max }
}

// The mounted endpoints are classes: the router hands one out per request, and a reference costs
// one retain where a struct of many fields costs one per field.

/// An operation or a dialect route placed at its full path: what the pipeline needs of it, read
/// once. Both kinds pass the same stages (principal, rate limit, cache, authorization, handler);
/// a dialect route differs only in how the caller presents a credential, in reading the body
/// before the principal stage (its credential may be in it), and in its error shape.
final class MountedRoute: Sendable {
    let pluginID: String
    /// The operation's name, or `<plugin>.<dialect> METHOD <path>`.
    let name: String
    let route: Route
    /// The dialect, for a dialect's route.
    let dialect: Dialect?
    let plugin: PluginContext
    let template: String
    let access: AccessRule
    /// The cache policy after plugins.yaml overrides.
    let cache: CachePolicy
    let cost: Int
    let resourceParameter: String?
    let tags: [String]
    /// Path parameters that carry a secret (``SecretParameters``): logs and traces show `***`.
    let secretParameters: [String]
    /// Whether the handler reads a body (a dialect route's body is always read: its credential may be there).
    let readsBody: Bool
    /// Whether the handler takes the body as it arrives (``Route/streamsBody``).
    let streamsBody: Bool
    /// The plugin's ``ServicePlugin/cacheAdmits(_:)``.
    let cacheAdmits: @Sendable (Principal) async -> Bool
    /// The plugin's hook, when it is an ``AuthorizingPlugin``.
    let authorize: (@Sendable (AuthorizationRequest) async throws -> Void)?
    /// The credential kinds the plugin takes (`accept`; nil: all).
    let accept: Set<String>?
    let metrics: GatewayMetrics.EndpointSeries
    /// The cache policy's tags and invalidated tags, split once into text and `{parameter}`s.
    let storedTags: [TagTemplate]
    let invalidatedTags: [TagTemplate]

    init(pluginID: String, route: Route, dialect: Dialect?, plugin: PluginContext, template: String, cache: CachePolicy,
         instance: any ServicePlugin, metrics: GatewayMetrics, accept: Set<String>? = nil) {
        self.pluginID = pluginID
        self.accept = accept
        self.route = route
        self.dialect = dialect
        self.plugin = plugin
        self.template = template
        self.cache = cache
        name = dialect.map { "\(pluginID).\($0.name) \(route.method.rawValue) \(route.path)" } ?? route.name
        access = route.access
        cost = route.cost
        resourceParameter = route.resourceParameter
        tags = route.tags
        readsBody = dialect != nil || (route.io.hasBody && !route.streamsBody)
        streamsBody = route.streamsBody
        self.metrics = metrics.endpointSeries(name, commonStatus: dialect == nil ? Int(route.successStatus.code) : 200)
        cacheAdmits = { await instance.cacheAdmits($0) }
        if let authorizing = instance as? any AuthorizingPlugin {
            authorize = { request in try await authorizing.authorize(request) }
        } else {
            authorize = nil
        }
        storedTags = cache.tags.map(TagTemplate.init)
        invalidatedTags = cache.invalidates.map(TagTemplate.init)
        secretParameters = SecretParameters.names(in: tags)
    }

    var summary: String {
        dialect.map { "[\($0.name)] \(route.summary)" } ?? route.summary
    }
}

/// A cache tag such as `todo:bucket:{bucket}`, split once into text and parameter names, so that
/// a request fills it in with appends alone. An unknown `{name}` stays as written.
struct TagTemplate: Sendable, Equatable {
    enum Part: Sendable, Equatable {
        case text(String)
        case parameter(String)
    }

    let parts: [Part]
    /// The tag itself when it has no parameters.
    let fixed: String?

    init(_ tag: String) {
        var parts: [Part] = []
        var rest = tag[...]
        // Braces are ASCII, so their UTF-8 positions are character boundaries.
        while let open = rest.utf8.firstIndex(of: UInt8(ascii: "{")),
              let close = rest.utf8[open...].firstIndex(of: UInt8(ascii: "}")) {
            if open > rest.startIndex { parts.append(.text(String(rest[..<open]))) }
            parts.append(.parameter(String(rest[rest.utf8.index(after: open)..<close])))
            rest = rest[rest.utf8.index(after: close)...]
        }
        if !rest.isEmpty { parts.append(.text(String(rest))) }
        self.parts = parts
        fixed = parts.contains { if case .parameter = $0 { true } else { false } } ? nil : tag
    }

    func resolve(_ parameters: [String: String]) -> String {
        if let fixed { return fixed }
        var result = ""
        result.reserveCapacity(64)
        for part in parts {
            switch part {
            case .text(let text): result += text
            case .parameter(let name):
                if let value = parameters[name] { result += value } else { result += "{" + name + "}" }
            }
        }
        return result
    }
}

/// One of the gateway's own endpoints (`/healthz`, `/openapi.json`, ...).
final class GatewayEndpoint: Sendable {
    let name: String
    let summary: String
    let handler: @Sendable (Request, GatewayRequestContext) async throws -> Response
    let metrics: GatewayMetrics.EndpointSeries

    init(name: String, summary: String, metrics: GatewayMetrics, handler: @escaping @Sendable (Request, GatewayRequestContext) async throws -> Response) {
        self.name = name
        self.summary = summary
        self.handler = handler
        self.metrics = metrics.endpointSeries(name, commonStatus: 200)
    }
}

/// What a path resolves to.
enum Endpoint: Sendable {
    case route(MountedRoute)
    case gateway(GatewayEndpoint)

    /// The label under which metrics and logs report it.
    var name: String {
        switch self {
        case .route(let mounted): mounted.name
        case .gateway(let endpoint): endpoint.name
        }
    }

    var summary: String {
        switch self {
        case .route(let mounted): mounted.summary
        case .gateway(let endpoint): endpoint.summary
        }
    }
}
