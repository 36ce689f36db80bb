import Foundation
import HTTPTypes

/// A failure the gateway reports to a client as an RFC 9457 problem document.
///
/// A `GatewayError` carries everything the reply needs: the HTTP status, a stable problem type,
/// a human-readable title and detail, and — for invalid input — the offending fields as JSON
/// pointers. Handlers throw it; the host renders it as `application/problem+json` in the native API
/// and a dialect maps it to its legacy error shape. Any other error thrown by a handler is logged
/// and reported as a 500 without leaking its text.
public struct GatewayError: Error, Sendable, Equatable, CustomStringConvertible {
    /// One offending part of the input, located by a JSON pointer (RFC 6901) such as `/title`
    /// for the body or by a parameter name such as `query.limit`.
    public struct FieldError: Sendable, Equatable, Codable {
        /// Where the problem is: a JSON pointer into the body, or `path.<name>` / `query.<name>`.
        public var pointer: String
        /// What is wrong with it, in words a client developer can act on.
        public var detail: String

        public init(pointer: String, detail: String) {
            self.pointer = pointer
            self.detail = detail
        }
    }

    /// The problem types the gateway reports: the last part of ``type`` (``slug``). A dialect maps
    /// them to its own codes.
    public enum Kind: String, Sendable, CaseIterable {
        case badRequest = "bad-request"
        case unauthorized = "unauthorized"
        case forbidden = "forbidden"
        /// The client application's key (a COIMOTION `_key`, a NEC BaaS application id) is missing or unknown.
        case unknownApplication = "unknown-application"
        case notFound = "not-found"
        case methodNotAllowed = "method-not-allowed"
        case notAcceptable = "not-acceptable"
        case conflict = "conflict"
        case gone = "gone"
        case preconditionFailed = "precondition-failed"
        case contentTooLarge = "content-too-large"
        case unsupportedMediaType = "unsupported-media-type"
        case invalid = "invalid-input"
        case quotaExceeded = "quota-exceeded"
        /// A call of a batch or a step of a composite was not made: one it depends on failed.
        case failedDependency = "failed-dependency"
        case internalError = "internal-error"
        case badGateway = "bad-gateway"
        case unavailable = "unavailable"
        case gatewayTimeout = "gateway-timeout"
    }

    /// The problem type.
    public let kind: Kind
    /// The reply's HTTP status.
    public let status: HTTPResponse.Status
    /// A short summary of the problem type; the same for every occurrence of the type.
    public let title: String
    /// What went wrong this time, specific to this occurrence.
    public let detail: String
    /// The offending fields, for input problems.
    public let errors: [FieldError]
    /// Headers the reply must carry, such as `Allow` on a 405 or `Retry-After` on a 429.
    public let headers: HTTPFields
    /// Extension members added to the problem document (RFC 9457 §3.2), such as
    /// `violated-policies` on a quota problem. Values are strings, numbers or string arrays.
    package let extensions: [String: ProblemValue]

    private init(
        _ kind: Kind, status: HTTPResponse.Status, title: String, detail: String,
        errors: [FieldError] = [], headers: HTTPFields = [:], extensions: [String: ProblemValue] = [:]
    ) {
        self.kind = kind
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors
        self.headers = headers
        self.extensions = extensions
    }

    /// The problem type URI. Quota problems use the IANA registered type; the others live under
    /// the gateway's own namespace.
    public var type: String {
        switch kind {
        case .quotaExceeded: "https://iana.org/assignments/http-problem-types#quota-exceeded"
        default: "https://gateway.dev/problems/\(kind.rawValue)"
        }
    }

    /// The stable slug of the problem type (`not-found`, `invalid-input`, ...), handy for dialects.
    public var slug: String { kind.rawValue }

    public var description: String { "\(status.code) \(title): \(detail)" }

    // MARK: Constructors

    /// 400: the request cannot be read (malformed JSON, bad percent-encoding, a bad query).
    public static func badRequest(_ detail: String, errors: [FieldError] = []) -> GatewayError {
        GatewayError(.badRequest, status: 400, title: "Bad request", detail: detail, errors: errors)
    }
    /// 401: the caller must authenticate (or its credential is no longer valid).
    public static func unauthorized(_ detail: String = "Authentication is required.") -> GatewayError {
        GatewayError(.unauthorized, status: 401, title: "Unauthorized", detail: detail,
                     headers: [.wwwAuthenticate: "Bearer"])
    }
    /// 403: the caller is known but may not do this.
    public static func forbidden(_ detail: String) -> GatewayError {
        GatewayError(.forbidden, status: 403, title: "Forbidden", detail: detail)
    }
    /// 403: the client application's key is missing or not registered with this gateway.
    public static func unknownApplication(_ detail: String) -> GatewayError {
        GatewayError(.unknownApplication, status: 403, title: "Unknown application", detail: detail)
    }
    /// 404: nothing here, or nothing the caller may know of.
    public static func notFound(_ detail: String) -> GatewayError {
        GatewayError(.notFound, status: 404, title: "Not found", detail: detail)
    }
    /// 405: the path exists but not for this method; `allowed` fills the `Allow` header.
    public static func methodNotAllowed(_ method: String, allowed: [String]) -> GatewayError {
        GatewayError(.methodNotAllowed, status: 405, title: "Method not allowed",
                     detail: "\(method) is not allowed here; use \(allowed.joined(separator: ", ")).",
                     headers: [.allow: allowed.joined(separator: ", ")])
    }
    /// 406: no representation the client accepts.
    public static func notAcceptable(_ detail: String) -> GatewayError {
        GatewayError(.notAcceptable, status: 406, title: "Not acceptable", detail: detail)
    }
    /// 409: the request conflicts with the current state (a duplicate, a stale version).
    /// `duplicate` names the member whose value is taken (`username`, `email`), as the extension
    /// member `duplicate`, so that a dialect can answer with its own code for each.
    public static func conflict(_ detail: String, duplicate: String? = nil) -> GatewayError {
        GatewayError(.conflict, status: 409, title: "Conflict", detail: detail, extensions: duplicate.map { ["duplicate": .string($0)] } ?? [:])
    }

