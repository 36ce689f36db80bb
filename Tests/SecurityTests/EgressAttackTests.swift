import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import SQLKit
import ServiceLifecycle
import Synchronization
import Testing

/// A resolver that answers from a table, as an attacker's DNS would, and fails for other names.
private struct AttackerDNS: EgressResolver {
    let table: [String: String]

    func addresses(of host: String) async throws -> [IPAddress] {
        guard let address = table[host.lowercased()].flatMap({ IPAddress(host: $0) }) else { throw GatewayError.badGateway("no such name") }
        return [address]
    }
}

/// A service on loopback standing for what lives inside the network: it counts every request,
/// answers `/hook` (a trigger's target) with what `hookAnswer` says, and `/internal` with a secret.
private final class InsideService: Sendable {
    let hits = Atomic<Int>(0)
    let internalHits = Atomic<Int>(0)
    /// `nil`: 200; otherwise a redirect to this path.
    let redirect: String?

    init(redirectingTo redirect: String? = nil) { self.redirect = redirect }

    func serve<R: Sendable>(_ body: @Sendable (Int) async throws -> R) async throws -> R {
        let router = Router()
        router.post("/hook") { _, _ -> Response in
            self.hits.add(1, ordering: .relaxed)
            guard let redirect = self.redirect else { return Response(status: .ok) }
            return Response(status: .found, headers: [.location: redirect])
        }
        for method in [HTTPRequest.Method.get, .post] {
            router.on("/internal", method: method) { _, _ -> String in
                self.internalHits.add(1, ordering: .relaxed)
                return "the inside's secret"
            }
        }
        return try await withLoopbackServer(router) { port in try await body(port) }
    }
}

