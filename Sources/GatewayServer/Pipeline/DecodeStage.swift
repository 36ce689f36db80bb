import GatewayCore
import Hummingbird
import HTTPTypes

/// What the handler is given: a dialect route its request in the old shape (read by the identify
/// stage); an operation its path and query parameters, its body read up to the size limit (or
/// handed over as it arrives, for an operation that streams it) and the body's media type. The
/// operation itself decodes and validates its typed input from these (``ServiceOperation``), so
/// that `gateway call`, batches and composites decode exactly as HTTP does.
struct DecodeStage {
    let bodyLimit: BodyLimit

    enum Input {
        case operation(ServiceOperation, OperationRequest)
        case dialect(DialectRoute, DialectRequest)
    }

    func run(_ call: inout RouteCall) async throws -> Input {
        let mounted = call.mounted
        if let route = mounted.dialectRoute, let request = call.dialectRequest { return .dialect(route, request) }
        guard let operation = mounted.operation else { throw GatewayError.internalError() }
        if mounted.readsBody { call.body = try await bodyLimit.collect(call.exchange.request) }
        let contentType = call.exchange.request.headers.value(.contentType).map(MediaType.essence(of:))
        var input = OperationRequest(pathParameters: call.parameters, queryParameters: call.query, body: call.body, contentType: contentType)
        if mounted.streamsBody { input.bodyStream = ByteStream(call.exchange.request.body) }
        return .operation(operation, input)
    }
}
