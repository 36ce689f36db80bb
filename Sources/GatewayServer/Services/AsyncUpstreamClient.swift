import AsyncHTTPClient
import GatewayCore
import HTTPTypes
import NIOCore
import NIOHTTP1

/// The upstream HTTP client plugins receive: AsyncHTTPClient with a deadline per request, and
/// failures mapped to 502 / 504 problems so plugins can let them propagate.
public struct AsyncUpstreamClient: UpstreamHTTPClient {
    let client: HTTPClient

    public init(client: HTTPClient = .shared) {
        self.client = client
    }

    public func send(_ request: UpstreamRequest, maxBodySize: Int) async throws -> UpstreamResponse {
        var outbound = HTTPClientRequest(url: request.url)
        outbound.method = HTTPMethod(rawValue: request.method.rawValue)
        for field in request.headers { outbound.headers.add(name: field.name.rawName, value: field.value) }
        // The request's trace, continued with a span of this call (unless the plugin set its own).
        if request.headers[RequestTrace.traceparent] == nil {
            let trace = RequestTrace.outgoingFields()
            outbound.headers.add(name: "traceparent", value: trace.traceparent)
            if let state = trace.tracestate { outbound.headers.add(name: "tracestate", value: state) }
        }
        if let body = request.body { outbound.body = .bytes(body) }
        let timeout = TimeAmount.nanoseconds(Int64(request.timeout.components.seconds) * 1_000_000_000
            + request.timeout.components.attoseconds / 1_000_000_000)
        do {
            let response = try await client.execute(outbound, timeout: timeout)
            let body = try await response.body.collect(upTo: maxBodySize)
            var headers = HTTPFields()
            for (name, value) in response.headers { if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) } }
            return UpstreamResponse(status: HTTPResponse.Status(code: Int(response.status.code)), headers: headers, body: body)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            throw GatewayError.gatewayTimeout("The upstream service at \(request.url) did not answer in time.")
        } catch let error as GatewayError {
            throw error
        } catch {
            throw GatewayError.badGateway("The upstream service at \(request.url) failed: \(error)")
        }
    }
}
