import GatewayCore
import SQLKit

extension QuerySQL {
    /// The condition "an object of `bucket` that `actor` may read": the objects every aggregation
    /// starts from. Any further condition on which objects are there to read belongs here, so that
    /// it holds for every pipeline.
    func appendReadable(bucket: String, actor: Actor, to sql: inout SQLQueryString) {
        sql.appendLiteral("bucket = ")
        sql.appendInterpolation(bind: bucket)
        sql.appendLiteral(" AND deleted = 0")
        if !actor.administersAll {
            sql.appendLiteral(" AND ")
            appendVisibility(for: actor, to: &sql)
        }
    }
}

/// Writes an aggregation pipeline as one statement over `todo_objects`, so that the database
/// does the work and no bucket is ever loaded: a chain of CTEs `s0`, `s1`, ..., one per stage,
/// each a `SELECT` of a JSON document `doc` (text on SQLite, jsonb on PostgreSQL) and its
/// position `ord` (a CTE keeps no order, so `$sort` numbers its output and later stages keep
/// the numbers). `s0` holds the objects the actor may read (``QuerySQL/appendReadable(bucket:actor:to:)``),
/// filtered by the pipeline's leading `$match` stages as a query would (its indexes apply), as
/// documents: the fields, `_id`, `createdAt` and `updatedAt` (as the dialect writes them, so they
/// sort in time order) and `etag`. Objects start in the order of creation.
///
/// In a stage's expressions a value is JSON (SQLite: JSON text; PostgreSQL: jsonb), and SQL NULL
/// when the field is missing, so that missing and null stay apart where MongoDB keeps them
/// apart (`$push`, `$project`). Numbers are summed and compared as numbers, strings byte by byte
/// (the "C" collation on PostgreSQL); types order as in MongoDB: null, numbers, strings,
/// objects, arrays, booleans. Field names are written as literals: ``DocumentPath`` admits only
/// safe characters; every constant is bound.
struct AggregationSQL: Sendable {
    let query: QuerySQL

    private var json1: Bool { query.json1 }

    /// The statement: one row per result document (`doc`, as text), in order, at most
    /// `maximumDocuments + 1` of them; `doc` is NULL from the document where the results pass
    /// `maximumBytes` on.
    func statement(bucket: String, actor: Actor, pipeline: AggregationPipeline, maximumDocuments: Int, maximumBytes: Int) -> SQLQueryString {
        var stages = pipeline.stages[...]
        var sql = SQLQueryString("WITH s0 AS (")
        appendDocuments(bucket: bucket, actor: actor, to: &sql)
        while case .match(let condition)? = stages.first {
            sql.appendLiteral(" AND (")
            query.append(condition, to: &sql)
            sql.appendLiteral(")")
            stages.removeFirst()
        }
        sql.appendLiteral(")")
        for (index, stage) in stages.enumerated() {
            sql.appendLiteral(", s\(index + 1) AS (")
            append(stage, from: "s\(index)", to: &sql)
            sql.appendLiteral(")")
        }
        let text = json1 ? "doc" : "doc::text"
        sql.appendLiteral(" SELECT CASE WHEN total <= \(maximumBytes) THEN doc END AS doc FROM (SELECT \(text) AS doc, ord, ")
        let bytes = json1 ? "length(CAST(doc AS BLOB))" : "octet_length(\(text))"
        sql.appendLiteral("sum(\(bytes)) OVER (ORDER BY ord ROWS UNBOUNDED PRECEDING) AS total FROM s\(stages.count)) AS results ")
        sql.appendLiteral("ORDER BY ord LIMIT \(maximumDocuments + 1)")
        return sql
    }

    /// The readable objects of the bucket as documents, up to the end of `WHERE`.
    private func appendDocuments(bucket: String, actor: Actor, to sql: inout SQLQueryString) {
        let created = timestamp("created_at")
        let updated = timestamp("updated_at")
        if json1 {
            sql.appendLiteral("SELECT json_set(data, '$._id', id, '$.createdAt', \(created), '$.updatedAt', \(updated), '$.etag', etag) AS doc, ")
        } else {
            sql.appendLiteral("SELECT data || jsonb_build_object('_id', id, 'createdAt', \(created), 'updatedAt', \(updated), 'etag', etag) AS doc, ")
        }
        sql.appendLiteral("row_number() OVER (ORDER BY created_at, id) AS ord FROM todo_objects WHERE ")
        query.appendReadable(bucket: bucket, actor: actor, to: &sql)
    }

