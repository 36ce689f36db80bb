import Foundation
import SuggestPlugin

// In-process figures for the suggestion index on the shared data set (all of jieba's dictionary
// plus the film titles): build time, lookup latency percentiles over a fixed set of real prefixes,
// and the process's resident memory after loading.
//   suggest-index-bench [--data ../shared/data/terms]
func argument(_ name: String) -> String? {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count else { return nil }
    return CommandLine.arguments[index + 1]
}
let folder = URL(fileURLWithPath: argument("--data") ?? "../shared/data/terms")
var terms: [Term] = []
for (file, dictionary) in [("jieba_dict.txt", "jieba"), ("movies.tsv", "movies")] {
    let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
    let parsed = SuggestTermParser.parse(text, dictionary: dictionary)
    terms += parsed.terms
}
let normalizeStart = ContinuousClock.now
var normalizedBytes = 0
for term in terms { normalizedBytes &+= SuggestNormalizer.normalize(term.keyword).utf8.count }
let normalizeTime = ContinuousClock.now - normalizeStart
print("normalizing every keyword: \(normalizeTime) (\(normalizedBytes) bytes)")
let buildStart = ContinuousClock.now
let index = SuggestionIndex(terms: terms)
let buildTime = ContinuousClock.now - buildStart

func residentMegabytes() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
          let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "") else { return -1 }
    return kilobytes / 1024
}

let prefixes = ["北", "北京", "北京大", "中", "中国", "上海", "台", "電", "电影", "音乐", "a", "st", "sta", "star", "the", "lov", "love", "matr",
                "harr", "god", "inter", "jack", "stra", "strar", "teh", "moive", "b", "be", "bea", "x"]
var samples: [Double] = []
for _ in 0..<2000 {
    for prefix in prefixes {
        let start = ContinuousClock.now
        let result = index.suggestions(for: prefix, limit: 10)
        let elapsed = ContinuousClock.now - start
        precondition(result.count <= 10)
        samples.append(Double(elapsed.components.attoseconds) / 1e12 + Double(elapsed.components.seconds) * 1e6)
    }
}
if CommandLine.arguments.contains("--per-prefix") {
    // The median and worst time of each prefix, to see where the tail comes from.
    for (offset, prefix) in prefixes.enumerated() {
        let own = stride(from: offset, to: samples.count, by: prefixes.count).map { samples[$0] }.sorted()
        print(String(format: "  %@: median %.1f µs, max %.1f µs, %d results", prefix, own[own.count / 2], own.last ?? 0,
                     index.suggestions(for: prefix, limit: 10).count))
    }
}
samples.sort()
let sorted = samples
func percentile(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
print(String(format: "terms %d, index build %.2f s, resident memory %.0f MB", terms.count,
             Double(buildTime.components.seconds) + Double(buildTime.components.attoseconds) / 1e18, residentMegabytes()))
print(String(format: "lookups %d: p50 %.2f µs, p99 %.2f µs, max %.2f µs", samples.count, percentile(0.5), percentile(0.99), samples.last ?? 0))
let prefixList = prefixes.map { "\"\($0)\"" }.joined(separator: ",")
print(String(format: "{\"engine\": \"suggestion-index\", \"terms\": %d, \"buildSeconds\": %.3f, \"residentMB\": %.0f, \"lookups\": %d, \"p50Us\": %.2f, \"p99Us\": %.2f, ",
             terms.count, Double(buildTime.components.seconds) + Double(buildTime.components.attoseconds) / 1e18, residentMegabytes(),
             samples.count, percentile(0.5), percentile(0.99)) + "\"prefixes\": [\(prefixList)]}")
