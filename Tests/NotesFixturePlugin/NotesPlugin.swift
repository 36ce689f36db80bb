import Foundation
import GatewayCore
import Logging
import NIOCore
import SQLKit
import ServiceLifecycle
import Synchronization

/// A small notes service that exercises the whole plugin contract in tests and benchmarks:
/// operations with path, query and body input, access rules, cache tags, a dialect with its own
/// error shape and a WebSocket route, a migration, a background service and health.
/// It is never shipped in the `gateway` executable.
public struct NotesPlugin: AuthorizingPlugin {
    public static let id = "notes"
    public static let summary = "Notes: a fixture plugin proving the plugin contract"

    public struct Configuration: PluginConfiguration {
        /// The word `notes.echo` greets with.
        public var greeting: String = "hello"
        /// Above this many notes the plugin reports itself degraded.
        public var maxNotes: Int = 10_000
        /// How often the janitor service recounts.
        public var recountEvery = ConfigDuration(seconds: 1)

        public init() {}
        public static let defaults = Configuration()

        public func validate() throws {
            guard maxNotes > 0 else { throw ConfigurationError(key: "maxNotes", "must be at least 1") }
            guard !greeting.isEmpty else { throw ConfigurationError(key: "greeting", "must not be empty") }
            guard recountEvery.seconds > 0 else { throw ConfigurationError(key: "recountEvery", "must be more than 0") }
        }
    }

    public static let migrations: [Migration] = [
        Migration(1, "create notes_items") { db in
            try await db.create(table: "notes_items")
                .column("id", type: .text, .primaryKey(autoIncrement: false))
                .column("owner", type: .text)
                .column("title", type: .text, .notNull)
                .column("body", type: .text, .notNull)
                .column("version", type: .bigint, .notNull)
                .column("created_at", type: .text, .notNull)
                .column("updated_at", type: .text, .notNull)
                .run()
        },
        Migration(2, "index notes by update time") { db in
            try await db.create(index: "notes_items_updated").on("notes_items").column("updated_at").run()
        },
    ]

    let configuration: Configuration
    let store: NotesStore
    let janitor: NotesJanitor
    /// How many times a handler ran (tests prove cache hits skip handlers with it).
    public let handlerCalls = CallCounter()
    /// How many times the authorize hook ran.
    public let hookCalls = CallCounter()

    public init(configuration: Configuration, context: PluginContext) async throws {
        self.configuration = configuration
        store = NotesStore(database: context.database, clock: context.clock)
        janitor = NotesJanitor(store: store, every: configuration.recountEvery.seconds, logger: context.logger)
    }

    public var services: [any Service] { [janitor] }

    public func health() async -> PluginHealth {
        let count = janitor.lastCount.load(ordering: .relaxed)
        return count > configuration.maxNotes ? .degraded("\(count) notes, above the limit of \(configuration.maxNotes)") : .ok
    }

    public func loadDemoData() async throws {
        _ = try await store.create(NoteDraft(title: "Welcome", body: "This note was loaded as demo data."), owner: nil)
    }

    public var routes: [Route] {
        let store = self.store
        let greeting = configuration.greeting
        let calls = self.handlerCalls
        return [
            Route.define("notes.echo", .get, "/echo", summary: "Greet a name (a small JSON operation)")
                .query(EchoQuery.self)
                .returns(Echo.self) { input, _ in
                    Echo(greeting: "\(greeting), \(input.query.name)", length: input.query.name.count)
                },
            Route.define("notes.list", .get, "/notes", summary: "List notes, newest first")
                .cache(.shared(ttl: .seconds(30), tags: ["notes:list"]))
                .query(ListQuery.self)
                .returns(NoteList.self) { input, _ in
                    calls.increment()
                    return try await store.list(limit: input.query.limit ?? 50, after: input.query.cursor)
                },
            Route.define("notes.create", .post, "/notes", summary: "Create a note")
                .cache(.invalidating(["notes:list"]))
                .body(NoteDraft.self)
                .replies(Note.self) { input, context in
                    let note = try await store.create(input.body, owner: context.principal.userID)
                    if let owner = note.owner {
                        try await context.plugin.notify(userID: owner, title: "Note created", body: note.title, link: "/v1/notes/notes/\(note.id)")
                    }
                    return Reply(note, status: 201, headers: [.location: "/v1/notes/notes/\(note.id)", .eTag: note.etag])
                },
            Route.define("notes.get", .get, "/notes/{id}", summary: "Read one note")
                .path(NoteID.self)
                .resource("id")
                .tags(NotesPlugin.lockable)
                .replies(Note.self) { input, context in
                    let note = try await store.note(input.path.id)
                    await context.recordView(of: note.id, title: note.title)
                    return Reply(note, headers: [.eTag: note.etag])
                },
            Route.define("notes.update", .put, "/notes/{id}", summary: "Replace a note (conditional with If-Match)")
                .cache(.invalidating(["notes:list"]))
                .resource("id")
                .path(NoteID.self)
                .body(NoteDraft.self)
                .replies(Note.self) { input, context in
                    let existing = try await store.note(input.path.id)
                    if existing.owner != nil { try context.requireOwner(existing.owner, resource: "note") }
                    let note = try await store.update(input.path.id, with: input.body, ifMatch: context.headers[.ifMatch])
                    return Reply(note, headers: [.eTag: note.etag])
                },
            Route.define("notes.delete", .delete, "/notes/{id}", summary: "Delete a note")
                .access(.scope("notes:write"))
                .resource("id")
                .cache(.invalidating(["notes:list"]))
                .path(NoteID.self)
                .returns(NoContent.self) { input, _ in
                    try await store.delete(input.path.id)
                    return NoContent()
                },
            Route.define("notes.mine", .get, "/me/notes", summary: "The caller's own notes")
                .access(.user)
                .cache(.perPrincipal(ttl: .seconds(30), tags: ["notes:list"]))
                .returns(NoteList.self) { _, context in
                    calls.increment()
                    return try await store.list(limit: 50, after: nil, owner: context.principal.userID)
                },
            Route.define("notes.read", .get, "/read/{id}", summary: "Read a note, for callers with notes:read")
                .access(.scope("notes:read"))
                .resource("id")
                .path(NoteID.self)
                .returns(Note.self) { input, _ in
                    try await store.note(input.path.id)
                },
            Route.define("notes.owned", .get, "/owned/{id}", summary: "Read a note only its owner may see")
                .access(.owner)
                .resource("id")
                .path(NoteID.self)
                .returns(Note.self) { input, context in
                    let note = try await store.note(input.path.id)
                    try context.requireOwner(note.owner, resource: "note")
                    return note
                },
            Route.define("notes.stats", .get, "/admin/stats", summary: "Counts for administrators")
                .access(.admin)
                .returns(Stats.self) { _, _ in
                    Stats(notes: try await store.count())
                },
            Route.define("notes.links", .get, "/links", summary: "Answer with two Link fields (a repeated header)")
                .replies(Echo.self) { _, _ in
                    Reply(Echo(greeting: "links", length: 2), headers: HTTPFields([
                        HTTPField(name: .link, value: "</v1/notes/notes>; rel=\"collection\""),
                        HTTPField(name: .link, value: "</v1/notes/echo>; rel=\"related\""),
                    ]))
                },
            Route.define("notes.slow", .get, "/slow", summary: "Answer after a delay (for shutdown tests)")
                .query(SlowQuery.self)
                .returns(Echo.self) { input, _ in
                    try await Task.sleep(for: .milliseconds(min(max(input.query.ms, 0), 10_000)))
                    return Echo(greeting: "done", length: input.query.ms)
                },
        ]
    }

