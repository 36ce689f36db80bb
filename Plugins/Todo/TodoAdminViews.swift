import Foundation
import GatewayCore
import SQLKit

/// The admin console's page of the todo plugin: the buckets, how many objects each holds, and
/// the shape their objects must have.
extension TodoPlugin {
    /// The most buckets the page lists.
    static let adminBucketRows = 100

    public var adminViews: [AdminView] {
        let service = self.service
        return [
            AdminView(id: "buckets", title: "Buckets", load: { _ in
                try await Self.bucketSections(service)
            }),
        ]
    }

    static func bucketSections(_ service: ObjectService) async throws -> [AdminSection] {
        let buckets = try await service.buckets.all()
        let counts = try await service.store.objectCounts()
        let rows = buckets.prefix(adminBucketRows).map { bucket in
            let count = counts[bucket.name] ?? (total: 0, marked: 0)
            let source = bucket.configured ? "plugins.yaml" : bucket.tenant.map { "tenant \($0)" } ?? "API"
            return AdminRow([
                bucket.name, String(count.total - count.marked), String(count.marked), schemaText(bucket.schema), bucket.create.rawValue,
                bucket.indexSpecs.isEmpty ? "" : bucket.indexSpecs.joined(separator: "; "), source,
            ])
        }
        let total = counts.values.reduce(0) { $0 + $1.total - $1.marked }
        let title = buckets.count > rows.count ? "Buckets (the first \(rows.count) of \(buckets.count), by name)" : "Buckets"
        var sections: [AdminSection] = [
            .figures(title: "Objects", [AdminFigure("Buckets", String(buckets.count)), AdminFigure("Objects", String(total))]),
            .table(title: title, columns: ["Bucket", "Objects", "Marked deleted", "Schema", "Who creates", "Indexes", "Declared in"], rows: rows),
        ]
        // Objects left in a bucket that no longer exists (its declaration was removed from plugins.yaml).
        let names = Set(buckets.map(\.name))
        let orphaned = counts.filter { !names.contains($0.key) }.sorted { $0.key < $1.key }
        if !orphaned.isEmpty {
            sections.append(.text(title: "Objects without a bucket",
                                  orphaned.prefix(adminBucketRows).map { "\($0.key): \($0.value.total)" }.joined(separator: ", ")
                                      + (orphaned.count > adminBucketRows ? ", …" : "")
                                      + ". Declaring the bucket again in plugins.yaml shows them."))
        }
        return sections
    }

    /// A bucket's schema as a line: its fields with their types (`*` marks a required one), or
    /// `free` when the bucket takes any object.
    static func schemaText(_ schema: ObjectSchema?) -> String {
        guard let schema else { return "free" }
        let required = Set(schema.required ?? [])
        var parts = (schema.properties ?? [:]).sorted { $0.key < $1.key }.map { name, property in
            var type = (property.type ?? ["any"]).joined(separator: "|")
            if let format = property.format { type += " (\(format))" }
            if let items = property.items?.type { type += " of " + items.joined(separator: "|") }
            return "\(name)\(required.contains(name) ? "*" : ""): \(type)"
        }
        // Required fields the schema gives no type for.
        parts += required.subtracting(schema.properties?.keys.map { $0 } ?? []).sorted().map { "\($0)*: any" }
        if parts.isEmpty { return schema.type.map { "free (" + $0.joined(separator: "|") + ")" } ?? "free" }
        if schema.additionalProperties == false { parts.append("no other fields") }
        return parts.joined(separator: ", ")
    }
}

extension ObjectStore {
    /// The objects of each bucket that holds any: all of them, and those marked deleted.
    func objectCounts() async throws -> [String: (total: Int, marked: Int)] {
        let rows = try await database.raw("""
            SELECT bucket, COUNT(*) AS total, SUM(CASE WHEN deleted <> 0 THEN 1 ELSE 0 END) AS marked FROM todo_objects GROUP BY bucket
            """).all()
        var counts: [String: (total: Int, marked: Int)] = [:]
        for row in rows {
            let bucket = try row.decode(column: "bucket", as: String.self)
            let total = try row.decode(column: "total", as: Int.self)
            let marked = try row.decode(column: "marked", as: Int?.self) ?? 0
            counts[bucket] = (total, marked)
        }
        return counts
    }
}
