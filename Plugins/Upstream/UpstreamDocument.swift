import Foundation
import GatewayCore
import NIOCore
import Yams

/// The upstream service's own OpenAPI document (JSON or YAML, from a file or a URL), made part of
/// the gateway's: its paths under the plugin's mount (as the routes map them), its operations
/// tagged and named after the plugin, its schemas renamed `<id>_<name>` among the gateway's, and
/// its security requirements dropped (the gateway's own apply at the mount).
enum UpstreamDocument {
    static func load(_ source: String, context: PluginContext, routes: [UpstreamSettings.Route]) async -> (paths: [String: JSONValue], schemas: [String: JSONValue]) {
        do {
            let text: String
            if source.hasPrefix("http://") || source.hasPrefix("https://") {
                let reply = try await context.http.send(UpstreamRequest(method: .get, url: source, timeout: .seconds(10)), maxBodySize: 16 << 20)
                guard reply.status.code == 200 else { throw DocumentError(message: "\(source) answered \(reply.status.code)") }
                text = String(buffer: reply.body)
            } else {
                text = try String(contentsOf: context.resolve(path: source), encoding: .utf8)
            }
            guard let node = try Yams.compose(yaml: text), case .object(let document) = json(node) else {
                throw DocumentError(message: "\(source) is not an OpenAPI document")
            }
            return imported(document, id: context.pluginID, routes: routes)
        } catch {
            context.logger.warning("the upstream service's OpenAPI document could not be read; its routes are described generically",
                                   metadata: ["source": "\(source)", "error": "\(error)"])
            return ([:], [:])
        }
    }

    struct DocumentError: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    /// The paths (relative to the mount) and schemas of `document`.
    static func imported(_ document: [String: JSONValue], id: String, routes: [UpstreamSettings.Route]) -> (paths: [String: JSONValue], schemas: [String: JSONValue]) {
        let components = document["components"]?.objectValue ?? [:]
        var schemas: [String: JSONValue] = [:]
        for (name, schema) in components["schemas"]?.objectValue ?? [:] {
            schemas["\(id)_\(name)"] = rewrite(schema, id: id, components: components, depth: 0)
        }
        var paths: [String: JSONValue] = [:]
        for (path, item) in document["paths"]?.objectValue ?? [:] {
            guard let mounted = gatewayPath(for: path, routes: routes), case .object(var members) = rewrite(item, id: id, components: components, depth: 0)
            else { continue }
            members["servers"] = nil
            for method in ["get", "put", "post", "delete", "options", "head", "patch", "trace"] {
                guard case .object(var operation)? = members[method] else { continue }
                operation["security"] = nil
                operation["servers"] = nil
                operation["tags"] = .array([.string(id)])
                if let name = operation["operationId"]?.stringValue { operation["operationId"] = .string("\(id).\(name)") }
                members[method] = .object(operation)
            }
            paths[mounted] = .object(members)
        }
        return (paths, schemas)
    }

    /// Where an upstream path is served under the mount: through the first route whose upstream
    /// template matches it; nil when no route leads there.
    static func gatewayPath(for path: String, routes: [UpstreamSettings.Route]) -> String? {
        let segments = path.split(separator: "/").map(String.init)
        for route in routes {
            var values: [String: String] = [:]
            var index = 0
            var matched = true
            for part in route.upstreamPath {
                switch part {
                case .text(let text):
                    if index < segments.count && segments[index] == text { index += 1 } else { matched = false }
                case .parameter(let name):
                    if index < segments.count { values[name] = segments[index]; index += 1 } else { matched = false }
                case .rest(let name):
                    values[name] = segments[index...].joined(separator: "/")
                    index = segments.count
                }
                if !matched { break }
            }
            guard matched, index == segments.count else { continue }
            let mounted = route.path.split(separator: "/").compactMap { segment -> String? in
                guard segment.hasPrefix("{") && segment.hasSuffix("}") else { return String(segment) }
                let name = segment.hasSuffix("...}") ? String(segment.dropFirst().dropLast(4)) : String(segment.dropFirst().dropLast())
                let value = values[name] ?? ""
                return value.isEmpty ? nil : value
            }
            return "/" + mounted.joined(separator: "/")
        }
        return nil
    }

    /// `value` with schema references renamed and other component references replaced by what they name.
    static func rewrite(_ value: JSONValue, id: String, components: [String: JSONValue], depth: Int) -> JSONValue {
        guard depth < 32 else { return value }
        switch value {
        case .object(var members):
            if let reference = members["$ref"]?.stringValue, reference.hasPrefix("#/components/") {
                let parts = reference.dropFirst("#/components/".count).split(separator: "/", maxSplits: 1).map(String.init)
                if parts.count == 2 {
                    if parts[0] == "schemas" {
                        members["$ref"] = .string("#/components/schemas/\(id)_\(parts[1])")
                        return .object(members)
                    }
                    if let target = components[parts[0]]?.objectValue?[parts[1]] {
                        return rewrite(target, id: id, components: components, depth: depth + 1)
                    }
                }
            }
            for (key, member) in members { members[key] = rewrite(member, id: id, components: components, depth: depth + 1) }
            return .object(members)
        case .array(let elements):
            return .array(elements.map { rewrite($0, id: id, components: components, depth: depth + 1) })
        default:
            return value
        }
    }

    /// A YAML node as JSON: plain scalars typed as YAML's core schema types them, others as text.
    static func json(_ node: Node) -> JSONValue {
        switch node {
        case .scalar(let scalar):
            guard scalar.style == .plain else { return .string(scalar.string) }
            if let bool = Bool.construct(from: scalar) { return .bool(bool) }
            if let integer = Int.construct(from: scalar) { return .number(Double(integer)) }
            if let double = Double.construct(from: scalar) { return .number(double) }
            if NSNull.construct(from: scalar) != nil { return .null }
            return .string(scalar.string)
        case .mapping(let mapping):
            var members: [String: JSONValue] = [:]
            for (key, value) in mapping { members[key.string ?? "\(key)"] = json(value) }
            return .object(members)
        case .sequence(let sequence):
            return .array(sequence.map(json))
        case .alias:
            return .null
        }
    }
}
