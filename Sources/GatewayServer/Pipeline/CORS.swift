import GatewayCore
import HTTPTypes
import Hummingbird

/// Cross-origin requests (`server.cors`): a preflight (`OPTIONS` with
/// `Access-Control-Request-Method`) is answered here with a 204, before any route; every other
/// reply to an allowed `Origin` gets its `Access-Control-Allow-*` fields once, at the end.
struct CORS {
    let settings: CORSSettings

    /// The answer to a preflight: the allowed methods and headers for an allowed origin, nothing
    /// for another (the browser then refuses the request itself).
    func preflight(_ exchange: Exchange) -> Response {
        var headers = HTTPFields()
        if let origin = exchange.request.headers[.origin], allows(origin) {
            headers[.accessControlAllowMethods] = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
            headers[.accessControlAllowHeaders] = settings.allowHeaders.joined(separator: ", ")
            headers[.accessControlMaxAge] = String(Int(settings.maxAge.seconds))
        }
        return Response(status: .noContent, headers: headers)
    }

    /// Adds the fields that let a page of an allowed origin read `response`.
    func decorate(_ response: inout Response, for exchange: Exchange) {
        guard let origin = exchange.request.headers[.origin], allows(origin) else { return }
        let wildcard = settings.allowOrigins.contains("*") && !settings.allowCredentials
        response.headers[.accessControlAllowOrigin] = wildcard ? "*" : origin
        if !wildcard { response.headers[.vary] = "Origin" }
        if settings.allowCredentials { response.headers[.accessControlAllowCredentials] = "true" }
        if !settings.exposeHeaders.isEmpty { response.headers[.accessControlExposeHeaders] = settings.exposeHeaders.joined(separator: ", ") }
    }

    private func allows(_ origin: String) -> Bool {
        settings.allowOrigins.contains("*") || settings.allowOrigins.contains(origin)
    }
}
