import Foundation
import GatewayCore
import Yams

/// A problem in a configuration file, located by line and column and by key path:
/// `plugins.yaml:14:7: plugins.suggest.cache.ttl: "5 min" is not a duration (use 300s, 5m, 1h)`.
public struct ConfigurationFileError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The file's name as given.
    public var file: String
    /// 1-based line and column; nil when the problem is not tied to a place (an unreadable file).
    public var line: Int?
    public var column: Int?
    /// The dotted key path, such as `plugins.suggest.cache.ttl`; empty for the document itself.
    public var keyPath: String
    public var message: String

    public var description: String {
        var location = file
        if let line { location += ":\(line)" }
        if let column { location += ":\(column)" }
        return keyPath.isEmpty ? "\(location): \(message)" : "\(location): \(keyPath): \(message)"
    }
}

/// A part of a configuration file kept undecoded, to be decoded later into a type known only
/// then (a plugin's `config:` block, decoded with the plugin's `Configuration`).
public struct ConfigurationNode: Decodable, Equatable, @unchecked Sendable {
    // Yams nodes are immutable values once composed; they are only read after loading.
    let node: Node?
    let keyPath: [String]
    let context: YAMLDecodingContext?

    public init(from decoder: any Decoder) throws {
        guard let decoder = decoder as? YAMLNodeDecoder else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "only decodable from YAML"))
        }
        node = decoder.node
        keyPath = decoder.keyPath
        context = decoder.context
        decoder.context.markSubtreeUsed(decoder.node)
    }

    /// Equal when they hold the same YAML, wherever it stands in the file.
    public static func == (left: ConfigurationNode, right: ConfigurationNode) -> Bool {
        left.node == right.node
    }

    init(empty keyPath: [String], file: String) {
        node = nil
        self.keyPath = keyPath
        context = YAMLDecodingContext(file: file)
    }

    /// Decodes the block strictly: unknown keys and wrong types are errors with line and column.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let context = YAMLDecodingContext(file: self.context?.file ?? "config", substitution: self.context?.substitution ?? ConfigurationSubstitution())
        return try context.decodeStrictly(type, node: node ?? .mapping(.init([])), keyPath: keyPath)
    }

    /// Decodes a plugin's configuration strictly, taking the keys the block leaves out from the
    /// type's ``PluginConfiguration/defaults``.
    public func decode<T: PluginConfiguration>(_ type: T.Type) throws -> T {
        try decode(type, defaults: T.defaults)
    }

    /// Decodes the block strictly, taking each of its top-level keys that the block leaves out
    /// from `defaults` (a key the block gives replaces the default's value whole).
    public func decode<T: PluginConfiguration>(_ type: T.Type, defaults: T) throws -> T {
        let encoded = try YAMLEncoder().encode(defaults)
        let fallback = try Yams.compose(yaml: encoded) ?? .mapping(.init([]))
        let context = YAMLDecodingContext(file: self.context?.file ?? "config", substitution: self.context?.substitution ?? ConfigurationSubstitution())
        return try context.decodeStrictly(type, node: node ?? .mapping(.init([])), keyPath: keyPath, defaults: fallback)
    }

    /// An error about `key` (relative to this block, such as `dictionaries[0]`) located at its line.
    public func error(at key: String, _ message: String) -> ConfigurationFileError {
        var target = node
        var path = keyPath
        for part in ConfigurationNode.split(key) {
            path.append(part)
            if let index = Int(part.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))), part.hasPrefix("["),
               case .sequence(let seq)? = target, index < seq.count {
                target = seq[index]
                path.removeLast()
                path[path.count - 1] += part
            } else if case .mapping(let map)? = target {
                target = map[part] ?? target
            }
        }
        return ConfigurationFileError(file: context?.file ?? "config", line: target?.mark.map { $0.line }, column: target?.mark.map { $0.column },
                                      keyPath: path.joined(separator: "."), message: context?.masking(message, about: target) ?? message)
    }

    private static func split(_ key: String) -> [String] {
        var parts: [String] = []
        for piece in key.split(separator: ".") {
            var rest = Substring(piece)
            if let bracket = rest.firstIndex(of: "[") {
                parts.append(String(rest[..<bracket]))
                rest = rest[bracket...]
                while let close = rest.firstIndex(of: "]") {
                    parts.append(String(rest[...close]))
                    rest = rest[rest.index(after: close)...]
                }
            } else {
                parts.append(String(rest))
            }
        }
        return parts.filter { !$0.isEmpty }
    }
}

