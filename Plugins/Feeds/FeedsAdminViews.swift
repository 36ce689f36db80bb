import Foundation
import GatewayCore
import SQLKit

/// The admin console's page of the feeds plugin: a datastream's recent datapoints as a chart with
/// its latest value (the page's `feed` and `stream` arguments), or the recently updated
/// datastreams to choose from.
extension FeedsPlugin {
    /// The datapoints the chart shows (the newest).
    static let adminChartPoints = 200
    /// The recently updated feeds whose datastreams the page lists, and the most rows it shows.
    static let adminRecentFeeds = 20
    static let adminRecentRows = 100

    public var adminViews: [AdminView] {
        let service = self.service
        return [
            AdminView(id: "datastream", title: "Datastream", refresh: 5, load: { request in
                try await Self.datastreamSections(service, request.arguments)
            }, actions: [
                "show": { request in try await Self.describeDatastream(service, request.arguments) },
            ]),
        ]
    }

    static func datastreamForm(feed: String, stream: String) -> AdminSection {
        .form(title: "Choose a datastream", action: "", submitLabel: "Show",
              fields: [AdminField(name: "feed", label: "Feed id", value: feed), AdminField(name: "stream", label: "Datastream id", value: stream)])
    }

    static func datastreamSections(_ service: FeedService, _ arguments: [String: String]) async throws -> [AdminSection] {
        let feedText = (arguments["feed"] ?? "").trimmingCharacters(in: .whitespaces)
        let streamText = (arguments["stream"] ?? "").trimmingCharacters(in: .whitespaces)
        let form = datastreamForm(feed: feedText, stream: streamText)
        guard !feedText.isEmpty || !streamText.isEmpty else {
            let recent = try await recentDatastreams(service)
            return [form, recent]
        }
        let found: (feed: FeedRecord, stream: DatastreamRecord)
        do {
            found = try await datastream(service, feed: feedText, stream: streamText)
        } catch let error as GatewayError {
            let recent = try await recentDatastreams(service)
            return [form, .text(title: "Datastream", error.detail), recent]
        }
        let (feed, stream) = found
        let store = service.store
        let query = try HistoryQuery(parameters: ["limit": String(adminChartPoints)], now: store.now(), legacy: false)
        let points = try await store.history(stream, query)
        let stored = try await store.datapointCount(stream)
        let unit = stream.unit.symbol.map { " " + $0 } ?? ""
        var figures = [
            AdminFigure("Feed", "\(feed.title) (\(feed.id)), \(service.status(of: feed))"),
            AdminFigure("Last value", stream.currentValue.map { FeedRules.text($0) + unit } ?? "none"),
            AdminFigure("Measured at", stream.at.map { UTCTimestamp.format(micros: $0, fractionDigits: 0) } ?? "never"),
            AdminFigure("Datapoints stored", String(stored)),
        ]
        if let low = stream.minValue, let high = stream.maxValue {
            figures.append(AdminFigure("Lowest / highest", FeedRules.text(low) + unit + " / " + FeedRules.text(high) + unit))
        }
        let label = "\(feed.id)/\(stream.id)" + (stream.unit.symbol.map { " (\($0))" } ?? "")
        return [
            form,
            .figures(title: "Datastream \(feed.id)/\(stream.id)", figures),
            .chart(title: "The last \(points.count) datapoint\(points.count == 1 ? "" : "s")", label: label,
                   points: points.map { AdminPoint(at: UTCTimestamp.date(micros: $0.at), value: $0.value) }),
        ]
    }

    /// The feed and datastream the arguments name: 422 for a malformed id, 404 for an unknown one.
    static func datastream(_ service: FeedService, feed feedText: String, stream streamText: String) async throws -> (feed: FeedRecord, stream: DatastreamRecord) {
        guard let feedID = FeedRules.feedID(feedText) else { throw GatewayError.invalid(field: "feed", "must be a feed's id (a positive integer)") }
        guard FeedRules.isDatastreamID(streamText) else {
            throw GatewayError.invalid(field: "stream", "must be a datastream's id (letters, digits, _ and -)")
        }
        guard let found = try await service.store.feed(feedID, datastream: streamText) else {
            throw GatewayError.notFound("No feed \(feedID).")
        }
        guard let stream = found.stream else { throw GatewayError.notFound("Feed \(feedID) has no datastream '\(streamText)'.") }
        return (found.feed, stream)
    }

    /// The form's action: the datastream's latest value, and the page that follows it.
    static func describeDatastream(_ service: FeedService, _ arguments: [String: String]) async throws -> String {
        let (feed, stream) = try await datastream(service, feed: (arguments["feed"] ?? "").trimmingCharacters(in: .whitespaces),
                                                  stream: (arguments["stream"] ?? "").trimmingCharacters(in: .whitespaces))
        let value = stream.currentValue.map { FeedRules.text($0) + (stream.unit.symbol.map { " " + $0 } ?? "") } ?? "no value yet"
        let when = stream.at.map { " at " + UTCTimestamp.format(micros: $0, fractionDigits: 0) } ?? ""
        let path = "/admin/plugins/\(Self.id)/datastream?feed=\(feed.id)&stream=\(stream.id)"
        return "\(feed.id)/\(stream.id): \(value)\(when). Its chart: \(path)"
    }

    /// The datastreams of the most recently updated feeds, newest value first.
    static func recentDatastreams(_ service: FeedService) async throws -> AdminSection {
        var filter = FeedStore.FeedFilter()
        filter.seesPrivate = true
        filter.order = .updated
        filter.limit = adminRecentFeeds
        let (_, feeds) = try await service.store.listFeeds(filter, frozenAfter: service.frozenAfterMicros)
        let streams = try await service.store.datastreams(of: feeds.map(\.id))
        let titles = Dictionary(feeds.map { ($0.id, $0.title) }, uniquingKeysWith: { first, _ in first })
        let all = streams.values.flatMap { $0 }.sorted { ($0.updated, $0.feedID, $0.id) > ($1.updated, $1.feedID, $1.id) }
        let rows = all.prefix(adminRecentRows).map { stream in
            AdminRow([
                String(stream.feedID), titles[stream.feedID] ?? "", stream.id,
                stream.currentValue.map { FeedRules.text($0) + (stream.unit.symbol.map { " " + $0 } ?? "") } ?? "",
                stream.at.map { UTCTimestamp.format(micros: $0, fractionDigits: 0) } ?? "",
                UTCTimestamp.format(micros: stream.updated, fractionDigits: 0),
            ], actions: [AdminAction("Latest", action: "show", arguments: ["feed": String(stream.feedID), "stream": stream.id])])
        }
        let title = all.count > rows.count
            ? "Recently updated datastreams (the newest \(rows.count) of the \(feeds.count) feeds updated last)"
            : "Recently updated datastreams (of the \(feeds.count) feed\(feeds.count == 1 ? "" : "s") updated last)"
        guard !rows.isEmpty else { return .text(title: "Recently updated datastreams", "No feed has a datastream yet.") }
        return .table(title: title, columns: ["Feed", "Title", "Datastream", "Last value", "Measured at", "Updated"], rows: rows)
    }
}

extension FeedStore {
    /// How many datapoints a datastream holds (the sum of its chunks' counts).
    func datapointCount(_ stream: DatastreamRecord) async throws -> Int {
        try await database.raw("""
            SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS n FROM feeds_chunks WHERE stream = \(bind: stream.key)
            """).first()?.decode(column: "n", as: Int.self) ?? 0
    }
}
