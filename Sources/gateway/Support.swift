import Foundation
import GatewayCore
import GatewayServer
import NIOCore

/// Builds the HTTP request for `gateway call` from name=value arguments.
enum CallRequest {
    static func build(operation: ServiceOperation, mount: String, arguments: [(String, String)], body: String?) throws -> (target: String, body: ByteBuffer?) {
        var path = operation.path
        var remaining: [(String, String)] = []
        let pathNames = Set(operation.pathParameterNames)
        for (name, value) in arguments {
            if pathNames.contains(name) {
                path = path.replacingOccurrences(of: "{\(name)}", with: value.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? value)
            } else {
                remaining.append((name, value))
            }
        }
        if let missing = ServiceOperation.parameterNames(in: path).first {
            throw CallError("the path parameter '\(missing)' is missing (pass \(missing)=...)")
        }
        var target = mount.hasSuffix("/") ? String(mount.dropLast()) : mount
        target += path.isEmpty || path == "/" ? "" : (path.hasPrefix("/") ? path : "/" + path)
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
            var components = URLComponents()
            components.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) }
            target += "?" + (components.percentEncodedQuery ?? "")
        }
        if let body { return (target, ByteBuffer(string: body)) }
        if takesBody {
            return (target, ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: fields)))
        }
        return (target, nil)
    }

    static func pretty(_ text: String) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]),
              let data = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])
        else { return text }
        return String(decoding: data, as: UTF8.self)
    }
}

struct CallError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Left-aligned text columns.
enum Table {
    static func render(_ rows: [[String]]) -> String {
        guard let columns = rows.map(\.count).max() else { return "" }
        var widths = Array(repeating: 0, count: columns)
        for row in rows { for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) } }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}
