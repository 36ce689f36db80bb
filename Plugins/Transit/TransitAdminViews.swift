import Foundation
import GatewayCore

/// The admin console's page of the transit plugin: the GTFS feeds served, with their counts, and
/// how fresh each feed's realtime data is.
extension TransitPlugin {
    /// The most feeds the page lists.
    static let adminFeedRows = 100

    public var adminViews: [AdminView] {
        let runtime = self.runtime
        let sources = configuration.feeds
        return [
            AdminView(id: "feeds", title: "Feeds", refresh: 30, load: { _ in
                Self.feedSections(runtime: runtime, sources: sources)
            }),
        ]
    }

    static func adminTime(_ seconds: Int64) -> String {
        UTCTimestamp.format(micros: seconds * 1_000_000, fractionDigits: 0)
    }

    static func adminTime(_ date: Date) -> String {
        UTCTimestamp.format(micros: UTCTimestamp.micros(date), fractionDigits: 0)
    }

    static func feedSections(runtime: TransitRuntime, sources: [FeedSource]) -> [AdminSection] {
        let network = runtime.network
        let now = runtime.now()
        let configured = [String: FeedSource](sources.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        let served = Set(network.feeds.map(\.id))

        var rows: [AdminRow] = []
        for (index, feed) in network.feeds.enumerated().prefix(adminFeedRows) {
            let agencies = network.agencies.filter { Int($0.feed) == index }.map { $0.name.isEmpty ? $0.id : $0.name }
            let refresh = configured[feed.id].map { source in source.refresh.map { "every \(Int64($0.seconds))s" } ?? "once" } ?? "not configured"
            rows.append(AdminRow([
                feed.id, agencies.isEmpty ? "" : agencies.joined(separator: ", "), String(feed.summary.stops), String(feed.summary.routes),
                String(feed.summary.trips), String(feed.summary.stopTimes), adminTime(feed.importedAt), AdminView.redacted(url: feed.source), refresh,
            ]))
        }
        // Configured feeds not imported yet.
        for source in sources where !served.contains(source.id) && rows.count < adminFeedRows {
            rows.append(AdminRow([source.id, "", "", "", "", "", "not imported yet", AdminView.redacted(url: source.source), source.refresh.map { "every \(Int64($0.seconds))s" } ?? "once"]))
        }
        let feedCount = network.feeds.count + sources.filter { !served.contains($0.id) }.count
        var sections: [AdminSection] = [
            .figures(title: "Network", [
                AdminFigure("Feeds served", String(network.feeds.count)),
                AdminFigure("Stops", String(network.feeds.reduce(0) { $0 + $1.summary.stops })),
                AdminFigure("Routes", String(network.feeds.reduce(0) { $0 + $1.summary.routes })),
                AdminFigure("Trips", String(network.feeds.reduce(0) { $0 + $1.summary.trips })),
            ]),
        ]
        if rows.isEmpty {
            sections.append(.text(title: "Feeds", "No feed is served: import a GTFS zip (gateway import transit FILE, or PUT /v1/transit/feeds/{feed})."))
        } else {
            sections.append(.table(title: feedCount > rows.count ? "Feeds (the first \(rows.count) of \(feedCount))" : "Feeds",
                                   columns: ["Feed", "Agencies", "Stops", "Routes", "Trips", "Stop times", "Imported at", "Source", "Refresh"], rows: rows))
        }

        // Realtime: each feed configured with a source, and each served feed sent messages.
        var realtimeRows: [AdminRow] = []
        let realtimeFeeds = sources.filter { $0.realtime != nil }.map(\.id)
            + network.feeds.map(\.id).filter { id in configured[id]?.realtime == nil && runtime.realtimeStatus(id) != nil }
        for feed in realtimeFeeds.prefix(adminFeedRows) {
            let realtime = configured[feed]?.realtime
            let status = runtime.realtimeStatus(feed)
            let received = runtime.realtimeReceivedAt(feed)
            let age = received.map { now - $0 }
            var state: String
            if let age, let realtime {
                let interval = realtime.interval?.seconds ?? 30
                let stale = Int64(realtime.staleAfter?.seconds ?? interval * 3)
                state = age > stale ? "stale (older than \(stale)s)" : "fresh"
            } else if received != nil {
                state = "received (posted)"
            } else {
                state = "no good message yet"
            }
            if let error = status?.lastError {
                state += "; last attempt failed" + (status?.lastErrorAt.map { " at " + adminTime($0) } ?? "") + ": " + error
            }
            realtimeRows.append(AdminRow([
                feed, realtime.map { AdminView.redacted(url: $0.tripUpdates) } ?? "posted to the API", received.map { adminTime($0) } ?? "never", age.map { String($0) } ?? "",
                status.map { String($0.tripUpdates) } ?? "", status.map { "\($0.unknownTrips) / \($0.unmatchedStops)" } ?? "", state,
            ]))
        }
        if !realtimeRows.isEmpty {
            sections.append(.table(title: "Realtime", columns: ["Feed", "Trip updates from", "Last good message", "Age (s)", "Trip updates",
                                                                 "Unknown trips / unmatched stops", "Status"], rows: realtimeRows))
        }
        return sections
    }
}
