import Foundation
import Yams

/// plugins.yaml as the admin API shows it: every secret written in the file replaced by
/// `"********"` — values under keys that name one (`password`, `secret`, `token`, `pem`,
/// `authorization`, `*Key`, `appKeys`, …), the password of a URL (`postgres://user:***@host`) and
/// secret-named query parameters of a URL (`?token=***`) — the rest as written, comments and all. A
/// reference (`${DB_PASSWORD}`, `${file:/run/secrets/x}`) names a secret without holding it and is
/// shown.
///
/// An edited text sent back may keep a mask where it does not change that secret:
/// ``unmasked(_:original:file:)`` puts the running file's value back. It refuses, at the line, what
/// would move a secret elsewhere: a mask where the file keeps none, a masked URL changed around its
/// mask, a list holding masks that grew or shrank, an entry of a list whose other values changed
/// around its mask; and a reference the file does not already hold there (the admin API does not
/// read the host's files and environment into the configuration).
enum ConfigurationMasking {
    static let mask = "********"
    private static let quotedMask = "\"\(mask)\""

    /// One secret of a text: its key path and where it is written.
    struct Secret {
        var path: String
        /// What the mask replaces, in unicode scalar offsets: the whole scalar as written (quotes or
        /// block included) for a secret key's value; only the password or parameter value of a URL.
        var range: Range<Int>
        var line: Int
        var column: Int
        /// A part of a URL: the whole scalar is kept with its value masked, and given back only unchanged.
        var isPart = false
    }

    /// What a text holds, by key path (`auth.appKeys[0]`).
    struct Scan {
        struct Scalar {
            var value: String
            /// The scalar as written, in unicode scalar offsets.
            var range: Range<Int>
            var line: Int
            var column: Int
            var quoted: Bool
        }

        var scalars: [String: Scalar] = [:]
        /// The lengths of lists.
        var lists: [String: Int] = [:]
        var secrets: [Secret] = []
        /// Each list element's content with its secrets masked, to see whether it changed.
        var elements: [String: String] = [:]
        /// The text's scalars.
        var characters: [Unicode.Scalar] = []

        func source(_ range: Range<Int>) -> String {
            var view = String.UnicodeScalarView()
            view.append(contentsOf: characters[range])
            return String(view)
        }
    }

    /// Key names that hold secrets, compared lowercased; a name ending in `key` counts too
    /// (`masterKey`, `keySecret`), except in `limits`, whose `key` is a rate.
    private static let secretWords = ["password", "secret", "token", "apikey", "appkey", "masterkey", "privatekey", "credential", "pem", "passphrase",
                                      "authorization", "cookie", "bearer", "signature"]

    static func isSecretKey(_ name: String, path: String) -> Bool {
        let lowered = name.lowercased()
        if path.hasPrefix("limits.") || path == "limits" { return false }
        return secretWords.contains { lowered.contains($0) } || lowered.hasSuffix("key") || lowered == "sig"
    }

