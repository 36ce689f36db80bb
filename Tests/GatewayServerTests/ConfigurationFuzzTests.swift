import Foundation
import GatewayServer
import GatewayTesting
import Testing

/// Random mutations of the shipped plugins.yaml: each must end in a valid configuration or a
/// located error — never a crash or a hang.
@Suite("plugins.yaml fuzzing")
struct ConfigurationFuzzTests {

    static let base: String = {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../plugins.yaml").standardized
        let shipped = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        // A second plugin block with limits and config, so mutations reach more plugin settings.
        return shipped + """

              notes:
                enabled: true
                mount: /v1/notes
                limits: { anonymous: 30/s }
                cache: { ttl: 5m }
                config: { greeting: hello, maxNotes: 100 }
            """
    }()

    static let replacements = [
        "", "~", "null", "-1", "0", "99999999999999999999999999", "1e400", "true", "[]", "{}", "[1, [2, [3]]]",
        "\"quoted\"", "'single'", "${UNSET_VARIABLE}", "${", "5 min", "64XB", "60/fortnight", "sqlite:", "postgres://",
        "&anchor x", "*missing", "!!binary aGVsbG8=", "|\n  block", String(repeating: "x", count: 100_000), "\u{0}", "\t",
        "\u{FEFF}", "💥", "- item", "key: value: other", "? complex", "%YAML 1.2",
    ]

    static func mutate(_ text: String, using rng: inout SplitMix) -> Data {
        var lines = text.components(separatedBy: "\n")
        let mutations = Int.random(in: 1...3, using: &rng)
        for _ in 0..<mutations where !lines.isEmpty {
            let index = Int.random(in: 0..<lines.count, using: &rng)
            switch Int.random(in: 0..<8, using: &rng) {
            case 0: lines.remove(at: index)
            case 1: lines[index] = String(repeating: " ", count: Int.random(in: 0...7, using: &rng)) + lines[index].trimmingCharacters(in: .whitespaces)
            case 2:
                if let colon = lines[index].firstIndex(of: ":") {
                    lines[index] = String(lines[index][...colon]) + " " + replacements.randomElement(using: &rng)!
                }
            case 3: lines.insert("  unknownKey\(index): 1", at: index)
            case 4: lines[index] = lines[index].replacingOccurrences(of: ":", with: "")
            case 5: lines.insert(lines[Int.random(in: 0..<lines.count, using: &rng)], at: index)
            case 6: lines[index] = String(lines[index].reversed())
            default:
                var bytes = Array(lines.joined(separator: "\n").utf8)
                if !bytes.isEmpty {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0x80...0xFF, using: &rng)
                }
                return Data(bytes)
            }
        }
        return Data(lines.joined(separator: "\n").utf8)
    }

    @Test("1,000 random mutations each end in a configuration or a located error")
    func mutations() throws {
        #expect(!Self.base.isEmpty)
        var rng = SplitMix(state: 0x5EED_0F_CAFE)
        var valid = 0
        var located = 0
        for _ in 0..<1000 {
            let data = Self.mutate(Self.base, using: &rng)
            do {
                let configuration = try GatewayConfiguration.parse(data, file: "plugins.yaml", knownPlugins: ["events", "feeds", "notes", "suggest", "todo", "transit"], environment: [:])
                if let config = configuration.plugins["notes"]?.config {
                    _ = try? config.decode(FuzzNotesConfiguration.self)
                }
                if let config = configuration.plugins["suggest"]?.config {
                    _ = try? config.decode(FuzzSuggestConfiguration.self)
                }
                valid += 1
            } catch {
                #expect(!error.message.isEmpty)
                #expect(error.description.hasPrefix("plugins.yaml"))
                // Every error that comes from the document's content has a line.
                #expect(error.line != nil, "no line for: \(error.description)")
                located += 1
            }
        }
        #expect(valid + located == 1000)
        #expect(located > 100)
        #expect(valid > 10)
    }

    struct FuzzSuggestConfiguration: Decodable {
        var dictionaries: [String]?
    }

    struct FuzzNotesConfiguration: Decodable {
        var greeting: String?
        var maxNotes: Int?
    }
}
