import Foundation
import NIOCore

/// The COIMOTION transport shared by the dialects of seed 000 (accounts, events, transit): every
/// call is `POST` with a JSON object holding the parameters plus `_key` (the app key) and `token`
/// (the session, absent before login); every reply is HTTP 200 with
/// `{"errCode": 0, "message": "...", "value": {...}}`, where a non-zero `errCode` is an application
/// error and a `token` member replaces the client's token (`""` ends its session).
///
/// Error codes are not documented anywhere public (*unverified*); the gateway uses a fixed,
/// non-zero code per problem class, see ``errorCode(for:)``.
public enum CoimotionTransport {
    /// One decoded call.
    public struct Call: Sendable {
        /// The parameters, without `_key` and `token`.
        public var parameters: [String: String]
        /// The app key the client sent.
        public var appKey: String?
        /// The session token the client sent (nil or empty before login).
        public var token: String?

        /// A parameter as text (numbers and booleans are given as their JSON text).
        public func string(_ name: String) -> String? { parameters[name] }

        /// A required parameter; a missing or empty one is a 422 naming it.
        public func require(_ name: String) throws -> String {
            guard let value = parameters[name], !value.isEmpty else { throw GatewayError.invalid(field: name, "is required") }
            return value
        }
    }

    /// Decodes a call's body. Throws 400 for a body that is not a JSON object, and 403 when the
    /// app key is not one of `appKeys`.
    public static func parse(_ request: DialectRequest, appKeys: Set<String>) throws -> Call {
        let object: [String: Any]
        if request.body.readableBytes == 0 {
            object = [:]
        } else {
            guard let parsed = try? JSONSerialization.jsonObject(with: Data(request.body.readableBytesView)) as? [String: Any] else {
                throw GatewayError.badRequest("The body is not a JSON object.")
            }
            object = parsed
        }
        var parameters: [String: String] = [:]
        for (name, value) in object where name != "_key" && name != "token" {
            switch value {
            case let text as String: parameters[name] = text
            case let number as NSNumber: parameters[name] = number.stringValue
            case is NSNull: continue
            default:
                if let data = try? JSONSerialization.data(withJSONObject: value) { parameters[name] = String(decoding: data, as: UTF8.self) }
            }
        }
        let call = Call(parameters: parameters, appKey: object["_key"] as? String, token: object["token"] as? String)
        guard let key = call.appKey, appKeys.contains(key) else {
            throw GatewayError.forbidden("The app key is missing or not registered with this gateway.")
        }
        return call
    }

    /// The session token in a call's body, for ``Dialect/credential``.
    public static func credential(_ request: DialectRequest) -> Credential? {
        guard request.body.readableBytes > 0,
              let object = try? JSONSerialization.jsonObject(with: Data(request.body.readableBytesView)) as? [String: Any],
              let token = object["token"] as? String, !token.isEmpty else { return nil }
        return .sessionToken(token)
    }

    /// A successful reply carrying `value` (omitted when nil) and, when given, a token.
    public static func reply(_ value: (any Encodable & Sendable)?, message: String = "Ok.", token: String? = nil) throws -> DialectResponse {
        var envelope = "{\"errCode\":0,\"message\":" + quoted(message)
        if let value {
            envelope += ",\"value\":" + String(decoding: try JSONStreamEncoder.encode(value), as: UTF8.self)
        }
        if let token { envelope += ",\"token\":" + quoted(token) }
        envelope += "}"
        return DialectResponse(status: 200, headers: ["Content-Type": "application/json; charset=utf-8"], body: ByteBuffer(string: envelope))
    }

    /// An application error: HTTP 200 with a non-zero `errCode`. A 401 also ends the client's session (`token: ""`).
    public static func renderError(_ error: GatewayError) -> DialectResponse {
        var envelope = "{\"errCode\":\(errorCode(for: error)),\"message\":" + quoted(error.detail)
        if error.status == 401 { envelope += ",\"token\":\"\"" }
        envelope += "}"
        return DialectResponse(status: 200, headers: ["Content-Type": "application/json; charset=utf-8"], body: ByteBuffer(string: envelope))
    }

    /// The `errCode` for a problem: -1 bad app key (403 from ``parse(_:appKeys:)``), 1 invalid input,
    /// 2 not signed in, 3 forbidden, 4 not found, 5 conflict, 9 too many requests, 99 anything else.
    public static func errorCode(for error: GatewayError) -> Int {
        switch error.status {
        case 400, 413, 415, 422: 1
        case 401: 2
        case 403: error.detail.hasPrefix("The app key") ? -1 : 3
        case 404: 4
        case 409, 412: 5
        case 429: 9
        default: 99
        }
    }

    private static func quoted(_ text: String) -> String {
        var bytes: [UInt8] = []
        JSONValue.write(string: text, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}
