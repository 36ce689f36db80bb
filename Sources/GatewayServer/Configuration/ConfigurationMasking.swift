import Foundation
import Yams

/// plugins.yaml as the admin API shows it: every secret written in the file replaced by
/// `"********"` — values under keys that name one (`password`, `secret`, `token`, `pem`, `*Key`,
/// `appKeys`, …) and the password of a URL (`postgres://user:***@host`) — the rest as written,
/// comments and all. A reference (`${DB_PASSWORD}`, `${file:/run/secrets/x}`) names a secret
/// without holding it and is shown.
///
/// An edited text sent back may keep a mask where it does not change that secret: ``unmasked(_:original:file:)``
/// puts the running file's value back at the same key path; a mask where the file has none is
/// an error at its line.
enum ConfigurationMasking {
    static let mask = "********"
    private static let quotedMask = "\"\(mask)\""

    /// One secret of a text: its key path and where it is written.
    struct Secret {
        var path: String
        /// The scalar as written (quotes or block included), in unicode scalar offsets.
        var range: Range<Int>
        var line: Int
        var column: Int
        /// For a URL: the range is only its password.
        var isURLPassword = false
    }

    /// Key names that hold secrets, compared lowercased; a name ending in `key` counts too
    /// (`masterKey`, `keySecret`), except in `limits`, whose `key` is a rate.
    private static let secretWords = ["password", "secret", "token", "apikey", "appkey", "masterkey", "privatekey", "credential", "pem", "passphrase"]

    static func isSecretKey(_ name: String, path: String) -> Bool {
        let lowered = name.lowercased()
        if path.hasPrefix("limits.") || path == "limits" { return false }
        return secretWords.contains { lowered.contains($0) } || lowered.hasSuffix("key")
    }

