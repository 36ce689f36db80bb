import Foundation
import GatewayCore
import SQLKit
import Synchronization

/// The buckets: those plugins.yaml declares (fixed while the gateway runs) and those
/// administrators create through the API (kept in `todo_buckets`, seen by every instance).
final class BucketRegistry: Sendable {
    let configured: [String: Bucket]
    private let created = Mutex<[String: Bucket]>([:])
    let database: any SQLDatabase
    let store: ObjectStore
    let clock: any WallClock

    init(configured: [String: Bucket], store: ObjectStore, clock: any WallClock) {
        self.configured = configured
        self.store = store
        database = store.database
        self.clock = clock
    }

    private struct Row: Codable {
        var name: String
        var settings: String
        var created_at: Double
        /// The tenant whose master key created it (nil: an administrator).
        var tenant: String?
    }

    /// Reads the created buckets and makes sure every bucket's indexes exist.
    func load() async throws {
        for bucket in configured.values { try await store.ensureIndexes(of: bucket) }
        try await reload()
    }

    private func reload() async throws {
        let rows = try await database.select().column("*").from("todo_buckets").all(decoding: Row.self)
        var buckets: [String: Bucket] = [:]
        for row in rows {
            guard let settings = try? JSONDecoder().decode(BucketSettings.self, from: Data(row.settings.utf8)),
                  var bucket = try? Bucket(name: row.name, settings: settings, configured: false) else { continue }
            bucket.tenant = row.tenant
            buckets[row.name] = bucket
        }
        created.withLock { $0 = buckets }
    }

    /// The bucket named `name`; 404 when there is none.
    func bucket(_ name: String) async throws -> Bucket {
        if let bucket = configured[name] ?? created.withLock({ $0[name] }) { return bucket }
        // Another instance may have created it since.
        if Bucket.nameProblem(name) == nil {
            try await reload()
            if let bucket = created.withLock({ $0[name] }) { return bucket }
        }
        throw GatewayError.notFound("No bucket '\(name)'.")
    }

    /// Every bucket, by name.
    func all() async throws -> [Bucket] {
        try await reload()
        let dynamic = created.withLock { Array($0.values) }
        return (Array(configured.values) + dynamic).sorted { $0.name < $1.name }
    }

    /// Creates a bucket (through `tenant`'s dialect, or the native API); 409 when the name is taken.
    func create(name: String, settings: BucketSettings, tenant: String? = nil) async throws -> Bucket {
        var bucket: Bucket
        do {
            bucket = try Bucket(name: name, settings: settings, configured: false)
            bucket.tenant = tenant
        } catch {
            throw GatewayError.invalid(field: "/name", error.message)
        }
        let existing = try? await self.bucket(name)
        if configured[name] != nil || existing != nil { throw GatewayError.conflict("The bucket '\(name)' exists already.") }
        let text = String(decoding: try JSONEncoder().encode(bucket.settings), as: UTF8.self)
        do {
            try await database.insert(into: "todo_buckets").model(Row(name: name, settings: text, created_at: clock.now().timeIntervalSince1970, tenant: tenant)).run()
        } catch {
            throw GatewayError.conflict("The bucket '\(name)' exists already.")
        }
        try await store.ensureIndexes(of: bucket)
        created.withLock { $0[name] = bucket }
        return bucket
    }

    /// Changes a created bucket's settings (a bucket of plugins.yaml is changed there: 409).
    func update(name: String, settings: BucketSettings) async throws -> Bucket {
        if configured[name] != nil { throw GatewayError.conflict("The bucket '\(name)' is declared in plugins.yaml; change it there.") }
        let old = try await self.bucket(name)
        var bucket: Bucket
        do {
            bucket = try Bucket(name: name, settings: settings, configured: false)
            bucket.tenant = old.tenant
        } catch {
            throw GatewayError.invalid(field: "/", error.message)
        }
        let text = String(decoding: try JSONEncoder().encode(bucket.settings), as: UTF8.self)
        try await database.update("todo_buckets").set("settings", to: text).where("name", .equal, name).run()
        if old.indexSpecs != bucket.indexSpecs {
            try await store.dropIndexes(of: old)
            try await store.ensureIndexes(of: bucket)
        }
        created.withLock { $0[name] = bucket }
        return bucket
    }

    /// Deletes a created bucket with all its objects; returns how many objects went.
    func delete(name: String) async throws -> Int {
        if configured[name] != nil { throw GatewayError.conflict("The bucket '\(name)' is declared in plugins.yaml; remove it there.") }
        let bucket = try await self.bucket(name)
        let removed = try await database.transaction { db in
            let count = try await db.raw("DELETE FROM todo_objects WHERE bucket = \(bind: name) RETURNING id").all().count
            try await db.delete(from: "todo_buckets").where("name", .equal, name).run()
            return count
        }
        try await store.dropIndexes(of: bucket)
        created.withLock { $0[name] = nil }
        return removed
    }
}