/// Decodes configuration files strictly: every key must be known, every value of the right type,
/// `${NAME}`, `${NAME:-default}` and `${file:PATH}` in a value are replaced (see
/// ``ConfigurationSubstitution``), and every error carries the file, line, column and key path.
public struct YAMLConfigurationDecoder {
    /// Documents with more nodes than this are refused: an alias bomb expands past any real configuration.
    public static let maxNodes = 100_000

    /// The variables `${NAME}` reads.
    public var environment: [String: String]
    /// The folder relative `${file:PATH}` paths are read from: the configuration file's.
    public var baseDirectory: URL

    public init(environment: [String: String] = ProcessInfo.processInfo.environment,
                baseDirectory: URL = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)) {
        self.environment = environment
        self.baseDirectory = baseDirectory
    }

    /// Decodes `T` from the bytes of `file`.
    public func decode<T: Decodable>(_ type: T.Type, from data: Data, file: String) throws(ConfigurationFileError) -> T {
        guard let text = String(validating: data, as: UTF8.self) else {
            let (line, column) = Self.position(ofFirstInvalidUTF8In: data)
            throw ConfigurationFileError(file: file, line: line, column: column, keyPath: "", message: "the file is not valid UTF-8")
        }
        let node: Node
        do {
            node = try Yams.compose(yaml: text) ?? .mapping(.init([]))
        } catch let error as YamlError {
            throw Self.fileError(error, file: file)
        } catch {
            throw ConfigurationFileError(file: file, line: nil, column: nil, keyPath: "", message: "\(error)")
        }
        let context = YAMLDecodingContext(file: file, substitution: ConfigurationSubstitution(environment: environment, baseDirectory: baseDirectory))
        do {
            return try context.decodeStrictly(type, node: node, keyPath: [])
        } catch let error as ConfigurationFileError {
            throw error
        } catch {
            throw ConfigurationFileError(file: file, line: nil, column: nil, keyPath: "", message: "\(error)")
        }
    }

    private static func fileError(_ error: YamlError, file: String) -> ConfigurationFileError {
        switch error {
        case .scanner(let context, let problem, let mark, _), .parser(let context, let problem, let mark, _):
            let what = [context?.text, problem].compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: " ")
            return ConfigurationFileError(file: file, line: mark.line, column: mark.column, keyPath: "", message: "not valid YAML: \(what)")
        case .composer(let context, let problem, let mark, _):
            let what = [context?.text, problem].compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: " ")
            return ConfigurationFileError(file: file, line: mark.line, column: mark.column, keyPath: "", message: "not valid YAML: \(what)")
        case .reader(let problem, let offset, _, let yaml):
            // The reader reports a byte offset; count lines and columns (in Unicode scalars) up to it.
            var line = 1
            var column = 1
            if let offset {
                for byte in yaml.utf8.prefix(offset) {
                    if byte == 0x0A {
                        line += 1
                        column = 1
                    } else if byte & 0xC0 != 0x80 {
                        column += 1
                    }
                }
            }
            return ConfigurationFileError(file: file, line: line, column: column, keyPath: "", message: "not valid YAML: \(problem)")
        case .duplicatedKeysInMapping(let duplicates, let context):
            return ConfigurationFileError(file: file, line: context.mark.line, column: context.mark.column, keyPath: "",
                                          message: "the key \(duplicates.sorted().map { "'\($0)'" }.joined(separator: ", ")) appears more than once")
        default:
            return ConfigurationFileError(file: file, line: nil, column: nil, keyPath: "", message: "not valid YAML: \(error)")
        }
    }

    static func position(ofFirstInvalidUTF8In data: Data) -> (Int, Int) {
        var line = 1
        var lineStart = 0
        var index = 0
        let bytes = [UInt8](data)
        while index < bytes.count {
            let byte = bytes[index]
            let length: Int
            switch byte {
            case 0x00...0x7F: length = 1
            case 0xC2...0xDF: length = 2
            case 0xE0...0xEF: length = 3
            case 0xF0...0xF4: length = 4
            default: return (line, index - lineStart + 1)
            }
            if index + length > bytes.count { return (line, index - lineStart + 1) }
            if String(validating: bytes[index..<index + length], as: UTF8.self) == nil { return (line, index - lineStart + 1) }
            if byte == 0x0A {
                line += 1
                lineStart = index + 1
            }
            index += length
        }
        return (line, 1)
    }
}

