import Crypto
import Foundation
import GatewayCore
import SQLKit

/// Limits an import holds a feed to.
struct GTFSLimits: Sendable {
    /// The most bytes the feed's files may hold once uncompressed (a zip bomb stops here).
    var maxUncompressedBytes: Int64 = 2 << 30
    /// The most rejected records listed one by one in a report (all are counted).
    var maxListedRejections = 1000
}

/// What an import of one GTFS feed did.
struct GTFSImportResult: Sendable {
    var feed: String
    var summary: FeedSummary
    var rejected: [ImportReport.Rejection]
    /// True when the feed's bytes were those already served (nothing was written).
    var unchanged = false
}

/// Reads a GTFS zip (agency, stops, routes, trips, stop_times, calendar and calendar_dates,
/// frequencies, shapes) into a new version of its feed, then serves that version in one step.
///
/// Files are extracted one at a time to a temporary folder (counting their real uncompressed size
/// against the limit) and read record by record, so memory holds the feed's stops, routes, trips
/// and services but never its stop times or shapes. A record that cannot be used is rejected with
/// its file and line and the import goes on (`strict` stops at the first instead); a missing file
/// or column, a corrupt archive or a feed with nothing to serve stops the import and leaves the
/// served version as it was.
struct GTFSFeedImport {
    let store: TransitStore
    let limits: GTFSLimits

    static let requiredFiles = ["agency.txt", "stops.txt", "routes.txt", "trips.txt", "stop_times.txt"]