    /// Whether a value only refers to a secret kept elsewhere (`${NAME}`, `${file:PATH}`), with no default written beside it.
    static func isReference(_ value: String) -> Bool {
        value.range(of: #"^\$\{[^}:]*(:[^-][^}]*)?\}$"#, options: .regularExpression) != nil && !value.contains(":-")
    }

    /// The secrets of `text` (nil: the text is not YAML).
    static func secrets(in text: String) -> [Secret]? {
        guard let node = try? Yams.compose(yaml: text) else { return text.isEmpty ? [] : nil }
        let scalars = Array(text.unicodeScalars)
        let lineStarts = [0] + scalars.indices.filter { scalars[$0] == "\n" }.map { $0 + 1 }
        var found: [Secret] = []

        func offset(_ mark: Mark) -> Int? {
            guard mark.line >= 1, mark.line <= lineStarts.count else { return nil }
            let result = lineStarts[mark.line - 1] + mark.column - 1
            return result <= scalars.count ? result : nil
        }
        func lineEnd(_ start: Int) -> Int {
            var end = start
            while end < scalars.count && scalars[end] != "\n" { end += 1 }
            return end
        }
        func indentation(ofLineAt start: Int) -> Int {
            var line = start
            while line > 0 && scalars[line - 1] != "\n" { line -= 1 }
            var count = 0
            while line + count < scalars.count && scalars[line + count] == " " { count += 1 }
            return count
        }
        /// Where the scalar written at `start` ends.
        func extent(_ scalar: Node.Scalar, from start: Int) -> Int {
            switch scalar.style {
            case .doubleQuoted, .singleQuoted:
                let quote = scalars[start]
                var index = start + 1
                while index < scalars.count {
                    if quote == "\"" && scalars[index] == "\\" { index += 2; continue }
                    if scalars[index] == quote {
                        if quote == "'" && index + 1 < scalars.count && scalars[index + 1] == "'" { index += 2; continue }
                        return index + 1
                    }
                    index += 1
                }
                return scalars.count
            case .literal, .folded:
                // The indicator's line, then every line indented deeper than the key's, or blank.
                let keyIndent = indentation(ofLineAt: start)
                var end = lineEnd(start)
                var next = end + 1
                while next < scalars.count {
                    let stop = lineEnd(next)
                    let line = scalars[next..<stop]
                    let blank = line.allSatisfy { $0 == " " || $0 == "\t" || $0 == "\r" }
                    let indent = line.prefix { $0 == " " }.count
                    if !blank && indent <= keyIndent { break }
                    if !blank { end = stop }
                    next = stop + 1
                }
                return end
            case .plain, .any:
                return min(scalars.count, start + scalar.string.unicodeScalars.count)
            }
        }
        func visit(_ node: Node, path: String, secretKey: Bool) {
            switch node {
            case .scalar(let scalar):
                guard let mark = scalar.mark, let start = offset(mark) else { return }
                let value = scalar.string
                if secretKey {
                    guard !isReference(value), value != mask, !value.isEmpty else { return }
                    found.append(Secret(path: path, range: start..<extent(scalar, from: start), line: mark.line, column: mark.column))
                } else if let password = urlPassword(value), scalar.style == .plain || scalar.style == .doubleQuoted || scalar.style == .singleQuoted {
                    // The password of a URL, found in the text as written (plain or quoted on one line).
                    let end = extent(scalar, from: start)
                    let written = String(String.UnicodeScalarView(scalars[start..<end]))
                    if let range = written.range(of: ":" + password + "@") {
                        let from = start + written.unicodeScalars.distance(from: written.unicodeScalars.startIndex, to: range.lowerBound) + 1
                        found.append(Secret(path: path, range: from..<(from + password.unicodeScalars.count), line: mark.line,
                                            column: mark.column + from - start, isURLPassword: true))
                    }
                }
            case .mapping(let mapping):
                for (key, value) in mapping {
                    let name = key.string ?? ""
                    let childPath = path.isEmpty ? name : path + "." + name
                    visit(value, path: childPath, secretKey: secretKey || isSecretKey(name, path: childPath))
                }
            case .sequence(let sequence):
                for (index, item) in sequence.enumerated() {
                    visit(item, path: "\(path)[\(index)]", secretKey: secretKey)
                }
            case .alias:
                return
            }
        }
        visit(node, path: "", secretKey: false)
        return found
    }

    /// The password of a URL with user information (`scheme://user:password@host`), unless it is a reference.
    static func urlPassword(_ value: String) -> String? {
        guard let match = value.range(of: #"^[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:[^@/\s]+@"#, options: .regularExpression) else { return nil }
        let userInfo = value[match].split(separator: "/", omittingEmptySubsequences: true).dropFirst().first.map(String.init) ?? ""
        guard let colon = userInfo.firstIndex(of: ":") else { return nil }
        let password = String(userInfo[userInfo.index(after: colon)...].dropLast())
        return password.isEmpty || password == mask || isReference(password) ? nil : password
    }

    /// `text` with its secrets masked, and the paths of those masked.
    static func masked(_ text: String) -> (text: String, paths: [String]) {
        guard let secrets = secrets(in: text), !secrets.isEmpty else { return (text, []) }
        var scalars = Array(text.unicodeScalars)
        for secret in secrets.sorted(by: { $0.range.lowerBound > $1.range.lowerBound }) {
            scalars.replaceSubrange(secret.range, with: (secret.isURLPassword ? mask : quotedMask).unicodeScalars)
        }
        var view = String.UnicodeScalarView()
        view.append(contentsOf: scalars)
        return (String(view), secrets.map(\.path))
    }

    /// `edited` with each mask it kept replaced by the value `original` (the running file) has at
    /// the same key path. Text that is not YAML is given back as it is (parsing reports it).
    static func unmasked(_ edited: String, original: String, file: String) throws(ConfigurationFileError) -> String {
        guard edited.contains(mask), let node = try? Yams.compose(yaml: edited) else { return edited }
        let originalScalars = Array(original.unicodeScalars)
        var originals: [String: (text: String, urlPassword: Bool)] = [:]
        for secret in secrets(in: original) ?? [] {
            var view = String.UnicodeScalarView()
            view.append(contentsOf: originalScalars[secret.range])
            originals[secret.path] = (String(view), secret.isURLPassword)
        }
        let scalars = Array(edited.unicodeScalars)
        let lineStarts = [0] + scalars.indices.filter { scalars[$0] == "\n" }.map { $0 + 1 }
        var replacements: [(range: Range<Int>, text: String)] = []
        var problem: ConfigurationFileError?

        func visit(_ node: Node, path: String) {
            guard problem == nil else { return }
            switch node {
            case .scalar(let scalar):
                guard scalar.string.contains(mask), let mark = scalar.mark, mark.line <= lineStarts.count else { return }
                let start = lineStarts[mark.line - 1] + mark.column - 1
                if scalar.string == mask, let kept = originals[path], !kept.urlPassword {
                    let quoted = scalar.style == .doubleQuoted || scalar.style == .singleQuoted
                    replacements.append((start..<(start + (quoted ? quotedMask : mask).unicodeScalars.count), kept.text))
                } else if let kept = originals[path], kept.urlPassword, let range = scalar.string.range(of: ":" + mask + "@") {
                    let from = start + (scalar.style == .plain ? 0 : 1)
                        + scalar.string.unicodeScalars.distance(from: scalar.string.unicodeScalars.startIndex, to: range.lowerBound) + 1
                    replacements.append((from..<(from + mask.unicodeScalars.count), kept.text))
                } else {
                    problem = ConfigurationFileError(file: file, line: mark.line, column: mark.column, keyPath: path,
                                                     message: "is masked (\(mask)) where the running file keeps no secret: write the value")
                }
            case .mapping(let mapping):
                for (key, value) in mapping { visit(value, path: path.isEmpty ? (key.string ?? "") : path + "." + (key.string ?? "")) }
            case .sequence(let sequence):
                for (index, item) in sequence.enumerated() { visit(item, path: "\(path)[\(index)]") }
            case .alias:
                return
            }
        }
        visit(node, path: "")
        if let problem { throw problem }
        var result = scalars
        for replacement in replacements.sorted(by: { $0.range.lowerBound > $1.range.lowerBound }) {
            result.replaceSubrange(replacement.range, with: replacement.text.unicodeScalars)
        }
        var view = String.UnicodeScalarView()
        view.append(contentsOf: result)
        return String(view)
    }
}