    public var dialects: [Dialect] {
        [NotesLegacyDialect.make(store: store, calls: handlerCalls)]
    }

    /// The tag of the routes whose note ``authorize(_:)`` checks.
    public static let lockable = "lockable"

    /// The authorize hook: a note named `locked` is refused on every route tagged ``lockable``,
    /// native or legacy, before its handler runs.
    public func authorize(_ request: AuthorizationRequest) async throws {
        hookCalls.increment()
        if request.has(tag: Self.lockable), request.pathParameters["id"] == "locked" {
            throw GatewayError.forbidden("This note is locked.")
        }
    }
}

// MARK: Inputs and outputs

public struct EchoQuery: Codable, Sendable {
    public var name: String
}

public struct Echo: Codable, Sendable, Equatable {
    public var greeting: String
    public var length: Int

    public init(greeting: String, length: Int) {
        self.greeting = greeting
        self.length = length
    }
}

public struct SlowQuery: Codable, Sendable {
    public var ms: Int
}

public struct ListQuery: Codable, Sendable, ValidatableInput {
    public var limit: Int?
    public var cursor: String?

    public func validate() -> [GatewayError.FieldError] {
        guard let limit, !(1...1000).contains(limit) else { return [] }
        return [.init(pointer: "limit", detail: "must be between 1 and 1000")]
    }
}

public struct NoteID: Codable, Sendable, ValidatableInput {
    public var id: String

    public func validate() -> [GatewayError.FieldError] {
        id.count == 32 && id.allSatisfy(\.isHexDigit) ? [] : [.init(pointer: "id", detail: "is not a note id (32 hex digits)")]
    }
}

public struct NoteDraft: Codable, Sendable, ValidatableInput {
    public var title: String
    public var body: String
    public var tags: [String]?

    public init(title: String, body: String, tags: [String]? = nil) {
        self.title = title
        self.body = body
        self.tags = tags
    }

    public func validate() -> [GatewayError.FieldError] {
        var problems: [GatewayError.FieldError] = []
        if title.trimmingCharacters(in: .whitespaces).isEmpty { problems.append(.init(pointer: "/title", detail: "must not be empty")) }
        if title.count > 200 { problems.append(.init(pointer: "/title", detail: "must be at most 200 characters")) }
        if body.utf8.count > 100_000 { problems.append(.init(pointer: "/body", detail: "must be at most 100000 bytes")) }
        return problems
    }
}

public struct Note: Codable, Sendable, Equatable {
    public var id: String
    public var owner: String?
    public var title: String
    public var body: String
    public var version: Int
    public var createdAt: Date
    public var updatedAt: Date

    public var etag: String { "\"\(id.prefix(8))-\(version)\"" }
}

/// A page of notes, in the native list shape.
public typealias NoteList = Page<Note>

public struct Stats: Codable, Sendable {
    public var notes: Int
}

// MARK: Service

/// Recounts the notes periodically, so health can answer without a query.
final class NotesJanitor: Service, Sendable {
    let store: NotesStore
    let every: Double
    let logger: Logger
    let lastCount = Atomic<Int>(0)

    init(store: NotesStore, every: Double, logger: Logger) {
        self.store = store
        self.every = every
        self.logger = logger
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            if let count = try? await store.count() { lastCount.store(count, ordering: .relaxed) }
            // Wakes early when the gateway shuts down, so the service group stops promptly.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(Int(self.every * 1000))) }
        }
    }
}

/// Counts handler runs.
public final class CallCounter: Sendable {
    private let value = Atomic<Int>(0)
    public init() {}
    public var count: Int { value.load(ordering: .relaxed) }
    func increment() { value.add(1, ordering: .relaxed) }
}
