import Foundation
import GatewayCore

/// `composites.<name>` in plugins.yaml: an endpoint of the gateway made of calls to operations of
/// any plugin (or upstream service), their inputs taken from the request and from earlier steps'
/// replies, the reply assembled into a declared shape.
///
/// ```yaml
/// composites:
///   note-with-author:
///     path: /v1/views/notes/{id}
///     steps:
///       note: { operation: notes.get, input: { id: "{{request.path.id}}" } }
///       author: { operation: accounts.user, input: { id: "{{note/owner}}" }, optional: true, timeout: 2s }
///     reply: { note: "{{note}}", author: "{{author/username}}" }
/// ```
///
/// A string that is one reference takes the referenced JSON as it is; references inside longer text
/// are put in as text. References: `{{request.path.NAME}}`, `{{request.query.NAME}}`,
/// `{{request.body}}` and `{{STEP}}` (a step's JSON reply), each optionally with a JSON pointer
/// (`{{note/owner}}`), and `{{STEP.status}}`. (`${...}` is plugins.yaml's own: the environment.)
public struct CompositeSettings: Decodable, Sendable, Equatable {
    /// `GET` (default) or `POST` (its JSON body is `{{request.body}}`).
    public var method: String
    /// Its full path, with `{name}` parameters.
    public var path: String
    public var summary: String?
    /// Who may call it (the steps are then each authorized as the caller): `public` (default),
    /// `user`, `admin`, `scope:NAME` or `granted:NAME` (a grant an administrator gave the user).
    public var access: String
    /// How long each step may take unless it says otherwise (default 10s).
    public var timeout: ConfigDuration
    public var steps: [String: CompositeStep]
    /// The reply's shape (default: each step's reply under its name).
    public var reply: JSONValue?
    /// The credential kinds the composite takes (`session`, `key`, providers' names; default all),
    /// as a plugin's `accept`.
    public var accept: [String]?

    enum CodingKeys: String, CodingKey { case method, path, summary, access, timeout, steps, reply, accept }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        method = try container.decodeIfPresent(String.self, forKey: .method)?.uppercased() ?? "GET"
        guard method == "GET" || method == "POST" else {
            throw DecodingError.dataCorruptedError(forKey: .method, in: container, debugDescription: "use GET or POST")
        }
        path = try container.decode(String.self, forKey: .path)
        guard PluginSettings.isValidMount(path.replacingOccurrences(of: "{", with: "").replacingOccurrences(of: "}", with: "")), path.count > 1,
              !path.contains("...") else {
            throw DecodingError.dataCorruptedError(forKey: .path, in: container, debugDescription: "\"\(path.prefix(80))\" is not a path (start with /; {name} parameters)")
        }
        summary = try container.decodeIfPresent(String.self, forKey: .summary)
        access = try container.decodeIfPresent(String.self, forKey: .access) ?? "public"
        guard CompositeSettings.accessRule(access) != nil else {
            throw DecodingError.dataCorruptedError(forKey: .access, in: container, debugDescription: "use public, user, admin, scope:NAME or granted:NAME")
        }
        timeout = try container.decodeIfPresent(ConfigDuration.self, forKey: .timeout) ?? ConfigDuration(seconds: 10)
        guard timeout.seconds > 0 else { throw DecodingError.dataCorruptedError(forKey: .timeout, in: container, debugDescription: "must be more than 0") }
        steps = try container.decode([String: CompositeStep].self, forKey: .steps)
        reply = try container.decodeIfPresent(JSONValue.self, forKey: .reply)
        accept = try container.decodeIfPresent([String].self, forKey: .accept)
        guard !steps.isEmpty else { throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "give at least one step") }
        // References: to path parameters the path has, to steps that exist, without a circle.
        let parameters = Set(Route.parameterNames(in: path))
        func check(_ value: JSONValue?, at key: String) throws -> Set<String> {
            var used = Set<String>()
            for reference in CompositeReference.all(in: value) {
                switch reference.source {
                case .path(let name) where !parameters.contains(name):
                    throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "\(key): {{request.path.\(name)}} is not a parameter of \(path)")
                case .body where method != "POST":
                    throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "\(key): {{request.body}} needs method: POST")
                case .step(let name), .status(let name):
                    guard steps[name] != nil else {
                        throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "\(key): no step is named '\(name)'")
                    }
                    used.insert(name)
                default: break
                }
            }
            if case .string(let text)? = value, let problem = CompositeReference.problem(in: text) {
                throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "\(key): \(problem)")
            }
            return used
        }
        var edges: [String: Set<String>] = [:]
        for (name, step) in steps.sorted(by: { $0.key < $1.key }) {
            guard name.range(of: "^[A-Za-z][A-Za-z0-9_-]{0,39}$", options: .regularExpression) != nil, name != "request" else {
                throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "'\(name)' is not a step name (a letter, then letters, digits, _ and -; not 'request')")
            }
            if let problem = step.problem {
                throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "steps.\(name): \(problem)")
            }
            var used = try check(.object((step.input ?? [:])), at: "steps.\(name).input")
            used.formUnion(try check(step.path.map(JSONValue.string), at: "steps.\(name).path"))
            used.formUnion(try check(step.body, at: "steps.\(name).body"))
            guard !used.contains(name) else {
                throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "steps.\(name) refers to itself")
            }
            edges[name] = used
        }
        _ = try check(reply, at: "reply")
        var state: [String: Int] = [:]
        func visit(_ node: String) -> Bool {
            if state[node] == 1 { return true }
            if state[node] == 2 { return false }
            state[node] = 1
            for next in edges[node] ?? [] where visit(next) { return true }
            state[node] = 2
            return false
        }
        for name in steps.keys.sorted() where visit(name) {
            throw DecodingError.dataCorruptedError(forKey: .steps, in: container, debugDescription: "the steps refer to each other in a circle (through '\(name)')")
        }
    }

    static func accessRule(_ text: String) -> AccessRule? {
        switch text {
        case "public": .public
        case "user": .user
        case "admin": .admin
        default:
            if text.hasPrefix("scope:") && text.count > 6 { .scope(String(text.dropFirst(6))) }
            else if text.hasPrefix("granted:") && text.count > 8 { .granted(String(text.dropFirst(8))) }
            else { nil }
        }
    }
}

