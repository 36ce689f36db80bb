import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdWSClient
import Logging
import NIOCore
import NIOWebSocket
@testable import FeedsPlugin
import ServiceLifecycle
import Testing

/// Serves `gateway` on a free port, plus a socket listener whose `/` is the v2 socket, and runs `body` with both ports.
func withServing(_ gateway: TestGateway, _ body: @escaping @Sendable (_ port: Int, _ socketPort: Int) async throws -> Void) async throws {
    let (ports, continuation) = AsyncStream<(String, Int)>.makeStream()
    let app = gateway.gateway.makeApplication(host: "127.0.0.1", port: 0) { port in continuation.yield(("http", port)) }
    let listener = gateway.gateway.makeSocketListener(host: "127.0.0.1", port: 0, route: "/v2/socket") { port in continuation.yield(("socket", port)) }
    let group = ServiceGroup(configuration: .init(services: [.init(service: app), .init(service: listener)], logger: Logger(label: "test")))
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        var found: [String: Int] = [:]
        for await (name, port) in ports {
            found[name] = port
            if found.count == 2 { break }
        }
        try await body(try #require(found["http"]), try #require(found["socket"]))
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
    }
}

/// `feeds_live_subscriptions` as /metrics reports it.
func liveSubscriptions(_ gateway: TestGateway) -> Double? {
    let text = String(decoding: gateway.gateway.metrics.render(), as: UTF8.self)
    let name = "feeds_live_subscriptions"
    return text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
}

/// A WebSocket conversation: send text, await the next text.
struct Conversation {
    var next: () async throws -> JSONValue?
    var send: (String) async throws -> Void
}

func converse(_ url: String, headers: HTTPFields = [:], _ body: @escaping @Sendable (Conversation) async throws -> Void) async throws {
    _ = try await WebSocketClient.connect(url: url, configuration: .init(additionalHeaders: headers), logger: Logger(label: "ws")) { inbound, outbound, _ in
        var iterator = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
        let conversation = Conversation(
            next: {
                guard case .text(let text) = try await iterator.next() else { return nil }
                return try JSONValue.parse(text)
            },
            send: { text in try await outbound.write(.text(text)) })
        try await body(conversation)
        try await outbound.close(.normalClosure, reason: nil)
    }
}

