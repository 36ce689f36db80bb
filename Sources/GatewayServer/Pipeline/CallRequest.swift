import Foundation
import GatewayCore
import NIOCore

/// Builds the HTTP request for `gateway call` from name=value arguments.
public enum CallRequest {
    /// The request target and body for running `operation` (mounted at `mount`) with name=value arguments:
    /// path parameters fill the path, query parameters (and every pair, for an operation without a body)
    /// the query, the rest a JSON body whose values are parsed as JSON where they parse.
    public static func build(operation: Route, mount: String, arguments: [(String, String)], body: String?) throws -> (target: String, body: ByteBuffer?) {
        var path = operation.path
        var remaining: [(String, String)] = []
        let pathNames = Set(operation.pathParameterNames)
        for (name, value) in arguments {
            if pathNames.contains(name) {
                // `{name...}` takes the rest of a path: its slashes stay.
                path = path.replacingOccurrences(of: "{\(name)...}", with: value.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? value)
                path = path.replacingOccurrences(of: "{\(name)}", with: value.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? value)
            } else {
                remaining.append((name, value))
            }
        }
        if let missing = Route.parameterNames(in: path).first {
            throw CallError("the path parameter '\(missing)' is missing (pass \(missing)=...)")
        }
        var target = Gateway.joinPath(mount, path)
        let queryNames = Set(SchemaReflector.parameters(of: operation.io.query).map(\.name))
        let takesBody = operation.io.hasBody
        var query: [(String, String)] = []
        var fields: [String: Any] = [:]
        for (name, value) in remaining {
            if queryNames.contains(name) || !takesBody {
                query.append((name, value))
            } else {
                fields[name] = (try? JSONSerialization.jsonObject(with: Data(value.utf8), options: [.fragmentsAllowed])) ?? value
            }
        }
        if !query.isEmpty {
            // Only unreserved characters stay as they are: `&`, `=` and `+` in a value must not split it.
            let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
            target += "?" + query.map { name, value in
                (name.addingPercentEncoding(withAllowedCharacters: unreserved) ?? name) + "="
                    + (value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value)
            }.joined(separator: "&")
        }
        if let body { return (target, ByteBuffer(string: body)) }
        if takesBody {
            return (target, ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: fields)))
        }
        return (target, nil)
    }

    /// Pretty-prints JSON text; other text is returned as is.
    public static func pretty(_ text: String) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]),
              let data = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])
        else { return text }
        return String(decoding: data, as: UTF8.self)
    }
}

/// Arguments of `gateway call` that do not fit the operation.
public struct CallError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