    /// The member a 409 says is taken (see ``conflict(_:duplicate:)``).
    public var duplicate: String? {
        if case .string(let member)? = extensions["duplicate"] { return member }
        return nil
    }
    /// 410: the resource existed and is gone for good.
    public static func gone(_ detail: String) -> GatewayError {
        GatewayError(.gone, status: 410, title: "Gone", detail: detail)
    }
    /// 412: an `If-Match` precondition failed.
    public static func preconditionFailed(_ detail: String) -> GatewayError {
        GatewayError(.preconditionFailed, status: 412, title: "Precondition failed", detail: detail)
    }
    /// 413: the body is larger than the limit.
    public static func contentTooLarge(limit: Int) -> GatewayError {
        GatewayError(.contentTooLarge, status: 413, title: "Content too large",
                     detail: "The request body exceeds the limit of \(limit) bytes.",
                     extensions: ["limit": .int(limit)])
    }
    /// 413: the request holds more than an operation takes at once (too many items, not too many bytes).
    public static func tooLarge(_ detail: String) -> GatewayError {
        GatewayError(.contentTooLarge, status: 413, title: "Content too large", detail: detail)
    }

    /// 415: the body's media type is not one the operation reads.
    public static func unsupportedMediaType(_ got: String, accepted: [String]) -> GatewayError {
        GatewayError(.unsupportedMediaType, status: 415, title: "Unsupported media type",
                     detail: "Content-Type '\(got)' is not accepted; send \(accepted.joined(separator: " or ")).",
                     headers: [HTTPField.Name("Accept-Post")!: accepted.joined(separator: ", ")])
    }
    /// 422: the request is well-formed but its values are invalid; each field error names one.
    public static func invalid(_ detail: String, errors: [FieldError] = []) -> GatewayError {
        GatewayError(.invalid, status: 422, title: "Invalid input", detail: detail, errors: errors)
    }
    /// 422 for one field: `pointer` names it, `detail` says what is wrong.
    public static func invalid(field pointer: String, _ detail: String) -> GatewayError {
        .invalid("\(pointer): \(detail)", errors: [FieldError(pointer: pointer, detail: detail)])
    }
    /// 429: a quota is used up; `retryAfter` seconds until it returns.
    public static func quotaExceeded(policy: String, retryAfter: Int, detail: String? = nil) -> GatewayError {
        GatewayError(.quotaExceeded, status: 429, title: "Too many requests",
                     detail: detail ?? "The rate limit '\(policy)' is exhausted; retry in \(retryAfter) s.",
                     headers: [.retryAfter: String(retryAfter)],
                     extensions: ["violated-policies": .strings([policy])])
    }
    /// 500: an unexpected failure; the detail never carries internal text.
    public static func internalError(_ detail: String = "The gateway failed to handle this request.") -> GatewayError {
        GatewayError(.internalError, status: 500, title: "Internal error", detail: detail)
    }
    /// 502: an upstream service answered with something unusable.
    public static func badGateway(_ detail: String) -> GatewayError {
        GatewayError(.badGateway, status: 502, title: "Bad gateway", detail: detail)
    }
    /// 503: the service (or one of its dependencies) is unavailable for now.
    public static func unavailable(_ detail: String, retryAfter: Int? = nil) -> GatewayError {
        GatewayError(.unavailable, status: 503, title: "Service unavailable", detail: detail,
                     headers: retryAfter.map { [.retryAfter: String($0)] } ?? [:])
    }
    /// 424: not done, because something it depends on failed.
    public static func failedDependency(_ detail: String) -> GatewayError {
        GatewayError(.failedDependency, status: 424, title: "Failed dependency", detail: detail)
    }
    /// 504: an upstream service did not answer in time.
    public static func gatewayTimeout(_ detail: String) -> GatewayError {
        GatewayError(.gatewayTimeout, status: 504, title: "Gateway timeout", detail: detail)
    }

    /// A copy with more reply header fields (replacing fields of the same names).
    public func adding(headers more: HTTPFields) -> GatewayError {
        var merged = headers
        for name in Set(more.map(\.name)) { merged[fields: name] = more[fields: name] }
        return GatewayError(kind, status: status, title: title, detail: detail, errors: errors, headers: merged, extensions: extensions)
    }
}

/// A value of an extension member in a problem document.
package enum ProblemValue: Sendable, Equatable, Encodable {
    case string(String)
    case int(Int)
    case strings([String])

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .strings(let value): try container.encode(value)
        }
    }
}
