import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import SQLKit
@testable import FeedsPlugin
import Testing

@Suite("datapoint chunks")
struct DatapointChunkTests {
    func points(_ pairs: [(Int64, Double)]) -> [Datapoint] { pairs.map { Datapoint(at: $0.0, value: $0.1) } }

    @Test("a batch is put in time order, and where it names a time twice its later datapoint wins")
    func normalized() {
        let ordered = points([(1, 1), (2, 2), (5, 5)])
        #expect(DatapointChunks.normalized(ordered) == ordered)
        #expect(DatapointChunks.normalized(points([(5, 5), (1, 1), (5, 6), (2, 2), (1, 0)])) == points([(1, 0), (2, 2), (5, 6)]))
        #expect(DatapointChunks.normalized([]) == [])
    }

    @Test("merging keeps time order, and the incoming datapoint replaces one at the same time")
    func merge() {
        let existing = points([(1, 1), (3, 3), (5, 5)])
        #expect(DatapointChunks.merge(existing, points([(6, 6), (7, 7)])) == points([(1, 1), (3, 3), (5, 5), (6, 6), (7, 7)]))
        #expect(DatapointChunks.merge(existing, points([(0, 0), (3, 30), (4, 4), (9, 9)]))
                == points([(0, 0), (1, 1), (3, 30), (4, 4), (5, 5), (9, 9)]))
        #expect(DatapointChunks.merge([], existing) == existing)
        #expect(DatapointChunks.merge(existing, []) == existing)
    }

    @Test("split gives full chunks and a last one with the rest; blobs round-trip every double bit for bit")
    func splitAndEncode() throws {
        let many = (0..<1_300).map { Datapoint(at: Int64($0) * 1_000_000 - 500_000_000, value: Double($0) / 3) }
        let chunks = DatapointChunks.split(many)
        #expect(chunks.map(\.count) == [434, 433, 433], "as few chunks as can be, of even sizes")
        #expect(DatapointChunks.split(Array(many.prefix(501))).map(\.count) == [251, 250])
        #expect(DatapointChunks.split(Array(many.prefix(500))).map(\.count) == [500])
        #expect(DatapointChunks.split([]).isEmpty)
        #expect(Array(chunks.joined()) == many)
        let odd = points([(Int64.min / 2, -0.0), (-1, .leastNonzeroMagnitude), (0, .greatestFiniteMagnitude), (Int64.max / 2, -.infinity)])
        let decoded = try DatapointChunks.decode(DatapointChunks.encode(odd[...]))
        #expect(decoded.map(\.at) == odd.map(\.at))
        #expect(decoded.map(\.value.bitPattern) == odd.map(\.value.bitPattern))
        let summary = DatapointChunks.summary(of: chunks[2])
        #expect(summary == .init(firstAt: many[867].at, lastAt: many[1299].at, count: 433, low: many[867].value, high: many[1299].value,
                                 total: many[867...].reduce(0) { $0 + $1.value }, firstValue: many[867].value, lastValue: many[1299].value))
    }

    @Test("a damaged blob is refused rather than read wrongly")
    func damaged() {
        let blob = DatapointChunks.encode(points([(1, 1), (2, 2)])[...])
        #expect(throws: DatapointChunks.ChunkError.self) { try DatapointChunks.decode(blob.dropLast()) }
        #expect(throws: DatapointChunks.ChunkError.self) { try DatapointChunks.decode(Data()) }
        let backwards = DatapointChunks.encode(points([(2, 2), (1, 1)])[...])
        #expect(throws: DatapointChunks.ChunkError.self) { try DatapointChunks.decode(backwards) }
    }

    @Test("the last datapoint at or before a time, by bisection")
    func lastIndex() {
        let series = points([(10, 0), (20, 0), (30, 0)])
        #expect([5, 10, 15, 20, 29, 30, 99].map { DatapointChunks.lastIndex(atOrBefore: Int64($0), in: series) } == [nil, 0, 0, 1, 1, 2, 2])
        #expect(DatapointChunks.lastIndex(atOrBefore: 0, in: []) == nil)
    }

    @Test("a compensated sum keeps what a plain sum loses, and overflows to infinity without failing")
    func compensatedSum() {
        var sum = CompensatedSum()
        sum.add(1e16)
        for _ in 0..<10 { sum.add(1) }
        sum.add(-1e16)
        #expect(sum.value == 10)
        var huge = CompensatedSum()
        huge.add(.greatestFiniteMagnitude)
        huge.add(.greatestFiniteMagnitude)
        #expect(huge.value == .infinity)
        huge.add(-.infinity)
        #expect(huge.value.isNaN)
    }
}

