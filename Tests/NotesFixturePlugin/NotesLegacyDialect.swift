import Foundation
import GatewayCore
import NIOCore
import NIOFoundationCompat

/// An old client's API for the same notes: plain-text listing, form-like JSON with
/// `{"code", "msg"}` errors, a key in `?apikey=`, and a WebSocket that echoes.
enum NotesLegacyDialect {
    struct LegacyError: Encodable {
        var code: Int
        var msg: String
    }

    struct LegacyCreate: Decodable {
        var t: String
        var b: String?
    }

    static func make(store: NotesStore, calls: CallCounter) -> Dialect {
        Dialect(
            name: "legacy",
            routes: [
                Route.define(.get, "/legacy/notes.txt", summary: "Titles, one per line").handle { request, _ in
                    let limit = request.query("n").flatMap(Int.init) ?? 20
                    guard (1...1000).contains(limit) else { throw GatewayError.invalid(field: "n", "must be between 1 and 1000") }
                    let notes = try await store.list(limit: limit, after: nil)
                    return .text(notes.items.map { "\($0.id)\t\($0.title)" }.joined(separator: "\n"))
                },
                // Declared like an operation: typed path input, access rule, cost, cache policy and a
                // tag for the plugin's authorize hook; the host runs all of it.
                Route.define(.get, "/legacy/note/{id}", summary: "One note as old JSON, with two Link fields")
                    .path(NoteID.self)
                    .access(.user)
                    .cost(2)
                    .cache(.perPrincipal(ttl: .seconds(30), tags: ["notes:list"]))
                    .tags(NotesPlugin.lockable)
                    .handleDecoded { call, _ in
                        calls.increment()
                        let note = try await store.note(call.path.id)
                        return try .json(["code": "0", "id": note.id, "t": note.title], headers: HTTPFields([
                            HTTPField(name: .link, value: "</legacy/notes.txt>; rel=\"collection\""),
                            HTTPField(name: .link, value: "</v1/notes/notes/\(note.id)>; rel=\"alternate\""),
                        ]))
                    },
                Route.define(.post, "/legacy/notes", summary: "Create with the old field names").handle { request, context in
                    let draft: LegacyCreate
                    do {
                        draft = try JSONDecoder().decode(LegacyCreate.self, from: Data(buffer: request.body))
                    } catch {
                        throw GatewayError.badRequest("bad json")
                    }
                    let note = try await store.create(NoteDraft(title: draft.t, body: draft.b ?? ""), owner: context.principal.userID)
                    return try .json(["code": "0", "id": note.id])
                },
                Route.define(.get, "/legacy/live", summary: "Echoes each text message back, upper-cased").socket { _, socket, _ in
                    for await message in socket.inbound {
                        if case .text(let text) = message { try await socket.send(.text(text.uppercased())) }
                    }
                },
            ],
            credentials: .firstOf(.apiKeyQuery("apikey"), .bearer),
            renderError: { error in
                (try? RouteReply.json(LegacyError(code: Int(error.status.code) * 10, msg: error.detail), status: error.status == 404 ? 404 : 200))
                    ?? .text("error", status: 500)
            })
    }
}
