import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import Hummingbird
import NIOCore
import NIOFoundationCompat
import ServiceLifecycle
import SwiftProtobuf
import Synchronization
@testable import TransitPlugin
import Testing

/// GTFS-realtime messages made from the example feed.
enum Messages {
    typealias Update = TransitRealtime_TripUpdate.StopTimeUpdate

    static func stop(sequence: UInt32? = nil, stopID: String? = nil, arrivalDelay: Int32? = nil, departureDelay: Int32? = nil,
                     arrivalTime: Int64? = nil, relationship: Update.ScheduleRelationship? = nil) -> Update {
        var update = Update()
        if let sequence { update.stopSequence = sequence }
        if let stopID { update.stopID = stopID }
        if let arrivalDelay { update.arrival.delay = arrivalDelay }
        if let arrivalTime { update.arrival.time = arrivalTime }
        if let departureDelay { update.departure.delay = departureDelay }
        if let relationship { update.scheduleRelationship = relationship }
        return update
    }

    static func trip(_ id: String, start: String? = nil, date: String? = "20100601", canceled: Bool = false, _ stops: [Update]) -> TransitRealtime_FeedEntity {
        var entity = TransitRealtime_FeedEntity()
        entity.id = id + (start ?? "")
        entity.tripUpdate.trip.tripID = id
        if let start { entity.tripUpdate.trip.startTime = start }
        if let date { entity.tripUpdate.trip.startDate = date }
        if canceled { entity.tripUpdate.trip.scheduleRelationship = .canceled }
        entity.tripUpdate.stopTimeUpdate = stops
        return entity
    }

    static func message(_ entities: [TransitRealtime_FeedEntity], time: Date = sampleMorning) throws -> Data {
        var message = TransitRealtime_FeedMessage()
        message.header.gtfsRealtimeVersion = "2.0"
        message.header.timestamp = UInt64(time.timeIntervalSince1970)
        message.entity = entities
        return try message.serializedData()
    }

    /// CITY1 leaving at 8:00: 2 minutes late at its second stop, carried to the third, no data from the fourth;
    /// the 8:30 shuttle skips the airport; CITY2 at 8:00 is cancelled; a trip nobody knows.
    static func morning() throws -> Data {
        try message([
            trip("CITY1", start: "08:00:00", [stop(sequence: 2, arrivalDelay: 120), stop(sequence: 4, relationship: .noData)]),
            trip("STBA", start: "8:30:00", [stop(stopID: "BEATTY_AIRPORT", relationship: .skipped)]),
            trip("CITY2", start: "08:00:00", canceled: true, []),
            trip("CITY1", start: "08:10:00", date: nil, [stop(stopID: "NADAV", arrivalTime: Int64(sampleMorning.timeIntervalSince1970) + 27 * 60)]),
            trip("GHOST", [stop(sequence: 1, arrivalDelay: 60)]),
        ])
    }
}

