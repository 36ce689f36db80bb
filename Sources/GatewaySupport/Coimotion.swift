import Foundation
import GatewayCore
import HTTPTypes
import NIOCore

/// The COIMOTION dialect kit, shared by the dialects of seed 000 (accounts `core/user`, events
/// `twShow`, transit `twCtBus`; legacy-apis.md §1).
///
/// The transport: every call is `POST` with a JSON object holding the parameters plus `_key` (the
/// app key) and `token` (the session, absent before login). Every reply is HTTP 200 with
/// `{"errCode": 0, "message": "...", "value": {...}}`; a non-zero `errCode` is an application
/// error, and a `token` member replaces the client's token (`""` ends its session).
///
/// A COIMOTION route is an ordinary ``Route`` whose handler is made by ``call(_:)``:
///
/// ```swift
/// Coimotion.dialect(routes: [
///     Route.define(.post, "/coimotion/twShow/show/catList", summary: "Categories")
///         .handle(Coimotion.call { call, context in .ok(categories) }),
/// ])
/// ```
///
/// The kit reads the body's parameters, refuses a `_key` that is not one of the host's
/// ``PluginContext/appKeys`` (errCode -1), and writes the envelope. The host resolves the body's
/// `token` to the caller (``credentials``): a token that is unknown or expired makes the caller a
/// guest and the reply carries `"token": ""`, as the old service told a client its session was over.
public enum Coimotion {
    /// The `errCode` of a reply. The old service's codes are not documented anywhere public
    /// (*unverified*); the gateway uses one fixed code per problem class:
    ///
    /// | errCode | meaning | problem kinds |
    /// |---|---|---|
    /// | 0 | success | — |
    /// | -1 | the app key is missing or not registered | `unknown-application` |
    /// | 1 | invalid input | `bad-request`, `invalid-input`, `content-too-large`, `unsupported-media-type` |
    /// | 2 | not signed in (the reply also carries `"token": ""`) | `unauthorized` |
    /// | 3 | forbidden | `forbidden` |
    /// | 4 | not found | `not-found`, `gone` |
    /// | 5 | conflict | `conflict`, `precondition-failed` |
    /// | 9 | too many requests | `quota-exceeded` |
    /// | 99 | anything else | every other kind |
    public enum ErrorCode: Int, Sendable, CaseIterable {
        case ok = 0
        case unknownApplication = -1
        case invalidInput = 1
        case notSignedIn = 2
        case forbidden = 3
        case notFound = 4
        case conflict = 5
        case tooManyRequests = 9
        case other = 99

        /// The code for a problem, by its kind.
        public init(_ error: GatewayError) {
            switch error.kind {
            case .unknownApplication: self = .unknownApplication
            case .badRequest, .invalid, .contentTooLarge, .unsupportedMediaType: self = .invalidInput
            case .unauthorized: self = .notSignedIn
            case .forbidden: self = .forbidden
            case .notFound, .gone: self = .notFound
            case .conflict, .preconditionFailed: self = .conflict
            case .quotaExceeded: self = .tooManyRequests
            default: self = .other
            }
        }
    }

    /// One decoded call.
    public struct Call: Sendable {
        /// The parameters, without `_key` and `token`; numbers and booleans as their JSON text,
        /// arrays and objects as compact JSON.
        public var parameters: [String: String]
        /// The app key the client sent.
        public var appKey: String?
        /// The session token the client sent (nil or empty before login).
        public var token: String?
        /// The route's path parameters (`{ctID}` of `twShow/show/byCity/{ctID}`), percent-decoded.
        public var pathParameters: [String: String]

        public init(parameters: [String: String], appKey: String? = nil, token: String? = nil, pathParameters: [String: String] = [:]) {
            self.parameters = parameters
            self.appKey = appKey
            self.token = token
            self.pathParameters = pathParameters
        }

        /// An integer path parameter; one that is missing or not an integer is a 422 naming it.
        public func pathInt(_ name: String) throws -> Int {
            guard let text = pathParameters[name], let value = Int(text) else { throw GatewayError.invalid(field: name, "must be an integer") }
            return value
        }

        /// A parameter as text.
        public func string(_ name: String) -> String? { parameters[name] }

        /// A required parameter; a missing or empty one is a 422 naming it (errCode 1).
        public func require(_ name: String) throws -> String {
            guard let value = parameters[name], !value.isEmpty else { throw GatewayError.invalid(field: name, "is required") }
            return value
        }

        /// An optional integer parameter; one that is not an integer is a 422 naming it.
        public func int(_ name: String) throws -> Int? {
            guard let text = parameters[name], !text.isEmpty else { return nil }
            guard let value = Int(text.trimmingCharacters(in: .whitespaces)) else { throw GatewayError.invalid(field: name, "must be an integer") }
            return value
        }

        /// An optional decimal parameter (the SDK sends coordinates as strings like `"%f"`).
        public func double(_ name: String) throws -> Double? {
            guard let text = parameters[name], !text.isEmpty else { return nil }
            guard let value = Double(text.trimmingCharacters(in: .whitespaces)), value.isFinite else {
                throw GatewayError.invalid(field: name, "must be a number")
            }
            return value
        }
    }

