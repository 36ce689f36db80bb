import GatewayCore
import SQLKit

/// Writes object queries as SQL over the `todo_objects` table: SQLite's JSON functions or
/// PostgreSQL's jsonb operators. Field paths are written as literals (``QueryField`` admits only
/// safe characters) so that a condition's expression is exactly the one an index was built on;
/// every value is bound.
struct QuerySQL: Sendable {
    /// JSON1 functions (SQLite) rather than jsonb operators (PostgreSQL).
    let json1: Bool

    init(json: DatabaseFeatures.JSONStorage) { json1 = json == .json1 }

    // MARK: Expressions

    /// The SQLite JSON path literal: `'$."a"."b"'`.
    func sqlitePath(_ segments: [String]) -> String {
        "'$" + segments.map { ".\"\($0)\"" }.joined() + "'"
    }

    /// The PostgreSQL text-array path literal: `'{a,b}'`.
    func postgresPath(_ segments: [String]) -> String {
        "'{" + segments.joined(separator: ",") + "}'"
    }

    /// The expression of a field: a column, or the JSON value at a path (SQL NULL when it is
    /// missing or JSON null, on both databases).
    func expression(_ field: QueryField) -> String {
        switch field {
        case .id: "id"
        case .createdAt: "created_at"
        case .updatedAt: "updated_at"
        case .owner: "owner"
        case .etag: "etag"
        case .deleted: "deleted"
        case .path(let segments):
            json1 ? "json_extract(data, \(sqlitePath(segments)))" : "NULLIF(data #> \(postgresPath(segments)), 'null'::jsonb)"
        }
    }

    /// The JSON type of a path's value, as the database names it, or NULL when missing.
    private func typeOf(_ segments: [String]) -> String {
        json1 ? "json_type(data, \(sqlitePath(segments)))" : "jsonb_typeof(data #> \(postgresPath(segments)))"
    }

    /// The text of a path's value when it is a string.
    private func textOf(_ segments: [String]) -> String {
        json1 ? "json_extract(data, \(sqlitePath(segments)))" : "(data #>> \(postgresPath(segments)))"
    }

    /// The index expression list for an index over `fields` (after `bucket`, before the id that
    /// breaks ties in every order).
    func indexColumns(_ fields: [QueryField]) -> String {
        (fields.map { field in
            if case .path = field, !json1 { return "(\(expression(field))) NULLS FIRST" }
            return expression(field)
        } + (fields.contains(.id) ? [] : ["id"])).joined(separator: ", ")
    }

    // MARK: Values

    /// Appends a bound value compared with a path's expression.
    private func appendJSON(_ value: JSONValue, to sql: inout SQLQueryString) {
        if json1 {
            switch value {
            case .bool(let flag): sql.appendInterpolation(bind: flag ? 1 : 0)
            case .number(let number): sql.appendInterpolation(bind: number)
            case .string(let text): sql.appendInterpolation(bind: text)
            case .null: sql.appendLiteral("NULL")
            case .array, .object: sql.appendInterpolation(bind: value.jsonText)
            }
        } else {
            sql.appendLiteral("CAST(")
            sql.appendInterpolation(bind: value.jsonText)
            sql.appendLiteral(" AS jsonb)")
        }
    }

    /// Appends a bound value compared with a system column; false when the value has the wrong type
    /// for it (the comparison can then never hold).
    private func appendColumnValue(_ field: QueryField, _ value: JSONValue, to sql: inout SQLQueryString) -> Bool {
        switch (field, value) {
        case (.createdAt, .number(let micros)), (.updatedAt, .number(let micros)):
            // Any number is a time (`Int64(_:)` would trap on one out of range).
            sql.appendInterpolation(bind: Int64(exactly: micros.rounded(.down)) ?? (micros > 0 ? .max : .min))
            return true
        case (.id, .string(let text)), (.owner, .string(let text)), (.etag, .string(let text)):
            sql.appendInterpolation(bind: text)
            return true
        case (.deleted, .bool(let flag)):
            sql.appendLiteral(flag ? "1" : "0")
            return true
        default:
            return false
        }
    }

    // MARK: Conditions