extension ShippedGateway {
    /// A feed of `token`'s user with one datastream `temp`; its id.
    func feed(token: String) async throws -> Int {
        let reply = try await send(.POST, "/v1/feeds", headers: [("Authorization", "Bearer \(token)")],
                                   json: #"{"title": "Greenhouse", "datastreams": [{"id": "temp"}]}"#)
        return try #require((reply.json?["id"] as? NSNumber)?.intValue ?? (reply.json?["id"] as? String).flatMap { Int($0) }, "\(reply.body)")
    }

    /// Creates a `change` trigger on the feed's `temp` posting to `url`.
    func createTrigger(feed: Int, url: String, token: String) async throws -> Reply {
        try await send(.POST, "/v1/feeds/triggers", headers: [("Authorization", "Bearer \(token)")],
                       json: #"{"feed": \#(feed), "datastream": "temp", "url": "\#(url)", "type": "change"}"#)
    }

    /// Fires the feed's triggers (a new value of `temp`), runs the feeds plugin's background
    /// services until the first delivery has been tried, and answers that delivery as the
    /// owner's delivery log shows it.
    func fireAndDeliver(feed: Int, trigger: String, token: String) async throws -> [String: Any] {
        let posted = try await send(.POST, "/v1/feeds/\(feed)/datastreams/temp/datapoints", headers: [("Authorization", "Bearer \(token)")],
                                    json: #"[{"value": \#(Int.random(in: 1...1000))}]"#)
        #expect(posted.status == 200, "\(posted.body)")
        let services = try #require(gateway.plugins.first { $0.id == "feeds" }).instance.services
        return try await withThrowingTaskGroup(of: Void.self) { group in
            for service in services { group.addTask { try await service.run() } }
            defer { group.cancelAll() }
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                let log = try await send(.GET, "/v1/feeds/triggers/\(trigger)/deliveries", headers: [("Authorization", "Bearer \(token)")])
                if let first = (log.json?["items"] as? [[String: Any]])?.last, ((first["attempts"] as? NSNumber)?.intValue ?? 0) >= 1 {
                    return first
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            Issue.record("no delivery was tried")
            return [:]
        }
    }
}

/// Item: URLs a caller sets (trigger targets) must not lead the gateway into its own network,
/// whatever the spelling, the name or the redirect.
@Suite("attack: egress to internal addresses through trigger URLs (SSRF)")
struct EgressAttackTests {
    /// The six spellings of loopback that a check of the text alone let through.
    static let loopbackSpellings = ["http://[0:0:0:0:0:0:0:1]/", "http://[::ffff:7f00:1]/", "http://2130706433/", "http://127.1/",
                                    "http://0177.0.0.1/", "http://0x7f.0.0.1/"]

    @Test("every spelling of loopback (and metadata, private and link-local forms) is refused at creation with 422 naming /url",
          arguments: securityStorages)
    func spellingsRefused(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage) { gateway in
            let mallory = try await gateway.register("mallory")
            let feed = try await gateway.feed(token: mallory.token)
            let others = ["http://0x7f000001:8080/hook", "http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/",
                          "http://[fd00:ec2::254]/", "http://0xa9fea9fe/", "http://10.1/", "http://[fe80::1]/", "http://100.64.0.1/",
                          "http://localhost./", "http://metadata.google.internal/", "http://0/"]
            for url in Self.loopbackSpellings + others {
                let reply = try await gateway.createTrigger(feed: feed, url: url, token: mallory.token)
                #expect(reply.status == 422, "\(url): \(reply.status) \(reply.body)")
                let pointers = (reply.json?["errors"] as? [[String: Any]])?.compactMap { $0["pointer"] as? String } ?? []
                #expect(pointers == ["/url"], "\(url): \(reply.body)")
            }
            // Changing a trigger's URL is held to the same rule.
            let created = try await gateway.createTrigger(feed: feed, url: "https://hooks.example.org/ok", token: mallory.token)
            #expect(created.status == 201, "\(created.body)")
            let id = try #require((created.json?["id"] as? NSNumber)?.stringValue ?? created.json?["id"] as? String)
            for url in Self.loopbackSpellings {
                let reply = try await gateway.send(.PUT, "/v1/feeds/triggers/\(id)", headers: [("Authorization", "Bearer \(mallory.token)")],
                                                   json: #"{"url": "\#(url)"}"#)
                #expect(reply.status == 422, "\(url): \(reply.status) \(reply.body)")
            }
            // The v2 dialect's triggers too.
            for url in Self.loopbackSpellings {
                let reply = try await gateway.send(.POST, "/v2/triggers", headers: [("Authorization", "Bearer \(mallory.token)")],
                                                   json: #"{"trigger": {"environment_id": \#(feed), "stream_id": "temp", "url": "\#(url)", "trigger_type": "change"}}"#)
                #expect(reply.status == 422, "\(url): \(reply.status) \(reply.body)")
            }
            let listed = try await gateway.send(.GET, "/v1/feeds/triggers", headers: [("Authorization", "Bearer \(mallory.token)")])
            #expect((listed.json?["items"] as? [Any])?.count == 1, "\(listed.body)")
        }
    }

    @Test("a public-looking name that resolves to 127.0.0.1 is refused when the delivery is sent", arguments: securityStorages)
    func nameResolvingInside(storage: TestStorage) async throws {
        let inside = InsideService()
        try await inside.serve { port in
            try await ShippedGateway.with(storage: storage, configure: { $0.egressResolver = AttackerDNS(table: ["hooks.attacker.example": "127.0.0.1"]) }) { gateway in
                let mallory = try await gateway.register("mallory")
                let feed = try await gateway.feed(token: mallory.token)
                // The name passes the check of the text: only its address tells.
                let created = try await gateway.createTrigger(feed: feed, url: "http://hooks.attacker.example:\(port)/hook", token: mallory.token)
                #expect(created.status == 201, "\(created.body)")
                let id = try #require((created.json?["id"] as? NSNumber)?.stringValue)
                let delivery = try await gateway.fireAndDeliver(feed: feed, trigger: id, token: mallory.token)
                #expect(delivery["status"] as? String != "delivered", "\(delivery)")
                #expect((delivery["error"] as? String)?.contains("loopback") == true, "\(delivery)")
                #expect(inside.hits.load(ordering: .relaxed) == 0)
            }
        }
    }

    @Test("a stored trigger naming localhost is refused when the delivery is sent (the system resolver's answer is checked)",
          arguments: securityStorages)
    func localhostAtDelivery(storage: TestStorage) async throws {
        let inside = InsideService()
        try await inside.serve { port in
            try await ShippedGateway.with(storage: storage) { gateway in
                let mallory = try await gateway.register("mallory")
                let feed = try await gateway.feed(token: mallory.token)
                let created = try await gateway.createTrigger(feed: feed, url: "https://hooks.example.org/hook", token: mallory.token)
                let id = try #require((created.json?["id"] as? NSNumber)?.stringValue, "\(created.body)")
                // A trigger stored before its URL would be refused (an older version, a restored backup).
                try await gateway.gateway.database.sql.raw("UPDATE feeds_triggers SET url = \(bind: "http://localhost:\(port)/hook") WHERE id = \(bind: Int64(id)!)").run()
                let delivery = try await gateway.fireAndDeliver(feed: feed, trigger: id, token: mallory.token)
                #expect(delivery["status"] as? String != "delivered", "\(delivery)")
                #expect((delivery["error"] as? String)?.contains("loopback") == true, "\(delivery)")
                #expect(inside.hits.load(ordering: .relaxed) == 0)
            }
        }
    }

    @Test("a redirect from an allowed target to an internal address is not followed", arguments: securityStorages)
    func redirectNotFollowed(storage: TestStorage) async throws {
        let inside = InsideService(redirectingTo: "/internal")
        try await inside.serve { port in
            // The operator allows internal targets, so that the first hop can be a real server on
            // loopback: the redirect is still not followed.
            let edit: @Sendable (String) -> String = { $0.replacingOccurrences(of: "triggerPrivateTargets: false", with: "triggerPrivateTargets: true") }
            try await ShippedGateway.with(storage: storage, edit: edit) { gateway in
                let mallory = try await gateway.register("mallory")
                let feed = try await gateway.feed(token: mallory.token)
                let created = try await gateway.createTrigger(feed: feed, url: "http://127.0.0.1:\(port)/hook", token: mallory.token)
                let id = try #require((created.json?["id"] as? NSNumber)?.stringValue, "\(created.body)")
                let delivery = try await gateway.fireAndDeliver(feed: feed, trigger: id, token: mallory.token)
                #expect(inside.hits.load(ordering: .relaxed) >= 1)
                #expect(inside.internalHits.load(ordering: .relaxed) == 0)
                #expect((delivery["responseStatus"] as? NSNumber)?.intValue == 302, "\(delivery)")
                #expect(delivery["status"] as? String != "delivered", "\(delivery)")
            }
        }
    }
}
