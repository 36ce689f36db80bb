import Foundation
import GatewayCore

/// `gateway import feeds FILE.csv --feed ID --datastream ID [--column NAME]`: loads a time series
/// into a datastream.
///
/// The file is `at,value` lines, or a CSV whose header names a time column (`at`, `datetime`,
/// `timestamp`, `time` or `date`) and the value column (`--column`, else `value`, else the last
/// other column). Times are ISO 8601; without a zone they are UTC. A bad line is reported with its
/// number and skipped; a datapoint at a time already stored replaces it, so importing a file
/// again leaves the same data.
struct DatapointImporter: Importer {
    let service: FeedService
    var format: String { "csv" }
    var summary: String { "A time series for one datastream: at,value lines or a CSV with a header (--feed ID --datastream ID [--column NAME])" }

    static let batchSize = 5_000

    func accepts(_ file: URL) -> Bool {
        ["csv", "txt"].contains(file.pathExtension.lowercased())
    }

    func importFile(_ file: URL, options: [String: String], progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> ImportReport {
        guard let feedText = options["feed"], let streamID = options["datastream"] else {
            throw GatewayError.badRequest("Name the target with --feed ID --datastream ID.")
        }
        let admin = Principal(kind: .apiKey(keyID: "import"), isAdmin: true, address: "local")
        let feed = try await service.visibleFeed(feedText, admin)
        let stream: DatastreamRecord
        if let existing = try await service.store.datastream(feedID: feed.id, id: streamID) {
            stream = existing
        } else {
            guard FeedRules.isDatastreamID(streamID) else { throw GatewayError.badRequest("'\(streamID)' is not a datastream id (letters, digits, _ and -).") }
            try await service.createDatastreams(feed, [DatastreamDraft(id: streamID)], admin)
            stream = try await service.stream(feed, streamID, admin)
        }
        let data = try Data(contentsOf: file)
        let text = String(decoding: data, as: UTF8.self)
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        if lines.last?.isEmpty == true { lines.removeLast() }

        var timeColumn = 0
        var valueColumn = 1
        var firstData = 0
        if let header = lines.first {
            let names = header.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespacesAndNewlines).lowercased() }
            let looksLikeHeader = names.contains { Self.time($0) == nil && FeedRules.value($0) == nil }
            if looksLikeHeader {
                firstData = 1
                guard let time = names.firstIndex(where: { ["at", "datetime", "timestamp", "time", "date"].contains($0) }) else {
                    throw GatewayError.badRequest("The header names no time column (at, datetime, timestamp, time or date).")
                }
                timeColumn = time
                if let wanted = options["column"]?.lowercased() {
                    guard let index = names.firstIndex(of: wanted) else { throw GatewayError.badRequest("The header has no column '\(wanted)'.") }
                    valueColumn = index
                } else if let index = names.firstIndex(of: "value") {
                    valueColumn = index
                } else if let index = names.indices.last(where: { $0 != time }) {
                    valueColumn = index
                } else {
                    throw GatewayError.badRequest("The header names no value column.")
                }
            }
        }

        var rejected: [ImportReport.Rejection] = []
        var imported = 0
        var batch: [Datapoint] = []
        var seen: [Int64: Int] = [:]
        let total = lines.count - firstData
        for index in firstData..<lines.count {
            let number = index + 1
            let line = lines[index].trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty { continue }
            let fields = line.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard fields.count > max(timeColumn, valueColumn) else {
                rejected.append(.init(line: number, reason: "has \(fields.count) fields, expected at least \(max(timeColumn, valueColumn) + 1)"))
                continue
            }
            guard let at = Self.time(fields[timeColumn]) else {
                rejected.append(.init(line: number, reason: "'\(fields[timeColumn].prefix(40))' is not an ISO 8601 time"))
                continue
            }
            guard let value = FeedRules.value(fields[valueColumn]) else {
                rejected.append(.init(line: number, reason: "'\(fields[valueColumn].prefix(40))' is not a number"))
                continue
            }
            if let problem = service.timeProblem(at) {
                rejected.append(.init(line: number, reason: "the time \(problem)"))
                continue
            }
            if let earlier = seen[at] {
                rejected.append(.init(line: number, reason: "repeats the time of line \(earlier)"))
                continue
            }
            seen[at] = number
            batch.append(Datapoint(at: at, value: value))
            if batch.count == Self.batchSize {
                try await service.ingest(batch, into: stream)
                imported += batch.count
                batch.removeAll(keepingCapacity: true)
                progress(index + 1 - firstData, total)
            }
        }
        if !batch.isEmpty {
            try await service.ingest(batch, into: stream)
            imported += batch.count
        }
        progress(total, total)
        return ImportReport(imported: imported, rejected: rejected)
    }

    /// An ISO 8601 time; one without a zone is UTC.
    static func time(_ text: String) -> Int64? {
        if let micros = UTCTimestamp.parse(text) { return micros }
        guard text.utf8.count >= 19, text.utf8.count <= 29, !text.hasSuffix("Z") else { return nil }
        return UTCTimestamp.parse(text + "Z")
    }
}
