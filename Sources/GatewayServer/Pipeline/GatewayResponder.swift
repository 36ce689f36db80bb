import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import Synchronization

/// The gateway's request pipeline, as one Hummingbird responder. A request passes these stages,
/// in this order, each a small type in a file of its own:
///
/// 1. ``Exchange``: the request id, the client behind trusted proxies, when it arrived.
/// 2. ``Target``: where it goes — a CORS preflight (``CORS``), a plugin's route, one of the
///    gateway's own endpoints, or a 404 / 405 / 400 (``RouteTable``).
/// 3. ``Observation``: the trace, then the metrics and the access-log line, around all that follows.
/// 4. For a plugin's route (``serve(_:parameters:exchange:)``): ``IdentifyStage`` → ``LimitStage``
///    → ``AuthorizeStage`` → ``CacheLookupStage`` → ``DecodeStage`` → ``HandleStage`` →
///    ``EncodeStage`` → ``CacheStoreStage``. Authorization comes before the cache lookup (DESIGN.md
///    names the lookup first) so that a stored reply is never served to a caller the route refuses.
/// 5. For every reply, once: `X-Request-Id`, the CORS fields, compression, no body for a HEAD.
///
/// Every error becomes a problem document, or the dialect's legacy shape (``ProblemResponse``);
/// nothing a client sends produces a 500 unless a handler itself fails unexpectedly.
///
/// The stages are plain calls rather than Hummingbird middleware: what plugins.yaml decides
/// (routes, limits, settings) is replaced as one on reload while requests already running finish
/// with theirs (``LivePipeline``), where a middleware chain is fixed when the application is
/// built; and the route stages share one request's state (``RouteCall``) rather than a context.
public struct GatewayResponder: HTTPResponder {
    public typealias Context = GatewayRequestContext

    /// What a reload of plugins.yaml replaces: routes, settings and limits, swapped as one.
    let live: LivePipeline
    /// The state this copy serves with: a request takes the live state once, when it arrives,
    /// and finishes with it whatever a reload swaps in meanwhile.
    private var state: PipelineState
    let authenticator: any Authenticator
    let cache: any ResponseCacheStore
    let metrics: GatewayMetrics
    let logger: Logger
    /// With PostgreSQL: what a request publishes to the other instances goes in one statement.
    let messaging: PostgresMessaging?

    var routes: RouteTable<Endpoint> { state.routes }
    var settings: PipelineSettings { state.settings }
    var rateLimiter: any RateLimiter { state.rateLimiter }
    /// The WebSocket routes (served by the upgrade, beside this responder).
    var webSockets: RouteTable<MountedWebSocket> { state.webSockets }

    init(state: PipelineState, authenticator: any Authenticator, cache: any ResponseCacheStore, metrics: GatewayMetrics, logger: Logger,
         messaging: PostgresMessaging? = nil) {
        live = LivePipeline(state)
        self.state = state
        self.authenticator = authenticator
        self.cache = cache
        self.metrics = metrics
        self.logger = logger
        self.messaging = messaging
    }

    /// This responder with the live state as it is now.
    func current() -> GatewayResponder {
        var copy = self
        copy.state = live.state
        return copy
    }

    /// Settings of the pipeline that come from plugins.yaml.
    struct PipelineSettings: Sendable {
        var maxBodySize: Int
        var cors: CORSSettings?
        var accessLog: Bool
        var proxies = ProxyTrust([])
        var compression: ResponseCompression?
        /// `auth.certificates`: the callers verified client certificates name.
        var certificateRules: [CertificateRule] = []
    }