@Suite("datapoint chunks against a model")
struct DatapointChunkModelTests {
    @Test("random batches (in and out of order, overlapping earlier ones), range deletes and single changes: every history read matches a plain model",
          arguments: TestStorage.available)
    func randomHistory(storage: TestStorage) async throws {
        let seed = UInt64.random(in: 0...UInt64.max)
        try await withFeeds(storage) { gateway in
            var random = SplitMix(state: seed)
            let (token, stream) = try await gateway.feedWithStream("m")
            let points = "\(stream)/datapoints"
            // Second k of the window is at(base + k); values are quarters, so sums are exact.
            let base = -20_000
            let span = 6_000
            var model: [Int: Double] = [:]
            func value() -> Double { Double(Int.random(in: -4_000...4_000, using: &random)) / 4 }

            func read(_ query: String) async throws -> [(String, Double)] {
                let reply = try await gateway.call(.get, "\(points)?\(query)")
                #expect(reply.status == 200, "seed \(seed): \(query): \(reply.text.prefix(200))")
                return (reply.json["datapoints"]?.arrayValue ?? []).compactMap { point in
                    guard let at = point["at"]?.string, let value = point["value"]?.numberValue else { return nil }
                    return (at, value)
                }
            }
            func same(_ got: [(String, Double)], _ expected: [(Int, Double)], _ what: String) {
                let want = expected.map { (at(base + $0.0), $0.1) }
                let matches = got.count == want.count && zip(got, want).allSatisfy { $0.0 == $1.0 && abs($0.1 - $1.1) <= 1e-9 * max(1, abs($1.1)) }
                #expect(matches, "seed \(seed): \(what): got \(got.prefix(5))… (\(got.count)), expected \(want.prefix(5))… (\(want.count))")
            }

            for step in 0..<40 {
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<6:
                    // A batch: a run of seconds (forwards or backwards), or scattered seconds.
                    let count = Int.random(in: 1...1_500, using: &random)
                    var batch: [(Int, Double)] = []
                    if Bool.random(using: &random) {
                        let first = Int.random(in: 0..<span, using: &random)
                        let stride = Int.random(in: 1...3, using: &random)
                        batch = (0..<count).map { first + $0 * stride }.filter { $0 < span }.map { ($0, value()) }
                        if Bool.random(using: &random) { batch.reverse() }
                    } else {
                        // (A batch may not name a time twice: the API refuses that.)
                        var seconds = Set<Int>()
                        for _ in 0..<count { seconds.insert(Int.random(in: 0..<span, using: &random)) }
                        batch = seconds.map { ($0, value()) }
                    }
                    let body = batch.map { #"{"at": "\#(at(base + $0.0))", "value": \#($0.1)}"# }.joined(separator: ",")
                    let reply = try await gateway.call(.post, points, token: token, body: #"{"datapoints": [\#(body)]}"#)
                    #expect(reply.status == 200, "seed \(seed): step \(step): \(reply.text.prefix(200))")
                    for (k, v) in batch { model[k] = v }
                case 6..<8:
                    let a = Int.random(in: 0..<span, using: &random)
                    let b = min(span - 1, a + Int.random(in: 0...(Bool.random(using: &random) ? 50 : 3_000), using: &random))
                    let reply = try await gateway.call(.delete, "\(points)?start=\(at(base + a))&end=\(at(base + b))", token: token)
                    let expected = model.keys.filter { $0 >= a && $0 <= b }.count
                    #expect(reply.json["deleted"] == .number(Double(expected)), "seed \(seed): step \(step): \(reply.text.prefix(200))")
                    for k in a...b { model[k] = nil }
                default:
                    guard let k = model.keys.randomElement(using: &random) else { continue }
                    let v = value()
                    #expect(try await gateway.call(.put, "\(points)/\(at(base + k))", token: token, body: #"{"value": \#(v)}"#).status == 200)
                    model[k] = v
                    let missing = (0..<span).first { model[$0] == nil }
                    if let missing {
                        #expect(try await gateway.call(.put, "\(points)/\(at(base + missing))", token: token, body: #"{"value": 1}"#).status == 404)
                    }
                }
                guard step % 4 == 3 else { continue }
                let sorted = model.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }

                // Raw ranges, the newest, and find_previous.
                let a = Int.random(in: 0..<span, using: &random)
                let b = min(span - 1, a + Int.random(in: 0..<span, using: &random))
                let limit = Int.random(in: 1...1_000, using: &random)
                let inRange = sorted.filter { $0.0 >= a && $0.0 <= b }
                same(try await read("start=\(at(base + a))&end=\(at(base + b))&limit=\(limit)"), Array(inRange.prefix(limit)), "range \(a)…\(b) limit \(limit)")
                let previous = sorted.last { $0.0 < a }
                same(try await read("start=\(at(base + a))&end=\(at(base + b))&limit=\(limit)&find_previous=true"),
                     Array(((previous.map { [$0] } ?? []) + inRange).prefix(limit)), "find_previous \(a)…\(b)")
                same(try await read("end=\(at(base + b))&limit=\(limit)"), Array(sorted.filter { $0.0 <= b }.suffix(limit)), "newest to \(b)")
                for (k, v) in sorted.prefix(3) {
                    #expect(try await gateway.call(.get, "\(points)/\(at(base + k))").json["value"] == .number(v), "seed \(seed)")
                }

                // Sampling at each interval point: the value in force there.
                let interval = [1, 7, 60, 600][Int.random(in: 0..<4, using: &random)]
                for discrete in [false, true] {
                    var expected: [(Int, Double)] = []
                    // Discrete sampling looks at the first `limit` points; the other kind at all of them.
                    var t = a
                    var seen = 0
                    while t <= b, expected.count < 1_000, !discrete || seen < 1_000 {
                        seen += 1
                        if let found = sorted.last(where: { $0.0 <= t && $0.0 >= a }) {
                            if discrete { expected.append((t, found.1)) } else if expected.last?.0 != found.0 { expected.append(found) }
                        }
                        t += interval
                    }
                    let query = "start=\(at(base + a))&end=\(at(base + b))&interval=\(interval)&limit=1000" + (discrete ? "&interval_type=discrete" : "")
                    if (b - a) / interval < 20_000 { same(try await read(query), expected, query) }
                }

                // Aggregates per interval.
                let window = [60, 900, 3_600][Int.random(in: 0..<3, using: &random)]
                var groups: [Int: [(Int, Double)]] = [:]
                for point in inRange { groups[(point.0 - a) / window, default: []].append(point) }
                let keys = groups.keys.sorted()
                for function in HistoryFunction.allCases {
                    let expected: [(Int, Double)] = keys.prefix(1_000).map { key in
                        let members = groups[key]!
                        let values = members.map(\.1)
                        let result: Double = switch function {
                        case .avg: values.reduce(0, +) / Double(values.count)
                        case .min: values.min()!
                        case .max: values.max()!
                        case .sum: values.reduce(0, +)
                        case .count: Double(values.count)
                        case .first: members.first!.1
                        case .last: members.last!.1
                        }
                        return (a + key * window, result)
                    }
                    let query = "start=\(at(base + a))&end=\(at(base + b))&interval=\(window)&function=\(function.rawValue)&limit=1000"
                    same(try await read(query), expected, query)
                }

                // The current value is the latest datapoint.
                let current = try await gateway.call(.get, stream).json
                #expect((current["currentValue"] ?? .null) == sorted.last.map { .number($0.1) } ?? .null, "seed \(seed): step \(step)")
            }
        }
    }
}