    /// A microsecond column as ``Timestamps/format(micros:)`` writes it (`2013-08-27T05:19:16.000Z`).
    private func timestamp(_ column: String) -> String {
        if json1 {
            return "strftime('%Y-%m-%dT%H:%M:%S', \(column) / 1000000, 'unixepoch') || '.' || substr('00' || (\(column) / 1000 % 1000), -3) || 'Z'"
        }
        return "to_char(to_timestamp(\(column) / 1000000) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || '.' || lpad((\(column) / 1000 % 1000)::text, 3, '0') || 'Z'"
    }

    // MARK: Stages

    private func append(_ stage: AggregationStage, from input: String, to sql: inout SQLQueryString) {
        switch stage {
        case .match(let condition):
            // The condition is written as for objects, over a `data` column of the same name.
            sql.appendLiteral("SELECT data AS doc, ord FROM (SELECT doc AS data, ord FROM \(input)) AS todo_objects WHERE ")
            query.append(Self.onDocuments(condition), to: &sql)
        case .group(let key, let accumulators):
            sql.appendLiteral(json1 ? "SELECT json_object('_id', json(k)" : "SELECT jsonb_build_object('_id', k")
            for accumulator in accumulators {
                sql.appendLiteral(", '\(accumulator.name)', ")
                sql += json1 ? "json(" + self.accumulator(accumulator) + ")" : self.accumulator(accumulator)
            }
            sql.appendLiteral(") AS doc, row_number() OVER (ORDER BY min(ord)) AS ord FROM (SELECT doc, ord, COALESCE(")
            sql += value(key, of: "doc")
            // SQLite before 3.44 has no ORDER BY inside an aggregate: its groups' rows come from a
            // subquery ordered by key and order, which GROUP BY reads in that order.
            sql.appendLiteral(json1 ? ", 'null') AS k FROM \(input) ORDER BY k, ord) AS g GROUP BY k" : ", 'null'::jsonb) AS k FROM \(input)) AS g GROUP BY k")
        case .sort(let keys):
            let terms = keys.map { sortTerms($0.path, descending: $0.descending) } + ["p.ord"]
            sql.appendLiteral("SELECT p.doc, row_number() OVER (ORDER BY \(terms.joined(separator: ", "))) AS ord FROM \(input) AS p")
        case .skip(let count):
            sql.appendLiteral("SELECT doc, ord FROM \(input) ORDER BY ord \(json1 ? "LIMIT -1 " : "")OFFSET \(count)")
        case .limit(let count):
            sql.appendLiteral("SELECT doc, ord FROM \(input) ORDER BY ord LIMIT \(count)")
        case .project(.include(let members)):
            sql.appendLiteral("SELECT ")
            sql += object(members, at: [], of: "doc")
            sql.appendLiteral(" AS doc, ord FROM \(input)")
        case .project(.exclude(let paths)):
            let removed = json1 ? "json_remove(doc, \(paths.map { path($0) }.joined(separator: ", ")))"
                : "doc" + paths.map { " #- \(path($0))" }.joined()
            sql.appendLiteral("SELECT \(removed) AS doc, ord FROM \(input)")
        case .count(let name):
            sql.appendLiteral("SELECT \(json1 ? "json_object" : "jsonb_build_object")('\(name)', count(*)) AS doc, 1 AS ord FROM \(input) HAVING count(*) > 0")
        case .unwind(let field, let preserve, let indexField):
            appendUnwind(field, preserve: preserve, indexField: indexField, from: input, to: &sql)
        }
    }

    /// A condition on the documents of a later stage: the system fields are fields of the
    /// document there, and dates the strings it holds.
    static func onDocuments(_ condition: Condition) -> Condition {
        func field(_ field: QueryField) -> QueryField {
            switch field {
            case .id: .path(["_id"])
            case .path: field
            default: .path([field.name])
            }
        }
        func value(_ field: QueryField, _ value: JSONValue) -> JSONValue {
            guard field == .createdAt || field == .updatedAt, case .number(let micros) = value,
                  let whole = Int64(exactly: micros.rounded(.down)), abs(whole) < 253_402_300_800_000_000 else { return value }
            return .string(Timestamps.format(micros: whole))
        }
        switch condition {
        case .all(let parts): return .all(parts.map(onDocuments))
        case .any(let parts): return .any(parts.map(onDocuments))
        case .none(let parts): return .none(parts.map(onDocuments))
        case .not(let inner): return .not(onDocuments(inner))
        case .compare(let name, let comparison, let operand): return .compare(field(name), comparison, value(name, operand))
        case .oneOf(let name, let operands): return .oneOf(field(name), operands.map { value(name, $0) })
        case .exists(let name, let present): return .exists(field(name), present)
        case .matches(let name, let regex): return .matches(field(name), regex)
        case .containsAll(let name, let operands): return .containsAll(field(name), operands)
        }
    }