    public func respond(to request: Request, context: Context) async throws -> Response {
        let pipeline = current()
        let settings = pipeline.settings
        let exchange = Exchange(request, context: context, proxies: settings.proxies)
        let target = Target.resolve(exchange, routes: pipeline.routes, cors: settings.cors)
        let observation = Observation(metrics: metrics, logger: logger, accessLog: settings.accessLog)
        return await observation.observe(exchange, target) {
            var response = await pipeline.serve(target, exchange: exchange)
            response.headers[RequestID.field] = exchange.requestID
            if let cors = settings.cors { CORS(settings: cors).decorate(&response, for: exchange) }
            if let compression = settings.compression {
                do {
                    try await compression.apply(to: &response, request: exchange.request)
                } catch {
                    // zlib failing (out of memory): the reply goes as it is.
                    logger.warning("compression failed", metadata: ["request.id": .string(exchange.requestID), "error": .string("\(error)")])
                }
            }
            if exchange.method == .head { response.body = .init() }
            return response
        }
    }

    private func serve(_ target: Target, exchange: Exchange) async -> Response {
        switch target {
        case .preflight(let cors):
            return CORS(settings: cors).preflight(exchange)
        case .refused(let error):
            return ProblemResponse.reply(to: error, dialect: nil, exchange: exchange, endpoint: target.name, logger: logger)
        case .route(let mounted, let parameters):
            guard let messaging else { return await serve(mounted, parameters: parameters, exchange: exchange) }
            return await messaging.collecting { await serve(mounted, parameters: parameters, exchange: exchange) }
        case .gateway(let endpoint):
            do {
                guard let messaging else { return try await endpoint.handler(exchange.request, exchange.context) }
                return try await messaging.collecting { try await endpoint.handler(exchange.request, exchange.context) }
            } catch {
                return ProblemResponse.reply(to: error, dialect: nil, exchange: exchange, endpoint: target.name, logger: logger)
            }
        }
    }

    /// The stages of a plugin's route, in order; an error ends them with the route's error shape.
    func serve(_ mounted: MountedRoute, parameters: [String: String], exchange: Exchange) async -> Response {
        let bodyLimit = BodyLimit(maxSize: settings.maxBodySize)
        let limit = LimitStage(limiter: rateLimiter, metrics: metrics)
        do {
            var call = try RouteCall(exchange, mounted: mounted, parameters: parameters)
            try await IdentifyStage(authenticator: authenticator, metrics: metrics, bodyLimit: bodyLimit, certificateRules: settings.certificateRules).run(&call)
            try await limit.run(&call)
            try await AuthorizeStage().run(call)
            if let stored = await CacheLookupStage(cache: cache).run(&call) { return stored }
            let request = try await DecodeStage(bodyLimit: bodyLimit).run(&call)
            let reply = try await HandleStage(logger: logger, limit: limit).run(call, request: request)
            let encoded = try EncodeStage().run(reply, call: call)
            return await CacheStoreStage(cache: cache).run(encoded, call: call)
        } catch {
            return ProblemResponse.reply(to: error, dialect: mounted.dialect, exchange: exchange, endpoint: mounted.name, logger: logger)
        }
    }

    /// Charges `cost` units of `plugin`'s rate limit to `principal` (for work outside a request's
    /// own stages: a WebSocket's messages, a composite's calls).
    func limit(_ principal: Principal, plugin: String, cost: Int) async throws -> [HTTPField] {
        try await LimitStage(limiter: rateLimiter, metrics: metrics).charge(principal, plugin: plugin, cost: cost)
    }
}

/// The parts of the pipeline that plugins.yaml decides and a reload replaces.
final class PipelineState: Sendable {
    let routes: RouteTable<Endpoint>
    let webSockets: RouteTable<MountedWebSocket>
    let settings: GatewayResponder.PipelineSettings
    let rateLimiter: any RateLimiter

    init(routes: RouteTable<Endpoint>, webSockets: RouteTable<MountedWebSocket>, settings: GatewayResponder.PipelineSettings, rateLimiter: any RateLimiter) {
        self.routes = routes
        self.webSockets = webSockets
        self.settings = settings
        self.rateLimiter = rateLimiter
    }
}

/// The pipeline state in use; a reload stores a new one, requests already running keep theirs.
final class LivePipeline: Sendable {
    private let current: Mutex<PipelineState>

    init(_ state: PipelineState) { current = Mutex(state) }

    var state: PipelineState { current.withLock { $0 } }

    func store(_ state: PipelineState) { current.withLock { $0 = state } }
}