    /// A feed id from a file name: lowercase letters, digits, `-` and `_`.
    static func feedID(from url: URL) -> String {
        let stem = url.deletingPathExtension().lastPathComponent.lowercased()
        let cleaned = String(stem.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") ? $0 : "-" })
        return cleaned.isEmpty ? "feed" : cleaned
    }

    static func validFeedID(_ id: String) -> Bool {
        !id.isEmpty && id.count <= 64 && id.allSatisfy { $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-") }
    }

    /// The SHA-256 of a file, in hex.
    static func digest(of url: URL) throws -> String {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        var hasher = SHA256()
        while let data = try handle.read(upToCount: 1 << 20), !data.isEmpty { hasher.update(data: data) }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    func run(zip: URL, feed: String, source: String, strict: Bool, skipUnchanged: Bool = false,
             progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void) async throws -> GTFSImportResult {
        guard Self.validFeedID(feed) else {
            throw GatewayError.invalid(field: "feed", "'\(feed.prefix(80))' is not a feed id (lowercase letters, digits and '-', at most 64)")
        }
        let digest = try Self.digest(of: zip)
        let existing = try await store.feeds()
        if skipUnchanged, let current = existing.first(where: { $0.id == feed }), current.digest == digest {
            return GTFSImportResult(feed: feed, summary: current.summary, rejected: [], unchanged: true)
        }
        let archive: ZipArchive
        do {
            archive = try ZipArchive(url: zip)
        } catch {
            throw GTFSError(file: zip.lastPathComponent, line: nil, "is not a readable zip archive (\(error))")
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gtfs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }

        let files = archive.filesByName
        for name in Self.requiredFiles where files[name] == nil {
            throw GTFSError(file: name, line: nil, "is missing from the feed")
        }
        guard files["calendar.txt"] != nil || files["calendar_dates.txt"] != nil else {
            throw GTFSError(file: "calendar.txt", line: nil, "is missing, and so is calendar_dates.txt: a feed needs one of them")
        }
        let totalBytes = files.values.reduce(Int64(0)) { $0 + Int64($1.uncompressedSize) }
        var extracted: Int64 = 0
        let cap = limits.maxUncompressedBytes
        func extract(_ name: String) throws -> URL? {
            guard let entry = files[name] else { return nil }
            let url = folder.appendingPathComponent(name)
            _ = FileManager.default.createFile(atPath: url.path, contents: nil)
            let handle = try FileHandle(forWritingTo: url)
            defer { try? handle.close() }
            do {
                try archive.extract(entry) { data in
                    extracted += Int64(data.count)
                    guard extracted <= cap else {
                        throw GTFSError(file: name, line: nil, "makes the feed larger than \(cap / (1 << 20)) MB uncompressed: refused")
                    }
                    try handle.write(contentsOf: data)
                }
            } catch let error as GTFSError {
                throw error
            } catch let problem as ZipArchive.Problem {
                throw GTFSError(file: name, line: nil, "cannot be extracted: the entry \(problem)")
            } catch {
                throw GTFSError(file: name, line: nil, "cannot be extracted: the archive is corrupt (\(error))")
            }
            return url
        }

        let version = try await store.beginImport(feed: feed, source: source)
        do {
            var reader = FeedReader(database: store.database, version: version, feed: feed, strict: strict, limits: limits,
                                    progress: progress, totalBytes: totalBytes)
            let others = existing.filter { $0.id != feed }
            try await reader.readAgencies(try extract("agency.txt")!, taken: try await agenciesServed(by: others))
            try await reader.readStops(try extract("stops.txt")!)
            try await reader.readRoutes(try extract("routes.txt")!)
            try await reader.readCalendar(try extract("calendar.txt"), dates: try extract("calendar_dates.txt"))
            try await reader.readShapes(try extract("shapes.txt"))
            try await reader.readTrips(try extract("trips.txt")!)
            try await reader.readStopTimes(try extract("stop_times.txt")!)
            try await reader.expandFrequencies(try extract("frequencies.txt"))
            guard reader.summary.stopTimes > 0 else {
                throw GTFSError(file: "stop_times.txt", line: nil, "has no stop time this feed can serve")
            }
            try await store.activate(TransitStore.FeedRecord(
                id: feed, version: version, agencyID: reader.defaultAgency, timeZone: reader.timeZone, source: source, digest: digest,
                importedAt: store.now(), summary: reader.summary))
            progress(Int(totalBytes), Int(totalBytes))
            return GTFSImportResult(feed: feed, summary: reader.summary, rejected: reader.rejections)
        } catch {
            try? await store.removeVersion(version)
            throw error
        }
    }

    private func agenciesServed(by feeds: [TransitStore.FeedRecord]) async throws -> [String: String] {
        var taken: [String: String] = [:]
        for feed in feeds {
            for row in try await store.database.raw("SELECT agency_id FROM transit_agencies WHERE version = \(bind: feed.version)").all() {
                taken[try row.decode(column: "agency_id", as: String.self)] = feed.id
            }
        }
        return taken
    }
}

/// Reads one feed's tables in dependency order, checking references as it goes.
private struct FeedReader {
    /// How many departures of a frequency-based trip one statement copies (two binds each).
    static let departuresPerStatement = 200

    let database: any SQLDatabase
    let version: Int64
    let feed: String
    let strict: Bool
    let limits: GTFSLimits
    let progress: @Sendable (_ done: Int, _ total: Int?) -> Void
    let totalBytes: Int64
    var doneBytes: Int64 = 0

    var summary = FeedSummary()
    var rejections: [ImportReport.Rejection] = []
    var defaultAgency = ""
    var timeZone = ""
    var agencies: Set<String> = []
    var stops: Set<String> = []
    var routes: Set<String> = []
    var services: Set<String> = []
    var shapes: Set<String> = []
    var trips: Set<String> = []

    init(database: any SQLDatabase, version: Int64, feed: String, strict: Bool, limits: GTFSLimits, progress: @escaping @Sendable (_ done: Int, _ total: Int?) -> Void, totalBytes: Int64) {
        self.database = database
        self.version = version
        self.feed = feed
        self.strict = strict
        self.limits = limits
        self.progress = progress
        self.totalBytes = totalBytes
    }

    /// Records a rejected record, or stops the import when strict.
    mutating func reject(_ table: GTFSTable, _ message: String) throws {
        if strict { throw GTFSError(file: table.file, line: table.line, message + " (--strict stops at the first rejected record)") }
        summary.rejected += 1
        if rejections.count < limits.maxListedRejections {
            rejections.append(ImportReport.Rejection(line: table.line, reason: "\(table.file): \(message)"))
        }
    }

    /// Reads every record of `table`, handing each to `body`; a ``GTFSRowError`` rejects the record.
    mutating func each(_ url: URL, file: String, required: [String], _ body: (inout FeedReader, GTFSTable) async throws -> Void) async throws {
        var table = try GTFSTable(url: url, file: file, required: required)
        let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int64) ?? 0
        var count = 0
        while try table.next() {
            do {
                try await body(&self, table)
            } catch let error as GTFSRowError {
                try reject(table, error.message)
            }
            count += 1
            if count % 10_000 == 0 { progress(Int(doneBytes + min(size, table.bytesRead)), Int(totalBytes)) }
        }
        doneBytes += size
        progress(Int(doneBytes), Int(totalBytes))
    }

    mutating func readAgencies(_ url: URL, taken: [String: String]) async throws {
        var insert = BatchInsert("transit_agencies", columns: ["version", "agency_id", "name", "url", "time_zone", "lang", "phone", "fare_url", "email"],
                                 database: database)
        var rows: [(id: String?, line: Int)] = []
        try await each(url, file: "agency.txt", required: ["agency_name", "agency_url", "agency_timezone"]) { reader, table in
            let zone = try table.required("agency_timezone")
            guard TimeZone(identifier: zone) != nil else { throw GTFSError(file: table.file, line: table.line, "agency_timezone '\(zone)' is not an IANA time zone") }
            if reader.timeZone.isEmpty { reader.timeZone = zone }
            guard zone == reader.timeZone else {
                throw GTFSError(file: table.file, line: table.line, "agency_timezone \(zone) differs from \(reader.timeZone): a feed's agencies share one time zone")
            }
            let given = table.optional("agency_id")
            let id = given ?? reader.feed
            guard !reader.agencies.contains(id) else { throw GTFSRowError("agency_id \(id) appears twice") }
            if let owner = taken[id] {
                throw GTFSError(file: table.file, line: table.line, "agency \(id) is already served by feed \(owner): an agency comes from one feed")
            }
            reader.agencies.insert(id)
            rows.append((given, table.line))
            if reader.defaultAgency.isEmpty { reader.defaultAgency = id }
            try await insert.add([reader.version, id, try table.required("agency_name"), try table.required("agency_url"), zone,
                                  table.optional("agency_lang"), table.optional("agency_phone"), table.optional("agency_fare_url"),
                                  table.optional("agency_email")])
        }
        try await insert.flush()
        guard !agencies.isEmpty else { throw GTFSError(file: "agency.txt", line: nil, "names no agency") }
        if rows.count > 1, let missing = rows.first(where: { $0.id == nil }) {
            throw GTFSError(file: "agency.txt", line: missing.line, "agency_id is required when a feed has several agencies")
        }
        summary.agencies = agencies.count
    }

    mutating func readStops(_ url: URL) async throws {
        var insert = BatchInsert("transit_stops", columns: ["version", "stop_id", "code", "name", "description", "lat", "lon", "location_type",
                                                            "parent_id", "wheelchair", "platform"], database: database)
        var parents: [(stop: String, parent: String, line: Int)] = []
        // Parents are checked once every stop is known; the rows wait for that (stops are few).
        var rows: [[any Encodable & Sendable]] = []
        var parentColumn: [String: Int] = [:]
        try await each(url, file: "stops.txt", required: ["stop_id"]) { reader, table in
            let id = try table.required("stop_id")
            guard !reader.stops.contains(id) else { throw GTFSRowError("stop_id \(id) appears twice") }
            let type = try table.int("location_type") ?? 0
            guard (0...4).contains(type) else { throw GTFSRowError("location_type \(type) is not 0 to 4") }
            var lat = try table.double("stop_lat", in: -90...90)
            var lon = try table.double("stop_lon", in: -180...180)
            if type <= 2 {
                guard lat != nil, lon != nil else { throw GTFSRowError("stop_lat and stop_lon are required for location_type \(type)") }
                guard table.optional("stop_name") != nil else { throw GTFSRowError("stop_name is required for location_type \(type)") }
            }
            if lat == nil || lon == nil { lat = 0; lon = 0 }
            reader.stops.insert(id)
            let parent = table.optional("parent_station")
            if let parent { parents.append((id, parent, table.line)) }
            parentColumn[id] = rows.count
            rows.append([reader.version, id, table.optional("stop_code"), table.optional("stop_name") ?? "", table.optional("stop_desc"), lat!, lon!,
                         type, parent, try table.int("wheelchair_boarding") ?? 0, table.optional("platform_code")])
        }
        for (stop, parent, line) in parents where !stops.contains(parent) {
            if strict { throw GTFSError(file: "stops.txt", line: line, "parent_station \(parent) of stop \(stop) is not in stops.txt") }
            summary.rejected += 1
            if rejections.count < limits.maxListedRejections {
                rejections.append(ImportReport.Rejection(line: line, reason: "stops.txt: parent_station \(parent) of stop \(stop) is not in stops.txt (kept without it)"))
            }
            if let index = parentColumn[stop] { rows[index][8] = String?.none }
        }
        for row in rows { try await insert.add(row) }
        try await insert.flush()
        summary.stops = stops.count
    }

    mutating func readRoutes(_ url: URL) async throws {
        var insert = BatchInsert("transit_routes", columns: ["version", "route_id", "agency_id", "short_name", "long_name", "description", "type",
                                                             "url", "color", "text_color", "sort_order"], database: database)
        try await each(url, file: "routes.txt", required: ["route_id", "route_type"]) { reader, table in
            let id = try table.required("route_id")
            guard !reader.routes.contains(id) else { throw GTFSRowError("route_id \(id) appears twice") }
            let agency: String
            if let given = table.optional("agency_id") {
                guard reader.agencies.contains(given) else { throw GTFSRowError("agency_id \(given) is not in agency.txt") }
                agency = given
            } else {
                guard reader.agencies.count == 1 else { throw GTFSRowError("agency_id is required when the feed has several agencies") }
                agency = reader.defaultAgency
            }
            guard let type = try table.int("route_type") else { throw GTFSRowError("route_type is empty") }
            let short = table.optional("route_short_name"), long = table.optional("route_long_name")
            guard short != nil || long != nil else { throw GTFSRowError("route \(id) has neither route_short_name nor route_long_name") }
            reader.routes.insert(id)
            try await insert.add([reader.version, id, agency, short, long, table.optional("route_desc"), type, table.optional("route_url"),
                                  table.optional("route_color"), table.optional("route_text_color"), try table.int("route_sort_order")])
        }
        try await insert.flush()
        summary.routes = routes.count
    }

    mutating func readCalendar(_ calendar: URL?, dates: URL?) async throws {
        if let calendar {
            var insert = BatchInsert("transit_calendar", columns: ["version", "service_id", "weekdays", "first_day", "last_day"], database: database)
            let days = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
            try await each(calendar, file: "calendar.txt", required: ["service_id", "start_date", "end_date"] + days) { reader, table in
                let id = try table.required("service_id")
                guard !reader.services.contains(id) else { throw GTFSRowError("service_id \(id) appears twice") }
                var mask = 0
                for (bit, day) in days.enumerated() {
                    switch table[day] {
                    case "1": mask |= 1 << bit
                    case "0": break
                    default: throw GTFSRowError("\(day) '\(table[day].prefix(20))' is not 0 or 1")
                    }
                }
                guard let first = GTFSFormat.date(table["start_date"]) else { throw GTFSRowError("start_date '\(table["start_date"].prefix(20))' is not a date (YYYYMMDD)") }
                guard let last = GTFSFormat.date(table["end_date"]) else { throw GTFSRowError("end_date '\(table["end_date"].prefix(20))' is not a date (YYYYMMDD)") }
                guard first <= last else { throw GTFSRowError("start_date is after end_date") }
                reader.services.insert(id)
                try await insert.add([reader.version, id, mask, Int(first), Int(last)])
            }
            try await insert.flush()
        }
        if let dates {
            var insert = BatchInsert("transit_calendar_dates", columns: ["version", "service_id", "day", "exception"], database: database)
            try await each(dates, file: "calendar_dates.txt", required: ["service_id", "date", "exception_type"]) { reader, table in
                let id = try table.required("service_id")
                guard let day = GTFSFormat.date(table["date"]) else { throw GTFSRowError("date '\(table["date"].prefix(20))' is not a date (YYYYMMDD)") }
                guard let type = try table.int("exception_type"), type == 1 || type == 2 else { throw GTFSRowError("exception_type is not 1 or 2") }
                reader.services.insert(id)
                try await insert.add([reader.version, id, Int(day), type])
            }
            try await insert.flush()
        }
        summary.services = services.count
    }

    mutating func readShapes(_ url: URL?) async throws {
        guard let url else { return }
        var insert = BatchInsert("transit_shapes", columns: ["version", "shape_id", "sequence", "lat", "lon"], database: database)
        try await each(url, file: "shapes.txt", required: ["shape_id", "shape_pt_lat", "shape_pt_lon", "shape_pt_sequence"]) { reader, table in
            let id = try table.required("shape_id")
            guard let lat = try table.double("shape_pt_lat", in: -90...90), let lon = try table.double("shape_pt_lon", in: -180...180) else {
                throw GTFSRowError("shape_pt_lat and shape_pt_lon are required")
            }
            guard let sequence = try table.int("shape_pt_sequence"), sequence >= 0 else { throw GTFSRowError("shape_pt_sequence is not a whole number of 0 or more") }
            reader.shapes.insert(id)
            try await insert.add([reader.version, id, sequence, lat, lon])
        }
        try await insert.flush()
        summary.shapes = shapes.count
    }

    mutating func readTrips(_ url: URL) async throws {
        var insert = BatchInsert("transit_trips", columns: ["version", "trip_id", "route_id", "service_id", "headsign", "short_name", "direction",
                                                            "block_id", "shape_id", "wheelchair"], database: database)
        try await each(url, file: "trips.txt", required: ["route_id", "service_id", "trip_id"]) { reader, table in
            let id = try table.required("trip_id")
            guard !reader.trips.contains(id) else { throw GTFSRowError("trip_id \(id) appears twice") }
            let route = try table.required("route_id")
            guard reader.routes.contains(route) else { throw GTFSRowError("route_id \(route) is not in routes.txt") }
            let service = try table.required("service_id")
            guard reader.services.contains(service) else { throw GTFSRowError("service_id \(service) is not in calendar.txt or calendar_dates.txt") }
            let direction = try table.int("direction_id")
            if let direction, direction != 0 && direction != 1 { throw GTFSRowError("direction_id \(direction) is not 0 or 1") }
            var shape = table.optional("shape_id")
            if let given = shape, !reader.shapes.contains(given) {
                try reader.reject(table, "shape_id \(given) is not in shapes.txt (kept without a shape)")
                shape = nil
            }
            reader.trips.insert(id)
            try await insert.add([reader.version, id, route, service, table.optional("trip_headsign"), table.optional("trip_short_name"), direction,
                                  table.optional("block_id"), shape, try table.int("wheelchair_accessible") ?? 0])
        }
        try await insert.flush()
        summary.trips = trips.count
    }

    mutating func readStopTimes(_ url: URL) async throws {
        var insert = BatchInsert("transit_stop_times", columns: ["version", "trip_id", "stop_sequence", "stop_id", "arrival", "departure", "headsign",
                                                                 "pickup", "drop_off"], database: database)
        try await each(url, file: "stop_times.txt", required: ["trip_id", "stop_id", "stop_sequence"]) { reader, table in
            let trip = try table.required("trip_id")
            guard reader.trips.contains(trip) else { throw GTFSRowError("trip_id \(trip) is not in trips.txt") }
            let stop = try table.required("stop_id")
            guard reader.stops.contains(stop) else { throw GTFSRowError("stop_id \(stop) is not in stops.txt") }
            guard let sequence = try table.int("stop_sequence"), sequence >= 0, sequence <= Int(Int32.max) else {
                throw GTFSRowError("stop_sequence is not a whole number of 0 or more")
            }
            var arrival: Int32?, departure: Int32?
            if let text = table.optional("arrival_time") {
                guard let time = GTFSFormat.time(text) else { throw GTFSRowError("arrival_time '\(text.prefix(20))' is not a time (HH:MM:SS)") }
                arrival = time
            }
            if let text = table.optional("departure_time") {
                guard let time = GTFSFormat.time(text) else { throw GTFSRowError("departure_time '\(text.prefix(20))' is not a time (HH:MM:SS)") }
                departure = time
            }
            if let arrival, let departure, departure < arrival { throw GTFSRowError("departure_time is before arrival_time") }
            try await insert.add([reader.version, trip, sequence, stop, arrival.map(Int.init), departure.map(Int.init), table.optional("stop_headsign"),
                                  try table.int("pickup_type") ?? 0, try table.int("drop_off_type") ?? 0])
        }
        try await insert.flush()
        summary.stopTimes = insert.written
    }

    /// Turns each frequency-based trip into one trip per departure, `{trip_id}@{HH:MM:SS}`, its stop
    /// times shifted from the template's; the template itself is not served.
    mutating func expandFrequencies(_ url: URL?) async throws {
        guard let url else { return }
        var windows: [String: [(start: Int32, end: Int32, headway: Int32)]] = [:]
        try await each(url, file: "frequencies.txt", required: ["trip_id", "start_time", "end_time", "headway_secs"]) { reader, table in
            let trip = try table.required("trip_id")
            guard reader.trips.contains(trip) else { throw GTFSRowError("trip_id \(trip) is not in trips.txt") }
            guard let start = GTFSFormat.time(table["start_time"]) else { throw GTFSRowError("start_time '\(table["start_time"].prefix(20))' is not a time (HH:MM:SS)") }
            guard let end = GTFSFormat.time(table["end_time"]) else { throw GTFSRowError("end_time '\(table["end_time"].prefix(20))' is not a time (HH:MM:SS)") }
            guard end > start else { throw GTFSRowError("end_time is not after start_time") }
            guard let headway = try table.int("headway_secs"), headway >= 60, headway <= 86_400 else {
                throw GTFSRowError("headway_secs is not between 60 and 86400")
            }
            windows[trip, default: []].append((start, end, Int32(headway)))
        }
        let db = database
        for (trip, list) in windows.sorted(by: { $0.key < $1.key }) {
            guard let row = try await db.raw("""
                SELECT MIN(COALESCE(departure, arrival)) AS first FROM transit_stop_times WHERE version = \(bind: version) AND trip_id = \(bind: trip)
                """).first(), let first = try row.decode(column: "first", as: Int?.self) else { continue }
            var departures: [SQLQueryString] = []
            for window in list {
                var departure = window.start
                while departure < window.end {
                    departures.append("(\(bind: "@" + GTFSFormat.formatTime(departure)), \(bind: Int(departure) - first))")
                    summary.frequencyTrips += 1
                    departure += window.headway
                }
            }
            // The copies are made a batch of departures to a statement (one statement a departure
            // was thousands for a feed with frequencies).
            for start in stride(from: 0, to: departures.count, by: Self.departuresPerStatement) {
                let batch = departures[start..<min(start + Self.departuresPerStatement, departures.count)].joined(separator: ", ")
                try await db.raw("""
                    INSERT INTO transit_trips (version, trip_id, route_id, service_id, headsign, short_name, direction, block_id, shape_id, wheelchair)
                    WITH departure(suffix, shift) AS (VALUES \(batch))
                    SELECT t.version, t.trip_id || d.suffix, t.route_id, t.service_id, t.headsign, t.short_name, t.direction, t.block_id, t.shape_id, t.wheelchair
                    FROM transit_trips t, departure d WHERE t.version = \(bind: version) AND t.trip_id = \(bind: trip)
                    """).run()
                try await db.raw("""
                    INSERT INTO transit_stop_times (version, trip_id, stop_sequence, stop_id, arrival, departure, headsign, pickup, drop_off)
                    WITH departure(suffix, shift) AS (VALUES \(batch))
                    SELECT s.version, s.trip_id || d.suffix, s.stop_sequence, s.stop_id, s.arrival + d.shift, s.departure + d.shift, s.headsign, s.pickup, s.drop_off
                    FROM transit_stop_times s, departure d WHERE s.version = \(bind: version) AND s.trip_id = \(bind: trip)
                    """).run()
            }
            let countRow = try await db.raw("SELECT COUNT(*) AS n FROM transit_stop_times WHERE version = \(bind: version) AND trip_id = \(bind: trip)").first()
            let templateCount = try countRow?.decode(column: "n", as: Int.self) ?? 0
            try await db.raw("DELETE FROM transit_stop_times WHERE version = \(bind: version) AND trip_id = \(bind: trip)").run()
            try await db.raw("DELETE FROM transit_trips WHERE version = \(bind: version) AND trip_id = \(bind: trip)").run()
            summary.stopTimes += templateCount * (list.reduce(0) { total, window in
                total + Int((window.end - window.start + window.headway - 1) / window.headway)
            } - 1)
            summary.trips -= 1
        }
        summary.trips += summary.frequencyTrips
    }
}
