import Foundation
import GatewayCore
import GatewaySupport
import SQLKit
import Synchronization

/// Who is acting on objects, as the store sees it.
struct Actor: Sendable, Equatable {
    /// The user the caller acts for; nil for guests (and a key without an owner).
    var userID: String?
    /// Whose objects, groups and buckets the actor administers besides its own.
    var authority: Authority
    /// The groups the user belongs to (at any depth), which ACL entries `g:{name}` admit.
    var groups: Set<String>
    /// The tenant a dialect request names (nil on the native API): recorded on the objects,
    /// groups and buckets it creates, so that the tenant's master key administers them.
    var tenant: String?

    /// What an actor administers beyond the ACLs that admit it.
    enum Authority: Sendable, Equatable {
        case none
        /// A dialect application's master key: what was made through its tenant, and nothing else.
        case tenant(String)
        /// Administrators: everything.
        case all
    }

    static let anonymous = Actor(userID: nil, authority: .none)

    init(userID: String?, authority: Authority, groups: Set<String> = [], tenant: String? = nil) {
        self.userID = userID
        self.authority = authority
        self.groups = groups
        self.tenant = tenant
    }

    /// Whether the actor administers what was made through `tenant` (nil: through the native API).
    func administers(_ tenant: String?) -> Bool {
        switch authority {
        case .none: false
        case .tenant(let own): tenant == own
        case .all: true
        }
    }

    /// An administrator, or the master key of an application: who manages buckets and users.
    var isManager: Bool { authority != .none }

    /// Administrators read and write every object.
    var administersAll: Bool { authority == .all }

    /// The ACL entries naming the actor's groups (`g:{name}`), at most ``GroupDirectory/maximumGroupsPerUser``.
    var groupEntries: [String] { groups.sorted().prefix(GroupDirectory.maximumGroupsPerUser).map { "g:" + $0 } }
}

/// Who besides the owner may read and write an object: user ids, `anonymous` (everyone) or
/// `authenticated` (every signed-in caller). Writers may read too.
struct ObjectACL: Sendable, Equatable {
    var readers: [String]
    var writers: [String]

    static let ownerOnly = ObjectACL(readers: [], writers: [])
    static let everyone = ObjectACL(readers: ["anonymous"], writers: ["anonymous"])
    static let maximumEntries = 100

    static func entryProblem(_ entry: String) -> String? {
        if entry.hasPrefix("g:") {
            return GroupDirectory.nameProblem(String(entry.dropFirst(2))).map { "names no group: \($0)" }
        }
        guard !entry.isEmpty, entry.utf8.count <= 64,
              entry.unicodeScalars.allSatisfy(\.isNameCharacter) else {
            return "must be a user id, \"anonymous\", \"authenticated\" or g:{group}"
        }
        return nil
    }

    /// The text the store searches for readers: every reader and writer between spaces.
    var searchable: String {
        if readers.isEmpty && writers.isEmpty { return "  " }
        if self == .everyone { return " anonymous " }
        return " " + Array(Set(readers + writers)).sorted().joined(separator: " ") + " "
    }

    /// The stored text of the ACL (`{"readers":[...],"writers":[...]}`).
    var text: String {
        if readers.isEmpty && writers.isEmpty { return Self.ownerOnlyText }
        if self == .everyone { return Self.everyoneText }
        return json.jsonText
    }

    fileprivate static let ownerOnlyText = ObjectACL.ownerOnly.json.jsonText
    fileprivate static let everyoneText = ObjectACL.everyone.json.jsonText

    func admits(_ actor: Actor, in entries: [String]) -> Bool { Self.admits(actor, entries) }

    /// Whether `entries` name everyone, every signed-in caller, the actor or one of its groups.
    static func admits(_ actor: Actor, _ entries: [String]) -> Bool {
        if entries.contains("anonymous") { return true }
        guard let userID = actor.userID else { return false }
        return entries.contains("authenticated") || entries.contains(userID) || entries.contains { $0.hasPrefix("g:") && actor.groups.contains(String($0.dropFirst(2))) }
    }

    var json: JSONValue {
        .object(["readers": .array(readers.map(JSONValue.string)), "writers": .array(writers.map(JSONValue.string))])
    }
}

