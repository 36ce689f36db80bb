import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import TransitPlugin
import Testing

@Suite("transit: the admin console's feeds page")
struct TransitAdminViewTests {
    static let view = "/v1/admin/plugins/transit/views/feeds"

    @Test("the served feeds with their counts, and each feed's realtime freshness", arguments: TestStorage.available)
    func feeds(storage: TestStorage) async throws {
        try await withTransit(storage) { gateway in
            let admin = try await gateway.administrator()
            gateway.gateway.forgetCredentials()
            let listed = try await gateway.send(.get, "/v1/transit/feeds", token: admin)
            let sample = try #require(listed.items.first)

            let before = try await gateway.send(.get, Self.view, token: admin)
            #expect(before.status == 200, "\(before.text)")
            #expect(before["sections"]?.arrayValue?.compactMap { $0["kind"]?.stringValue } == ["figures", "table"], "no realtime yet: \(before.text)")

            let posted = try await gateway.send(.post, "/v1/transit/feeds/sample/realtime", token: admin, body: ByteBuffer(data: try Messages.morning()),
                                                contentType: "application/x-protobuf")
            #expect(posted.status == 200, "\(posted.text)")

            let page = try await gateway.send(.get, Self.view, token: admin)
            #expect(page.status == 200, "\(page.text)")
            let sections = page["sections"]?.arrayValue ?? []
            #expect(sections.compactMap { $0["kind"]?.stringValue } == ["figures", "table", "table"], "\(page.text)")
            guard sections.count == 3 else { return }
            let figures = sections[0]["figures"]?.arrayValue ?? []
            #expect(figures.first { $0["label"]?.stringValue == "Feeds served" }?["value"]?.stringValue == "1")
            #expect(figures.first { $0["label"]?.stringValue == "Stops" }?["value"]?.stringValue == sample["stops"]?.numberValue.map { String(Int($0)) })

            let feedRows = (sections[1]["rows"]?.arrayValue ?? []).map { ($0["cells"]?.arrayValue ?? []).compactMap(\.stringValue) }
            #expect(feedRows.count == 1)
            let feed = try #require(feedRows.first)
            #expect(feed.first == "sample")
            #expect(feed[1] == "Demo Transit Authority", "\(feed)")
            #expect(feed[2] == sample["stops"]?.numberValue.map { String(Int($0)) })
            #expect(feed[3] == sample["routes"]?.numberValue.map { String(Int($0)) })
            #expect(feed[4] == sample["trips"]?.numberValue.map { String(Int($0)) })
            #expect(feed[8] == "not configured")

            let realtime = (sections[2]["rows"]?.arrayValue ?? []).map { ($0["cells"]?.arrayValue ?? []).compactMap(\.stringValue) }
            let unmatched = Int(posted["unmatchedStops"]?.numberValue ?? -1)
            #expect(realtime == [["sample", "posted to the API", "2010-06-01T15:00:00Z", "0", "5", "1 / \(unmatched)", "received (posted)"]], "\(realtime)")

            let user = try await gateway.register("plain")
            #expect(try await gateway.send(.get, Self.view, token: user.token).status == 403)
        }
    }
}