    private func appendUnwind(_ field: DocumentPath, preserve: Bool, indexField: String?, from input: String, to sql: inout SQLQueryString) {
        let at = path(field)
        let raw = json1 ? "(p.doc -> \(at))" : "(p.doc #> \(at))"
        let type = json1 ? "json_type(p.doc, \(at))" : "jsonb_typeof(\(raw))"
        /// The document with the index field set (to `index`, JSON), when the stage names one.
        func indexed(_ document: String, _ index: String) -> String {
            guard let indexField else { return document }
            return json1 ? "json_set(\(document), '$.\"\(indexField)\"', \(index))" : "\(document) || jsonb_build_object('\(indexField)', \(index))"
        }
        let null = json1 ? "json('null')" : "NULL::jsonb"
        if json1 {
            let element = "json(CASE e.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE json_quote(e.value) END)"
            sql.appendLiteral("SELECT doc, row_number() OVER (ORDER BY o, i) AS ord FROM (SELECT \(indexed("json_set(p.doc, \(at), \(element))", "e.key")) AS doc, ")
            sql.appendLiteral("p.ord AS o, e.key AS i FROM \(input) AS p, json_each(CASE WHEN \(type) = 'array' THEN \(raw) ELSE '[]' END) AS e")
        } else {
            sql.appendLiteral("SELECT doc, row_number() OVER (ORDER BY o, i) AS ord FROM (SELECT \(indexed("jsonb_set(p.doc, \(at), e.value)", "e.i - 1")) AS doc, ")
            sql.appendLiteral("p.ord AS o, e.i AS i FROM \(input) AS p CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN \(type) = 'array' THEN \(raw) ")
            sql.appendLiteral("ELSE '[]'::jsonb END) WITH ORDINALITY AS e(value, i)")
        }
        // A value that is not an array counts as an array of itself.
        sql.appendLiteral(" UNION ALL SELECT \(indexed("p.doc", null)), p.ord, 0 FROM \(input) AS p WHERE \(type) NOT IN ('array', 'null')")
        if preserve {
            let removed = json1 ? "json_remove(p.doc, \(at))" : "p.doc #- \(at)"
            let empty = json1 ? "'[]'" : "'[]'::jsonb"
            sql.appendLiteral(" UNION ALL SELECT \(indexed("CASE WHEN \(type) = 'array' THEN \(removed) ELSE p.doc END", null)), p.ord, 0 FROM \(input) AS p ")
            sql.appendLiteral("WHERE \(type) IS NULL OR \(type) = 'null' OR (\(type) = 'array' AND \(raw) = \(empty))")
        }
        sql.appendLiteral(") AS u")
    }

    // MARK: Values

    /// The literal of a path: SQLite's `'$."a"."b"'`, PostgreSQL's `'{a,b}'`.
    private func path(_ path: DocumentPath) -> String {
        json1 ? query.sqlitePath(path.segments) : query.postgresPath(path.segments)
    }