    func append(_ condition: Condition, to sql: inout SQLQueryString) {
        switch condition {
        case .all(let parts): join(parts, with: " AND ", empty: "TRUE", to: &sql)
        case .any(let parts): join(parts, with: " OR ", empty: "FALSE", to: &sql)
        case .none(let parts):
            sql.appendLiteral("NOT COALESCE(")
            join(parts, with: " OR ", empty: "FALSE", to: &sql)
            sql.appendLiteral(", FALSE)")
        case .not(let inner):
            sql.appendLiteral("NOT COALESCE((")
            append(inner, to: &sql)
            sql.appendLiteral("), FALSE)")
        case .compare(let field, let comparison, let value):
            compare(field, comparison, value, to: &sql)
        case .oneOf(let field, let values):
            join(values.map { .compare(field, .eq, $0) }, with: " OR ", empty: "FALSE", to: &sql)
        case .exists(let field, let present):
            switch field {
            case .path(let segments):
                let raw = json1 ? "json_type(data, \(sqlitePath(segments)))" : "(data #> \(postgresPath(segments)))"
                sql.appendLiteral("\(raw) IS \(present ? "NOT " : "")NULL")
            case .owner: sql.appendLiteral("owner IS \(present ? "NOT " : "")NULL")
            default: sql.appendLiteral(present ? "TRUE" : "FALSE")
            }
        case .matches(let field, let regex):
            if case .path(let segments) = field {
                sql.appendLiteral("(\(typeOf(segments)) = \(json1 ? "'text'" : "'string'") AND ")
                sql.appendLiteral(json1 ? "substr(\(textOf(segments)), 1, \(RegexGuard.matchedPrefix)) REGEXP " : "left(\(textOf(segments)), \(RegexGuard.matchedPrefix)) ~ ")
            } else {
                let column = expression(field)
                sql.appendLiteral("(\(column) IS NOT NULL AND ")
                sql.appendLiteral(json1 ? "substr(\(column), 1, \(RegexGuard.matchedPrefix)) REGEXP " : "left(\(column), \(RegexGuard.matchedPrefix)) ~ ")
            }
            sql.appendInterpolation(bind: json1 ? regex.icu : regex.postgres)
            sql.appendLiteral(")")
        case .containsAll(let field, let values):
            guard case .path(let segments) = field else { sql.appendLiteral("FALSE"); return }
            sql.appendLiteral("(\(typeOf(segments)) = 'array'")
            if json1 {
                for value in values {
                    sql.appendLiteral(" AND EXISTS (SELECT 1 FROM json_each(todo_objects.data, \(sqlitePath(segments))) AS element WHERE element.value = ")
                    appendJSON(value, to: &sql)
                    if case .bool(let flag) = value { sql.appendLiteral(" AND element.type = '\(flag)'") }
                    if case .string = value { sql.appendLiteral(" AND element.type = 'text'") }
                    sql.appendLiteral(")")
                }
            } else {
                sql.appendLiteral(" AND (data #> \(postgresPath(segments))) @> ")
                appendJSON(.array(values), to: &sql)
            }
            sql.appendLiteral(")")
        }
    }

    private func join(_ parts: [Condition], with separator: String, empty: String, to sql: inout SQLQueryString) {
        guard !parts.isEmpty else { sql.appendLiteral(empty); return }
        sql.appendLiteral("(")
        for (index, part) in parts.enumerated() {
            if index > 0 { sql.appendLiteral(separator) }
            sql.appendLiteral("(")
            append(part, to: &sql)
            sql.appendLiteral(")")
        }
        sql.appendLiteral(")")
    }

    private static let operators: [Condition.Comparison: String] = [.eq: "=", .ne: "<>", .lt: "<", .lte: "<=", .gt: ">", .gte: ">="]

    private func compare(_ field: QueryField, _ comparison: Condition.Comparison, _ value: JSONValue, to sql: inout SQLQueryString) {
        let expression = expression(field)
        if value == .null {
            sql.appendLiteral(comparison == .ne ? "\(expression) IS NOT NULL" : "\(expression) IS NULL")
            return
        }
        if comparison == .ne {
            sql.appendLiteral("NOT COALESCE((")
            compare(field, .eq, value, to: &sql)
            sql.appendLiteral("), FALSE)")
            return
        }
        let op = Self.operators[comparison]!
        guard case .path(let segments) = field else {
            var fragment = SQLQueryString("")
            fragment.appendLiteral("\(expression) \(op) ")
            if appendColumnValue(field, value, to: &fragment) { sql += fragment } else { sql.appendLiteral("FALSE") }
            return
        }
        sql.appendLiteral("(\(expression) \(op) ")
        appendJSON(value, to: &sql)
        // Comparisons hold only between values of one JSON type (SQLite would order numbers
        // before text, and reads booleans as 0 and 1).
        switch value {
        case .bool(let flag):
            sql.appendLiteral(json1 ? " AND \(typeOf(segments)) = '\(flag)'" : "")
        case .number:
            sql.appendLiteral(" AND \(typeOf(segments)) \(json1 ? "IN ('integer', 'real')" : "= 'number'")")
        case .string:
            sql.appendLiteral(" AND \(typeOf(segments)) = \(json1 ? "'text'" : "'string'")")
        default: break
        }
        sql.appendLiteral(")")
    }

    // MARK: Ordering and pages