extension ObjectACL {
    /// The ACL stored as `text`; the common ones without parsing.
    init(text: String) throws {
        if text == Self.everyoneText {
            self = .everyone
        } else if text == Self.ownerOnlyText {
            self = .ownerOnly
        } else {
            guard case .object(let acl) = try JSONValue.parse(text) else { throw GatewayError.internalError("A stored ACL is not a JSON object.") }
            func list(_ key: String) -> [String] { acl[key]?.arrayValue?.compactMap(\.stringValue) ?? [] }
            self.init(readers: list("readers"), writers: list("writers"))
        }
    }
}

/// An object as stored: the client's fields plus what the store keeps beside them.
struct StoredObject: Sendable, Equatable {
    var id: String
    /// The client's fields as compact JSON with sorted keys, as stored (replies splice it in as is).
    private(set) var dataText: String
    var owner: String?
    var acl: ObjectACL
    /// The tenant whose dialect created it (nil: the native API).
    var tenant: String?
    var etag: String
    /// Microseconds since 1970.
    var createdAt: Int64
    var updatedAt: Int64
    /// Marked deleted (the NEC BaaS soft delete): kept, but found only when asked for.
    var deleted = false

    init(id: String, dataText: String, owner: String?, acl: ObjectACL, tenant: String? = nil, etag: String, createdAt: Int64, updatedAt: Int64, deleted: Bool = false) {
        self.deleted = deleted
        self.tenant = tenant
        self.id = id
        self.dataText = dataText
        self.owner = owner
        self.acl = acl
        self.etag = etag
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    /// The client's fields (parsed from ``dataText`` on each read: read once and keep the result).
    var data: [String: JSONValue] {
        get { (try? JSONValue.parse(dataText, maximumDepth: 256))?.objectValue ?? [:] }
        set { dataText = JSONValue.object(newValue).jsonText }
    }

    func isOwned(by actor: Actor) -> Bool {
        actor.administers(tenant) || (owner != nil && owner == actor.userID)
    }

    func readable(by actor: Actor) -> Bool {
        isOwned(by: actor) || acl.admits(actor, in: acl.readers + acl.writers)
    }

    func writable(by actor: Actor) -> Bool {
        isOwned(by: actor) || acl.admits(actor, in: acl.writers)
    }

    /// The value of a query field, as a cursor records it.
    func sortValue(_ field: QueryField) -> JSONValue {
        switch field {
        case .id: .string(id)
        case .createdAt: .number(Double(createdAt))
        case .updatedAt: .number(Double(updatedAt))
        case .owner: owner.map(JSONValue.string) ?? .null
        case .etag: .string(etag)
        case .deleted: .bool(deleted)
        case .path(let segments): JSONValue.object(data)[path: segments] ?? .null
        }
    }

    /// Appends the object as JSON: `system` (sorted key/value pairs, written first) and then the
    /// stored fields spliced in without parsing them.
    func write(system: [(String, JSONValue)], into bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "{"))
        for (index, (key, value)) in system.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            JSONValue.string(key).write(into: &bytes)
            bytes.append(UInt8(ascii: ":"))
            value.write(into: &bytes)
        }
        let inner = dataText.utf8.dropFirst().dropLast()
        if !inner.isEmpty {
            if !system.isEmpty { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: inner)
        }
        bytes.append(UInt8(ascii: "}"))
    }
}

/// The objects of every bucket, in one table (`todo_objects`): the object's JSON (`TEXT` on SQLite,
/// `jsonb` on PostgreSQL) and the columns queries filter and sort on.
///
/// Guarantees: every write changes the etag; a conditional write (`ifMatch`) happens only if the
/// etag still matches when the row is written, and an unconditional read-modify-write (merge,
/// `$inc`) retries rather than lose a concurrent change; queries run in the database, filtered by
/// what the actor may read, and never load a whole bucket.
struct ObjectStore: Sendable {
    let database: any SQLDatabase
    /// The same database when it runs finished statements (SQLite), for the insert of `create`.
    let runner: (any SQLStatementRunner)?
    let sql: QuerySQL
    let clock: any WallClock
    let maxObjectBytes: Int
    /// Creates that arrive together, inserted by one statement (where there is no ``runner``: on
    /// PostgreSQL every statement is a round trip and a commit of its own).
    let creates: WriteCombiner<Int, NewRow>

