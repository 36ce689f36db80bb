import Foundation
import GatewayCore
import NIOCore
import ServiceLifecycle

/// Imports, refreshes and deletes feeds, and swaps the network in after each change.
struct FeedManager: Sendable {
    let runtime: TransitRuntime
    let context: PluginContext
    let limits: GTFSLimits

    func importFile(_ file: URL, feed: String, source: String, strict: Bool, skipUnchanged: Bool = false,
                    progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> GTFSImportResult {
        let result: GTFSImportResult
        do {
            result = try await GTFSFeedImport(store: runtime.store, limits: limits)
                .run(zip: file, feed: feed, source: source, strict: strict, skipUnchanged: skipUnchanged, progress: progress)
        } catch let error as GTFSError {
            throw GatewayError.invalid(error.description)
        }
        if !result.unchanged {
            try await runtime.reload()
            await context.purgeCache(tags: ["transit"])
        }
        return result
    }

    /// Reads a configured source (a path or an http(s) URL) and imports it unless unchanged.
    func refresh(_ source: TransitPlugin.FeedSource) async throws -> GTFSImportResult {
        if source.source.hasPrefix("http://") || source.source.hasPrefix("https://") {
            let reply = try await context.http.send(UpstreamRequest(url: source.source, timeout: .seconds(300)),
                                                    maxBodySize: Int(min(limits.maxUncompressedBytes, 1 << 30)))
            guard reply.status.code == 200 else { throw GatewayError.badGateway("\(source.source) answered \(reply.status.code)") }
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("gtfs-\(UUID().uuidString).zip")
            try Data(reply.body.readableBytesView).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            return try await importFile(file, feed: source.id, source: source.source, strict: false, skipUnchanged: true, progress: { _, _ in })
        }
        return try await importFile(context.resolve(path: source.source), feed: source.id, source: source.source, strict: false,
                                    skipUnchanged: true, progress: { _, _ in })
    }

    func delete(_ feed: String) async throws -> Bool {
        guard try await runtime.store.deleteFeed(feed) else { return false }
        try await runtime.reload()
        await context.purgeCache(tags: ["transit"])
        return true
    }
}

/// `gateway import transit FEED.zip [--feed ID] [--strict]`.
struct GTFSImporter: Importer {
    let feeds: FeedManager

    var format: String { "gtfs" }
    var summary: String { "A GTFS feed (zip); --feed ID names it (default the file's name), --strict stops at the first rejected record" }

    func accepts(_ file: URL) -> Bool {
        if file.pathExtension.lowercased() == "zip" { return true }
        guard let handle = try? FileHandle(forReadingFrom: file) else { return false }
        defer { try? handle.close() }
        return (try? handle.read(upToCount: 4)) == Data([0x50, 0x4B, 0x03, 0x04])
    }

    func importFile(_ file: URL, options: [String: String], progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> ImportReport {
        let feed = options["feed"] ?? GTFSFeedImport.feedID(from: file)
        let strict = options["strict"].map { $0.isEmpty || $0 == "true" || $0 == "1" } ?? false
        let result = try await feeds.importFile(file, feed: feed, source: file.path, strict: strict, progress: progress)
        return ImportReport(imported: result.summary.stopTimes, rejected: result.rejected)
    }
}

/// Compares the served feeds' versions with the database now and then, and reloads when another
/// instance (or `gateway import`) changed them.
struct FeedWatcher: Service {
    let runtime: TransitRuntime
    let every: Duration
    /// Replies made from what this instance served before are dropped when it takes another's data.
    let purgeCache: @Sendable (_ tags: [String]) async -> Void
    let logger: Logger

    func run() async throws {
        // The realtime messages stored before this instance started.
        if (try? await runtime.syncRealtime()) == true { await purgeCache(["transit"]) }
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: every) }
            guard !Task.isShuttingDownGracefully && !Task.isCancelled else { return }
            do {
                let stored = try await runtime.store.feeds().map { "\($0.id)@\($0.version)" }
                let served = runtime.network.feeds.map { "\($0.id)@\($0.version)" }
                var changed = false
                if stored != served {
                    try await runtime.reload()
                    changed = true
                    logger.info("transit feeds reloaded", metadata: ["feeds": "\(stored.joined(separator: ", "))"])
                }
                // Realtime messages another instance polled or was sent.
                if try await runtime.syncRealtime() { changed = true }
                if changed { await purgeCache(["transit"]) }
            } catch {
                logger.warning("transit feed check failed", metadata: ["error": "\(error)"])
            }
        }
    }
}

/// Imports configured feeds that are not imported yet, then re-reads each on its `refresh` schedule.
struct FeedRefresher: Service {
    let feeds: FeedManager
    let sources: [TransitPlugin.FeedSource]
    let logger: Logger

    func run() async throws {
        var due: [String: ContinuousClock.Instant] = [:]
        let clock = ContinuousClock()
        let served = Set(feeds.runtime.network.feeds.map(\.id))
        for source in sources {
            due[source.id] = served.contains(source.id) ? source.refresh.map { clock.now + $0.duration } : clock.now
        }
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            for source in sources {
                guard let when = due[source.id], when <= clock.now else { continue }
                do {
                    let result = try await feeds.refresh(source)
                    if !result.unchanged {
                        logger.info("transit feed imported", metadata: ["feed": "\(source.id)", "stopTimes": "\(result.summary.stopTimes)",
                                                                        "rejected": "\(result.summary.rejected)"])
                    }
                    due[source.id] = source.refresh.map { clock.now + $0.duration }
                } catch {
                    logger.error("transit feed import failed", metadata: ["feed": "\(source.id)", "error": "\(error)"])
                    due[source.id] = clock.now + .seconds(max(60, min(3600, source.refresh?.seconds ?? 300)))
                }
            }
            let next = due.values.min()
            try? await cancelWhenGracefulShutdown {
                try await Task.sleep(for: next.map { max(.seconds(1), $0 - clock.now) } ?? .seconds(3600))
            }
        }
    }
}

/// Polls a feed's GTFS-realtime TripUpdates (on one instance of a cluster, under the lease
/// `transit.realtime.<feed>`) and stores each good message for every instance; a failed fetch or an
/// unreadable message keeps the last good one and is reported in health.
struct RealtimePoller: Service {
    let feed: String
    let source: TransitPlugin.RealtimeSource
    let runtime: TransitRuntime
    let http: any UpstreamHTTPClient
    let purgeCache: @Sendable (_ tags: [String]) async -> Void
    let logger: Logger

    func run() async throws {
        let interval = (source.interval ?? ConfigDuration(seconds: 30)).duration
        let timeout = (source.timeout ?? ConfigDuration(seconds: 10)).duration
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let reply = try await http.send(UpstreamRequest(url: source.tripUpdates, timeout: timeout), maxBodySize: RealtimeDecoder.maxMessageBytes)
                if reply.status.code == 200 {
                    try await runtime.receiveRealtime(feed: feed, message: Data(reply.body.readableBytesView))
                    await purgeCache(["transit"])
                } else {
                    runtime.recordFailure(feed: feed, "\(source.tripUpdates) answered \(reply.status.code)")
                }
            } catch let error as GatewayError {
                if error.status != 422 { runtime.recordFailure(feed: feed, error.detail) }
                logger.warning("transit realtime fetch failed", metadata: ["feed": "\(feed)", "error": "\(error.detail)"])
            } catch {
                runtime.recordFailure(feed: feed, "\(error)")
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
