import Foundation
import GatewayCore
import NIOCore
@testable import FeedsPlugin

/// Xively datapoints: the fast scanner of JSON bodies checked against the general reading (what
/// the scanner accepts, the general reading must read alike), and CSV lines (`at,value`, `value`,
/// `id,at,value`, an import file's lines) through the time and number parsers they use.
enum FeedsFuzz {
    static let now: Int64 = 1_780_000_000_000_000

    static let datapoints: FuzzTargets.Target = { bytes in
        let buffer = ByteBuffer(bytes: bytes)
        if let points = DatapointScanner.scan(buffer, now: now) {
            _ = FeedService.distinct(points)
            // The general reading of the same body.
            let body = try? JSONValue.parse(buffer, maximumDepth: 8)
            let list: [JSONValue]?
            switch body {
            case .array(let items)?: list = items
            case .object(let members)?: list = members["datapoints"]?.arrayValue
            default: list = nil
            }
            guard let list, list.count == points.count else { fatalError("the scanner read a body the general reading does not: \(points.count) points") }
            for (point, item) in zip(points, list) {
                guard case .object(let members) = item, let value = members["value"].flatMap(FeedRules.value) else {
                    fatalError("the scanner read a value the general reading refuses")
                }
                let at = members["at"]?.stringValue.flatMap { UTCTimestamp.parse($0) } ?? now
                guard value == point.value, at == point.at else {
                    fatalError("the scanner read \(point.at) \(point.value), the general reading \(at) \(value)")
                }
            }
        }
        // CSV: each line's fields through the parsers the CSV readers use.
        let text = String(decoding: bytes, as: UTF8.self)
        for line in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).prefix(1_000) {
            let fields = line.trimmingCharacters(in: CharacterSet(charactersIn: " \r\t")).split(separator: ",", omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: .whitespaces) }
            for field in fields {
                _ = FeedRules.value(field)
                _ = UTCTimestamp.parse(field)
                _ = DatapointImporter.time(field)
                _ = FeedRules.isDatastreamID(field)
            }
        }
    }
}