    /// A row of `todo_objects` to insert.
    struct NewRow: Sendable {
        let bucket: String
        let object: StoredObject
        let readers: String
        let acl: String
    }

    init(database: any SQLDatabase, clock: any WallClock, maxObjectBytes: Int) {
        self.database = database
        let runner = database as? any SQLStatementRunner
        // SQLite's writer commits the creates that wait together itself; elsewhere they are combined here.
        self.runner = database.features.combinesWrites ? runner : nil
        sql = QuerySQL(json: database.features.json)
        self.clock = clock
        self.maxObjectBytes = maxObjectBytes
        creates = WriteCombiner(maxItems: Self.insertTexts.count) { _, rows in try await Self.insert(rows, on: database, runner: runner) }
    }

    /// Inserts new objects in one statement: a finished statement where the database runs them
    /// (on PostgreSQL a prepared statement, one for each number of rows), SQLKit's query otherwise.
    static func insert(_ rows: [NewRow], on database: any SQLDatabase, runner: (any SQLStatementRunner)?) async throws {
        guard let runner, rows.count <= insertTexts.count else {
            try await database.raw(insertQuery(rows, json1: database.features.json == .json1)).run()
            return
        }
        var values: [StatementValue] = []
        values.reserveCapacity(rows.count * 10)
        for row in rows { values += statementValues(row) }
        try await runner.runStatement((database.features.json == .jsonb ? jsonbInsertTexts : insertTexts)[rows.count - 1], values)
    }

    /// The insert of 1, 2, … 64 objects, with `?` placeholders.
    static let insertTexts = insertTexts(data: "?")
    /// The same where `data` is `jsonb`.
    static let jsonbInsertTexts = insertTexts(data: "CAST(? AS jsonb)")

    private static func insertTexts(data: String) -> [String] {
        (1...64).map { count in
            "INSERT INTO todo_objects (bucket, id, data, owner, readers, acl, tenant, etag, created_at, updated_at) VALUES "
                + Array(repeating: "(?, ?, \(data), ?, ?, ?, ?, ?, ?, ?)", count: count).joined(separator: ", ")
        }
    }

    /// A row's values in the order of ``insertTexts``.
    static func statementValues(_ row: NewRow) -> [StatementValue] {
        let object = row.object
        return [.text(row.bucket), .text(object.id), .text(object.dataText), object.owner.map { .text($0) } ?? .null, .text(row.readers),
                .text(row.acl), object.tenant.map { .text($0) } ?? .null, .text(object.etag), .integer(object.createdAt), .integer(object.updatedAt)]
    }

    /// The `INSERT` of new objects. A guest's object has no owner, written as `NULL` (an optional
    /// bind would go through the generic `Encodable` path).
    static func insertQuery(_ rows: [NewRow], json1: Bool) -> SQLQueryString {
        var query: SQLQueryString = "INSERT INTO todo_objects (bucket, id, data, owner, readers, acl, tenant, etag, created_at, updated_at) VALUES "
        for (index, row) in rows.enumerated() {
            let object = row.object
            let owner: SQLQueryString = object.owner.map { "\(bind: $0)" } ?? "NULL"
            let tenant: SQLQueryString = object.tenant.map { "\(bind: $0)" } ?? "NULL"
            query += (index == 0 ? "(" : ", (") + "\(bind: row.bucket), \(bind: object.id), " + jsonValue(object.dataText, json1: json1) + ", " + owner
                + ", \(bind: row.readers), \(bind: row.acl), " + tenant + ", \(bind: object.etag), \(bind: object.createdAt), \(bind: object.updatedAt))"
        }
        return query
    }

    // MARK: Ids and etags

