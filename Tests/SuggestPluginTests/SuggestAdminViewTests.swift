import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NIOFoundationCompat
@testable import SuggestPlugin
import Testing

@Suite("suggest: the admin console's index page")
struct SuggestAdminViewTests {
    static let view = "/v1/admin/plugins/suggest/views/index"

    /// The reply's JSON as an object.
    static func object(_ body: ByteBuffer) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any])
    }

    @Test("the index's size and dictionaries, a query tried from the form, and its suggestions when the page names one")
    func index() async throws {
        try await withSuggest { gateway in
            let root = try await gateway.register("root")
            try await gateway.gateway.accounts.setAdmin(userID: root.userID, true)
            gateway.gateway.forgetCredentials(userID: root.userID)
            let auth: HTTPFields = [.authorization: "Bearer \(root.token)", .contentType: "application/json"]

            let plain = try await gateway.gateway.handle(.get, Self.view, headers: auth)
            #expect(plain.status == 200, "\(String(buffer: plain.body))")
            let page = try Self.object(plain.body)
            let sections = try #require(page["sections"] as? [[String: Any]])
            #expect(sections.map { $0["kind"] as? String } == ["figures", "table", "form"])
            let figures = try #require(sections[0]["figures"] as? [[String: String]])
            #expect(figures.first { $0["label"] == "Terms in the index" }?["value"] == "5")
            #expect(figures.first { $0["label"] == "Dictionaries" }?["value"] == "1")
            #expect((sections[1]["rows"] as? [[String: Any]])?.first?["cells"] as? [String] == ["test", "5"])
            #expect((sections[2]["fields"] as? [[String: String]])?.map { $0["name"] } == ["q", "limit"])

            // The form's action answers with the suggestions.
            let tried = try await gateway.gateway.handle(.post, Self.view + "/actions/try", headers: auth,
                                                         body: ByteBuffer(string: #"{"arguments": {"q": "北", "limit": "10"}}"#))
            #expect(tried.status == 200, "\(String(buffer: tried.body))")
            #expect(try Self.object(tried.body)["message"] as? String == "3 suggestions for '北': 北京 Beijing, 北京大學 Peking University, 北海")
            let none = try await gateway.gateway.handle(.post, Self.view + "/actions/try", headers: auth, body: ByteBuffer(string: #"{"arguments": {"q": "zzz"}}"#))
            #expect(try Self.object(none.body)["message"] as? String == "No suggestions for 'zzz'.")
            #expect(try await gateway.gateway.handle(.post, Self.view + "/actions/try", headers: auth, body: ByteBuffer(string: #"{"arguments": {}}"#)).status == 422)

            // With `q` in the page's arguments: a table of the suggestions, their weights and how they matched.
            let arguments = "q=jack&limit=5".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let queried = try await gateway.gateway.handle(.get, Self.view + "?arguments=" + arguments, headers: auth)
            #expect(queried.status == 200, "\(String(buffer: queried.body))")
            let parts = try #require(try Self.object(queried.body)["sections"] as? [[String: Any]])
            #expect(parts.map { $0["kind"] as? String } == ["figures", "table", "form", "table"])
            #expect((parts[2]["fields"] as? [[String: String]])?.first?["value"] == "jack", "the form shows the query")
            let rows = (parts[3]["rows"] as? [[String: Any]] ?? []).compactMap { $0["cells"] as? [String] }
            #expect(rows == [["1", "Michael Jackson — Thriller", "Michael Jackson", "80", "test", "word prefix"],
                             ["2", "Jack Johnson", "Jack Johnson", "30", "test", "keyword prefix"]], "\(rows)")

            let user = try await gateway.register("plain")
            #expect(try await gateway.gateway.handle(.get, Self.view, headers: [.authorization: "Bearer \(user.token)"]).status == 403)
        }
    }
}
