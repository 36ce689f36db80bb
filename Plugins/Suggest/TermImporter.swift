import Foundation
import GatewayCore

/// Parses dictionary text (the importer's format), for benchmarks and tools.
public enum SuggestTermParser {
    public static func parse(_ text: String, dictionary: String) -> (terms: [Term], rejected: [ImportReport.Rejection]) {
        TermImporter.parse(text, dictionary: dictionary)
    }
}

/// Loads dictionaries from text files: `keyword<TAB>text[<TAB>weight]` lines, or jieba's
/// `word freq pos` lines. A malformed line is counted and reported with its number, never dropped
/// silently and never the end of the import; a re-import replaces the dictionary atomically.
struct TermImporter: Importer {
    let store: TermStore
    var format: String { "terms" }
    var summary: String { "keyword<TAB>text[<TAB>weight] lines, or jieba `word freq pos` lines (--dictionary NAME, default: the file name)" }

    func accepts(_ file: URL) -> Bool {
        ["tsv", "txt"].contains(file.pathExtension.lowercased())
    }

    /// Parses the lines of a dictionary file.
    static func parse(_ text: String, dictionary: String) -> (terms: [Term], rejected: [ImportReport.Rejection]) {
        var terms: [Term] = []
        var rejected: [ImportReport.Rejection] = []
        var number = 0
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let content = line.hasSuffix("\r") ? line.dropLast() : line
            if content.trimmingCharacters(in: .whitespaces).isEmpty { continue }
            if content.contains("\t") {
                let fields = content.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                guard fields.count <= 3, !fields[0].trimmingCharacters(in: .whitespaces).isEmpty else {
                    rejected.append(.init(line: number, reason: fields.count > 3 ? "more than three tab-separated fields" : "empty keyword"))
                    continue
                }
                let text = fields.count > 1 && !fields[1].isEmpty ? fields[1] : fields[0]
                var weight = 0.0
                if fields.count == 3 {
                    guard let value = Double(fields[2].trimmingCharacters(in: .whitespaces)), value.isFinite, value >= 0 else {
                        rejected.append(.init(line: number, reason: "the weight '\(fields[2].prefix(40))' is not a non-negative number"))
                        continue
                    }
                    weight = value
                }
                terms.append(Term(dictionary: dictionary, keyword: fields[0], text: text, weight: weight))
            } else {
                let fields = content.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
                guard (2...3).contains(fields.count), let frequency = Double(fields[1]), frequency.isFinite, frequency >= 0 else {
                    rejected.append(.init(line: number, reason: "neither keyword<TAB>text nor `word freq [pos]`"))
                    continue
                }
                terms.append(Term(dictionary: dictionary, keyword: fields[0], text: fields[0], weight: frequency))
            }
        }
        return (terms, rejected)
    }

    func importFile(_ file: URL, options: [String: String], progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> ImportReport {
        let data = try Data(contentsOf: file)
        guard let text = String(validating: data, as: UTF8.self) else {
            throw GatewayError.invalid(field: "file", "\(file.lastPathComponent) is not UTF-8 text")
        }
        let dictionary = options["dictionary"] ?? file.deletingPathExtension().lastPathComponent
        let (terms, rejected) = Self.parse(text, dictionary: dictionary)
        progress(0, terms.count)
        try await store.replace(dictionary: dictionary, with: terms)
        progress(terms.count, terms.count)
        return ImportReport(imported: terms.count, rejected: rejected)
    }
}
