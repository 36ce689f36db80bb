import Foundation
import GatewayCore

/// What `${...}` in a value of a configuration file stands for, so that secrets stay out of the file:
///
/// - `${NAME}`: the environment variable NAME; when NAME is unset but `NAME_FILE` is set, the
///   contents of the file `NAME_FILE` names (the convention of container secrets). Neither set is
///   an error, never an empty string.
/// - `${NAME:-default}`: the same, or `default` when that is unset or empty.
/// - `${file:PATH}`: the contents of the file at PATH; a relative path is read from the
///   configuration file's folder.
///
/// A file's contents lose one trailing newline (the one editors and `echo` add). A file that
/// cannot be read is an error that names its path, never what it holds; an error about a value
/// read from a file shows the `${...}` that read it instead of the value (``masking(_:in:)``).
struct ConfigurationSubstitution: Sendable {
    /// The environment variables.
    var environment: [String: String]
    /// The folder relative `${file:...}` paths are read from.
    var baseDirectory: URL

    /// The largest secret file: anything longer is not a secret (and `/dev/zero` would never end).
    static let maxFileBytes = 1 << 20

    init(environment: [String: String] = [:], baseDirectory: URL = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)) {
        self.environment = environment
        self.baseDirectory = baseDirectory
    }

    /// One `${...}` and what it stood for.
    struct Replacement {
        var expression: String
        var value: String
        /// Whether the value was read from a file: a secret, kept out of messages.
        var isSecret: Bool
        /// Where the value starts in the substituted text, in characters.
        var offset = 0
    }

    /// `text` with every `${...}` replaced, and what each stood for.
    func substitute(_ text: String) throws(ConfigurationValueError) -> (text: String, replacements: [Replacement]) {
        guard text.contains("${") else { return (text, []) }
        var result = ""
        var replacements: [Replacement] = []
        var rest = Substring(text)
        while let start = rest.range(of: "${") {
            result += rest[..<start.lowerBound]
            guard let end = rest[start.upperBound...].firstIndex(of: "}") else {
                throw ConfigurationValueError(message: "unterminated '${' in \"\(text)\"")
            }
            var replacement = try resolve(String(rest[start.upperBound..<end]))
            replacement.offset = result.count
            result += replacement.value
            replacements.append(replacement)
            rest = rest[rest.index(after: end)...]
        }
        return (result + rest, replacements)
    }

    /// `message`, about the value of `text`, without the secrets that value holds: where the
    /// message quotes the value (whole or cut short) it shows `text` instead, and a secret quoted
    /// elsewhere becomes the `${...}` that read it.
    func masking(_ message: String, in text: String) -> String {
        guard text.contains("${"), let (value, replacements) = try? substitute(text) else { return message }
        let secrets = replacements.filter { $0.isSecret && !$0.value.isEmpty }
        guard let first = secrets.first else { return message }
        var masked = message
        // Only a quote that reaches into the first secret needs replacing.
        for length in stride(from: min(value.count, message.count), through: first.offset + 1, by: -1) {
            let quoted = String(value.prefix(length))
            if masked.contains(quoted) {
                masked = masked.replacingOccurrences(of: quoted, with: text)
                break
            }
        }
        for secret in secrets { masked = masked.replacingOccurrences(of: secret.value, with: secret.expression) }
        return masked
    }

    private func resolve(_ inner: String) throws(ConfigurationValueError) -> Replacement {
        let expression = "${\(inner)}"
        if inner.hasPrefix("file:") {
            let path = String(inner.dropFirst("file:".count))
            guard !path.isEmpty else { throw ConfigurationValueError(message: "\(expression) names no file") }
            return Replacement(expression: expression, value: try read(path, naming: path), isSecret: true)
        }
        var name = inner
        var fallback: String?
        if let separator = inner.range(of: ":-") {
            name = String(inner[..<separator.lowerBound])
            fallback = String(inner[separator.upperBound...])
        }
        guard !name.isEmpty else { throw ConfigurationValueError(message: "\(expression) names no environment variable") }
        var value = environment[name]
        var isSecret = false
        if value == nil, let path = environment[name + "_FILE"] {
            value = try read(path, naming: "\(path) (\(name)_FILE)")
            isSecret = true
        }
        if let fallback, value?.isEmpty ?? true {
            return Replacement(expression: expression, value: fallback, isSecret: false)
        }
        guard let value else {
            throw ConfigurationValueError(message: "the environment variable \(name) is not set (nor \(name)_FILE)")
        }
        return Replacement(expression: expression, value: value, isSecret: isSecret)
    }

    /// The contents of the file at `path` less one trailing newline; `naming` is how an error names it.
    private func read(_ path: String, naming: String) throws(ConfigurationValueError) -> String {
        func failure(_ reason: String) -> ConfigurationValueError {
            ConfigurationValueError(message: "the secret file \(naming) cannot be read: \(reason)")
        }
        let file = path.hasPrefix("/") ? URL(fileURLWithPath: path) : baseDirectory.appendingPathComponent(path)
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: file.path, isDirectory: &isFolder) else { throw failure("it does not exist") }
        guard !isFolder.boolValue else { throw failure("it is a folder") }
        guard FileManager.default.isReadableFile(atPath: file.path) else { throw failure("permission denied") }
        let data: Data
        do {
            let handle = try FileHandle(forReadingFrom: file)
            defer { try? handle.close() }
            data = try handle.read(upToCount: Self.maxFileBytes + 1) ?? Data()
        } catch {
            throw failure(error.localizedDescription)
        }
        guard data.count <= Self.maxFileBytes else { throw failure("it is larger than \(Self.maxFileBytes / 1024) KB") }
        guard var text = String(validating: data, as: UTF8.self) else { throw failure("it is not UTF-8 text") }
        // "\r\n" is one Character, so this removes either kind of line end.
        if text.hasSuffix("\n") || text.hasSuffix("\r\n") { text.removeLast() }
        return text
    }
}