@Suite("transit: GTFS-realtime predictions")
struct TransitRealtimeTests {
    @Test("delays carry to later stops, SKIPPED and NO_DATA, cancelled trips, unknown trips counted", arguments: TestStorage.available)
    func predictions(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let admin = try await gateway.administrator()
            let posted = try await gateway.send(.post, "/v1/transit/feeds/sample/realtime", token: admin, body: ByteBuffer(data: try Messages.morning()),
                                                contentType: "application/x-protobuf")
            #expect(posted.status == 200, "\(posted.text)")
            #expect(posted["tripUpdates"]?.numberValue == 5)
            #expect(posted["unknownTrips"]?.numberValue == 1)

            let trip = try await gateway.send(.get, "/v1/transit/trips/DTA_CITY1@08:00:00?serviceDate=2010-06-01")
            let times = try #require(trip["stopTimes"]?.arrayValue)
            #expect(times.map { $0["status"]?.stringValue } == ["scheduled", "predicted", "predicted", "noData", "noData"])
            // NANAA: arrival 8:05 + 2 min; its departure (8:07) keeps the arrival's delay; NADAV gets it carried.
            #expect(times[1]["predictedArrival"]?.stringValue == "2010-06-01T15:07:00Z")
            #expect(times[1]["predictedDeparture"]?.stringValue == "2010-06-01T15:09:00Z")
            #expect(times[2]["predictedArrival"]?.stringValue == "2010-06-01T15:14:00Z")
            #expect(times[2]["predictedDeparture"]?.stringValue == "2010-06-01T15:16:00Z")
            #expect(times[3]["predictedArrival"] == nil || times[3]["predictedArrival"] == .null)

            // By stop id, with an absolute time: NADAV 5 minutes late (8:22 → 8:27), carried to DADAN and EMSI.
            let other = try await gateway.send(.get, "/v1/transit/trips/DTA_CITY1@08:10:00?serviceDate=2010-06-01")
            let otherTimes = try #require(other["stopTimes"]?.arrayValue)
            #expect(otherTimes.map { $0["status"]?.stringValue } == ["scheduled", "scheduled", "predicted", "predicted", "predicted"])
            #expect(otherTimes[2]["predictedArrival"]?.stringValue == "2010-06-01T15:27:00Z")
            #expect(otherTimes[4]["predictedArrival"]?.stringValue == "2010-06-01T15:41:00Z")

            let shuttle = try await gateway.send(.get, "/v1/transit/trips/DTA_STBA@08:30:00?serviceDate=2010-06-01")
            #expect(shuttle["stopTimes"]?.arrayValue?.map { $0["status"]?.stringValue } == ["scheduled", "skipped"])
            let cancelled = try await gateway.send(.get, "/v1/transit/trips/DTA_CITY2@08:00:00?serviceDate=2010-06-01")
            #expect(cancelled["stopTimes"]?.arrayValue?.allSatisfy { $0["status"]?.stringValue == "cancelled" } == true)
            // Another day of the same trip has no prediction.
            let tomorrow = try await gateway.send(.get, "/v1/transit/trips/DTA_CITY1@08:00:00?serviceDate=2010-06-02")
            #expect(tomorrow["stopTimes"]?.arrayValue?.allSatisfy { $0["status"]?.stringValue == "scheduled" } == true)

            // Arrivals carry the predictions.
            let arrivals = try await gateway.send(.get, "/v1/transit/stops/DTA_NANAA/arrivals?minutesBefore=0&minutesAfter=10")
            let first = try #require(arrivals.items.first { $0["trip"]?.stringValue == "DTA_CITY1@08:00:00" })
            #expect(first["status"]?.stringValue == "predicted")
            #expect(first["predictedArrival"]?.stringValue == "2010-06-01T15:07:00Z")
            #expect(first["scheduledArrival"]?.stringValue == "2010-06-01T15:05:00Z")
        }
    }

    @Test("a late vehicle scheduled before the window appears in it by its predicted time")
    func lateVehicle() async throws {
        try await withTransit { gateway in
            let admin = try await gateway.administrator()
            // STBA at 7:30 reaches the airport at 7:50, 20 minutes late: 8:10.
            let message = try Messages.message([Messages.trip("STBA", start: "07:30:00", [Messages.stop(sequence: 1, arrivalDelay: 1200, departureDelay: 1200)])])
            #expect(try await gateway.send(.post, "/v1/transit/feeds/sample/realtime", token: admin, body: ByteBuffer(data: message),
                                           contentType: "application/x-protobuf").status == 200)
            let arrivals = try await gateway.send(.get, "/v1/transit/stops/DTA_BEATTY_AIRPORT/arrivals?minutesBefore=0&minutesAfter=15")
            let late = arrivals.items.first { $0["trip"]?.stringValue == "DTA_STBA@07:30:00" }
            #expect(late?["predictedArrival"]?.stringValue == "2010-06-01T15:10:00Z")
            #expect(late?["scheduledArrival"]?.stringValue == "2010-06-01T14:50:00Z")
        }
    }

    @Test("garbage is a 422 and the last good message stays; an unknown feed is 404")
    func garbage() async throws {
        try await withTransit { gateway in
            let admin = try await gateway.administrator()
            #expect(try await gateway.send(.post, "/v1/transit/feeds/sample/realtime", token: admin, body: ByteBuffer(data: try Messages.morning()),
                                           contentType: "application/x-protobuf").status == 200)
            for junk in [Data([0xFF, 0xFF, 0xFF, 0x01, 0x02]), Data("{\"not\": \"protobuf\"}".utf8), Data()] {
                let reply = try await gateway.send(.post, "/v1/transit/feeds/sample/realtime", token: admin, body: ByteBuffer(data: junk),
                                                   contentType: "application/octet-stream")
                #expect(reply.status == 422, "\(reply.text)")
                #expect(reply.headers[.contentType] == "application/problem+json")
            }
            #expect(try gateway.transitPlugin.runtime.realtimeStatus("sample")?.lastError != nil)
            let trip = try await gateway.send(.get, "/v1/transit/trips/DTA_CITY1@08:00:00?serviceDate=2010-06-01")
            #expect(trip["stopTimes"]?.arrayValue?[1]["status"]?.stringValue == "predicted", "the last good message is still in use")
            #expect(try await gateway.send(.post, "/v1/transit/feeds/nowhere/realtime", token: admin, body: ByteBuffer(data: try Messages.morning()),
                                           contentType: "application/x-protobuf").status == 404)
        }
    }

    @Test("a configured feed polls its TripUpdates URL; a failing source keeps the last good message and degrades health")
    func polling() async throws {
        let body = Mutex<Data?>(try Messages.morning())
        let router = Router()
        router.get("/trip-updates") { _, _ -> Response in
            guard let data = body.withLock({ $0 }) else { return Response(status: .serviceUnavailable) }
            return Response(status: .ok, headers: [.contentType: "application/x-protobuf"], body: .init(byteBuffer: ByteBuffer(data: data)))
        }
        try await withLoopbackServer(router) { port in
            let yaml = feedsYAML(#"{ id: sample, source: "\#(sampleFeed.path)", "#
                                 + #"realtime: { tripUpdates: "http://127.0.0.1:\#(port)/trip-updates", interval: 1s, timeout: 2s, staleAfter: 1h } }"#)
            try await withTransit(yaml: yaml) { gateway in
                let plugin = try gateway.transitPlugin
                #expect(await plugin.health().status == .degraded, "no message yet")
                // The poller, run under the cluster lease of the feed's realtime source.
                let poller = try #require(plugin.services.first { ($0 as? LeasedService)?.name == "transit.realtime.sample" })
                let task = Task { try await poller.run() }
                defer { task.cancel() }
                try await waitUntil { plugin.runtime.realtimeStatus("sample")?.receivedAt != nil }
                #expect(await plugin.health().status == .ok)
                #expect(plugin.runtime.realtimeStatus("sample")?.tripUpdates == 5)
                // Stored for the other instances of a cluster (just after it is in use here).
                var stored: [String] = []
                for _ in 0..<100 where stored.isEmpty {
                    stored = try await plugin.runtime.store.realtimeRecords().map(\.feed)
                    if stored.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
                }
                #expect(stored == ["sample"])

                body.withLock { $0 = nil }
                try await waitUntil { plugin.runtime.realtimeStatus("sample")?.lastError != nil }
                let health = await plugin.health()
                #expect(health.status == .degraded)
                #expect(health.reason?.contains("answered 503") == true, "\(health.reason ?? "")")
                let trip = try await gateway.send(.get, "/v1/transit/trips/DTA_CITY1@08:00:00?serviceDate=2010-06-01")
                #expect(trip["stopTimes"]?.arrayValue?[1]["status"]?.stringValue == "predicted")

                body.withLock { $0 = Data([0xFF, 0x00, 0xFF]) }
                try await waitUntil { plugin.runtime.realtimeStatus("sample")?.lastError?.contains("unreadable GTFS-realtime message") == true }
            }
        }
    }

    func waitUntil(_ condition: @Sendable () -> Bool) async throws {
        for _ in 0..<100 {
            if condition() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("the condition never held")
    }
}

@Suite("transit: feeds kept up to date from plugins.yaml")
struct TransitFeedSourceTests {
    @Test("a configured path and a configured URL are imported on start; an unchanged source is skipped; health says what is missing")
    func configuredFeeds() async throws {
        let zip = try Data(contentsOf: sampleFeed)
        let fetches = Mutex(0)
        let router = Router()
        router.get("/feed.zip") { _, _ -> Response in
            fetches.withLock { $0 += 1 }
            return Response(status: .ok, headers: [.contentType: "application/zip"], body: .init(byteBuffer: ByteBuffer(data: zip)))
        }
        var files = FeedFiles.minimal
        files["stops.txt"] = FeedFiles.stops.replacingOccurrences(of: "First Street", with: "Local Street")
        let local = try FeedFiles.zip(files)
        try await withLoopbackServer(router) { port in
            let yaml = feedsYAML(#"{ id: local, source: "\#(local.path)" }"#, #"{ id: remote, source: "http://127.0.0.1:\#(port)/feed.zip", refresh: 1m }"#)
            try await withTransit(yaml: yaml, feed: nil) { gateway in
                let plugin = try gateway.transitPlugin
                let health = await plugin.health()
                #expect(health.status == .degraded && health.reason?.contains("feed local is not imported yet") == true)
                // The refresher, run under the cluster lease `transit.feeds`.
                let refresher = try #require(plugin.services.first { ($0 as? LeasedService)?.name == "transit.feeds" })
                let task = Task { try await refresher.run() }
                defer { task.cancel() }
                for _ in 0..<600 where plugin.runtime.network.feeds.count < 2 { try await Task.sleep(for: .milliseconds(100)) }
                #expect(plugin.runtime.network.feeds.map(\.id) == ["local", "remote"])
                #expect(try await gateway.send(.get, "/v1/transit/stops/TST_A").json["stop"]?["name"]?.stringValue == "Local Street")
                #expect(try await gateway.send(.get, "/v1/transit/stops/DTA_STAGECOACH").status == 200)
                #expect(await plugin.health().status == .ok)
                #expect(fetches.withLock { $0 } == 1)

                // Refreshing an unchanged source writes nothing.
                let before = plugin.runtime.network.feeds.map(\.version)
                let again = try await plugin.feeds.refresh(try #require(plugin.configuration.feeds.last))
                #expect(again.unchanged)
                #expect(plugin.runtime.network.feeds.map(\.version) == before)
            }
        }
    }

    @Test("an instance serves the realtime predictions another instance polled or was sent", arguments: TestStorage.available)
    func otherInstanceRealtime(storage: TestStorage) async throws {
        let yaml = transitYAML.replacingOccurrences(of: "transit: {}", with: "transit:\n    config: { watchInterval: 1s }")
        try await withTransit(storage, yaml: yaml) { gateway in
            let plugin = try gateway.transitPlugin
            let watcher = try #require(plugin.services.first { $0 is FeedWatcher })
            let task = Task { try await watcher.run() }
            defer { task.cancel() }
            let trip = "/v1/transit/trips/DTA_CITY1@08:00:00?serviceDate=2010-06-01"
            #expect(try await gateway.send(.get, trip)["stopTimes"]?.arrayValue?[1]["status"]?.stringValue == "scheduled")
            // Another instance's message: stored straight through the store, this instance not told.
            try await plugin.runtime.store.saveRealtime(feed: "sample", message: try Messages.morning(), receivedAt: plugin.runtime.now())
            #expect(try await eventually(within: .seconds(15)) { plugin.runtime.realtimeStatus("sample")?.tripUpdates == 5 })
            #expect(try await gateway.send(.get, trip)["stopTimes"]?.arrayValue?[1]["status"]?.stringValue == "predicted")
            // A message posted to this instance is stored for the others.
            let admin = try await gateway.administrator()
            let message = try Messages.message([Messages.trip("CITY1", start: "08:00:00", [Messages.stop(sequence: 2, arrivalDelay: 60)])])
            let posted = try await gateway.send(.post, "/v1/transit/feeds/sample/realtime", token: admin, body: ByteBuffer(data: message),
                                                contentType: "application/x-protobuf")
            #expect(posted.status == 200, "\(posted.text)")
            let stored = try #require(try await plugin.runtime.store.realtimeMessage(feed: "sample"))
            #expect(stored.message == message)
        }
    }

    @Test("an instance picks up a feed another instance imported", arguments: TestStorage.available)
    func otherInstance(storage: TestStorage) async throws {
        let yaml = transitYAML.replacingOccurrences(of: "transit: {}", with: "transit:\n    config: { watchInterval: 1s }")
        try await withTransit(storage, yaml: yaml, feed: nil) { gateway in
            let plugin = try gateway.transitPlugin
            let watcher = try #require(plugin.services.first { $0 is FeedWatcher })
            let task = Task { try await watcher.run() }
            defer { task.cancel() }
            // Another instance's import: rows written straight through the store, this instance not told.
            _ = try await GTFSFeedImport(store: plugin.runtime.store, limits: GTFSLimits())
                .run(zip: sampleFeed, feed: "sample", source: "elsewhere", strict: false, progress: { _, _ in })
            #expect(plugin.runtime.network.feeds.isEmpty)
            for _ in 0..<300 where plugin.runtime.network.feeds.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
            #expect(plugin.runtime.network.feeds.map(\.id) == ["sample"])
        }
    }
}