/// Shared state of one decoding pass: which mapping keys were read (to find unknown ones), the
/// node budget, and what `${...}` reads.
final class YAMLDecodingContext: @unchecked Sendable {
    // Used by one decoding pass on one thread; never shared across tasks while mutable.
    let file: String
    let substitution: ConfigurationSubstitution
    private var usedKeys: Set<String> = []
    private var deferred: Set<String> = []
    private var visited = 0

    init(file: String, substitution: ConfigurationSubstitution = ConfigurationSubstitution()) {
        self.file = file
        self.substitution = substitution
    }

    func decodeStrictly<T: Decodable>(_ type: T.Type, node: Node, keyPath: [String], defaults: Node? = nil) throws -> T {
        let value: T
        do {
            var decoder = YAMLNodeDecoder(node: node, keyPath: keyPath, context: self)
            // The defaults are the gateway's own text: decoded with a context of their own, so that
            // their keys and places never mix with the file's.
            decoder.defaults = defaults.map { Indirect(YAMLNodeDecoder(node: $0, keyPath: keyPath, context: YAMLDecodingContext(file: file))) }
            value = try T(from: decoder)
        } catch let error as ConfigurationFileError {
            throw error
        } catch let error as DecodingError {
            throw fileError(for: error, root: node, rootPath: keyPath)
        }
        try checkUnknownKeys(in: node, keyPath: keyPath)
        return value
    }

    func markUsed(_ node: Node, key: String) {
        usedKeys.insert(identity(of: node) + "\u{1}" + key)
    }

    /// Leaves `node` to be checked when it is decoded later (a plugin's `config:` block).
    func markSubtreeUsed(_ node: Node) {
        deferred.insert(identity(of: node))
    }

    func visit(_ node: Node, keyPath: [String]) throws {
        visited += 1
        if visited > YAMLConfigurationDecoder.maxNodes {
            throw error(at: node, keyPath: keyPath, "the document is too large (over \(YAMLConfigurationDecoder.maxNodes) values)")
        }
    }

    private func identity(of node: Node) -> String {
        guard let mark = node.mark else { return "?" }
        return "\(mark.line):\(mark.column)"
    }

    private func checkUnknownKeys(in node: Node, keyPath: [String]) throws {
        var checked = 0
        func walk(_ node: Node, _ path: [String]) throws {
            checked += 1
            guard checked <= YAMLConfigurationDecoder.maxNodes else { return }
            if case .mapping = node, deferred.contains(identity(of: node)) { return }
            switch node {
            case .mapping(let mapping):
                for (key, value) in mapping {
                    let name = key.string ?? ""
                    guard usedKeys.contains(identity(of: node) + "\u{1}" + name) else {
                        throw error(at: key, keyPath: path + [name], "unknown key '\(name)'")
                    }
                    try walk(value, path + [name])
                }
            case .sequence(let sequence):
                for (index, element) in sequence.enumerated() {
                    var elementPath = path
                    if elementPath.isEmpty { elementPath = ["[\(index)]"] } else { elementPath[elementPath.count - 1] += "[\(index)]" }
                    try walk(element, elementPath)
                }
            default:
                break
            }
        }
        try walk(node, keyPath)
    }

