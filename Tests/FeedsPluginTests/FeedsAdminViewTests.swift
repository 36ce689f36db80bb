import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
@testable import FeedsPlugin
import Testing

@Suite("feeds: the admin console's datastream page")
struct FeedsAdminViewTests {
    static let view = "/v1/admin/plugins/feeds/views/datastream"

    @Test("recent datastreams to choose from; a chosen one's chart and latest value; the form's action", arguments: TestStorage.available)
    func datastream(storage: TestStorage) async throws {
        try await withFeeds(storage) { gateway in
            let ann = try await gateway.register("ann")
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token,
                                              body: #"{"title": "Garden", "private": true, "datastreams": [{"id": "soil", "unit": {"symbol": "%"}}, {"id": "air"}]}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            let posted = try await gateway.call(.post, "/v1/feeds/\(id)/datastreams/soil/datapoints", token: ann.token,
                                                body: #"{"datapoints": [{"at": "\#(at(-300))", "value": "10.5"}, {"at": "\#(at(-200))", "value": 12}, {"at": "\#(at(-100))", "value": "-3"}]}"#)
            #expect(posted.status == 200, "\(posted.text)")
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            gateway.gateway.forgetCredentials(userID: root.userID)

            // No datastream named: the form, empty, and the recently updated datastreams (private feeds too).
            let page = try await gateway.call(.get, Self.view, token: root.token)
            #expect(page.status == 200, "\(page.text)")
            #expect(page.json["refresh"] == .number(5))
            let sections = page.json["sections"]?.arrayValue ?? []
            #expect(sections.compactMap { $0["kind"]?.string } == ["form", "table"], "\(page.text)")
            #expect(sections.first?["fields"]?.arrayValue?.compactMap { $0["name"]?.string } == ["feed", "stream"])
            #expect(sections.first?["action"]?.string == "", "the form shows the view again with its fields as arguments")
            let rows = sections.last?["rows"]?.arrayValue ?? []
            #expect(Set(rows.compactMap { $0["cells"]?[2]?.string }) == ["soil", "air"], "\(page.text)")
            let soil = try #require(rows.first { $0["cells"]?[2]?.string == "soil" })
            #expect(soil["cells"]?[0]?.string == String(id))
            #expect(soil["cells"]?[3]?.string == "-3 %")
            #expect(soil["cells"]?[4]?.string == at(-100).replacingOccurrences(of: ".000000", with: ""))

            // One named (the arguments are the page's query): its figures and its chart, oldest first.
            let arguments = "feed=\(id)&stream=soil".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let chosen = try await gateway.call(.get, Self.view + "?arguments=" + arguments, token: root.token)
            #expect(chosen.status == 200, "\(chosen.text)")
            let parts = chosen.json["sections"]?.arrayValue ?? []
            #expect(parts.compactMap { $0["kind"]?.string } == ["form", "figures", "chart"], "\(chosen.text)")
            #expect(parts.first?["fields"]?[0]?["value"]?.string == String(id), "the form shows the choice")
            let figures = parts.count > 1 ? parts[1]["figures"]?.arrayValue ?? [] : []
            #expect(figures.first { $0["label"]?.string == "Last value" }?["value"]?.string == "-3 %", "\(chosen.text)")
            #expect(figures.first { $0["label"]?.string == "Datapoints stored" }?["value"]?.string == "3", "\(chosen.text)")
            let points = parts.last?["points"]?.arrayValue ?? []
            #expect(points.map { $0["value"] } == [.number(10.5), .number(12), .number(-3)], "\(chosen.text)")

            // An unknown datastream: said, beside the form.
            let unknown = try await gateway.call(.get, Self.view + "?arguments=" + ("feed=\(id)&stream=rain".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""),
                                                 token: root.token)
            #expect(unknown.json["sections"]?[1]?["kind"]?.string == "text", "\(unknown.text)")

            let shown = try await gateway.call(.post, Self.view + "/actions/show", token: root.token, body: #"{"arguments": {"feed": "\#(id)", "stream": "soil"}}"#)
            #expect(shown.status == 200, "\(shown.text)")
            #expect(shown.json["message"]?.string?.hasPrefix("\(id)/soil: -3 %") == true, "\(shown.text)")
            #expect(try await gateway.call(.post, Self.view + "/actions/show", token: root.token,
                                           body: #"{"arguments": {"feed": "\#(id)", "stream": "rain"}}"#).status == 404)
            #expect(try await gateway.call(.post, Self.view + "/actions/show", token: root.token,
                                           body: #"{"arguments": {"feed": "x", "stream": "soil"}}"#).status == 422)
            #expect(try await gateway.call(.get, Self.view, token: ann.token).status == 403)
        }
    }
}
