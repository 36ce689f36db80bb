import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import FeedsPlugin
import Testing

/// The Xively v2 dialect, spoken the way the LibCOSM Objective-C client speaks it.
@Suite("feeds Xively v2 dialect")
struct XivelyDialectTests {
    static let feedKeys: Set<String> = ["id", "title", "private", "feed", "status", "updated", "created", "creator", "version", "tags",
                                        "description", "website", "location", "datastreams"]
    static let streamKeys: Set<String> = ["id", "current_value", "at", "max_value", "min_value", "tags", "unit", "datapoints"]
    static let locationKeys: Set<String> = ["name", "domain", "exposure", "disposition", "lat", "lon", "ele"]

    /// `2013-01-01T14:14:55.118845Z`: UTC with six fraction digits.
    static func isLegacyTime(_ value: JSONValue?) -> Bool {
        guard let text = value?.string else { return false }
        return text.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"#, options: .regularExpression) != nil
    }

    @Test("the client's flow: create a feed, add datastreams and datapoints, fetch with history, in the exact v2 shapes", arguments: TestStorage.available)
    func clientFlow(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let joe = try await gateway.register("joebloggs")
            let key = try await gateway.createKey(token: joe.token, grant: #"{"label": "phone", "scopes": ["feeds:*"]}"#).secret

            let created = try await gateway.call(.post, "/v2/feeds", key: key, body: #"{"title": "Example Feed", "version": "1.0.0"}"#)
            #expect(created.status == 201)
            #expect(created.text.isEmpty)
            let location = try #require(created.headers[.location])
            #expect(location.hasPrefix("http://localhost/v2/feeds/"))
            let id = String(location.split(separator: "/").last!)

            // A PUT carrying read-only members (as a client that fetched and saves back does) ignores them.
            let put = try await gateway.call(.put, "/v2/feeds/\(id)?key=\(key)", body: """
                {"id": 12345, "status": "frozen", "creator": "https://example.com/users/x", "created": "2000-01-01T00:00:00Z", "updated": "2000-01-01T00:00:00Z",
                 "feed": "https://example.com/v2/feeds/1.json", "version": "1.0.0", "title": "Example Feed", "tags": ["car"], "private": "false",
                 "location": {"name": "garage", "lat": "51.5", "lon": -0.1, "ele": "23.0", "exposure": "indoor"},
                 "datastreams": [{"id": "miles", "current_value": "2399", "unit": {"label": "miles", "symbol": "mi"}, "min_value": "0"}]}
                """)
            #expect(put.status == 200, "\(put.text)")

            let points = try await gateway.call(.post, "/v2/feeds/\(id)/datastreams/miles/datapoints.json", key: key, body: """
                {"datapoints": [{"at": "2010-05-20T11:01:43Z", "value": "13234"}, {"at": "2010-05-20T11:01:44.5Z", "value": "13235.5"}]}
                """)
            #expect(points.status == 200, "\(points.text)")

            let feed = try await gateway.call(.get, "/v2/feeds/\(id).json", key: key)
            #expect(feed.status == 200)
            #expect(feed.json.keys.isSubset(of: Self.feedKeys), "no keys beyond the v2 feed: \(feed.json.keys.subtracting(Self.feedKeys))")
            #expect(feed.json["id"] == .number(Double(id)!))
            #expect(feed.json["private"] == .string("false"))
            #expect(feed.json["version"] == .string("1.0.0"))
            #expect(feed.json["status"] == .string("live"))
            #expect(feed.json["creator"] == .string("http://localhost/users/joebloggs"))
            #expect(feed.json["feed"] == .string("http://localhost/v2/feeds/\(id).json"))
            #expect(Self.isLegacyTime(feed.json["created"]) && Self.isLegacyTime(feed.json["updated"]))
            #expect(feed.json["created"] != .string("2000-01-01T00:00:00.000000Z"))
            #expect(feed.json["location"]?.keys.isSubset(of: Self.locationKeys) == true)
            #expect(feed.json["location"]?["ele"] == .string("23.0"))
            let stream = try #require(feed.json["datastreams"]?[0])
            #expect(stream.keys.isSubset(of: Self.streamKeys), "\(stream.keys)")
            #expect(stream["id"] == .string("miles"))
            #expect(stream["current_value"] == .string("2399"), "values travel as strings; the current value is the latest datapoint (now)")
            #expect(stream["max_value"] == .string("13235.5") && stream["min_value"] == .string("2399"))
            #expect(Self.isLegacyTime(stream["at"]))
            #expect(stream["unit"] == .object(["label": .string("miles"), "symbol": .string("mi")]))
            #expect(stream["datapoints"] == nil, "datapoints only with history parameters")

            // The trailing-slash form, the key in the query, and a history read.
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/?key=\(key)").json["id"] == feed.json["id"])
            let history = try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/miles.json?start=2010-05-20T11:00:00Z&end=2010-05-20T12:00:00Z", key: key)
            #expect(history.json["datapoints"] == .array([
                .object(["at": .string("2010-05-20T11:01:43.000000Z"), "value": .string("13234")]),
                .object(["at": .string("2010-05-20T11:01:44.500000Z"), "value": .string("13235.5")]),
            ]))
            let feedHistory = try await gateway.call(.get, "/v2/feeds/\(id)?start=2010-05-20T11:00:00Z&duration=1hour&datastreams=miles", key: key)
            #expect(feedHistory.json["datastreams"]?[0]?["datapoints"]?.arrayValue?.count == 2)