    /// An expression's JSON value in the document `doc` (NULL when a field is missing).
    private func value(_ expression: AggregationExpression, of doc: String) -> SQLQueryString {
        switch expression {
        case .field(let field):
            return SQLQueryString("(\(unsafeRaw: doc) \(unsafeRaw: json1 ? "->" : "#>") \(unsafeRaw: path(field)))")
        case .literal(let constant):
            var sql = SQLQueryString(json1 ? "json(" : "CAST(")
            sql.appendInterpolation(bind: constant.jsonText)
            sql.appendLiteral(json1 ? ")" : " AS jsonb)")
            return sql
        case .object(let members):
            return object(members.map { ($0.name, value($0.value, of: doc)) })
        case .array(let elements):
            var sql = SQLQueryString(json1 ? "json_array(" : "jsonb_build_array(")
            for (index, element) in elements.enumerated() {
                if index > 0 { sql.appendLiteral(", ") }
                sql += json1 ? "json(" + value(element, of: doc) + ")" : value(element, of: doc)
            }
            sql.appendLiteral(")")
            return sql
        }
    }

    /// A JSON object of the members whose value is not NULL.
    private func object(_ members: [(String, SQLQueryString)]) -> SQLQueryString {
        guard !members.isEmpty else { return SQLQueryString(json1 ? "json_object()" : "'{}'::jsonb") }
        var sql = SQLQueryString(json1 ? "(SELECT json_group_object(k, json(v)) FROM (" : "(SELECT COALESCE(jsonb_object_agg(k, v), '{}'::jsonb) FROM (")
        for (index, (name, value)) in members.enumerated() {
            sql.appendLiteral(index == 0 ? "SELECT '\(name)' AS k, " : " UNION ALL SELECT '\(name)', ")
            sql += value
            if index == 0 { sql.appendLiteral(" AS v") }
        }
        sql.appendLiteral(") AS members WHERE v IS NOT NULL)")
        return sql
    }

    /// The object a `$project` that includes fields makes of `doc`; `prefix` is where `members` are.
    private func object(_ members: [ProjectedMember], at prefix: [String], of doc: String) -> SQLQueryString {
        object(members.map { member -> (String, SQLQueryString) in
            switch member.value {
            case .copy(let field): return (member.name, value(.field(field), of: doc))
            case .computed(let expression): return (member.name, value(expression, of: doc))
            case .nested(let children):
                let here = prefix + [member.name]
                let nested = object(children, at: here, of: doc)
                if member.alwaysPresent { return (member.name, nested) }
                // Copied fields under a field that is not an object leave it out, as MongoDB does.
                let type = json1 ? "json_type(\(doc), \(query.sqlitePath(here)))" : "jsonb_typeof(\(doc) #> \(query.postgresPath(here)))"
                return (member.name, "CASE WHEN \(unsafeRaw: type) = 'object' THEN " + nested + " END")
            }
        })
    }

    /// The terms of `ORDER BY` for a field: the type's rank in MongoDB's order, then the value of
    /// a number, a string or a boolean (objects and arrays tie, keeping their previous order: the
    /// databases order them differently).
    private func sortTerms(_ field: DocumentPath, descending: Bool) -> String {
        let direction = descending ? "DESC" : "ASC"
        let at = path(field)
        if json1 {
            return "CASE json_type(p.doc, \(at)) WHEN 'integer' THEN 1 WHEN 'real' THEN 1 WHEN 'text' THEN 2 WHEN 'object' THEN 3 WHEN 'array' THEN 4 "
                + "WHEN 'false' THEN 5 WHEN 'true' THEN 5 ELSE 0 END \(direction), "
                + "CASE WHEN json_type(p.doc, \(at)) NOT IN ('object', 'array') THEN json_extract(p.doc, \(at)) END \(direction)"
        }
        let type = "jsonb_typeof(p.doc #> \(at))"
        return "CASE \(type) WHEN 'number' THEN 1 WHEN 'string' THEN 2 WHEN 'object' THEN 3 WHEN 'array' THEN 4 WHEN 'boolean' THEN 5 ELSE 0 END \(direction), "
            + "(CASE WHEN \(type) = 'string' THEN p.doc #>> \(at) END) COLLATE \"C\" \(direction), "
            + "CASE WHEN \(type) IN ('number', 'boolean') THEN p.doc #> \(at) END \(direction)"
    }

    /// An accumulator over the group's rows (`doc`, `ord`) as a JSON value.
    private func accumulator(_ accumulator: Accumulator) -> SQLQueryString {
        let operand = value(accumulator.operand, of: "doc")
        // The operand's value when it is a number, a string, a boolean (SQL values).
        let number: SQLQueryString = json1 ? "CASE WHEN json_type(" + operand + ") IN ('integer', 'real') THEN json_extract(" + operand + ", '$') END"
            : "CASE WHEN jsonb_typeof(" + operand + ") = 'number' THEN (" + operand + ")::numeric END"
        let string: SQLQueryString = json1 ? "CASE WHEN json_type(" + operand + ") = 'text' THEN json_extract(" + operand + ", '$') END"
            : "(CASE WHEN jsonb_typeof(" + operand + ") = 'string' THEN " + operand + " #>> '{}' END) COLLATE \"C\""
        let isTrue: SQLQueryString = json1 ? "json_type(" + operand + ") = 'true'" : "jsonb_typeof(" + operand + ") = 'boolean' AND " + operand + " = 'true'::jsonb"
        let isFalse: SQLQueryString = json1 ? "json_type(" + operand + ") = 'false'" : "jsonb_typeof(" + operand + ") = 'boolean' AND " + operand + " = 'false'::jsonb"
        /// A SQL value as JSON; NULL stays NULL.
        func json(_ aggregate: SQLQueryString) -> SQLQueryString {
            json1 ? "CASE WHEN " + aggregate + " IS NOT NULL THEN json_quote(" + aggregate + ") END" : "to_jsonb(" + aggregate + ")"
        }
        /// A sum or mean as JSON: one past the largest double is written `9e999` or `-9e999`,
        /// which no JSON reader takes (the reply is a 400), as SQLite from 3.42 writes it itself
        /// (before, `Inf`, which fails the statement).
        func finite(_ aggregate: SQLQueryString) -> SQLQueryString {
            "CASE WHEN abs(" + aggregate + ") <= 1.7976931348623157e308 THEN json_quote(" + aggregate + ") WHEN " + aggregate
                + " < 0 THEN '-9e999' WHEN " + aggregate + " > 0 THEN '9e999' END"
        }
        func boolean(_ first: SQLQueryString, _ firstName: String, _ second: SQLQueryString, _ secondName: String) -> SQLQueryString {
            let text = json1 ? "'\(firstName)'" : "'\(firstName)'::jsonb"
            let otherText = json1 ? "'\(secondName)'" : "'\(secondName)'::jsonb"
            return "CASE WHEN max(CASE WHEN " + first + " THEN 1 END) = 1 THEN \(unsafeRaw: text) WHEN max(CASE WHEN " + second
                + " THEN 1 END) = 1 THEN \(unsafeRaw: otherText) END"
        }
        let null: SQLQueryString = json1 ? "'null'" : "'null'::jsonb"
        switch accumulator.kind {
        case .sum:
            return json1 ? finite("total(" + number + ")") : "to_jsonb(COALESCE(sum(" + number + "), 0))"
        case .avg:
            return json1 ? finite("avg(" + number + ")") : json("avg(" + number + ")")
        case .min:
            return "COALESCE(" + json("min(" + number + ")") + ", " + json("min(" + string + ")") + ", " + boolean(isFalse, "false", isTrue, "true") + ")"
        case .max:
            return "COALESCE(" + boolean(isTrue, "true", isFalse, "false") + ", " + json("max(" + string + ")") + ", " + json("max(" + number + ")") + ")"
        case .first, .last:
            let element = accumulator.kind == .first ? (json1 ? "'$[0]'" : "0") : (json1 ? "'$[#-1]'" : "-1")
            return json1 ? "(json_group_array(json(COALESCE(" + operand + ", " + null + "))) -> \(unsafeRaw: element))"
                : "(jsonb_agg(COALESCE(" + operand + ", " + null + ") ORDER BY ord) -> \(unsafeRaw: element))"
        case .push:
            return json1 ? "COALESCE(json_group_array(json(" + operand + ")) FILTER (WHERE " + operand + " IS NOT NULL), '[]')"
                : "COALESCE(jsonb_agg(" + operand + " ORDER BY ord) FILTER (WHERE " + operand + " IS NOT NULL), '[]'::jsonb)"
        }
    }
}

extension ObjectStore {
    /// The largest reply of an aggregation, in bytes of its documents (MongoDB's document limit).
    static let maximumAggregationBytes = 16 << 20

