import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import Hummingbird
import NIOCore
@testable import FeedsPlugin
import Synchronization
import Testing

/// A web hook on loopback that records what triggers POST, answering 200 or, when told, 500.
final class HookReceiver: Sendable {
    let failing = Mutex(false)
    let bodies = Mutex<[JSONValue]>([])

    func serve<R: Sendable>(_ body: @Sendable (String) async throws -> R) async throws -> R {
        let router = Router()
        router.post("/hook") { request, _ -> Response in
            let bytes = try await request.body.collect(upTo: 1 << 20)
            self.bodies.withLock { $0.append((try? JSONValue.parse(bytes)) ?? .null) }
            return Response(status: self.failing.withLock { $0 } ? .internalServerError : .ok)
        }
        return try await withLoopbackServer(router) { port in try await body("http://127.0.0.1:\(port)/hook") }
    }
}

@Suite("feeds triggers")
struct FeedsTriggerTests {
    @Test("threshold, change, frozen and live triggers fire, POST the notification, retry with backoff, log each attempt and tell the owner", arguments: TestStorage.available)
    func triggers(storage: TestStorage) async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
        let hook = HookReceiver()
        try await hook.serve { url in
            try await withFeeds(storage, clock: clock) { gateway in
                let engine = try gateway.feedsPlugin.service.triggers
                let ann = try await gateway.register("ann")
                let bob = try await gateway.register("bob")
                let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Greenhouse", "datastreams": [{"id": "temp", "unit": {"symbol": "C"}}]}"#)
                let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
                let points = "/v1/feeds/\(id)/datastreams/temp/datapoints"
                func send(_ value: Double) async throws {
                    clock.advance(by: 1)
                    #expect(try await gateway.call(.post, points, token: ann.token, body: #"[{"value": \#(value)}]"#).status == 200)
                }

                // Bad triggers.
                for (body, pointer) in [(#"{"feed": \#(id), "datastream": "temp", "url": "\#(url)", "type": "gt"}"#, "/threshold"),
                                        (#"{"feed": \#(id), "datastream": "temp", "url": "ftp://x", "type": "change"}"#, "/url"),
                                        (#"{"feed": \#(id), "datastream": "temp", "url": "\#(url)", "type": "above", "threshold": 1}"#, "/type"),
                                        (#"{"datastream": "temp", "url": "\#(url)", "type": "change"}"#, "/feed")] {
                    let reply = try await gateway.call(.post, "/v1/feeds/triggers", token: ann.token, body: body)
                    #expect(reply.status == 422, "\(body)")
                    #expect(reply.json["errors"]?[0]?["pointer"] == .string(pointer), "\(reply.text)")
                }
                #expect(try await gateway.call(.post, "/v1/feeds/triggers", token: ann.token,
                                                body: #"{"feed": \#(id), "datastream": "nope", "url": "\#(url)", "type": "change"}"#).status == 404)
                #expect(try await gateway.call(.post, "/v1/feeds/triggers", body: #"{"feed": \#(id), "datastream": "temp", "url": "\#(url)", "type": "change"}"#).status == 401)

                let created = try await gateway.call(.post, "/v1/feeds/triggers", token: ann.token,
                                                     body: #"{"feed": \#(id), "datastream": "temp", "url": "\#(url)", "type": "gt", "threshold": 30}"#)
                #expect(created.status == 201)
                let triggerID = try #require(created.json["id"]?.numberValue.map { Int($0) })
                #expect(try await gateway.call(.get, "/v1/feeds/triggers/\(triggerID)", token: bob.token).status == 404, "another user's trigger does not exist for bob")

                // gt 30: fires when the value comes above 30, not again while it stays there, again after it went below.
                try await send(25)
                #expect(try await engine.deliverDue() == 0)
                try await send(31)
                #expect(try await engine.deliverDue() == 1)
                let first = try #require(hook.bodies.withLock { $0.last })
                #expect(first["type"] == .string("gt") && first["threshold_value"] == .string("30"))
                #expect(first["id"] == .number(Double(triggerID)))
                #expect(first["environment"]?["id"] == .number(Double(id)) && first["environment"]?["title"] == .string("Greenhouse"))
                #expect(first["triggering_datastream"]?["id"] == .string("temp"))
                #expect(first["triggering_datastream"]?["value"]?["value"] == .string("31"))
                #expect(first["triggering_datastream"]?["units"]?["symbol"] == .string("C"))
                try await send(35)
                #expect(try await engine.deliverDue() == 0)
                try await send(20)
                try await send(40)
                #expect(try await engine.deliverDue() == 1)
                #expect(hook.bodies.withLock { $0.count } == 2)
                let trigger = try await gateway.call(.get, "/v1/feeds/triggers/\(triggerID)", token: ann.token)
                #expect(trigger.json["notifiedAt"] == .string(UTCTimestamp.format(micros: (1_700_000_000 + 5) * 1_000_000)))
                let inbox = try await gateway.call(.get, "/v1/me/notifications", token: ann.token)
                #expect(inbox.json.items.count == 2)
                #expect(inbox.json.items.first?["title"]?.string?.contains("Greenhouse / temp gt 30") == true, "\(inbox.text)")

                // A failing hook: retried after 1s, 2s, ... and given up after triggerAttempts (3).
                hook.failing.withLock { $0 = true }
                let change = try await gateway.call(.post, "/v1/feeds/triggers", token: ann.token,
                                                    body: #"{"feed": \#(id), "datastream": "temp", "url": "\#(url)", "type": "change"}"#)
                let changeID = try #require(change.json["id"]?.numberValue.map { Int($0) })
                try await send(41)
                #expect(try await engine.deliverDue() == 1, "change fires; gt 30 does not, as the value stayed above 30")
                var log = try await gateway.call(.get, "/v1/feeds/triggers/\(changeID)/deliveries", token: ann.token).json.items
                #expect(log.count == 1 && log[0]["status"] == .string("pending") && log[0]["attempts"] == .number(1) && log[0]["responseStatus"] == .number(500))
                #expect(try await engine.deliverDue() == 0, "not before the backoff")
                clock.advance(by: 1.5)
                #expect(try await engine.deliverDue() == 1)
                clock.advance(by: 2.5)
                #expect(try await engine.deliverDue() == 1)
                log = try await gateway.call(.get, "/v1/feeds/triggers/\(changeID)/deliveries", token: ann.token).json.items
                #expect(log[0]["status"] == .string("failed") && log[0]["attempts"] == .number(3))
                clock.advance(by: 100)
                #expect(try await engine.deliverDue() == 0, "a failed delivery is not tried again")
                hook.failing.withLock { $0 = false }
                #expect(try await gateway.call(.delete, "/v1/feeds/triggers/\(changeID)", token: ann.token).status == 204)

                // frozen after 15 minutes without an update; live on the next update.
                let frozen = try await gateway.call(.post, "/v1/feeds/triggers", token: ann.token,
                                                    body: #"{"feed": \#(id), "datastream": "temp", "url": "\#(url)", "type": "frozen"}"#)
                #expect(frozen.status == 201)
                #expect(try await gateway.call(.post, "/v1/feeds/triggers", token: ann.token,
                                                body: #"{"feed": \#(id), "datastream": "temp", "url": "\#(url)", "type": "live"}"#).status == 201)
                let before = hook.bodies.withLock { $0.count }
                try await engine.checkFrozen()
                #expect(try await engine.deliverDue() == 0, "not frozen yet")
                clock.advance(by: 16 * 60)
                try await engine.checkFrozen()
                try await engine.checkFrozen()
                #expect(try await engine.deliverDue() == 1, "frozen fires once")
                #expect(hook.bodies.withLock { $0.last?["type"] } == .string("frozen"))
                try await send(10)
                #expect(try await engine.deliverDue() == 1)
                #expect(hook.bodies.withLock { $0.last?["type"] } == .string("live"))
                #expect(hook.bodies.withLock { $0.count } == before + 2)

                let list = try await gateway.call(.get, "/v1/feeds/triggers?feed=\(id)", token: ann.token)
                #expect(list.json.items.count == 3)
                #expect(try await gateway.call(.get, "/v1/feeds/triggers", token: bob.token).json.items.isEmpty)
                #expect(try await gateway.call(.delete, "/v1/feeds/\(id)", token: ann.token).status == 204)
                #expect(try await gateway.call(.get, "/v1/feeds/triggers", token: ann.token).json.items.isEmpty, "a feed's triggers go with it")
            }
        }
    }

    @Test("the v2 triggers endpoints: a top-level array, 201 + Location, exact members")
    func xivelyTriggers() async throws {
        try await withFeeds { gateway in
            let joe = try await gateway.register("joe")
            let key = try await gateway.createKey(token: joe.token, grant: #"{"label": "k", "scopes": ["feeds:*"]}"#).secret
            let created = try await gateway.call(.post, "/v2/feeds", key: key, body: #"{"title": "T", "datastreams": [{"id": "0"}]}"#)
            let id = String(try #require(created.headers[.location]).split(separator: "/").last!)
            let trigger = try await gateway.call(.post, "/v2/triggers", key: key, body: """
                {"environment_id": \(id), "stream_id": "0", "url": "http://example.com/hook", "trigger_type": "lte", "threshold_value": "15.5"}
                """)
            #expect(trigger.status == 201, "\(trigger.text)")
            let location = try #require(trigger.headers[.location])
            #expect(location.hasPrefix("http://localhost/v2/triggers/"))
            let triggerID = String(location.split(separator: "/").last!)
            let read = try await gateway.call(.get, "/v2/triggers/\(triggerID).json", key: key)
            #expect(read.json == .object(["id": .number(Double(triggerID)!), "environment_id": .number(Double(id)!), "stream_id": .string("0"),
                                          "url": .string("http://example.com/hook"), "trigger_type": .string("lte"), "threshold_value": .string("15.5"),
                                          "user": .string("joe")]))
            let list = try await gateway.call(.get, "/v2/triggers?feed_id=\(id)", key: key)
            #expect(list.json.arrayValue?.count == 1)
            #expect(try await gateway.call(.put, "/v2/triggers/\(triggerID)", key: key, body: #"{"threshold_value": "10", "id": 99}"#).status == 200)
            #expect(try await gateway.call(.get, "/v2/triggers/\(triggerID)", key: key).json["threshold_value"] == .string("10"))
            let bad = try await gateway.call(.post, "/v2/triggers", key: key, body: #"{"environment_id": \#(id), "stream_id": "0", "url": "http://example.com", "trigger_type": "gt"}"#)
            #expect(bad.status == 422 && bad.json.keys == ["title", "errors"])
            #expect(try await gateway.call(.delete, "/v2/triggers/\(triggerID)", key: key).status == 200)
            #expect(try await gateway.call(.get, "/v2/triggers/\(triggerID)", key: key).status == 404)
        }
    }
}