@Suite("feeds live updates")
struct FeedsLiveTests {
    @Test("native: subscribe to a datastream and a feed, receive each change, unsubscribe; private feeds stay hidden")
    func native() async throws {
        try await withFeeds { gateway in
            let ann = try await gateway.register("ann")
            let bob = try await gateway.register("bob")
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Live", "datastreams": [{"id": "temp"}]}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            let secret = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Hidden", "private": true}"#)
            let secretID = try #require(secret.json["id"]?.numberValue.map { Int($0) })
            try await withServing(gateway) { port, _ in
                try await converse("ws://127.0.0.1:\(port)/v1/feeds/live?access_token=\(bob.token)") { socket in
                    try await socket.send(#"{"action": "subscribe", "feed": \#(id), "datastream": "temp", "id": 1}"#)
                    #expect(try await socket.next() == .object(["type": .string("subscribed"), "id": .number(1), "feed": .number(Double(id)), "datastream": .string("temp")]))
                    try await socket.send(#"{"action": "subscribe", "feed": \#(secretID), "id": 2}"#)
                    let refused = try await socket.next()
                    #expect(refused?["type"] == .string("error") && refused?["status"] == .number(404) && refused?["id"] == .number(2))
                    try await socket.send("not json")
                    #expect(try await socket.next()?["status"] == .number(400))

                    #expect(try await gateway.call(.post, "/v1/feeds/\(id)/datastreams/temp/datapoints", token: ann.token,
                                                    body: #"[{"at": "\#(at(-5))", "value": 21.5}]"#).status == 200)
                    let push = try await socket.next()
                    #expect(push?["type"] == .string("change"))
                    #expect(push?["data"]?["currentValue"] == .number(21.5))
                    #expect(push?["data"]?["id"] == .string("temp"))
                    #expect(liveSubscriptions(gateway) == 1, "/metrics counts the subscription pushing")

                    try await socket.send(#"{"action": "unsubscribe", "feed": \#(id), "datastream": "temp", "id": 3}"#)
                    #expect(try await socket.next()?["type"] == .string("unsubscribed"))
                    try await socket.send(#"{"action": "subscribe", "feed": \#(id), "id": 4}"#)
                    #expect(try await socket.next()?["type"] == .string("subscribed"))
                    #expect(try await gateway.call(.put, "/v1/feeds/\(id)", token: ann.token, body: #"{"title": "Live and renamed"}"#).status == 200)
                    let feedPush = try await socket.next()
                    #expect(feedPush?["data"]?["title"] == .string("Live and renamed"), "the first push after unsubscribing the datastream is the feed's")
                    #expect(feedPush?["data"]?["datastreams"]?[0]?["currentValue"] == .number(21.5))
                    #expect(try await gateway.call(.delete, "/v1/feeds/\(id)", token: ann.token).status == 204)
                    #expect(try await socket.next()?["type"] == .string("deleted"))
                }
                let ended = try await eventually(within: .seconds(15)) { liveSubscriptions(gateway) == 0 }
                #expect(ended, "a closed connection's subscriptions leave the count")
                // A session from the URL is checked again: once it ends, pushes stop and requests are refused.
                let carl = try await gateway.register("carl")
                let other = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Other", "datastreams": [{"id": "temp"}]}"#)
                let otherID = try #require(other.json["id"]?.numberValue.map { Int($0) })
                try await converse("ws://127.0.0.1:\(port)/v1/feeds/live?access_token=\(carl.token)") { socket in
                    try await socket.send(#"{"action": "subscribe", "feed": \#(otherID), "datastream": "temp", "id": 5}"#)
                    #expect(try await socket.next()?["type"] == .string("subscribed"))
                    _ = try await gateway.gateway.handle(.post, "/v1/auth/logout", headers: [.authorization: "Bearer \(carl.token)"])
                    #expect(try await gateway.call(.post, "/v1/feeds/\(otherID)/datastreams/temp/datapoints", token: ann.token,
                                                    body: #"[{"at": "\#(at(-4))", "value": 22}]"#).status == 200)
                    try await socket.send(#"{"action": "subscribe", "feed": \#(otherID), "id": 6}"#)
                    let refused = try await socket.next()
                    #expect(refused?["id"] == .number(6) && refused?["status"] == .number(401), "no push first, then a refusal")
                }
            }
        }
    }

    @Test("v2 socket at / of a socket listener: subscribe with a token, pushes carry it; get runs the REST route")
    func xivelySocket() async throws {
        try await withFeeds { gateway in
            let joe = try await gateway.register("joe")
            let key = try await gateway.createKey(token: joe.token, grant: #"{"label": "k", "scopes": ["feeds:*"]}"#).secret
            let created = try await gateway.call(.post, "/v2/feeds", key: key, body: #"{"title": "Socket", "datastreams": [{"id": "miles", "current_value": "1"}]}"#)
            let id = String(try #require(created.headers[.location]).split(separator: "/").last!)
            try await withServing(gateway) { port, socketPort in
                try await converse("ws://127.0.0.1:\(socketPort)/") { socket in
                    try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(id)/datastreams/miles", "headers": {"X-ApiKey": "\#(key)"}, "token": "0x12345"}"#)
                    #expect(try await socket.next() == .object(["token": .string("0x12345"), "status": .number(200), "resource": .string("/feeds/\(id)/datastreams/miles")]))
                    try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(id)", "headers": {"X-ApiKey": "\#(key)"}, "token": "feed-token"}"#)
                    #expect(try await socket.next()?["status"] == .number(200))

                    #expect(try await gateway.call(.put, "/v2/feeds/\(id)/datastreams/miles", key: key, body: #"{"current_value": "2399"}"#).status == 200)
                    var pushes: [String: JSONValue] = [:]
                    for _ in 0..<2 {
                        let push = try #require(try await socket.next())
                        pushes[push["token"]?.string ?? ""] = push
                    }
                    #expect(pushes["0x12345"]?["resource"] == .string("/feeds/\(id)/datastreams/miles"))
                    #expect(pushes["0x12345"]?["body"]?["current_value"] == .string("2399"))
                    #expect(pushes["feed-token"]?["body"]?["datastreams"]?[0]?["current_value"] == .string("2399"), "a feed push carries the full feed")
                    #expect(pushes["feed-token"]?["body"]?["title"] == .string("Socket"))

                    try await socket.send(#"{"method": "get", "resource": "/feeds/\#(id)", "headers": {"X-ApiKey": "\#(key)"}, "token": "t2"}"#)
                    let got = try await socket.next()
                    #expect(got?["token"] == .string("t2") && got?["status"] == .number(200))
                    #expect(got?["body"]?["id"] == .number(Double(id)!))
                    try await socket.send(#"{"method": "get", "resource": "/feeds/999999", "token": "t3"}"#)
                    let missing = try await socket.next()
                    #expect(missing?["status"] == .number(404) && missing?["body"]?["title"] == .string("Not found"))
                    try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(id)", "headers": {"X-ApiKey": "wrong"}, "token": "t4"}"#)
                    #expect(try await socket.next()?["status"] == .number(401))
                    try await socket.send(#"{"method": "unsubscribe", "resource": "/feeds/\#(id)/datastreams/miles", "token": "t5"}"#)
                    #expect(try await socket.next()?["status"] == .number(200))
                    try await socket.send(#"{"method": "unsubscribe", "resource": "/feeds/\#(id)", "token": "t6"}"#)
                    #expect(try await socket.next()?["status"] == .number(200))

                    // A key revoked after subscribing stops receiving.
                    let second = try await gateway.createKey(token: joe.token, grant: #"{"label": "k2", "scopes": ["feeds:read"]}"#)
                    try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(id)/datastreams/miles", "headers": {"X-ApiKey": "\#(second.secret)"}, "token": "t9"}"#)
                    #expect(try await socket.next()?["status"] == .number(200))
                    #expect(try await gateway.call(.delete, "/v1/me/keys/\(second.id)", token: joe.token).status == 204)
                    #expect(try await gateway.call(.put, "/v2/feeds/\(id)/datastreams/miles", key: key, body: #"{"current_value": "2400"}"#).status == 200)
                    try await socket.send(#"{"method": "get", "resource": "/feeds/\#(id)/datastreams/miles", "token": "t10"}"#)
                    #expect(try await socket.next()?["token"] == .string("t10"), "no push reached the revoked key's subscription")
                }
                // The documented path on the main listener, with the key in the URL.
                try await converse("ws://127.0.0.1:\(port)/v2/socket?key=\(key)") { socket in
                    try await socket.send(#"{"method": "get", "resource": "/feeds/\#(id)/datastreams/miles", "token": 7}"#)
                    let got = try await socket.next()
                    #expect(got?["token"] == .number(7) && got?["body"]?["current_value"] == .string("2400"))
                }
                // A subscription made with the key in the URL is checked again before each push as well.
                let third = try await gateway.createKey(token: joe.token, grant: #"{"label": "k3", "scopes": ["feeds:read"]}"#)
                try await converse("ws://127.0.0.1:\(port)/v2/socket?key=\(third.secret)") { socket in
                    try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(id)/datastreams/miles", "token": "u1"}"#)
                    #expect(try await socket.next()?["status"] == .number(200))
                    #expect(try await gateway.call(.put, "/v2/feeds/\(id)/datastreams/miles", key: key, body: #"{"current_value": "2401"}"#).status == 200)
                    #expect(try await socket.next()?["token"] == .string("u1"), "pushes reach it while the key lives")
                    #expect(try await gateway.call(.delete, "/v1/me/keys/\(third.id)", token: joe.token).status == 204)
                    #expect(try await gateway.call(.put, "/v2/feeds/\(id)/datastreams/miles", key: key, body: #"{"current_value": "2402"}"#).status == 200)
                    try await socket.send(#"{"method": "get", "resource": "/feeds/\#(id)/datastreams/miles", "headers": {"X-ApiKey": "\#(key)"}, "token": "u2"}"#)
                    #expect(try await socket.next()?["token"] == .string("u2"), "no push reached the subscription of the revoked key from the URL")
                    // Nor does the revoked key still serve requests over the open socket.
                    try await socket.send(#"{"method": "get", "resource": "/feeds/\#(id)/datastreams/miles", "token": "u3"}"#)
                    let refused = try await socket.next()
                    #expect(refused?["token"] == .string("u3") && refused?["status"] == .number(401))
                }
            }
        }
    }

    @Test("with PostgreSQL a change through one instance reaches subscribers of another", .enabled(if: TestStorage.available.contains(.postgres)))
    func crossInstance() async throws {
        try await TestGateway.withTwoListening(feeds, yaml: feedsYAML) { first, second in
            let one = TestGateway(gateway: first, storage: .postgres)
            let ann = try await one.register("ann")
            let feed = try await one.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Shared", "datastreams": [{"id": "x"}]}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            let events = second.events.subscribe(to: "feeds/\(id)")
            #expect(try await one.call(.post, "/v1/feeds/\(id)/datastreams/x/datapoints", token: ann.token, body: #"[{"value": 3}]"#).status == 200)
            let event = try await withThrowingTaskGroup(of: GatewayEvent?.self) { race in
                race.addTask {
                    for await event in events { return event }
                    return nil
                }
                race.addTask { try await Task.sleep(for: .seconds(20)); return nil }
                let first = try await race.next() ?? nil
                race.cancelAll()
                return first
            }
            #expect(event?.topic == "feeds/\(id)/datastreams/x", "the second instance heard the first's change")
        }
    }
}

@Suite("socket listeners")
struct SocketListenerTests {
    @Test("server.socketListeners is checked: a path for the route, and a WebSocket route that exists")
    func configuration() async throws {
        let good = try GatewayConfiguration.parse(Data("server:\n  socketListeners:\n    - { port: 8081, route: /v2/socket }\n".utf8), file: "plugins.yaml",
                                                  knownPlugins: ["feeds"])
        #expect(good.server.socketListeners == [SocketListenerSettings(port: 8081, route: "/v2/socket")])
        #expect(throws: (any Error).self) {
            try GatewayConfiguration.parse(Data("server:\n  socketListeners:\n    - { port: 8081, route: v2 }\n".utf8), file: "plugins.yaml", knownPlugins: ["feeds"])
        }
        #expect(throws: (any Error).self) {
            try GatewayConfiguration.parse(Data("server:\n  socketListeners:\n    - { port: 8081, route: /v2/socket, colour: red }\n".utf8), file: "plugins.yaml", knownPlugins: ["feeds"])
        }
        await #expect(throws: GatewayStartupError.self) {
            try await TestGateway.with(feeds, yaml: feedsYAML + "\nserver:\n  socketListeners:\n    - { port: 8081, route: /v2/nowhere }\n") { _ in }
        }
    }
}

@Suite("socket rate limits")
struct SocketRateLimitTests {
    @Test("opening a socket and each request sent over it count against the caller's rate limit (v2: 403 once it is spent)")
    func limited() async throws {
        // Three an hour: in a loaded test run requests may be seconds apart, and 3/min refills one every 20 s.
        try await TestGateway.with(feeds, yaml: feedsYAML + "\nlimits: { anonymous: 3/h, user: 1000/min, key: 1000/min }\n", limits: true) { gateway in
            let ann = try await gateway.register("ann")
            let feed = try await gateway.call(.post, "/v1/feeds", token: ann.token, body: #"{"title": "Limited"}"#)
            let id = try #require(feed.json["id"]?.numberValue.map { Int($0) })
            try await withServing(gateway) { port, _ in
                try await converse("ws://127.0.0.1:\(port)/v2/socket") { socket in
                    var statuses: [Double] = []
                    for token in 0..<5 {
                        try await socket.send(#"{"method": "get", "resource": "/feeds/\#(id)", "token": \#(token)}"#)
                        statuses.append(try await socket.next()?["status"]?.numberValue ?? 0)
                    }
                    // Opening the socket was the first of the three.
                    #expect(statuses == [200, 200, 403, 403, 403], "\(statuses)")
                }
                try await converse("ws://127.0.0.1:\(port)/v1/feeds/live?access_token=\(ann.token)") { socket in
                    try await socket.send(#"{"action": "subscribe", "feed": \#(id), "id": 1}"#)
                    #expect(try await socket.next()?["type"] == .string("subscribed"), "a signed-in user has a quota of their own")
                }
            }
        }
    }
}
