import Foundation
import HTTPTypes
import NIOCore

/// A legacy API served beside a plugin's native one: routes that keep old clients working.
///
/// A dialect is a name, a credential extractor, an error renderer and its ``Route``s, declared
/// as the native API's are — access rule, cost, cache policy, tags, optional typed input. It
/// translates the old shapes and calls the same service code as the plugin's operations, and the
/// host runs its routes through the same pipeline: principal → rate
/// limit → cache → authorization (the access rule, the key's scopes and resources, the plugin's
/// ``AuthorizingPlugin/authorize(_:)`` hook) → handler. A dialect adds only two things of its own:
///
/// - a ``CredentialExtractor``: how its old clients present credentials (`X-ApiKey`, a token in
///   the body, ...). The host resolves what it returns to a principal;
/// - an error renderer: its legacy error shape. Every ``GatewayError`` on the way — a refused
///   credential, a 429, a 422 from decoding, a handler's error — is rendered through it.
///
/// No handler checks credentials or access itself.
public struct Dialect: Sendable {
    /// A short name (`kkbox`, `xively-v2`), used in logs, metrics and `gateway routes`.
    public let name: String
    /// The routes, WebSockets included. Paths are absolute (`/ajax/ac_search.php`); plugins.yaml
    /// may put them under a prefix.
    public let routes: [Route]
    /// How old clients present credentials.
    public let credentials: CredentialExtractor
    /// Renders a ``GatewayError`` in the legacy shape. The host adds the error's own header
    /// fields (`Retry-After`, `Allow`) to what it returns, unless the rendering sets them itself.
    public let renderError: @Sendable (GatewayError) -> RouteReply

    public init(
        name: String,
        routes: [Route],
        credentials: CredentialExtractor = .none,
        renderError: @escaping @Sendable (GatewayError) -> RouteReply
    ) {
        self.name = name
        self.routes = routes
        self.credentials = credentials
        self.renderError = renderError
    }
}

/// How a dialect's old clients present their credential. The host calls it once per request,
/// after the body is read, and resolves the result to a ``Principal`` (nil: a guest). A
/// credential that does not resolve (unknown, expired, revoked) is a 401 in the dialect's shape,
/// unless the extractor says such callers are guests (``InvalidCredential/guest``).
public struct CredentialExtractor: Sendable {
    /// What becomes of a caller whose credential does not resolve.
    public enum InvalidCredential: Sendable {
        /// A 401.
        case refuse
        /// A guest; the handler sees ``OperationContext/credentialRefused``.
        case guest
    }

    let extract: @Sendable (RouteRequest) -> Credential?
    /// What becomes of a caller whose credential does not resolve.
    public let invalid: InvalidCredential

    /// An extractor that reads the request with `extract`.
    public init(invalid: InvalidCredential = .refuse, _ extract: @escaping @Sendable (RouteRequest) -> Credential?) {
        self.invalid = invalid
        self.extract = extract
    }

    /// The credential `request` presents, if any.
    public func callAsFunction(_ request: RouteRequest) -> Credential? {
        extract(request)
    }

    /// No credential: every caller is a guest.
    public static let none = CredentialExtractor { _ in nil }

    /// The first extractor that finds a credential.
    public static func firstOf(_ extractors: CredentialExtractor...) -> CredentialExtractor {
        CredentialExtractor { request in
            for extractor in extractors { if let found = extractor(request) { return found } }
            return nil
        }
    }

    /// An API key in header `name` (`X-ApiKey`).
    public static func apiKeyHeader(_ name: String) -> CredentialExtractor {
        let field = HTTPField.Name(name)
        return CredentialExtractor { request in
            guard let field, let key = request.headers[field], !key.isEmpty else { return nil }
            return .apiKey(key)
        }
    }

    /// An API key in query parameter `name` (`?key=`).
    public static func apiKeyQuery(_ name: String) -> CredentialExtractor {
        CredentialExtractor { request in
            guard let key = request.query(name), !key.isEmpty else { return nil }
            return .apiKey(key)
        }
    }

    /// A session token in header `name` (`X-Session-Token`).
    public static func sessionHeader(_ name: String) -> CredentialExtractor {
        let field = HTTPField.Name(name)
        return CredentialExtractor { request in
            guard let field, let token = request.headers[field], !token.isEmpty else { return nil }
            return .sessionToken(token)
        }
    }

    /// The gateway's own `Authorization: Bearer <session token>`.
    public static let bearer = CredentialExtractor { request in
        guard let authorization = request.headers[.authorization], authorization.count > 7,
              authorization.prefix(7).lowercased() == "bearer " else { return nil }
        let token = authorization.dropFirst(7).trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : .sessionToken(token)
    }
}

/// A credential a client presented.
public enum Credential: Sendable, Equatable {
    /// A session token.
    case sessionToken(String)
    /// A native request's `Authorization: Bearer` token: a session token of this gateway, or a
    /// token of an identity provider the gateway trusts (`auth.providers`: a JWT, or an opaque
    /// token it introspects). Dialects never produce one: their old clients keep their own credentials.
    case bearerToken(String)
    /// An API key.
    case apiKey(String)

    /// The query parameters the gateway reads a native credential from where a client cannot set
    /// header fields (a browser's WebSocket): `access_token` (a session) and `api_key`. They are
    /// the gateway's, never to be passed on to a service behind it.
    public static let queryParameters: Set<String> = ["access_token", "api_key"]
}

/// A message on a WebSocket.
public enum WebSocketMessage: Sendable, Equatable {
    case text(String)
    case binary(ByteBuffer)
}

/// One open WebSocket, as a handler sees it.
public protocol WebSocketConnection: Sendable {
    /// The messages the client sends; ends when the client closes.
    var inbound: AsyncStream<WebSocketMessage> { get }
    /// Sends a message; throws when the connection is gone.
    func send(_ message: WebSocketMessage) async throws
}

/// Media type helpers.
package enum MediaType {
    /// A `Content-Type` value without its parameters, trimmed and lowercased (`application/json`).
    public static func essence(of header: String) -> String {
        if header == "application/json" { return header }
        let type = header.split(separator: ";", maxSplits: 1).first.map(String.init) ?? header
        return type.trimmingCharacters(in: .whitespaces).lowercased()
    }
}

extension HTTPField.Name {
    /// `Link` (RFC 8288): the native API's `rel="next"` pagination, and any relation a reply names.
    public static var link: HTTPField.Name { HTTPField.Name("Link")! }
}