            // One datapoint, its `at` in the path with unescaped colons, or escaped.
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/miles/datapoints/2010-05-20T11:01:43Z", key: key).json
                    == .object(["at": .string("2010-05-20T11:01:43.000000Z"), "value": .string("13234")]))
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/miles/datapoints/2010-05-20T11%3A01%3A43Z.json", key: key).status == 200)
            #expect(try await gateway.call(.put, "/v2/feeds/\(id)/datastreams/miles/datapoints/2010-05-20T11:01:43Z", key: key, body: #"{"value": "1"}"#).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/miles/datapoints/2010-05-20T11:01:43Z.csv", key: key).text == "2010-05-20T11:01:43.000000Z,1")
            #expect(try await gateway.call(.delete, "/v2/feeds/\(id)/datastreams/miles/datapoints/2010-05-20T11:01:43Z", key: key).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/miles/datapoints/2010-05-20T11:01:43Z", key: key).status == 404)

            // New datastreams: 201 with the Location; a second time is a 422 (v2 has no 409).
            let newStream = try await gateway.call(.post, "/v2/feeds/\(id)/datastreams", key: key,
                                                   body: #"{"version": "1.0.0", "datastreams": [{"id": "Temperature", "current_value": "21"}]}"#)
            #expect(newStream.status == 201)
            #expect(newStream.headers[.location] == "http://localhost/v2/feeds/\(id)/datastreams/Temperature")
            let again = try await gateway.call(.post, "/v2/feeds/\(id)/datastreams.json", key: key, body: #"{"datastreams": [{"id": "Temperature"}]}"#)
            #expect(again.status == 422)
            #expect(again.json.keys == ["title", "errors"])
            #expect(try await gateway.call(.put, "/v2/feeds/\(id)/datastreams/Temperature", key: key, body: #"{"current_value": "22.5", "id": "ignored"}"#).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/Temperature", key: key).json["current_value"] == .string("22.5"))

            // CSV in and out.
            #expect(try await gateway.call(.post, "/v2/feeds/\(id)/datastreams/Temperature/datapoints.csv", key: key,
                                            body: "2010-05-20T10:00:00Z,18\n2010-05-20T10:05:00Z,18.5\n").status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/Temperature.csv?start=2010-05-20T00:00:00Z&duration=1day", key: key).text
                    == "2010-05-20T10:00:00.000000Z,18\n2010-05-20T10:05:00.000000Z,18.5")
            #expect(try await gateway.call(.put, "/v2/feeds/\(id).csv", key: key, body: "Temperature,23\nmiles,2400\n").status == 200)
            let csvFeed = try await gateway.call(.get, "/v2/feeds/\(id).csv", key: key).text.split(separator: "\n").map { $0.split(separator: ",") }
            #expect(csvFeed.map { [String($0[0]), String($0[2])] } == [["Temperature", "23"], ["miles", "2400"]])
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)", key: key, headers: [.accept: "text/csv"]).text.hasPrefix("Temperature,"))

            // Range delete.
            #expect(try await gateway.call(.delete, "/v2/feeds/\(id)/datastreams/Temperature/datapoints?start=2010-05-20T09:00:00Z&duration=2hours", key: key).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/Temperature.csv?start=2010-05-20T00:00:00Z&duration=1day", key: key).text.isEmpty)

            // The feed list.
            let list = try await gateway.call(.get, "/v2/feeds.json?per_page=10&page=1&user=joebloggs", key: key)
            #expect(list.json.keys == ["totalResults", "itemsPerPage", "startIndex", "results"])
            #expect(list.json["totalResults"] == .number(1) && list.json["itemsPerPage"] == .number(10) && list.json["startIndex"] == .number(0))
            #expect(list.json["results"]?[0]?.keys.isSubset(of: Self.feedKeys) == true)

            #expect(try await gateway.call(.delete, "/v2/feeds/\(id)/datastreams/Temperature", key: key).status == 200)
            #expect(try await gateway.call(.delete, "/v2/feeds/\(id)", key: key).status == 200)
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)", key: key).status == 404)
        }
    }

    @Test("errors: {title, errors} bodies with the v2 status codes", arguments: TestStorage.available)
    func errors(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let joe = try await gateway.register("joe")
            let kim = try await gateway.register("kim")
            let key = try await gateway.createKey(token: joe.token, grant: #"{"label": "rw", "scopes": ["feeds:*"]}"#).secret
            let readKey = try await gateway.createKey(token: joe.token, grant: #"{"label": "r", "scopes": ["feeds:read"]}"#).secret
            let kimKey = try await gateway.createKey(token: kim.token, grant: #"{"label": "k", "scopes": ["feeds:*"]}"#).secret

            func expectError(_ reply: Reply, _ status: Int, _ title: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
                #expect(reply.status == status, "\(reply.text)", sourceLocation: sourceLocation)
                #expect(reply.json.keys == ["title", "errors"], "\(reply.text)", sourceLocation: sourceLocation)
                if let title { #expect(reply.json["title"] == .string(title), sourceLocation: sourceLocation) }
            }
            expectError(try await gateway.call(.post, "/v2/feeds", key: key, body: #"{"description": "no title"}"#), 422, "Unprocessable Entity")
            expectError(try await gateway.call(.post, "/v2/feeds", key: key, body: #"{"title": "#), 400, "JSON Parser Error")
            expectError(try await gateway.call(.post, "/v2/feeds", body: #"{"title": "t"}"#), 401)
            expectError(try await gateway.call(.get, "/v2/feeds", key: "not-a-key"), 401)
            expectError(try await gateway.call(.post, "/v2/feeds", key: readKey, body: #"{"title": "t"}"#), 403)
            expectError(try await gateway.call(.get, "/v2/feeds/424242", key: key), 404, "Not found")
            expectError(try await gateway.call(.get, "/v2/feeds/abc.json", key: key), 404)
            expectError(try await gateway.call(.get, "/v2/feeds.xml", key: key), 406)

            let secret = try await gateway.call(.post, "/v2/feeds", key: key, body: #"{"title": "Private", "private": "true", "datastreams": [{"id": "a"}]}"#)
            let id = String(try #require(secret.headers[.location]).split(separator: "/").last!)
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)", key: key).status == 200)
            expectError(try await gateway.call(.get, "/v2/feeds/\(id)", key: kimKey), 404)
            expectError(try await gateway.call(.get, "/v2/feeds/\(id)"), 404)
            #expect(try await gateway.call(.get, "/v2/feeds", key: kimKey).json["totalResults"] == .number(0), "a private feed is not listed for others")

            let points = "/v2/feeds/\(id)/datastreams/a/datapoints"
            expectError(try await gateway.call(.post, points, key: key, body: #"{"datapoints": [{"at": "2010-01-01T00:00:00Z", "value": "high"}]}"#), 422)
            expectError(try await gateway.call(.post, points, key: key, body: #"{"datapoints": [{"at": "2099-01-01T00:00:00Z", "value": "1"}]}"#), 422)
            expectError(try await gateway.call(.post, points, key: key, body: #"{"datapoints": [{"at": "20100101", "value": "1"}]}"#), 422)
            expectError(try await gateway.call(.post, "/v2/feeds/\(id)/datastreams/zz/datapoints", key: key, body: #"{"datapoints": [{"value": "1"}]}"#), 404)
            // Legacy interval rules: rounded up to the next interval, each with its largest range.
            #expect(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/a?duration=6hours&interval=45", key: key).status == 200)
            expectError(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/a?duration=2days&interval=60", key: key), 400)
            expectError(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/a?duration=2days&interval=90000", key: key), 400)
            expectError(try await gateway.call(.get, "/v2/feeds/\(id)/datastreams/a?limit=5000", key: key), 400)
        }
    }
}
