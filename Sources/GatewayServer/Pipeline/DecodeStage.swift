import GatewayCore
import Hummingbird
import HTTPTypes

/// What the handler is given: the request with its path and query parameters, its header fields
/// and its body, read up to the size limit (or handed over as it arrives, for a route that
/// streams it). A dialect's route has it already (the identify stage reads its body: its
/// credential may be there). The route itself decodes and validates its typed input from this
/// (``Route``), so that `gateway call`, batches and composites decode exactly as HTTP does.
struct DecodeStage {
    let bodyLimit: BodyLimit

    func run(_ call: inout RouteCall) async throws -> RouteRequest {
        if let request = call.request { return request }
        let mounted = call.mounted
        if mounted.readsBody { call.body = try await bodyLimit.collect(call.exchange.request) }
        var request = call.routeRequest()
        if mounted.streamsBody { request.bodyStream = ByteStream(call.exchange.request.body) }
        return request
    }
}