    func error(at node: Node?, keyPath: [String], _ message: String) -> ConfigurationFileError {
        ConfigurationFileError(file: file, line: node?.mark?.line, column: node?.mark?.column,
                               keyPath: keyPath.joined(separator: "."), message: masking(message, about: node))
    }

    /// `message` without the secrets read for the value of `node` (see ``ConfigurationSubstitution/masking(_:in:)``).
    func masking(_ message: String, about node: Node?) -> String {
        guard case .scalar(let scalar)? = node else { return message }
        return substitution.masking(message, in: scalar.string)
    }

    private func fileError(for error: DecodingError, root: Node, rootPath: [String]) -> ConfigurationFileError {
        let context: DecodingError.Context
        var message: String
        switch error {
        case .typeMismatch(let type, let ctx):
            context = ctx
            message = ctx.debugDescription.isEmpty ? "expected \(describe(type))" : ctx.debugDescription
        case .valueNotFound(let type, let ctx):
            context = ctx
            message = "expected \(describe(type))"
        case .keyNotFound(let key, let ctx):
            let located = locate(ctx.codingPath, in: root, rootPath: rootPath)
            return self.error(at: located.node, keyPath: located.path + [key.stringValue], "is required")
        case .dataCorrupted(let ctx):
            context = ctx
            message = ctx.debugDescription
        @unknown default:
            return self.error(at: root, keyPath: rootPath, "\(error)")
        }
        if let underlying = context.underlyingError as? ConfigurationFileError { return underlying }
        let located = locate(context.codingPath, in: root, rootPath: rootPath)
        if message.isEmpty { message = "invalid value" }
        return self.error(at: located.node, keyPath: located.path, message)
    }

    private func locate(_ codingPath: [any CodingKey], in root: Node, rootPath: [String]) -> (node: Node, path: [String]) {
        var node = root
        var path = rootPath
        for key in codingPath {
            if let index = key.intValue, case .sequence(let sequence) = node, index < sequence.count {
                node = sequence[index]
                if path.isEmpty { path = ["[\(index)]"] } else { path[path.count - 1] += "[\(index)]" }
            } else if case .mapping(let mapping) = node, let child = mapping[key.stringValue] {
                node = child
                path.append(key.stringValue)
            } else {
                path.append(key.stringValue)
            }
        }
        return (node, path)
    }

    private func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt.Type: "a whole number"
        case is Double.Type: "a number"
        default:
            String(describing: type).hasPrefix("Array") ? "a list" : "a mapping"
        }
    }
}

/// A strict `Decoder` over a Yams node that keeps the key path as readable strings.
struct YAMLNodeDecoder: Decoder {
    let node: Node
    let keyPath: [String]
    let context: YAMLDecodingContext
    var codingPath: [any CodingKey] = []
    /// Where the keys this mapping leaves out are read from (a plugin's defaults; top level only).
    var defaults: Indirect<YAMLNodeDecoder>?
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(node: Node, keyPath: [String], context: YAMLDecodingContext, codingPath: [any CodingKey] = []) {
        self.node = node
        self.keyPath = keyPath
        self.context = context
        self.codingPath = codingPath
    }

    func fail(_ message: String) -> ConfigurationFileError {
        context.error(at: node, keyPath: keyPath, message)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        try context.visit(node, keyPath: keyPath)
        switch node {
        case .mapping(let mapping):
            return KeyedDecodingContainer(YAMLKeyedContainer<Key>(decoder: self, mapping: mapping, defaults: try defaultsContainer(keyedBy: type)))
        case .scalar(let scalar) where scalar.string.isEmpty || scalar.string == "~" || scalar.string == "null":
            // An empty block (`config:` with nothing under it) reads as an empty mapping.
            return KeyedDecodingContainer(YAMLKeyedContainer<Key>(decoder: self, mapping: .init([]), defaults: try defaultsContainer(keyedBy: type)))
        default:
            throw fail("expected a mapping of keys to values")
        }
    }