@Suite("datapoint chunks migration")
struct DatapointChunkMigrationTests {
    @Test("a database of the one-row-per-datapoint layout moves every datapoint into chunks", arguments: TestStorage.available)
    func migrates(storage: TestStorage) async throws {
        try await storage.withDatabase { database in
            let runner = MigrationRunner(database: database.sql, logger: .init(label: "test"))
            let before = FeedsPlugin.migrations.filter { $0.version < 4 }
            _ = try await runner.migrate([(owner: "feeds", steps: before)])
            let db = database.sql
            try await db.raw("""
                INSERT INTO feeds_feeds (title, tags, private, created, updated) VALUES ('Old', '[]', 0, 0, 0)
                """).run()
            for (feed, stream) in [(1, "a"), (1, "b")] {
                try await db.raw("""
                    INSERT INTO feeds_datastreams (feed_id, id, tags, created, updated) VALUES (\(bind: feed), \(bind: stream), '[]', 0, 0)
                    """).run()
            }
            // Stream 1: 1,300 datapoints (three chunks); stream 2: three.
            let first = (0..<1_300).map { (1, Int64($0) * 1_000_000, Double($0) / 8) }
            let second = [(2, Int64(-5), -1.5), (2, Int64(0), 0.0), (2, Int64(7), 2.25)]
            for (stream, at, value) in first + second {
                try await db.raw("INSERT INTO feeds_datapoints (stream, at, value) VALUES (\(bind: stream), \(bind: at), \(bind: value))").run()
            }
            let applied = try await runner.migrate([(owner: "feeds", steps: FeedsPlugin.migrations.filter { $0.version <= 5 })])
            #expect(applied.map(\.version) == [4, 5])
            let counts = try await db.raw("SELECT stream, COUNT(*) AS chunks FROM feeds_chunks GROUP BY stream ORDER BY stream").all()
            #expect(try counts.map { try $0.decode(column: "chunks", as: Int.self) } == [3, 1])
            let store = FeedStore(database: db, clock: SystemClock())
            let streams = try await store.datastreams(of: 1)
            for (record, expected) in zip(streams.sorted { $0.key < $1.key }, [first, second]) {
                let query = try HistoryQuery(parameters: ["start": UTCTimestamp.format(micros: -1_000_000_000), "end": UTCTimestamp.format(micros: 2_000_000_000),
                                                          "limit": "1000"], now: 2_000_000_000, legacy: false)
                let read = try await store.history(record, query)
                #expect(read == expected.prefix(1_000).map { Datapoint(at: $0.1, value: $0.2) })
            }
            let tables = try await db.raw(SQLQueryString((db.dialect.name == "sqlite")
                ? "SELECT name FROM sqlite_master WHERE name = 'feeds_datapoints'"
                : "SELECT tablename AS name FROM pg_tables WHERE tablename = 'feeds_datapoints'")).all()
            #expect(tables.isEmpty, "the old table is gone")
        }
    }
}

