import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Renders ``GatewayError``s as RFC 9457 `application/problem+json` replies.
enum ProblemResponse {
    private struct Document: Encodable {
        let error: GatewayError
        let instance: String
        let requestID: String

        private struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(_ value: String) { stringValue = value }
            init?(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(error.type, forKey: Key("type"))
            try container.encode(error.title, forKey: Key("title"))
            try container.encode(error.status.code, forKey: Key("status"))
            try container.encode(error.detail, forKey: Key("detail"))
            try container.encode(instance, forKey: Key("instance"))
            try container.encode(requestID, forKey: Key("requestId"))
            if !error.errors.isEmpty { try container.encode(error.errors, forKey: Key("errors")) }
            for (name, value) in error.extensions.sorted(by: { $0.key < $1.key }) {
                try container.encode(value, forKey: Key(name))
            }
        }
    }

    /// The problem document of `error`, as bytes.
    static func body(_ error: GatewayError, path: String, requestID: String) -> ByteBuffer {
        (try? JSONStreamEncoder.encodeBuffer(Document(error: error, instance: instance(path), requestID: requestID))) ?? ByteBuffer()
    }

    static func make(_ error: GatewayError, path: String, requestID: String) -> Response {
        let data = body(error, path: path, requestID: requestID)
        var headers = HTTPFields()
        headers[.contentType] = "application/problem+json"
        headers[.cacheControl] = "no-store"
        for field in error.headers { headers.append(field) }
        return Response(status: error.status, headers: headers, body: .init(byteBuffer: data))
    }

    /// Any error as the reply: a ``GatewayError`` as it is, another error as a 500 whose text goes
    /// to the log only; in the dialect's legacy shape for a dialect route, else a problem document.
    static func reply(to error: any Error, dialect: Dialect?, exchange: Exchange, endpoint: String, logger: Logger) -> Response {
        let known = gatewayError(from: error)
        if known == nil {
            logger.error("unhandled error", metadata: ["request.id": .string(exchange.requestID), "endpoint": .string(endpoint),
                                                       "error": "\(String(reflecting: error))"])
        }
        let problem = known ?? .internalError()
        guard let dialect else { return make(problem, path: exchange.path, requestID: exchange.requestID) }
        let rendered = dialect.renderError(problem)
        var (headers, body) = rendered.whole()
        // The error's own fields (`Retry-After`, `Allow`), unless the rendering set them; a
        // challenge only on a 401 the dialect kept as one.
        for name in Set(problem.headers.map(\.name)) where headers[name] == nil {
            if name == .wwwAuthenticate && rendered.status != .unauthorized { continue }
            headers[fields: name] = problem.headers[fields: name]
        }
        return Response(status: rendered.status, headers: headers, body: .init(byteBuffer: body))
    }

    /// Maps any error to a ``GatewayError``: its own kind, Hummingbird's HTTP errors by status,
    /// anything else as a 500 whose text stays in the log.
    static func gatewayError(from error: any Error) -> GatewayError? {
        if let error = error as? GatewayError { return error }
        if let overload = DatabaseErrorText.overload(error) { return overload }
        if let error = error as? HTTPError {
            switch error.status.code {
            case 400: return .badRequest(error.body ?? "The request could not be read.")
            case 404: return .notFound(error.body ?? "No such resource.")
            case 413: return .contentTooLarge(limit: 0)
            case 415: return .unsupportedMediaType(error.body ?? "?", accepted: ["application/json"])
            case 401: return .unauthorized(error.body ?? "Authentication is required.")
            case 403: return .forbidden(error.body ?? "Forbidden.")
            default: return nil
            }
        }
        return nil
    }

    /// The request's path as the problem's `instance`: at most 512 characters, never cut inside a
    /// percent escape (a cut one would not be a URI reference).
    static func instance(_ path: String) -> String {
        var cut = path.prefix(512)
        if let percent = cut.suffix(2).lastIndex(of: "%") { cut = cut[..<percent] }
        return String(cut)
    }
}