    /// 24 lowercase hex digits, ordered by creation like a MongoDB ObjectId: 4 bytes of creation
    /// time (seconds), 5 random bytes fixed per process, and a 3-byte counter.
    static func newID(now: Date) -> String {
        let seconds = UInt32(truncatingIfNeeded: Int64(now.timeIntervalSince1970))
        let count = idCounter.add(1, ordering: .relaxed).newValue & 0xFF_FFFF
        // Written in one pass into the string's own storage: this runs for every object created.
        return String(unsafeUninitializedCapacity: 24) { text in
            var position = 0
            func put(_ byte: UInt8) {
                text[position] = hexDigits[Int(byte >> 4)]
                text[position + 1] = hexDigits[Int(byte & 0xF)]
                position += 2
            }
            for shift in stride(from: 24, through: 0, by: -8) { put(UInt8(truncatingIfNeeded: seconds >> UInt32(shift))) }
            for byte in processBytes { put(byte) }
            for shift in stride(from: 16, through: 0, by: -8) { put(UInt8(truncatingIfNeeded: count >> UInt32(shift))) }
            return position
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
    private static let processBytes: [UInt8] = (0..<5).map { _ in UInt8.random(in: 0...255) }
    private static let idCounter = Atomic<UInt32>(UInt32.random(in: 0...0xFF_FFFF))

    static func isValidID(_ id: String) -> Bool {
        id.utf8.count == 24 && id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// A version 4 UUID in lowercase text, unique in this process and, with 122 bits from a
    /// random key drawn once per process, across processes as random UUIDs are. Each is the
    /// process's key mixed with a counter by a bijection (SplitMix64's finalizer), so no two in a
    /// process are equal and none costs a system call (the system generator is one per call on
    /// Linux, and Foundation's `UUID()` opens the random device each time).
    static func newETag() -> String {
        let count = etagCounter.add(1, ordering: .relaxed).newValue
        var high = mix(count ^ etagKey.0)
        var low = mix(count &+ etagKey.1)
        high = high & ~(0xF << 12) | (0x4 << 12)  // version 4
        low = low & ~(0x3 << 62) | (0x2 << 62)  // variant 10
        return String(unsafeUninitializedCapacity: 36) { text in
            var position = 0
            for half in 0..<2 {
                let value = half == 0 ? high : low
                for nibble in stride(from: 60, through: 0, by: -4) {
                    let index = half * 16 + (60 - nibble) / 4
                    if index == 8 || index == 12 || index == 16 || index == 20 {
                        text[position] = UInt8(ascii: "-")
                        position += 1
                    }
                    text[position] = hexDigits[Int((value >> UInt64(nibble)) & 0xF)]
                    position += 1
                }
            }
            return position
        }
    }

    private static let etagKey: (UInt64, UInt64) = {
        var generator = SystemRandomNumberGenerator()
        return (generator.next(), generator.next())
    }()
    private static let etagCounter = Atomic<UInt64>(0)

    /// SplitMix64's finalizer: a bijection of 64-bit values that spreads every input bit.
    static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A bound JSON value for the `data` column (text on SQLite, jsonb on PostgreSQL).
    private static func jsonValue(_ text: String, json1: Bool) -> SQLQueryString {
        json1 ? "\(bind: text)" : "CAST(\(bind: text) AS jsonb)"
    }

    private func encodedData(_ data: [String: JSONValue]) throws -> String {
        let text = JSONValue.object(data).jsonText
        guard text.utf8.count <= maxObjectBytes else { throw GatewayError.contentTooLarge(limit: maxObjectBytes) }
        return text
    }

    private func aclText(_ acl: ObjectACL) -> String { acl.text }

    // MARK: Reading

    private static let columns = "id, CAST(data AS TEXT) AS data, owner, acl, tenant, etag, created_at, updated_at, deleted"

    private func decode(_ row: any SQLRow) throws -> StoredObject {
        var dataText = try row.decode(column: "data", as: String.self)
        if !sql.json1 {
            // jsonb's text form has spaces and its own key order: store-independent replies need the compact form.
            dataText = try JSONValue.parse(dataText, maximumDepth: 256).jsonText
        }
        guard dataText.utf8.first == UInt8(ascii: "{") else { throw GatewayError.internalError("A stored object is not a JSON object.") }
        let acl = try ObjectACL(text: try row.decode(column: "acl", as: String.self))
        return StoredObject(
            id: try row.decode(column: "id", as: String.self), dataText: dataText, owner: try row.decode(column: "owner", as: String?.self),
            acl: acl, tenant: try row.decode(column: "tenant", as: String?.self), etag: try row.decode(column: "etag", as: String.self),
            createdAt: try row.decode(column: "created_at", as: Int64.self), updatedAt: try row.decode(column: "updated_at", as: Int64.self),
            deleted: try row.decode(column: "deleted", as: Int.self) != 0)
    }

    /// The object, whoever may read it (nil when there is none).
    func load(bucket: String, id: String) async throws -> StoredObject? {
        guard Self.isValidID(id) else { return nil }
        var query = SQLQueryString("SELECT \(unsafeRaw: Self.columns) FROM todo_objects WHERE bucket = ")
        query.appendInterpolation(bind: bucket)
        query.appendLiteral(" AND id = ")
        query.appendInterpolation(bind: id)
        return try await database.raw(query).first().map(decode)
    }

    /// The object if `actor` may read it (and, unless `includeDeleted`, it is not marked deleted);
    /// otherwise 404, as for one that does not exist.
    func get(bucket: String, id: String, actor: Actor, includeDeleted: Bool = false) async throws -> StoredObject {
        guard let object = try await load(bucket: bucket, id: id), object.readable(by: actor), includeDeleted || !object.deleted else {
            throw GatewayError.notFound("No object '\(id)' in bucket '\(bucket)'.")
        }
        return object
    }

    // MARK: Writing

    /// Creates an object owned by the actor (a guest's object belongs to everyone).
    /// With `id` (a client's choice, already checked by ``isValidID(_:)``), an object of that id in
    /// the bucket makes it a 409 (`duplicate: "id"`), soft-deleted ones included.
    func create(in bucket: Bucket, data: [String: JSONValue], acl: ObjectACL?, actor: Actor, id chosenID: String? = nil) async throws -> StoredObject {
        let now = clock.now()
        let micros = Timestamps.micros(now)
        let owner = actor.userID
        let effectiveACL = acl ?? (owner == nil ? .everyone : .ownerOnly)
        let object = StoredObject(id: chosenID ?? Self.newID(now: now), dataText: try encodedData(data), owner: owner, acl: effectiveACL, tenant: actor.tenant, etag: Self.newETag(),
                                  createdAt: micros, updatedAt: micros)
        let row = NewRow(bucket: bucket.name, object: object, readers: effectiveACL.searchable, acl: aclText(effectiveACL))
        if chosenID != nil {
            // The primary key decides, so two clients choosing one id at once cannot both win.
            let query = Self.insertQuery([row], json1: sql.json1) + " ON CONFLICT (bucket, id) DO NOTHING RETURNING id"
            guard try await database.raw(query).first() != nil else {
                throw GatewayError.conflict("An object with the id '\(object.id)' exists already in bucket '\(bucket.name)'.", duplicate: "id")
            }
            return object
        }
        if let runner {
            // SQLite: the finished text and plain values, no query builder, no `Encodable` binds.
            try await runner.runStatement(Self.insertTexts[0], Self.statementValues(row))
            return object
        }
        try await creates.submit(row, key: 0)
        return object
    }

    /// Changes an object: `change` edits its fields (and may return a new ACL) from the current
    /// version. With `ifMatch`, the write happens only on that etag (412 otherwise); without it,
    /// a concurrent write makes the change run again on the newer version.
    /// `markDeleted` marks it deleted too (the NEC BaaS soft delete).
    func update(in bucket: Bucket, id: String, actor: Actor, ifMatch: String?, markDeleted: Bool = false,
                change: (inout [String: JSONValue]) throws -> ObjectACL?) async throws -> StoredObject {
        for attempt in 0..<Self.maximumAttempts {
            var object = try await get(bucket: bucket.name, id: id, actor: actor)
            guard object.writable(by: actor) else { throw GatewayError.forbidden("You may read this object but not change it.") }
            if let ifMatch, ifMatch != "*", ifMatch != object.etag {
                throw GatewayError.preconditionFailed("The object has changed: its etag is no longer \(ifMatch).")
            }
            let previousETag = object.etag
            var data = object.data
            let newACL = try change(&data)
            object.data = data
            guard object.dataText.utf8.count <= maxObjectBytes else { throw GatewayError.contentTooLarge(limit: maxObjectBytes) }
            if let acl = newACL {
                guard object.isOwned(by: actor) else { throw GatewayError.forbidden("Only the object's owner may change its ACL.") }
                object.acl = acl
            }
            object.etag = Self.newETag()
            object.updatedAt = max(Timestamps.micros(clock.now()), object.updatedAt + 1)
            if markDeleted { object.deleted = true }
            let query: SQLQueryString = "UPDATE todo_objects SET data = " + Self.jsonValue(object.dataText, json1: sql.json1) + (markDeleted ? ", deleted = 1" : "")
                + ", readers = \(bind: object.acl.searchable), acl = \(bind: aclText(object.acl)), etag = \(bind: object.etag), "
                + "updated_at = \(bind: object.updatedAt) WHERE bucket = \(bind: bucket.name) AND id = \(bind: id) AND etag = \(bind: previousETag) RETURNING id"
            if try await database.raw(query).first() != nil { return object }
            if ifMatch != nil { throw GatewayError.preconditionFailed("The object changed while this update ran; read it again.") }
            try await Self.backOff(attempt)
        }
        throw GatewayError.conflict("The object is being changed by others too often; try again.")
    }

    /// How often an unconditional read-modify-write retries after losing to a concurrent write.
    static let maximumAttempts = 50

    /// A short random pause that grows with the attempt, so that contending writers spread out.
    static func backOff(_ attempt: Int) async throws {
        try await Task.sleep(for: .microseconds(Int.random(in: 100...(500 + 200 * min(attempt, 20)))))
    }

    /// Deletes an object (conditionally with `ifMatch`), marked deleted or not.
    func delete(bucket: String, id: String, actor: Actor, ifMatch: String?) async throws {
        for attempt in 0..<Self.maximumAttempts {
            let object = try await get(bucket: bucket, id: id, actor: actor, includeDeleted: true)
            guard object.writable(by: actor) else { throw GatewayError.forbidden("You may read this object but not delete it.") }
            if let ifMatch, ifMatch != "*", ifMatch != object.etag {
                throw GatewayError.preconditionFailed("The object has changed: its etag is no longer \(ifMatch).")
            }
            var query = SQLQueryString("DELETE FROM todo_objects WHERE bucket = ")
            query.appendInterpolation(bind: bucket)
            query.appendLiteral(" AND id = ")
            query.appendInterpolation(bind: id)
            query.appendLiteral(" AND etag = ")
            query.appendInterpolation(bind: object.etag)
            query.appendLiteral(" RETURNING id")
            if try await database.raw(query).first() != nil { return }
            if ifMatch != nil { throw GatewayError.preconditionFailed("The object changed while this delete ran; read it again.") }
            try await Self.backOff(attempt)
        }
        throw GatewayError.conflict("The object is being changed by others too often; try again.")
    }

    /// Deletes every object matching `condition` that the actor may write (marked deleted or
    /// not); returns how many. With `markOnly`, marks those not yet marked deleted instead, each
    /// with a new etag and update time.
    func deleteAll(bucket: String, matching condition: Condition?, actor: Actor, markOnly: Bool = false) async throws -> Int {
        var query: SQLQueryString
        if markOnly {
            query = "UPDATE todo_objects SET deleted = 1, etag = \(bind: Self.newETag()), updated_at = \(bind: Timestamps.micros(clock.now())) WHERE deleted = 0 AND bucket = "
        } else {
            query = "DELETE FROM todo_objects WHERE bucket = "
        }
        query.appendInterpolation(bind: bucket)
        if let condition {
            query.appendLiteral(" AND (")
            sql.append(condition, to: &query)
            query.appendLiteral(")")
        }
        if !actor.administersAll {
            // Writers only: the tenant's master key, the owner, or an ACL naming the actor among the writers.
            query.appendLiteral(" AND (")
            if case .tenant(let tenant) = actor.authority {
                query.appendLiteral("tenant = ")
                query.appendInterpolation(bind: tenant)
                query.appendLiteral(" OR ")
            }
            if let userID = actor.userID {
                query.appendLiteral("owner = ")
                query.appendInterpolation(bind: userID)
                query.appendLiteral(" OR ")
            }
            query.appendLiteral("acl LIKE '%\"writers\":[%\"anonymous\"%]%'")
            if let userID = actor.userID {
                query.appendLiteral(" OR acl LIKE '%\"writers\":[%\"authenticated\"%]%'")
                QuerySQL.appendAnyLike("acl", [userID] + actor.groupEntries, pattern: { "%\"writers\":[%\"\($0)\"%]%" }, to: &query)
            }
            query.appendLiteral(")")
        }
        query.appendLiteral(" RETURNING id")
        return try await database.raw(query).all().count
    }

    // MARK: Queries

    /// The SQL of a page of `query` (without count), for running and for `EXPLAIN`.
    func pageSQL(bucket: String, query: ObjectQuery, actor: Actor, prefix: String = "") -> SQLQueryString {
        var statement = SQLQueryString("\(unsafeRaw: prefix)SELECT \(unsafeRaw: Self.columns) FROM todo_objects WHERE bucket = ")
        statement.appendInterpolation(bind: bucket)
        appendFilters(query, actor: actor, to: &statement)
        if let cursor = query.cursor {
            statement.appendLiteral(" AND ")
            sql.appendAfter(cursor, keys: query.order, to: &statement)
        }
        statement.appendLiteral(" ORDER BY \(sql.orderBy(query.order)) LIMIT \(query.limit + 1)")
        if query.skip > 0 { statement.appendLiteral(" OFFSET \(query.skip)") }
        return statement
    }

    private func appendFilters(_ query: ObjectQuery, actor: Actor, to statement: inout SQLQueryString) {
        if !query.includeDeleted { statement.appendLiteral(" AND deleted = 0") }
        if let condition = query.condition {
            statement.appendLiteral(" AND (")
            sql.append(condition, to: &statement)
            statement.appendLiteral(")")
        }
        if !actor.administersAll {
            statement.appendLiteral(" AND ")
            sql.appendVisibility(for: actor, to: &statement)
        }
    }

    /// A page of objects the actor may read, the total count when asked, and the cursor of the next page.
    func query(bucket: String, _ query: ObjectQuery, actor: Actor) async throws -> (objects: [StoredObject], count: Int?, next: QueryCursor?) {
        let rows = try await database.raw(pageSQL(bucket: bucket, query: query, actor: actor)).all()
        var objects = try rows.map(decode)
        var next: QueryCursor?
        if objects.count > query.limit {
            objects.removeLast(objects.count - query.limit)
            if let last = objects.last {
                next = QueryCursor(values: query.order.map { last.sortValue($0.field) }, id: last.id)
            }
        }
        var count: Int?
        if query.count {
            var statement = SQLQueryString("SELECT COUNT(*) AS total FROM todo_objects WHERE bucket = ")
            statement.appendInterpolation(bind: bucket)
            appendFilters(query, actor: actor, to: &statement)
            count = try await database.raw(statement).first()?.decode(column: "total", as: Int.self)
        }
        return (objects, count, next)
    }

    // MARK: Indexes

    /// Creates the bucket's declared indexes that do not exist yet.
    func ensureIndexes(of bucket: Bucket) async throws {
        for fields in bucket.indexes {
            // Plain column indexes for createdAt/updatedAt alone exist already.
            if fields == [.updatedAt] || fields == [.createdAt] || fields == [.owner] || fields == [.id] { continue }
            let statement = "CREATE INDEX IF NOT EXISTS \(bucket.indexName(fields)) ON todo_objects (bucket, \(sql.indexColumns(fields)))"
            try await database.raw(SQLQueryString(statement)).run()
        }
    }

    func dropIndexes(of bucket: Bucket) async throws {
        for fields in bucket.indexes {
            let statement = "DROP INDEX IF EXISTS \(bucket.indexName(fields))"
            try await database.raw(SQLQueryString(statement)).run()
        }
    }
}