    private func defaultsContainer<Key: CodingKey>(keyedBy type: Key.Type) throws -> YAMLKeyedContainer<Key>? {
        guard let defaults = defaults?.value, case .mapping(let mapping) = defaults.node else { return nil }
        return YAMLKeyedContainer<Key>(decoder: defaults, mapping: mapping, defaults: nil)
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try context.visit(node, keyPath: keyPath)
        guard case .sequence(let sequence) = node else { throw fail("expected a list") }
        return YAMLUnkeyedContainer(decoder: self, elements: Array(sequence))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        try context.visit(node, keyPath: keyPath)
        return YAMLScalarContainer(decoder: self)
    }

    func child(_ node: Node, key: any CodingKey, name: String) -> YAMLNodeDecoder {
        YAMLNodeDecoder(node: node, keyPath: keyPath + [name], context: context, codingPath: codingPath + [key])
    }
}

/// A value held by reference, so that a value type may hold another of its kind.
final class Indirect<Value>: @unchecked Sendable {
    // Immutable once made; decoders are used on one thread.
    let value: Value
    init(_ value: Value) { self.value = value }
}

private struct YAMLKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    init(decoder: YAMLNodeDecoder, mapping: Node.Mapping, defaults: YAMLKeyedContainer<Key>?) {
        self.decoder = decoder
        self.mapping = mapping
        defaultsBox = defaults.map(Indirect.init)
    }

    let decoder: YAMLNodeDecoder
    let mapping: Node.Mapping
    /// The defaults' container, for the keys `mapping` leaves out.
    let defaultsBox: Indirect<YAMLKeyedContainer<Key>>?
    var defaults: YAMLKeyedContainer<Key>? { defaultsBox?.value }
    var codingPath: [any CodingKey] { decoder.codingPath }

    var allKeys: [Key] {
        let given: [Key] = mapping.compactMap { key, _ in
            guard let name = key.string, let codingKey = Key(stringValue: name) else { return nil }
            decoder.context.markUsed(decoder.node, key: name)
            return codingKey
        }
        let names = Set(given.map(\.stringValue))
        return given + (defaults?.allKeys.filter { !names.contains($0.stringValue) } ?? [])
    }

    private func value(for key: Key) -> Node? {
        decoder.context.markUsed(decoder.node, key: key.stringValue)
        return mapping[key.stringValue]
    }

    /// The defaults' container when the file leaves `key` out and the defaults have it.
    private func fallback(for key: Key) -> YAMLKeyedContainer<Key>? {
        guard value(for: key) == nil, let defaults, defaults.contains(key) else { return nil }
        return defaults
    }

    func contains(_ key: Key) -> Bool {
        decoder.context.markUsed(decoder.node, key: key.stringValue)
        return mapping[key.stringValue] != nil || (defaults?.contains(key) ?? false)
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        if let fallback = fallback(for: key) { return try fallback.decodeNil(forKey: key) }
        guard let node = value(for: key) else { return true }
        if case .scalar(let scalar) = node, scalar.style == .plain, ["", "~", "null", "Null", "NULL"].contains(scalar.string) { return true }
        return false
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        if let fallback = fallback(for: key) { return try fallback.decode(type, forKey: key) }
        guard let node = value(for: key) else {
            throw decoder.context.error(at: decoder.node, keyPath: decoder.keyPath + [key.stringValue], "is required")
        }
        return try decoder.child(node, key: key, name: key.stringValue).decodeValue(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        if let fallback = fallback(for: key) { return try fallback.nestedContainer(keyedBy: type, forKey: key) }
        guard let node = value(for: key) else {
            throw decoder.context.error(at: decoder.node, keyPath: decoder.keyPath + [key.stringValue], "is required")
        }
        return try decoder.child(node, key: key, name: key.stringValue).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        if let fallback = fallback(for: key) { return try fallback.nestedUnkeyedContainer(forKey: key) }
        guard let node = value(for: key) else {
            throw decoder.context.error(at: decoder.node, keyPath: decoder.keyPath + [key.stringValue], "is required")
        }
        return try decoder.child(node, key: key, name: key.stringValue).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { decoder }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        if let fallback = fallback(for: key) { return try fallback.superDecoder(forKey: key) }
        return decoder.child(value(for: key) ?? .mapping(.init([])), key: key, name: key.stringValue)
    }
}