    /// Runs `pipeline` over the objects of `bucket` the actor may read, in the database. At most
    /// `maximumDocuments` documents come back (a 400 asks for a `$limit` otherwise), with at most
    /// ``maximumAggregationBytes`` of documents, so that no pipeline (a `$unwind` of large arrays,
    /// a `$push` of a whole bucket) can fill the gateway's memory.
    func aggregate(bucket: String, pipeline: AggregationPipeline, actor: Actor, maximumDocuments: Int) async throws -> [JSONValue] {
        let statement = AggregationSQL(query: sql).statement(bucket: bucket, actor: actor, pipeline: pipeline, maximumDocuments: maximumDocuments,
                                                             maximumBytes: Self.maximumAggregationBytes)
        let rows = try await database.raw(statement).all()
        guard rows.count <= maximumDocuments else {
            throw GatewayError.badRequest("The pipeline yields more than \(maximumDocuments) documents; end it with a $limit of at most \(maximumDocuments).")
        }
        return try rows.map { row in
            guard let text = try row.decode(column: "doc", as: String?.self) else {
                throw GatewayError.badRequest("The pipeline's results exceed \(Self.maximumAggregationBytes >> 20) MiB; narrow them with $match, $project or $limit.")
            }
            do {
                return try JSONValue.parse(text, maximumDepth: 256)
            } catch {
                throw GatewayError.badRequest("A result of the pipeline cannot be written as JSON (a number out of range?).")
            }
        }
    }
}

extension ObjectService {
    /// The results of `pipeline` over the bucket's objects that the actor may read.
    func aggregate(bucketName: String, pipeline: AggregationPipeline, actor: Actor) async throws -> [JSONValue] {
        let bucket = try await buckets.bucket(bucketName)
        return try await store.aggregate(bucket: bucket.name, pipeline: pipeline, actor: actor, maximumDocuments: maxQueryLimit)
    }
}
