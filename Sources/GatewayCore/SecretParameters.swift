/// Path parameters that carry a secret, such as the key in `/v2/keys/{key}`: the host writes
/// `***` in their place wherever it records a path (the access log, trace spans), so that a
/// secret sent in a path never reaches a log file or a trace collector.
///
/// A route marks one with ``RouteBuilder/secret(_:)``, which adds the tag ``tag(_:)`` (also
/// shown by `gateway routes`).
package enum SecretParameters {
    static let prefix = "secret:"

    /// The tag that marks path parameter `name` secret.
    public static func tag(_ name: String) -> String { prefix + name }

    /// The path parameters `tags` mark secret.
    public static func names(in tags: [String]) -> [String] {
        tags.compactMap { $0.hasPrefix(prefix) ? String($0.dropFirst(prefix.count)) : nil }
    }

    /// `path` as logs may show it: the route's `template` with `***` for each secret parameter and
    /// the value of every other one. `path` itself when the route has no secret parameter.
    public static func redact(_ path: String, template: String, parameters: [String: String], secret: [String]) -> String {
        guard !secret.isEmpty else { return path }
        let segments = template.split(separator: "/", omittingEmptySubsequences: false).map { segment -> String in
            guard segment.hasPrefix("{"), segment.hasSuffix("}") else { return String(segment) }
            var name = segment.dropFirst().dropLast()
            if name.hasSuffix("...") { name = name.dropLast(3) }
            return secret.contains(String(name)) ? "***" : parameters[String(name)] ?? String(segment)
        }
        return segments.joined(separator: "/")
    }
}

extension RouteBuilder {
    /// Marks path parameter `name` as a secret that logs and traces must not show.
    public func secret(_ name: String) -> Self { tags(SecretParameters.tag(name)) }
}