private struct YAMLUnkeyedContainer: UnkeyedDecodingContainer {
    let decoder: YAMLNodeDecoder
    let elements: [Node]
    var currentIndex = 0
    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private struct Index: CodingKey {
        let intValue: Int?
        var stringValue: String { "\(intValue ?? 0)" }
        init(_ index: Int) { intValue = index }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.intValue = intValue }
    }

    private mutating func next() throws -> YAMLNodeDecoder {
        guard !isAtEnd else { throw decoder.fail("the list is too short") }
        defer { currentIndex += 1 }
        var path = decoder.keyPath
        if path.isEmpty { path = ["[\(currentIndex)]"] } else { path[path.count - 1] += "[\(currentIndex)]" }
        return YAMLNodeDecoder(node: elements[currentIndex], keyPath: path, context: decoder.context,
                               codingPath: decoder.codingPath + [Index(currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, case .scalar(let scalar) = elements[currentIndex], scalar.style == .plain,
              ["~", "null", ""].contains(scalar.string) else { return false }
        currentIndex += 1
        return true
    }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decodeValue(type) }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next() }
}

private struct YAMLScalarContainer: SingleValueDecodingContainer {
    let decoder: YAMLNodeDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    private func text(expecting what: String) throws -> (String, Node.Scalar.Style) {
        guard case .scalar(let scalar) = decoder.node else {
            throw decoder.fail("expected \(what), found a \(decoder.node.isMapping ? "mapping" : "list")")
        }
        do {
            return (try decoder.context.substitution.substitute(scalar.string).text, scalar.style)
        } catch {
            throw decoder.fail(error.message)
        }
    }

    func decodeNil() -> Bool {
        guard case .scalar(let scalar) = decoder.node, scalar.style == .plain else { return false }
        return ["", "~", "null", "Null", "NULL"].contains(scalar.string)
    }

    func decode(_ type: Bool.Type) throws -> Bool {
        let (text, _) = try text(expecting: "true or false")
        switch text {
        case "true", "True", "TRUE", "yes", "on": return true
        case "false", "False", "FALSE", "no", "off": return false
        default: throw decoder.fail("\(quoted(text)) is not true or false")
        }
    }

    func decode(_ type: String.Type) throws -> String {
        let (text, style) = try text(expecting: "a string")
        if style == .plain, ["~", "null", "Null", "NULL"].contains(text) { throw decoder.fail("expected a string, found null") }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double {
        let (text, _) = try text(expecting: "a number")
        guard let value = Double(text), value.isFinite else { throw decoder.fail("\(quoted(text)) is not a number") }
        return value
    }

    func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }

    private func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        let (text, _) = try text(expecting: "a whole number")
        guard let value = T(text.replacingOccurrences(of: "_", with: "")) else {
            if Double(text) != nil || text.allSatisfy({ $0.isNumber || $0 == "-" }) {
                throw decoder.fail("\(quoted(text)) is not a whole number between \(T.min) and \(T.max)")
            }
            throw decoder.fail("\(quoted(text)) is not a whole number")
        }
        return value
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(type) }

    private func quoted(_ text: String) -> String {
        "\"\(text.count > 60 ? String(text.prefix(60)) + "…" : text)\""
    }
}

extension YAMLNodeDecoder {
    /// Decodes a value, turning errors thrown by a type's own `init(from:)` (such as a bad
    /// duration) into located file errors.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        do {
            return try T(from: self)
        } catch let error as ConfigurationFileError {
            throw error
        } catch let error as ConfigurationValueError {
            throw fail(error.message)
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, context.codingPath.count <= codingPath.count {
                throw fail(context.debugDescription)
            }
            throw error
        }
    }
}


extension Node {
    fileprivate var isMapping: Bool {
        if case .mapping = self { return true }
        return false
    }
}