    /// `ORDER BY` for `keys`, then the id in the last key's direction (so one index serves both),
    /// nulls first ascending.
    func orderBy(_ keys: [SortKey]) -> String {
        var terms = keys.map { key -> String in
            let expression = expression(key.field)
            if json1 || key.field.isSystem { return "\(expression) \(key.descending ? "DESC" : "ASC")" }
            return "\(expression) \(key.descending ? "DESC NULLS LAST" : "ASC NULLS FIRST")"
        }
        if !keys.contains(where: { $0.field == .id }) { terms.append(keys.last?.descending == true ? "id DESC" : "id ASC") }
        return terms.joined(separator: ", ")
    }

    /// The condition "comes after `cursor` in the order of `keys`".
    func appendAfter(_ cursor: QueryCursor, keys: [SortKey], to sql: inout SQLQueryString) {
        var allKeys = keys
        var values = cursor.values
        if !keys.contains(where: { $0.field == .id }) {
            allKeys.append(SortKey(field: .id, descending: keys.last?.descending ?? false))
            values.append(.string(cursor.id))
        }
        sql.appendLiteral("(")
        for index in allKeys.indices {
            if index > 0 { sql.appendLiteral(" OR ") }
            sql.appendLiteral("(")
            for previous in 0..<index {
                equal(allKeys[previous].field, values[previous], to: &sql)
                sql.appendLiteral(" AND ")
            }
            after(allKeys[index], values[index], to: &sql)
            sql.appendLiteral(")")
        }
        sql.appendLiteral(")")
    }

    private func sortValue(_ field: QueryField, _ value: JSONValue, to sql: inout SQLQueryString) {
        if field.isSystem {
            if !appendColumnValue(field, value, to: &sql) { sql.appendLiteral("NULL") }
        } else {
            appendJSON(value, to: &sql)
        }
    }

    private func equal(_ field: QueryField, _ value: JSONValue, to sql: inout SQLQueryString) {
        let expression = expression(field)
        if value == .null { sql.appendLiteral("\(expression) IS NULL"); return }
        sql.appendLiteral("\(expression) = ")
        sortValue(field, value, to: &sql)
    }

    private func after(_ key: SortKey, _ value: JSONValue, to sql: inout SQLQueryString) {
        let expression = expression(key.field)
        switch (key.descending, value == .null) {
        case (false, true): sql.appendLiteral("\(expression) IS NOT NULL")
        case (true, true): sql.appendLiteral("FALSE")
        case (false, false):
            sql.appendLiteral("\(expression) > ")
            sortValue(key.field, value, to: &sql)
        case (true, false):
            sql.appendLiteral("(\(expression) < ")
            sortValue(key.field, value, to: &sql)
            sql.appendLiteral(" OR \(expression) IS NULL)")
        }
    }

    // MARK: Visibility

    /// What a guest may read (the condition of the guests' partial index, `todo_objects_guest`).
    static let guestVisibility = "readers LIKE '% anonymous %'"

    /// The condition "the actor may read the object": every object for an administrator; for a
    /// master key, its tenant's objects and what its ACLs admit.
    func appendVisibility(for actor: Actor, to sql: inout SQLQueryString) {
        switch actor.authority {
        case .all:
            sql.appendLiteral("TRUE")
        case .tenant(let tenant):
            sql.appendLiteral("(tenant = ")
            sql.appendInterpolation(bind: tenant)
            sql.appendLiteral(" OR ")
            appendAdmitted(actor, to: &sql)
            sql.appendLiteral(")")
        case .none:
            appendAdmitted(actor, to: &sql)
        }
    }

    /// The condition "the object's owner is the actor, or its ACL admits the actor".
    private func appendAdmitted(_ actor: Actor, to sql: inout SQLQueryString) {
        guard let userID = actor.userID else {
            sql.appendLiteral(Self.guestVisibility)
            return
        }
        sql.appendLiteral("(owner = ")
        sql.appendInterpolation(bind: userID)
        sql.appendLiteral(" OR readers LIKE '% anonymous %' OR readers LIKE '% authenticated %'")
        Self.appendAnyLike("readers", [userID] + actor.groupEntries, pattern: { "% \($0) %" }, to: &sql)
        sql.appendLiteral(")")
    }

    /// ` OR column LIKE pattern(entry)` for each entry, escaped (`!`).
    static func appendAnyLike(_ column: String, _ entries: [String], pattern: (String) -> String, to sql: inout SQLQueryString) {
        for entry in entries {
            sql.appendLiteral(" OR \(column) LIKE ")
            sql.appendInterpolation(bind: pattern(likeEscaped(entry)))
            sql.appendLiteral(" ESCAPE '!'")
        }
    }

    static func likeEscaped(_ text: String) -> String {
        var escaped = ""
        for character in text {
            if character == "%" || character == "_" || character == "!" { escaped.append("!") }
            escaped.append(character)
        }
        return escaped
    }
}
