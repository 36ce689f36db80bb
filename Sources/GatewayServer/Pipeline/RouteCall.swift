import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore

/// A request to a plugin's route as the route stages see it, filled in as they go: the identify
/// stage sets the principal, the limit stage the rate-limit fields, the cache stage the key.
struct RouteCall {
    let exchange: Exchange
    let mounted: MountedRoute
    let parameters: [String: String]
    /// The query's parameters, percent-decoded, in order.
    let query: [(name: String, value: String)]
    /// The request's `Cache-Control`, lower-cased ("" without one).
    let cacheControl: String
    /// The body, once a stage has read it (``BodyLimit``).
    var body: ByteBuffer?
    /// A dialect route's request, made by the identify stage (its credential may be in the body).
    var request: RouteRequest?
    var principal = Principal.anonymous(address: "")
    /// The credential the caller presented, and whether it did not resolve and the caller is
    /// served as a guest (where the dialect says so).
    var credential: Credential?
    var credentialRefused = false
    /// `RateLimit`, `RateLimit-Policy` and the like, for the reply.
    var limitFields: [HTTPField] = []
    /// The reply's key in the response cache, when it may be served from or stored in it.
    var cacheKey: String?

    init(_ exchange: Exchange, mounted: MountedRoute, parameters: [String: String]) throws {
        self.exchange = exchange
        self.mounted = mounted
        self.parameters = parameters
        query = try PercentDecoding.queryParameters(Exchange.query(of: exchange.request))
        cacheControl = exchange.request.headers.value(.cacheControl)?.lowercased() ?? ""
    }

    /// The request as the route's handler reads it, with the body read so far.
    func routeRequest() -> RouteRequest {
        RouteRequest(method: exchange.method, path: exchange.path, pathParameters: parameters, queryParameters: query,
                     headers: exchange.request.headers, body: body ?? ByteBuffer(), authority: exchange.request.head.authority)
    }

    /// GET or HEAD.
    var isRead: Bool { exchange.method == .get || exchange.method == .head }
}

/// The body size limit (`server.maxBodySize`): a body is read whole only up to it, and a larger
/// one, announced or sent, is a 413. Bodies are read where a stage needs one: a dialect route's
/// before the principal (its credential may be in it), an operation's by the decode stage.
struct BodyLimit {
    let maxSize: Int

    func collect(_ request: Request) async throws -> ByteBuffer {
        if let length = request.headers.value(.contentLength).flatMap(Int.init), length > maxSize {
            throw GatewayError.contentTooLarge(limit: maxSize)
        }
        do {
            return try await request.body.collect(upTo: maxSize)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw GatewayError.contentTooLarge(limit: maxSize)
        }
    }
}
