import GatewayCore
import HTTPTypes
@testable import GatewayServer

/// A request's target: its path resolved on a route table like the gateway's (literals, parameters,
/// a rest parameter; parameters percent-decoded) and its query string split and decoded.
enum HTTPFuzz {
    static let table: RouteTable<Int> = {
        var table = RouteTable<Int>()
        let templates = ["/healthz", "/v1/todos", "/v1/todos/{id}", "/v1/todos/{id}/done", "/v1/batch", "/v1/me/keys/{key}",
                         "/1/{tenant}/objects/{bucket}", "/1/{tenant}/objects/{bucket}/_aggregate", "/1/{tenant}/objects/{bucket}/{object}",
                         "/v2/feeds/{feed}/datastreams/{stream}/datapoints", "/v2/feeds/{feed}/datastreams/{stream}/datapoints/{at}",
                         "/v1/upstream/{service}/{rest...}", "/v1/files/{rest...}"]
        for (index, template) in templates.enumerated() {
            try! table.add(.get, template, index)
            try! table.add(.post, template, -index)
        }
        return table
    }()

    static let path: FuzzTargets.Target = { bytes in
        let target = String(decoding: bytes, as: UTF8.self)
        let withoutFragment = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
        let parts = withoutFragment.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        for method in [HTTPRequest.Method.get, .head, .delete] {
            _ = try? table.resolve(method, path: parts[0])
        }
        _ = PercentDecoding.decode(parts[0])
        if parts.count > 1 {
            if let pairs = try? PercentDecoding.queryParameters(parts[1]) {
                for pair in pairs { _ = PercentEncoding.component(pair.value) }
            }
        }
    }
}