/// One step of a composite: an operation by name with its input, or a method and path.
public struct CompositeStep: Decodable, Sendable, Equatable {
    public var operation: String?
    /// The operation's path, query and body members by name.
    public var input: [String: JSONValue]?
    public var method: String?
    /// A path under the gateway, with its query; references in it are percent-encoded.
    public var path: String?
    public var body: JSONValue?
    /// How long it may take (default the composite's `timeout`).
    public var timeout: ConfigDuration?
    /// Whether the composite still answers 200 without it (its problem under `errors`).
    public var optional: Bool?

    var problem: String? {
        if operation != nil {
            if method != nil || path != nil { return "give either operation (with input) or method and path" }
            return nil
        }
        if input != nil { return "input goes with operation" }
        guard let method, ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(method.uppercased()) else {
            return "give operation, or method (GET, POST, PUT, PATCH, DELETE) and path"
        }
        guard let path, path.hasPrefix("/") else { return "path must start with /" }
        if timeout.map({ $0.seconds <= 0 }) ?? false { return "timeout must be more than 0" }
        return nil
    }
}

/// A `{{...}}` in a composite's text.
struct CompositeReference: Hashable, Sendable {
    enum Source: Hashable, Sendable {
        case path(String)
        case query(String)
        case body
        case step(String)
        case status(String)
    }

    var source: Source
    /// A JSON pointer into the value (`/venue/lat`), or empty.
    var pointer: String {
        didSet { tokens = Self.tokens(of: pointer) }
    }
    /// The pointer's reference tokens, decoded (RFC 6901: `~1` is `/`, `~0` is `~`).
    private(set) var tokens: [String]

    init(source: Source, pointer: String) {
        self.source = source
        self.pointer = pointer
        tokens = Self.tokens(of: pointer)
    }

    static func tokens(of pointer: String) -> [String] {
        guard !pointer.isEmpty else { return [] }
        return pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
    }

    /// A piece of a text: as written, or a reference.
    enum Part: Equatable, Sendable {
        case text(String)
        case reference(CompositeReference)
    }

    /// The pieces of `text`; a `{{` without its `}}`, or an unknown form, stays text (see ``problem(in:)``).
    static func parts(of text: String) -> [Part] {
        var parts: [Part] = []
        var rest = text[...]
        while let open = rest.range(of: "{{") {
            guard let close = rest[open.upperBound...].range(of: "}}"),
                  let reference = parse(String(rest[open.upperBound..<close.lowerBound]).trimmingCharacters(in: .whitespaces)) else { break }
            if open.lowerBound > rest.startIndex { parts.append(.text(String(rest[..<open.lowerBound]))) }
            parts.append(.reference(reference))
            rest = rest[close.upperBound...]
        }
        if !rest.isEmpty { parts.append(.text(String(rest))) }
        return parts
    }

    /// What is wrong with the references of `text`, if anything.
    static func problem(in text: String) -> String? {
        var rest = text[...]
        while let open = rest.range(of: "{{") {
            guard let close = rest[open.upperBound...].range(of: "}}") else { return "a {{ without its }}" }
            let inner = String(rest[open.upperBound..<close.lowerBound]).trimmingCharacters(in: .whitespaces)
            if parse(inner) == nil {
                return "{{\(inner)}} is not a reference (use {{request.path.NAME}}, {{request.query.NAME}}, {{request.body}}, {{STEP}} or {{STEP.status}}, optionally with a JSON pointer: {{STEP/a/b}})"
            }
            rest = rest[close.upperBound...]
        }
        return nil
    }

    static func parse(_ inner: String) -> CompositeReference? {
        let slash = inner.firstIndex(of: "/")
        let head = String(inner[..<(slash ?? inner.endIndex)])
        let pointer = slash.map { String(inner[$0...]) } ?? ""
        let parts = head.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard let first = parts.first, !first.isEmpty else { return nil }
        if first == "request" {
            switch (parts.count, parts.dropFirst().first) {
            case (3, "path"?) where pointer.isEmpty: return CompositeReference(source: .path(parts[2]), pointer: "")
            case (3, "query"?) where pointer.isEmpty: return CompositeReference(source: .query(parts[2]), pointer: "")
            case (2, "body"?): return CompositeReference(source: .body, pointer: pointer)
            default: return nil
            }
        }
        if parts.count == 1 { return CompositeReference(source: .step(first), pointer: pointer) }
        if parts.count == 2, parts[1] == "status", pointer.isEmpty { return CompositeReference(source: .status(first), pointer: "") }
        return nil
    }

    /// Every reference in the strings of `value`.
    static func all(in value: JSONValue?) -> [CompositeReference] {
        switch value {
        case .string(let text)?:
            return parts(of: text).compactMap { if case .reference(let reference) = $0 { reference } else { nil } }
        case .array(let elements)?: return elements.flatMap { all(in: $0) }
        case .object(let members)?: return members.values.flatMap { all(in: $0) }
        default: return []
        }
    }
}