@Suite("datapoint chunks under concurrent writers")
struct DatapointChunkConcurrencyTests {
    @Test("eight writers send interleaved batches into one datastream at once: every datapoint is kept, once", arguments: TestStorage.available)
    func interleaved(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let (token, stream) = try await gateway.feedWithStream("c")
            let points = "\(stream)/datapoints"
            // Writer w sends rounds of 40 datapoints at seconds w, w + 8, w + 16, …: every batch
            // overlaps the others' in time, so they merge into the same chunks.
            let writers = 8
            let rounds = 6
            let perBatch = 40
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        for round in 0..<rounds {
                            let seconds = (0..<perBatch).map { (round * perBatch + $0) * writers + writer }
                            let body = seconds.map { #"{"at": "\#(at(-10_000 + $0))", "value": \#($0)}"# }.joined(separator: ",")
                            let reply = try await gateway.call(.post, points, token: token, body: #"{"datapoints": [\#(body)]}"#)
                            #expect(reply.status == 200, "\(reply.text.prefix(200))")
                        }
                    }
                }
                try await group.waitForAll()
            }
            let total = writers * rounds * perBatch
            var read: [Double] = []
            var start = at(-10_000)
            while true {
                let page = try await gateway.call(.get, "\(points)?start=\(start)&end=\(at(0))&limit=1000").json["datapoints"]?.arrayValue ?? []
                read += page.compactMap { $0["value"]?.numberValue }
                guard page.count == 1000, let last = page.last?["value"]?.numberValue else { break }
                start = at(-10_000 + Int(last) + 1)
            }
            #expect(read == (0..<total).map(Double.init))
            let current = try await gateway.call(.get, stream).json
            #expect(current["currentValue"] == .number(Double(total - 1)))
        }
    }
}

@Suite("datapoint chunk layout")
struct DatapointChunkLayoutTests {
    /// Runs `body` with a store on a fresh database holding feed 1 with datastream "s".
    func withStore(_ storage: TestStorage, _ body: (FeedStore, DatastreamRecord, any SQLDatabase) async throws -> Void) async throws {
        try await storage.withDatabase { database in
            _ = try await MigrationRunner(database: database.sql, logger: .init(label: "test")).migrate([(owner: "feeds", steps: FeedsPlugin.migrations)])
            let db = database.sql
            try await db.raw("INSERT INTO feeds_feeds (title, tags, private, created, updated) VALUES ('Layout', '[]', 0, 0, 0)").run()
            try await db.raw("INSERT INTO feeds_datastreams (feed_id, id, tags, created, updated) VALUES (1, 's', '[]', 0, 0)").run()
            let store = FeedStore(database: db, clock: SystemClock())
            let stream = try #require(try await store.datastreams(of: 1).first)
            try await body(store, stream, db)
        }
    }