    /// What a reply says of the client's session token.
    public enum Token: Sendable, Equatable {
        /// No `token` member: the client keeps its token.
        case unchanged
        /// A new token replaces the client's (after login, or a rotation).
        case issue(String)
        /// `"token": ""`: the session is over.
        case end
    }

    /// A successful reply: errCode 0.
    public struct Reply: Sendable {
        public var value: (any Encodable & Sendable)?
        public var message: String
        public var token: Token

        /// `value` (no `value` member when nil), `message`, and what becomes of the token.
        public static func ok(_ value: (any Encodable & Sendable)? = nil, message: String = "Ok.", token: Token = .unchanged) -> Reply {
            Reply(value: value, message: message, token: token)
        }
    }

    /// The COIMOTION credential: the `token` member of the body, a session token. An unknown or
    /// expired one makes the caller a guest (the reply then ends the client's session) rather
    /// than failing the call: the old service answered a stale token's profile as a guest's.
    public static let credentials = CredentialExtractor(invalid: .guest) { request in
        guard let object = try? bodyObject(request), let token = object["token"] as? String, !token.isEmpty else { return nil }
        return .sessionToken(token)
    }

    /// A dialect of COIMOTION routes, with the COIMOTION credential and error shape.
    public static func dialect(name: String = "coimotion", routes: [Route]) -> Dialect {
        Dialect(name: name, routes: routes, credentials: credentials, renderError: renderError)
    }

    /// A route handler speaking the transport: reads the call, checks its `_key` against the
    /// host's app keys (errCode -1 when it is missing or unknown), runs `handler` and writes the
    /// envelope. A caller whose token did not resolve gets `"token": ""` unless the handler issues one.
    public static func call(
        _ handler: @escaping @Sendable (Call, OperationContext) async throws -> Reply
    ) -> @Sendable (RouteRequest, OperationContext) async throws -> RouteReply {
        { request, context in
            let call = try parse(request, appKeys: context.plugin.appKeys, matches: context.plugin.secretMatches)
            var reply = try await handler(call, context)
            if context.credentialRefused, reply.token == .unchanged { reply.token = .end }
            return try response(reply)
        }
    }

    /// Decodes a call's body. Throws 400 for a body that is not a JSON object, and
    /// ``GatewayError/unknownApplication(_:)`` when the app key is not one of `appKeys` (as
    /// `matches` compares a presented key with a configured one: ``PluginContext/secretMatches(_:configured:)``).
    public static func parse(_ request: RouteRequest, appKeys: Set<String>,
                             matches: (_ presented: String, _ configured: String) -> Bool) throws -> Call {
        let object = try bodyObject(request)
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
        let call = Call(parameters: parameters, appKey: object["_key"] as? String, token: object["token"] as? String,
                        pathParameters: request.pathParameters)
        guard let key = call.appKey, appKeys.contains(where: { matches(key, $0) }) else {
            throw GatewayError.unknownApplication("The app key is missing or not registered with this gateway.")
        }
        return call
    }

    private static func bodyObject(_ request: RouteRequest) throws -> [String: Any] {
        guard request.body.readableBytes > 0 else { return [:] }
        guard let parsed = try? JSONSerialization.jsonObject(with: Data(request.body.readableBytesView)) as? [String: Any] else {
            throw GatewayError.badRequest("The body is not a JSON object.")
        }
        return parsed
    }

    /// The envelope of a successful reply.
    public static func response(_ reply: Reply) throws -> RouteReply {
        try RouteReply.json(Envelope(errCode: ErrorCode.ok.rawValue, message: reply.message, value: reply.value, token: reply.token),
                                 contentType: "application/json; charset=utf-8")
    }

    /// An application error: HTTP 200 with a non-zero `errCode`; a 401 also ends the client's session.
    public static func renderError(_ error: GatewayError) -> RouteReply {
        let code = ErrorCode(error)
        let envelope = Envelope(errCode: code.rawValue, message: error.detail, value: nil, token: code == .notSignedIn ? .end : .unchanged)
        return (try? RouteReply.json(envelope, contentType: "application/json; charset=utf-8"))
            ?? RouteReply.text(#"{"errCode":99,"message":"The reply could not be written."}"#, contentType: "application/json; charset=utf-8")
    }

    /// `errCode`, `message`, `value` (when there is one) and `token` (when it changes), in that order.
    private struct Envelope: Encodable {
        var errCode: Int
        var message: String
        var value: (any Encodable & Sendable)?
        var token: Token

        enum Key: String, CodingKey { case errCode, message, value, token }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(errCode, forKey: .errCode)
            try container.encode(message, forKey: .message)
            if let value { try container.encode(value, forKey: .value) }
            switch token {
            case .unchanged: break
            case .issue(let token): try container.encode(token, forKey: .token)
            case .end: try container.encode("", forKey: .token)
            }
        }
    }
}
