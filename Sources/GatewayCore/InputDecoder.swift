import Foundation
import NIOCore

/// Decodes an operation's input parts and turns every decoding failure into a ``GatewayError``
/// that names the offending field: 400 when the body cannot be read at all, 422 when a value has
/// the wrong type, is missing or is invalid.
enum InputDecoder {
    static func decodeParameters<T: Decodable>(_ type: T.Type, from values: [String: String], location: String) throws -> T {
        if T.self == NoInput.self { return NoInput() as! T }
        return try decodeParameters(type, from: ParameterValues.named(values), location: location)
    }

    static func decodeParameters<T: Decodable>(_ type: T.Type, from pairs: [(name: String, value: String)], location: String) throws -> T {
        if T.self == NoInput.self { return NoInput() as! T }
        return try decodeParameters(type, from: ParameterValues.pairs(pairs), location: location)
    }

    static func decodeParameters<T: Decodable>(_ type: T.Type, from values: ParameterValues, location: String) throws -> T {
        do {
            return try T(from: ParameterDecoder(values: values))
        } catch let error as DecodingError {
            throw problem(for: error, location: location)
        }
    }

    static func decodeBody<T: Decodable>(_ type: T.Type, from request: RouteRequest) throws -> T {
        if T.self == NoInput.self { return NoInput() as! T }
        let contentType = request.contentType ?? "application/json"
        if let raw = T.self as? any RawBodyInput.Type {
            guard raw.acceptedMediaTypes.contains(contentType) || raw.acceptedMediaTypes.contains("*/*") else {
                throw GatewayError.unsupportedMediaType(contentType, accepted: raw.acceptedMediaTypes)
            }
            return try raw.init(bytes: request.body, contentType: contentType) as! T
        }
        guard contentType == "application/json" || contentType.hasSuffix("+json") else {
            throw GatewayError.unsupportedMediaType(contentType, accepted: ["application/json"])
        }
        let body = request.body
        guard body.readableBytes > 0 else {
            throw GatewayError.badRequest("This operation needs a JSON body.")
        }
        do {
            return try body.withUnsafeReadableBytes { bytes in
                try JSONCoding.decoder.decode(T.self, from: Data(bytes))
            }
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty,
               let syntax = body.withUnsafeReadableBytes({ JSONSyntax.firstError(in: $0) }) {
                // Foundation's message has no position; say where the syntax breaks.
                throw GatewayError.badRequest("The body is not valid JSON: \(syntax).")
            }
            throw problem(for: error, location: "")
        }
    }

    /// The function that turns a call's raw input into typed, validated input parts, prepared
    /// once per route: which parts to decode and which to validate is decided here, not per request.
    static func decoder<Path: Decodable & Sendable, Query: Decodable & Sendable, Body: Decodable & Sendable>(
        path _: Path.Type, query _: Query.Type, body _: Body.Type
    ) -> @Sendable (RouteRequest) throws -> RouteInput<Path, Query, Body> {
        let takesPath = Path.self != NoInput.self
        let takesQuery = Query.self != NoInput.self
        let takesBody = Body.self != NoInput.self
        let validatePath = validator(for: Path.self)
        let validateQuery = validator(for: Query.self)
        let validateBody = validator(for: Body.self)
        return { request in
            let path: Path = takesPath ? try decodeParameters(Path.self, from: request.pathParameters, location: "path") : NoInput() as! Path
            let query: Query = takesQuery
                ? try decodeParameters(Query.self, from: request.queryParameters, location: "query")
                : NoInput() as! Query
            let body: Body = takesBody ? try decodeBody(Body.self, from: request) : NoInput() as! Body
            let input = RouteInput(path: path, query: query, body: body, request: request)
            if let validatePath { try validatePath(input.path, "path") }
            if let validateQuery { try validateQuery(input.query, "query") }
            if let validateBody { try validateBody(input.body, "") }
            return input
        }
    }

    /// The validation of an input part of type `T`, prepared once per route: when `T` is
    /// ``ValidatableInput``, a function that validates a value of it; nil otherwise.
    static func validator<T>(for type: T.Type) -> (@Sendable (borrowing T, String) throws -> Void)? {
        guard type is any ValidatableInput.Type else { return nil }
        return { value, location in
            try check((copy value as? any ValidatableInput)?.validate() ?? [], location: location)
        }
    }

    /// Throws the 422 for `problems` (pointers relative to the part at `location`), if any.
    static func check(_ problems: [GatewayError.FieldError], location: String) throws {
        guard !problems.isEmpty else { return }
        let located = problems.map { problem in
            location.isEmpty ? problem : GatewayError.FieldError(pointer: "\(location).\(problem.pointer)", detail: problem.detail)
        }
        throw GatewayError.invalid(located.map { "\($0.pointer): \($0.detail)" }.joined(separator: "; "), errors: located)
    }

    /// Maps a decoding failure to a problem. `location` is `path` or `query` for parameters, empty for the body.
    static func problem(for error: DecodingError, location: String) -> GatewayError {
        func pointer(_ path: [any CodingKey], appending key: (any CodingKey)? = nil) -> String {
            let keys = path + (key.map { [$0] } ?? [])
            if !location.isEmpty {
                return "\(location).\(keys.map(\.stringValue).joined(separator: "."))"
            }
            return keys.isEmpty ? "/" : keys.map { key in
                "/" + (key.intValue.map(String.init) ?? key.stringValue
                    .replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1"))
            }.joined()
        }
        func invalid(_ pointer: String, _ detail: String) -> GatewayError {
            .invalid("\(pointer): \(detail)", errors: [.init(pointer: pointer, detail: detail)])
        }
        switch error {
        case .typeMismatch(let type, let context):
            return invalid(pointer(context.codingPath), "expected \(typeDescription(type))")
        case .valueNotFound(let type, let context):
            return invalid(pointer(context.codingPath), "expected \(typeDescription(type)), found null")
        case .keyNotFound(let key, let context):
            return invalid(pointer(context.codingPath, appending: key), "is required")
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty && location.isEmpty {
                return .badRequest("The body is not valid JSON.")
            }
            return invalid(pointer(context.codingPath), context.debugDescription)
        @unknown default:
            return .badRequest("The input could not be decoded.")
        }
    }

    private static func typeDescription(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt.Type, is UInt64.Type, is UInt32.Type: "an integer"
        case is Double.Type, is Float.Type: "a number"
        case is Date.Type: "an RFC 3339 timestamp"
        default:
            String(describing: type).hasPrefix("Array") ? "an array" : (String(describing: type).hasPrefix("Dictionary") ? "an object" : "a \(type)")
        }
    }
}

/// The gateway's JSON conventions: RFC 3339 UTC timestamps (fractional seconds accepted on input,
/// emitted when present), camelCase keys as declared, sorted keys off for speed.
package enum JSONCoding {
    /// The shared decoder for bodies and stored JSON.
    public static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = UTCTimestamp.date(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "'\(text)' is not an RFC 3339 timestamp")
            }
            return date
        }
        return decoder
    }

    /// The shared encoder for replies.
    public static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(UTCTimestamp.format(date))
        }
        return encoder
    }
}