    func chunkSizes(_ db: any SQLDatabase) async throws -> [Int] {
        try await db.raw("SELECT n FROM feeds_chunks ORDER BY first_at").all().map { try $0.decode(column: "n", as: Int.self) }
    }

    @Test("on PostgreSQL a full chunk stays in its row: nothing goes to the TOAST table",
          .enabled(if: TestStorage.available.contains(.postgres)))
    func chunksInLine() async throws {
        try await withStore(.postgres) { store, stream, db in
            let points = (0..<2_000).map { Datapoint(at: Int64($0) * 1_000_000, value: Double($0).squareRoot()) }
            try await store.ingest(points, into: stream)
            #expect(try await chunkSizes(db) == [500, 500, 500, 500])
            let toast = try #require(try await db.raw("""
                SELECT pg_relation_size(reltoastrelid) AS size FROM pg_class WHERE relname = 'feeds_chunks'
                """).first()).decode(column: "size", as: Int.self)
            #expect(toast == 0, "chunk blobs were moved out of line")
            let query = try HistoryQuery(parameters: ["start": UTCTimestamp.format(micros: 0), "end": UTCTimestamp.format(micros: 2_000_000_000),
                                                      "limit": "1000"], now: 2_000_000_000, legacy: false)
            #expect(try await store.history(stream, query) == Array(points.prefix(1_000)))
        }
    }

    @Test("datapoints sent one at a time, oldest last or into a full chunk, still fill chunks", arguments: TestStorage.available)
    func noFragments(storage: TestStorage) async throws {
        try await withStore(storage) { store, stream, db in
            for second in stride(from: 700, to: 0, by: -1) {
                try await store.ingest([Datapoint(at: Int64(second) * 1_000_000, value: Double(second))], into: stream)
            }
            #expect(try await chunkSizes(db) == [200, 500], "a backfill fills the chunk after it")
            for second in [1_500, 1_600, 1_700, 1_800] { try await store.ingest([Datapoint(at: Int64(second) * 1_000, value: 0)], into: stream) }
            let sizes = try await chunkSizes(db)
            #expect(sizes.reduce(0, +) == 704)
            #expect(sizes.allSatisfy { $0 > 100 }, "no chunk of a few datapoints: \(sizes)")
        }
    }

    @Test("a small batch far apart rewrites only the chunks it lands in; a stream deleted meanwhile refuses the write", arguments: TestStorage.available)
    func sparseBatch(storage: TestStorage) async throws {
        try await withStore(storage) { store, stream, db in
            try await store.ingest((0..<2_000).map { Datapoint(at: Int64($0) * 1_000_000, value: 1) }, into: stream)
            let before = try await db.raw("SELECT first_at, points FROM feeds_chunks ORDER BY first_at").all()
            #expect(before.count == 4)
            func feedUpdated() async throws -> Int64 {
                try #require(try await db.raw("SELECT updated FROM feeds_feeds WHERE id = 1").first()).decode(column: "updated", as: Int64.self)
            }
            let updated = try await feedUpdated()
            #expect(updated > 0, "an ingest sets the feed's updated")
            // Times inside the first and the last chunk: the two in between must not be rewritten.
            try await store.ingest([Datapoint(at: 10 * 1_000_000 + 1, value: 2), Datapoint(at: 1_990 * 1_000_000 + 1, value: 2)], into: stream)
            let after = try await db.raw("SELECT first_at, points FROM feeds_chunks ORDER BY first_at").all()
            let afterByStart = try Dictionary(uniqueKeysWithValues: after.map {
                (try $0.decode(column: "first_at", as: Int64.self), try $0.decode(column: "points", as: Data.self))
            })
            for index in 1...2 {
                let start = try before[index].decode(column: "first_at", as: Int64.self)
                #expect(try afterByStart[start] == before[index].decode(column: "points", as: Data.self), "the chunk at \(start) was rewritten")
            }
            #expect(try await chunkSizes(db).reduce(0, +) == 2_002)
            #expect(try await feedUpdated() > updated)
            try await store.deleteDatastream(stream)
            await #expect(throws: GatewayError.self) { try await store.ingest([Datapoint(at: 5, value: 1)], into: stream) }
            #expect(try await chunkSizes(db).isEmpty, "nothing written for a stream that is gone")
        }
    }
}
