import GatewayCore
import GatewaySupport
import NIOCore
import SQLKit
@testable import TodoPlugin

/// The todo plugin's query language (`where`, `order`, `cursor`), its `$regex` check and engine,
/// and the NEC BaaS aggregation pipeline, each parsed and then written out as SQL for both databases.
enum TodoFuzz {
    /// Three lines: a `where` (JSON text, as in the query string), an `order`, a `cursor`.
    static let query: FuzzTargets.Target = { bytes in
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", maxSplits: 2, omittingEmptySubsequences: false)
        let whereText = lines.first.map(String.init) ?? ""
        let order = lines.count > 1 ? String(lines[1]) : nil
        let cursor = lines.count > 2 ? String(lines[2]) : nil
        guard let whereValue = try? JSONValue.parse(whereText) else { return }
        guard let query = try? TodoPlugin.makeQuery(where: whereValue, order: order, limit: 10, cursor: cursor, skip: nil, count: true,
                                                    fields: nil, maxLimit: 100, location: "query.") else { return }
        for sqlite in [true, false] {
            let writer = QuerySQL(json: sqlite ? .json1 : .jsonb)
            var sql = SQLQueryString("")
            if let condition = query.condition { writer.append(condition, to: &sql) }
            if let cursor = query.cursor { writer.appendAfter(cursor, keys: query.order, to: &sql) }
            writer.appendVisibility(for: Actor(userID: "u1", authority: .tenant("t"), groups: ["g"]), to: &sql)
            _ = writer.orderBy(query.order)
        }
    }

    /// A `$regex` pattern on the first line, a value to match on the rest: the guard, the portable
    /// spellings, and the linear engine SQLite's `REGEXP` runs.
    static let regex: FuzzTargets.Target = { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        let parts = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        let pattern = String(parts[0])
        let value = parts.count > 1 ? String(parts[1].prefix(RegexGuard.matchedPrefix)) : ""
        guard RegexGuard.problem(in: pattern) == nil else { return }
        for caseInsensitive in [false, true] {
            guard let portable = try? PortableRegex(pattern, caseInsensitive: caseInsensitive),
                  let engine = try? LinearRegex(portable.icu) else { continue }
            _ = engine.matches(value)
        }
    }

    /// An `_aggregate` body, as the dialect reads it (with the order of its keys), and its SQL.
    static let aggregate: FuzzTargets.Target = { bytes in
        guard let body = try? JSONValue.parse(ByteBuffer(bytes: bytes)) else { return }
        guard let pipeline = try? AggregationPipeline(body: body, keyOrder: JSONKeyOrder.scan(Array(bytes))) else { return }
        for sqlite in [true, false] {
            _ = AggregationSQL(query: QuerySQL(json: sqlite ? .json1 : .jsonb)).statement(bucket: "todos", actor: .anonymous, pipeline: pipeline,
                                                                          maximumDocuments: 1_000, maximumBytes: 1 << 20)
        }
    }
}
