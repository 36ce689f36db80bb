import Foundation
import GatewayCore
import SQLKit

/// The notes table: the service code both the native operations and the dialect call.
struct NotesStore: Sendable {
    let database: any SQLDatabase
    let clock: any WallClock

    private struct Row: Codable {
        var id: String
        var owner: String?
        var title: String
        var body: String
        var version: Int
        var created_at: String
        var updated_at: String

        var note: Note {
            Note(id: id, owner: owner, title: title, body: body, version: version,
                 createdAt: UTCTimestamp.date(created_at) ?? .distantPast, updatedAt: UTCTimestamp.date(updated_at) ?? .distantPast)
        }
    }

    func create(_ draft: NoteDraft, owner: String?) async throws -> Note {
        let now = UTCTimestamp.format(clock.now())
        let row = Row(id: UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased(), owner: owner,
                      title: draft.title, body: draft.body, version: 1, created_at: now, updated_at: now)
        try await database.insert(into: "notes_items").model(row).run()
        return row.note
    }

    func note(_ id: String) async throws -> Note {
        guard let row = try await database.select().column("*").from("notes_items").where("id", .equal, id).first(decoding: Row.self) else {
            throw GatewayError.notFound("No note \(id).")
        }
        return row.note
    }

    func update(_ id: String, with draft: NoteDraft, ifMatch: String?) async throws -> Note {
        try await database.transaction { db in
            guard let row = try await db.select().column("*").from("notes_items").where("id", .equal, id).first(decoding: Row.self) else {
                throw GatewayError.notFound("No note \(id).")
            }
            if let ifMatch, ifMatch != "*", ifMatch != row.note.etag {
                throw GatewayError.preconditionFailed("The note changed since \(ifMatch); it is now \(row.note.etag).")
            }
            try await db.update("notes_items")
                .set("title", to: draft.title).set("body", to: draft.body)
                .set("version", to: row.version + 1).set("updated_at", to: UTCTimestamp.format(clock.now()))
                .where("id", .equal, id).run()
            var updated = row
            updated.title = draft.title
            updated.body = draft.body
            updated.version += 1
            return updated.note
        }
    }

    func delete(_ id: String) async throws {
        _ = try await note(id)
        try await database.delete(from: "notes_items").where("id", .equal, id).run()
    }

    func list(limit: Int, after cursor: String?, owner: String? = nil) async throws -> NoteList {
        var query = database.select().column("*").from("notes_items")
            .orderBy("created_at", .descending).orderBy("id", .descending).limit(limit + 1)
        if let owner { query = query.where("owner", .equal, owner) }
        if let cursor {
            let parts = cursor.split(separator: "|", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw GatewayError.badRequest("The cursor '\(cursor.prefix(80))' is not one this API gave out.") }
            query = query.where { group in
                group.where("created_at", .lessThan, parts[0])
                    .orWhere { $0.where("created_at", .equal, parts[0]).where("id", .lessThan, parts[1]) }
            }
        }
        let rows = try await query.all(decoding: Row.self)
        let page = rows.prefix(limit)
        let next = rows.count > limit ? page.last.map { "\($0.created_at)|\($0.id)" } : nil
        return NoteList(items: page.map(\.note), nextCursor: next)
    }

    func count() async throws -> Int {
        struct Count: Decodable { var count: Int }
        return try await database.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "count")
            .from("notes_items").first(decoding: Count.self)?.count ?? 0
    }
}
