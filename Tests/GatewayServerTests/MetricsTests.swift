import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import SQLKit
import Testing

@Suite("metrics")
struct MetricsTests {
    /// The value of the series `name` (with its labels, as written) in the exposition, or nil.
    static func value(_ text: String, _ name: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.dropFirst(name.count + 1))
        }
        return nil
    }

    @Test("cache hits, misses, evictions and size; rate-limited requests by plugin; authentication failures; process memory and descriptors")
    func hostSeries() async throws {
        let yaml = notesYAML + "\ncache: { maxEntries: 2 }\nlimits:\n  anonymous: 4/min\n"
        try await TestGateway.with(notes, yaml: yaml, limits: true) { gateway in
            let apiKey = HTTPField.Name("X-Api-Key")!
            // A miss, a hit, then two more lists: one entry too many, so the oldest is evicted.
            for target in ["/v1/notes/notes", "/v1/notes/notes", "/v1/notes/notes?limit=1", "/v1/notes/notes?limit=2"] {
                _ = try await gateway.gateway.handle(.get, target, from: "10.0.0.1")
            }
            // The fifth request of this guest is over its 4/min.
            let limited = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", from: "10.0.0.1")
            #expect(limited.status == 429)
            // Two credentials that do not verify.
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [apiKey: "gk_wrong"], from: "10.0.0.2").status == 401)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [.authorization: "Bearer nonsense"], from: "10.0.0.3").status == 401)

            let text = String(decoding: gateway.gateway.metrics.render(), as: UTF8.self)
            #expect(Self.value(text, "gateway_cache_hits_total") == 1)
            #expect(Self.value(text, "gateway_cache_misses_total") == 3)
            #expect(Self.value(text, "gateway_cache_evictions_total") == 1)
            #expect(Self.value(text, "gateway_cache_entries") == 2)
            #expect((Self.value(text, "gateway_cache_bytes") ?? 0) > 0)
            #expect((Self.value(text, #"gateway_rate_limited_requests_total{plugin="notes"}"#) ?? 0) >= 1)
            #expect(Self.value(text, "gateway_authentication_failures_total") == 2)
            #expect((Self.value(text, "process_resident_memory_bytes") ?? 0) > 1_000_000)
            #expect((Self.value(text, "process_open_fds") ?? 0) > 2)
            #expect((Self.value(text, "process_max_fds") ?? 0) >= (Self.value(text, "process_open_fds") ?? 0))
            #expect((Self.value(text, "process_cpu_seconds") ?? 0) > 0)
            #expect((Self.value(text, "process_start_time_seconds") ?? 0) > 1_700_000_000)

            // Counters only grow: a purge empties the cache, not the counts.
            await gateway.gateway.responder.cache.invalidate(tags: [ResponseCacheTags.all])
            _ = try await gateway.gateway.handle(.get, "/v1/notes/notes", from: "10.0.0.9")
            let after = String(decoding: gateway.gateway.metrics.render(), as: UTF8.self)
            #expect(Self.value(after, "gateway_cache_misses_total") == 4)
            #expect(Self.value(after, "gateway_cache_hits_total") == 1)
            #expect(Self.value(after, "gateway_cache_entries") == 1)
        }
    }

    @Test("database statements timed and failures counted; connections in use while a transaction holds one, and the pool's size", arguments: TestStorage.available)
    func databaseSeries(storage: TestStorage) async throws {
        try await TestGateway.with(notes, yaml: notesYAML, storage: storage) { gateway in
            let gw = gateway.gateway
            func text() -> String { String(decoding: gw.metrics.render(), as: UTF8.self) }
            let before = Self.value(text(), "gateway_db_query_duration_seconds_count") ?? 0
            #expect(try await gw.handle(.get, "/v1/notes/notes").status == 200)
            #expect((Self.value(text(), "gateway_db_query_duration_seconds_count") ?? 0) > before, "the list's statement is timed")
            #expect((Self.value(text(), "gateway_db_connections_max") ?? 0) >= 1)
            #expect(Self.value(text(), "gateway_db_connections_in_use") == 0)
            await #expect(throws: (any Error).self) { try await gw.database.sql.raw("SELECT * FROM no_such_table").run() }
            #expect(Self.value(text(), "gateway_db_query_failures_total") == 1)
            // A transaction holds its connection until it ends.
            let held = AsyncStream.makeStream(of: Void.self)
            let release = AsyncStream.makeStream(of: Void.self)
            let transaction = Task {
                try await gw.database.sql.transaction { session in
                    try await session.raw("SELECT 1").run()
                    held.continuation.yield()
                    for await _ in release.stream { break }
                }
            }
            for await _ in held.stream { break }
            #expect(Self.value(text(), "gateway_db_connections_in_use") == 1)
            release.continuation.yield()
            try await transaction.value
            #expect(Self.value(text(), "gateway_db_connections_in_use") == 0)
        }
    }
}