    /// Whether a value only refers to a secret kept elsewhere (`${NAME}`, `${file:PATH}`), with no default written beside it.
    static func isReference(_ value: String) -> Bool {
        value.range(of: #"^\$\{[^}:]*(:[^-][^}]*)?\}$"#, options: .regularExpression) != nil && !value.contains(":-")
    }

    /// The parts of a URL that are secrets: its password and secret-named query values, as ranges
    /// of `value` in unicode scalar offsets.
    static func urlSecrets(_ value: String) -> [Range<Int>] {
        let scalars = Array(value.unicodeScalars)
        let text = String(String.UnicodeScalarView(scalars))
        var found: [Range<Int>] = []
        func offset(_ index: String.Index) -> Int { text.unicodeScalars.distance(from: text.unicodeScalars.startIndex, to: index) }
        if let match = text.range(of: #"^[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:[^@/\s]+@"#, options: .regularExpression),
           let schemeEnd = text.range(of: "://")?.upperBound, let colon = text[schemeEnd..<match.upperBound].firstIndex(of: ":") {
            let start = offset(text.index(after: colon))
            let end = offset(match.upperBound) - 1
            let password = String(String.UnicodeScalarView(scalars[start..<end]))
            if start < end, !isReference(password), password != mask { found.append(start..<end) }
        }
        guard text.range(of: #"^[A-Za-z][A-Za-z0-9+.-]*://"#, options: .regularExpression) != nil, let question = text.firstIndex(of: "?") else { return found }
        var index = offset(question) + 1
        let end = scalars.firstIndex(of: "#") ?? scalars.count
        while index < end {
            let next = scalars[index..<end].firstIndex(of: "&") ?? end
            if let equals = scalars[index..<next].firstIndex(of: "=") {
                let name = String(String.UnicodeScalarView(scalars[index..<equals]))
                let value = String(String.UnicodeScalarView(scalars[(equals + 1)..<next]))
                if isSecretKey(name, path: "url"), !value.isEmpty, value != mask, !isReference(value) { found.append((equals + 1)..<next) }
            }
            index = next + 1
        }
        return found
    }

    /// What `text` holds (nil: it is not YAML).
    static func scan(_ text: String) -> Scan? {
        var scan = Scan()
        scan.characters = Array(text.unicodeScalars)
        guard let node = try? Yams.compose(yaml: text) else { return text.isEmpty ? scan : nil }
        let scalars = scan.characters
        let lineStarts = [0] + scalars.indices.filter { scalars[$0] == "\n" }.map { $0 + 1 }

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
        /// Visits `node` and gives its content with secrets masked.
        func visit(_ node: Node, path: String, secretKey: Bool) -> String {
            switch node {
            case .scalar(let scalar):
                guard let mark = scalar.mark, let start = offset(mark) else { return scalar.string }
                let value = scalar.string
                let quoted = scalar.style == .doubleQuoted || scalar.style == .singleQuoted
                let range = start..<extent(scalar, from: start)
                scan.scalars[path] = Scan.Scalar(value: value, range: range, line: mark.line, column: mark.column, quoted: quoted)
                if secretKey {
                    guard !isReference(value), value != mask, !value.isEmpty else { return value }
                    scan.secrets.append(Secret(path: path, range: range, line: mark.line, column: mark.column))
                    return mask
                }
                let parts = urlSecrets(value)
                guard !parts.isEmpty else { return value }
                var masked = Array(value.unicodeScalars)
                for part in parts.reversed() { masked.replaceSubrange(part, with: mask.unicodeScalars) }
                // The parts as written: a plain or quoted scalar on one line, without escapes in them.
                let written = scan.source(range)
                let shift = scalar.style == .plain ? 0 : 1
                if written.unicodeScalars.count == value.unicodeScalars.count + 2 * shift {
                    for part in parts {
                        scan.secrets.append(Secret(path: path, range: (range.lowerBound + shift + part.lowerBound)..<(range.lowerBound + shift + part.upperBound),
                                                   line: mark.line, column: mark.column + shift + part.lowerBound, isPart: true))
                    }
                }
                return String(String.UnicodeScalarView(masked))
            case .mapping(let mapping):
                var members: [String] = []
                for (key, value) in mapping {
                    let name = key.string ?? ""
                    let childPath = path.isEmpty ? name : path + "." + name
                    members.append(name + ":" + visit(value, path: childPath, secretKey: secretKey || isSecretKey(name, path: childPath)))
                }
                return "{" + members.joined(separator: ",") + "}"
            case .sequence(let sequence):
                scan.lists[path] = sequence.count
                var items: [String] = []
                for (index, item) in sequence.enumerated() {
                    let itemPath = "\(path)[\(index)]"
                    let content = visit(item, path: itemPath, secretKey: secretKey)
                    scan.elements[itemPath] = content
                    items.append(content)
                }
                return "[" + items.joined(separator: ",") + "]"
            case .alias:
                return "*"
            }
        }
        _ = visit(node, path: "", secretKey: false)
        return scan
    }

    /// `text` with its secrets masked, and the paths of those masked.
    static func masked(_ text: String) -> (text: String, paths: [String]) {
        guard let scan = scan(text), !scan.secrets.isEmpty else { return (text, []) }
        var scalars = scan.characters
        for secret in scan.secrets.sorted(by: { $0.range.lowerBound > $1.range.lowerBound }) {
            scalars.replaceSubrange(secret.range, with: (secret.isPart ? mask : quotedMask).unicodeScalars)
        }
        var paths: [String] = []
        for secret in scan.secrets where paths.last != secret.path { paths.append(secret.path) }
        return (String(String.UnicodeScalarView(scalars)), paths)
    }

    /// `text` with every secret value of `original` replaced by the mask (an error message that
    /// quotes a value).
    static func redacted(_ text: String, secretsOf original: String) -> String {
        guard let scan = scan(original) else { return text }
        var result = text
        for secret in scan.secrets {
            let value = secret.isPart ? scan.source(secret.range) : scan.scalars[secret.path]?.value ?? ""
            if value.count >= 3 { result = result.replacingOccurrences(of: value, with: mask) }
        }
        return result
    }

    /// An edited text made whole: its masks given the file's values back.
    struct Unmasked {
        var text: String
        /// Lines the whole text has beyond the edited one, after each edited line (a block secret given back).
        var addedLines: [(afterLine: Int, count: Int)]

        /// The edited text's line of a line of the whole text.
        func editedLine(_ line: Int) -> Int {
            var result = line
            for added in addedLines.sorted(by: { $0.afterLine < $1.afterLine }) {
                let start = added.afterLine
                if result > start + added.count { result -= added.count } else if result > start { return start }
            }
            return result
        }
    }

    /// `edited` with each mask it kept replaced by what `original` (the running file) has at the
    /// same key path, or the first problem at its line. Text that is not YAML is given back as it
    /// is (parsing reports it).
    static func unmasked(_ edited: String, original: String, file: String) throws(ConfigurationFileError) -> Unmasked {
        guard let changed = scan(edited) else { return Unmasked(text: edited, addedLines: []) }
        let before = scan(original) ?? Scan()
        func problem(_ scalar: Scan.Scalar, _ path: String, _ message: String) -> ConfigurationFileError {
            ConfigurationFileError(file: file, line: scalar.line, column: scalar.column, keyPath: path, message: message)
        }
        var replacements: [(range: Range<Int>, text: String, line: Int)] = []
        for (path, scalar) in changed.scalars.sorted(by: { $0.value.range.lowerBound < $1.value.range.lowerBound }) {
            // A reference reads the host's environment or files: only the operator writes one.
            if scalar.value.contains("${"), before.scalars[path]?.value != scalar.value {
                throw problem(scalar, path, "refers to the host's environment or files (${...}); such a value is written in the file on the host, not through the admin API")
            }
            guard scalar.value.contains(mask) else { continue }
            let secrets = before.secrets.filter { $0.path == path }
            guard let kept = before.scalars[path], !secrets.isEmpty else {
                throw problem(scalar, path, "is masked (\(mask)) where the running file keeps no secret: write the value")
            }
            if secrets.contains(where: \.isPart) {
                // A URL with a masked part comes back only unchanged.
                let shown = masked(before.source(kept.range)).text
                guard changed.source(scalar.range) == shown || scalar.value == masked(kept.value).text else {
                    throw problem(scalar, path, "holds a masked part but differs from the running file's value: retype the whole value")
                }
            } else if scalar.value != mask {
                throw problem(scalar, path, "holds \(mask) beside other text: write the value, or keep the mask alone")
            }
            // A mask inside a list entry: the list and the entry must be as they were around it.
            var prefix = ""
            for part in path.split(separator: "[", omittingEmptySubsequences: false).dropLast() {
                prefix += prefix.isEmpty && !path.hasPrefix("[") ? String(part) : "[" + part
                let list = String(prefix)
                guard changed.lists[list] == before.lists[list] else {
                    throw problem(scalar, path, "is masked in a list that gained or lost entries: retype the secrets of \(list)")
                }
            }
            if let entryEnd = path.range(of: "]", options: .backwards)?.upperBound {
                let entry = String(path[..<entryEnd])
                guard changed.elements[entry] == before.elements[entry] else {
                    throw problem(scalar, path, "is masked in an entry of a list whose other values changed: retype its secrets")
                }
            }
            replacements.append((scalar.range, before.source(kept.range), scalar.line))
        }
        var result = changed.characters
        var added: [(afterLine: Int, count: Int)] = []
        for replacement in replacements.sorted(by: { $0.range.lowerBound > $1.range.lowerBound }) {
            result.replaceSubrange(replacement.range, with: replacement.text.unicodeScalars)
            let lines = replacement.text.unicodeScalars.filter { $0 == "\n" }.count
            if lines > 0 { added.append((replacement.line, lines)) }
        }
        return Unmasked(text: String(String.UnicodeScalarView(result)), addedLines: added)
    }
}
