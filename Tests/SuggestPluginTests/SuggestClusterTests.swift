import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import ServiceLifecycle
@testable import SuggestPlugin
import Testing

@Suite("suggest across instances", .enabled(if: TestStorage.available.contains(.postgres)))
struct SuggestClusterTests {
    @Test("a term changed, removed or a dictionary imported through one instance reaches the other's index")
    func changesReachEveryIndex() async throws {
        try await TestGateway.withTwoListening(suggest, yaml: "plugins:\n  suggest: {}\n") { first, second in
            let other = try #require(second.plugins.first { $0.id == "suggest" }?.instance as? SuggestPlugin)
            let listener = try #require(other.services.first)
            let task = Task { try await listener.run() }
            defer { task.cancel() }
            try await Task.sleep(for: .milliseconds(100))   // subscribed

            let editor = try await TestGateway(gateway: first, storage: .postgres).register("editor")
            try await first.accounts.grant(["suggest:write"], to: editor.userID)
            let auth: HTTPFields = [.authorization: "Bearer \(editor.token)", .contentType: "application/json"]
            let put = #"{"keyword": "Taipei 101", "text": "Taipei 101 tower", "weight": 1000}"#
            #expect(try await first.handle(.put, "/v1/suggest/terms", headers: auth, body: ByteBuffer(string: put)).status == 200)
            let seen = try await eventually(within: .seconds(15)) { try await Self.suggests(second, "tai").contains("Taipei 101 tower") }
            #expect(seen, "the other instance's index did not get the new term")

            #expect(try await first.handle(.delete, "/v1/suggest/terms/custom/Taipei%20101", headers: auth).status == 204)
            let gone = try await eventually(within: .seconds(15)) { try await Self.suggests(second, "tai").contains("Taipei") == false }
            #expect(gone, "the other instance still suggests the removed term")

            let mine = try #require(first.plugins.first { $0.id == "suggest" }?.instance as? SuggestPlugin)
            try await mine.store.replace(dictionary: "films", with: [Term(dictionary: "films", keyword: "Zardoz", text: "Zardoz (1974)", weight: 5)])
            let imported = try await eventually(within: .seconds(15)) { try await Self.suggests(second, "zar").contains("Zardoz (1974)") }
            #expect(imported, "the other instance's index did not get the imported dictionary")
        }
    }

    static func suggests(_ gateway: Gateway, _ query: String) async throws -> String {
        String(buffer: try await gateway.handle(.get, "/v1/suggest?q=\(query)", headers: [.cacheControl: "no-cache"]).body)
    }
}
