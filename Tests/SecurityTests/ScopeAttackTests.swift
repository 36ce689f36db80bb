import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Testing

/// Scopes and grants, attacked from outside: a signed-in user holds no scope by being signed in,
/// a master key is held to its scopes, and a WebSocket is admitted and each subscription
/// authorized like the HTTP routes it mirrors.
@Suite("scope attacks")
struct ScopeAttackTests {
    static let calendar = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nUID:attack@example\r\nDTSTART:20261201T100000Z\r\nSUMMARY:Planted\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"

    /// The writes to data every user shares, each as `(label, method, path, content type, body)`.
    static func sharedWrites(_ tag: String) -> [(String, HTTPMethod, String, String, String)] {
        [
            ("suggest term", .PUT, "/v1/suggest/terms", "application/json", #"{"keyword": "free money \#(tag)", "text": "free money", "weight": 1000000}"#),
            ("suggest delete", .DELETE, "/v1/suggest/terms/custom/free%20money%20\(tag)", "application/json", ""),
            ("transit feed list", .GET, "/v1/transit/feeds", "application/json", ""),
            ("transit feed delete", .DELETE, "/v1/transit/feeds/nope\(tag)", "application/json", ""),
            ("events import", .POST, "/v1/events/import", "text/calendar", calendar),
            ("todo bucket", .POST, "/v1/todo/buckets", "application/json", #"{"name": "planted\#(tag)"}"#),
        ]
    }

    @Test("a new account cannot write shared data (dictionary, transit feeds, event imports, bucket definitions); an administrator and a user granted the scope can",
          arguments: securityStorages)
    func sharedWritesNeedAnAdministratorOrAGrant(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false) { gateway in
            // Open registration: anyone on the internet is a signed-in user.
            let stranger = try await gateway.register("stranger")
            for (label, method, path, type, body) in Self.sharedWrites("s") {
                let reply = try await gateway.send(method, path, bearer: stranger.token, type: type, body: body)
                #expect(reply.status == 403, "\(label) as a new user: \(reply.status) \(reply.body.prefix(200))")
            }
            let suggestions = try await gateway.send(.GET, "/v1/suggest?q=free%20money")
            #expect((suggestions.json?["items"] as? [Any])?.isEmpty == true, "the stranger's term reached every user's suggestions: \(suggestions.body)")

            let admin = try await gateway.administrator("root")
            // What each write answers once allowed: the term put and removed, no such feed, the import, the bucket.
            let allowed = [200, 204, 200, 404, 200, 201]
            for ((label, method, path, type, body), want) in zip(Self.sharedWrites("a"), allowed) {
                let reply = try await gateway.send(method, path, bearer: admin.token, type: type, body: body)
                #expect(reply.status == want, "\(label) as an administrator: \(reply.status) \(reply.body.prefix(200))")
            }

            // The administrator grants one user each plugin's write scope, through the admin API.
            let editor = try await gateway.register("editor")
            let grants = #"{"scopes": ["suggest:write", "transit:write", "events:write", "todo:write"]}"#
            let granted = try await gateway.send(.PUT, "/v1/admin/users/editor/grants", headers: [("Authorization", "Bearer \(admin.token)")], json: grants)
            #expect(granted.status == 200, "\(granted.body)")
            let selfGrant = try await gateway.send(.PUT, "/v1/admin/users/stranger/grants", headers: [("Authorization", "Bearer \(stranger.token)")], json: grants)
            #expect(selfGrant.status == 403, "a user granted itself: \(selfGrant.status)")
            for ((label, method, path, type, body), want) in zip(Self.sharedWrites("g"), allowed) {
                let reply = try await gateway.send(method, path, bearer: editor.token, type: type, body: body)
                #expect(reply.status == want, "\(label) as a granted user: \(reply.status) \(reply.body.prefix(200))")
            }
            // A key of the granted user is still held to its own scopes.
            let readKey = try await gateway.test.createKey(token: editor.token, grant: #"{"label": "r", "scopes": ["suggest:read"]}"#)
            let byReadKey = try await gateway.send(.PUT, "/v1/suggest/terms", headers: [("X-Api-Key", readKey.secret)],
                                                   json: #"{"keyword": "by key", "weight": 1}"#)
            #expect(byReadKey.status == 403, "a suggest:read key of a granted user wrote: \(byReadKey.status)")
            let writeKey = try await gateway.test.createKey(token: editor.token, grant: #"{"label": "w", "scopes": ["suggest:write"]}"#)
            let byWriteKey = try await gateway.send(.PUT, "/v1/suggest/terms", headers: [("X-Api-Key", writeKey.secret)],
                                                    json: #"{"keyword": "by key", "weight": 1}"#)
            #expect(byWriteKey.status == 200, "a suggest:write key of a granted user: \(byWriteKey.status) \(byWriteKey.body.prefix(200))")
            // The stranger's own suggest:write key gets nothing its owner lacks.
            let strangerKey = try await gateway.test.createKey(token: stranger.token, grant: #"{"label": "w", "scopes": ["suggest:write"]}"#)
            let byStrangerKey = try await gateway.send(.PUT, "/v1/suggest/terms", headers: [("X-Api-Key", strangerKey.secret)],
                                                       json: #"{"keyword": "by stranger", "weight": 1}"#)
            #expect(byStrangerKey.status == 403, "a new user's suggest:write key wrote: \(byStrangerKey.status)")

            // Withdrawn, the grant stops working at once.
            let withdrawn = try await gateway.send(.PUT, "/v1/admin/users/editor/grants", headers: [("Authorization", "Bearer \(admin.token)")],
                                                   json: #"{"scopes": []}"#)
            #expect(withdrawn.status == 200)
            let after = try await gateway.send(.PUT, "/v1/suggest/terms", headers: [("Authorization", "Bearer \(editor.token)")],
                                               json: #"{"keyword": "after", "weight": 1}"#)
            #expect(after.status == 403, "a withdrawn grant still wrote: \(after.status)")
        }
    }

    @Test("a master key made with --scope suggest:read cannot purge the cache, reload, grant, read /metrics or write; admin and * can",
          arguments: securityStorages)
    func masterKeyIsHeldToItsScopes(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false) { gateway in
            // As `gateway key create --scope suggest:read` makes it.
            let (readOnly, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "reader", scopes: ["suggest:read"]))
            let key = [("X-Api-Key", readOnly)]
            #expect(try await gateway.send(.GET, "/v1/suggest?q=ta", headers: key).status == 200, "it reads what its scope names")
            let attempts: [(String, HTTPMethod, String, String?)] = [
                ("cache purge", .POST, "/v1/admin/cache/purge", #"{"all": true}"#),
                ("reload", .POST, "/v1/admin/reload", nil),
                ("grant", .PUT, "/v1/admin/users/anyone/grants", #"{"scopes": ["suggest:write"]}"#),
                ("metrics", .GET, "/metrics", nil),
                ("suggest write", .PUT, "/v1/suggest/terms", #"{"keyword": "by master", "weight": 1}"#),
                ("todo bucket", .POST, "/v1/todo/buckets", #"{"name": "bymaster"}"#),
                ("transit feeds", .GET, "/v1/transit/feeds", nil),
            ]
            for (label, method, path, body) in attempts {
                let reply = try await gateway.send(method, path, headers: key, json: body)
                #expect(reply.status == 403, "\(label) with a suggest:read master key: \(reply.status) \(reply.body.prefix(200))")
            }

            // `admin` covers the administrators' routes, and only them.
            let (operations, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "ops", scopes: ["admin"]))
            #expect(try await gateway.send(.POST, "/v1/admin/cache/purge", headers: [("X-Api-Key", operations)], json: #"{"all": true}"#).status == 200)
            // (Uncompressed: the client refuses a reply that inflates more than tenfold.)
            #expect(try await gateway.send(.GET, "/metrics", headers: [("X-Api-Key", operations), ("Accept-Encoding", "identity")]).status == 200,
                    "/metrics for an admin master key")
            #expect(try await gateway.send(.PUT, "/v1/suggest/terms", headers: [("X-Api-Key", operations)],
                                           json: #"{"keyword": "by ops", "weight": 1}"#).status == 403, "admin alone does not write plugin data")
            // What the operator named, a master key may write: the operator stands above administrators.
            let (editor, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "editor", scopes: ["suggest:write"]))
            #expect(try await gateway.send(.PUT, "/v1/suggest/terms", headers: [("X-Api-Key", editor)],
                                           json: #"{"keyword": "by editor", "weight": 1}"#).status == 200)
            #expect(try await gateway.send(.POST, "/v1/admin/cache/purge", headers: [("X-Api-Key", editor)], json: #"{"all": true}"#).status == 403)
            // The CLI's default, *, is a full administrator.
            let (everything, _) = try await gateway.gateway.accounts.createKey(userID: nil, grant: .init(label: "root", scopes: ["*"]))
            #expect(try await gateway.send(.POST, "/v1/admin/cache/purge", headers: [("X-Api-Key", everything)], json: #"{"all": true}"#).status == 200)
            #expect(try await gateway.send(.GET, "/metrics", headers: [("X-Api-Key", everything), ("Accept-Encoding", "identity")]).status == 200)
            #expect(try await gateway.send(.POST, "/v1/todo/buckets", headers: [("X-Api-Key", everything)], json: #"{"name": "byroot"}"#).status == 201)
            // A user's key never takes `admin`.
            let user = try await gateway.register("someone")
            let refused = try await gateway.send(.POST, "/v1/me/keys", headers: [("Authorization", "Bearer \(user.token)")],
                                                 json: #"{"label": "x", "scopes": ["admin"]}"#)
            #expect(refused.status == 422, "a user's key with admin: \(refused.status)")
        }
    }

    @Test("a todo:read key cannot open the feeds' WebSockets (403 before the upgrade) nor subscribe over the v2 socket to a private feed GET refuses",
          arguments: securityStorages)
    func readKeyOfAnotherPluginCannotSubscribe(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false) { gateway in
            let owner = try await gateway.register("owner")
            let created = try await gateway.send(.POST, "/v1/feeds", headers: [("Authorization", "Bearer \(owner.token)")],
                                                 json: #"{"title": "Diary", "private": true, "datastreams": [{"id": "mood"}]}"#)
            let feed = try #require(scopeAttackNumber(created.json?["id"]), "\(created.body)")
            let todoKey = try await gateway.test.createKey(token: owner.token, grant: #"{"label": "todo", "scopes": ["todo:read"]}"#).secret
            #expect(try await gateway.send(.GET, "/v1/feeds/\(feed)", headers: [("X-Api-Key", todoKey)]).status == 403, "GET refuses the key")

            // The host refuses the upgrade itself.
            for (target, want) in [("/v1/feeds/live?api_key=\(todoKey)", 403), ("/v2/socket?key=\(todoKey)", 403), ("/v1/feeds/live?api_key=gk_unknown", 401)] {
                let status = try await gateway.upgradeStatus(target)
                #expect(status == want, "\(target.prefix(30)): \(status)")
            }
            let feedsKey = try await gateway.test.createKey(token: owner.token, grant: #"{"label": "feeds", "scopes": ["feeds:read"]}"#).secret
            #expect(try await gateway.upgradeStatus("/v1/feeds/live?api_key=\(feedsKey)") == 101, "a feeds:read key opens the socket")

            // The v2 socket is open to guests, and each request may carry its own key: the
            // subscription is authorized for that key as the GET is.
            try await gateway.converse("/v2/socket") { socket in
                try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(feed)", "headers": {"X-ApiKey": "\#(todoKey)"}, "token": "t1"}"#)
                let reply = try await socket.next()
                #expect(reply.flatMap { scopeAttackNumber($0["status"]) } == 403, "a todo:read key subscribed to a private feed: \(String(describing: reply))")
                try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(feed)", "headers": {"X-ApiKey": "\#(feedsKey)"}, "token": "t2"}"#)
                #expect(try await socket.next().flatMap { scopeAttackNumber($0["status"]) } == 200, "the owner's feeds:read key subscribes")
            }
        }
    }

    @Test("a feeds key restricted to feed A cannot subscribe to feed B, natively or over the v2 socket", arguments: securityStorages)
    func restrictedKeyCannotSubscribeElsewhere(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false) { gateway in
            let owner = try await gateway.register("owner")
            var created: [Int] = []
            for title in ["A", "B"] {
                let reply = try await gateway.send(.POST, "/v1/feeds", headers: [("Authorization", "Bearer \(owner.token)")],
                                                   json: #"{"title": "\#(title)", "datastreams": [{"id": "temp"}]}"#)
                created.append(try #require(scopeAttackNumber(reply.json?["id"]), "\(reply.body)"))
            }
            let ids = created
            let key = try await gateway.test.createKey(
                token: owner.token, grant: #"{"label": "a only", "scopes": ["feeds:read"], "resources": {"feeds": ["\#(ids[0])"]}}"#).secret
            #expect(try await gateway.send(.GET, "/v1/feeds/\(ids[1])", headers: [("X-Api-Key", key)]).status == 404, "GET refuses feed B")

            try await gateway.converse("/v1/feeds/live?api_key=\(key)") { socket in
                try await socket.send(#"{"action": "subscribe", "feed": \#(ids[0]), "id": 1}"#)
                #expect(try await socket.next()?["type"] as? String == "subscribed")
                try await socket.send(#"{"action": "subscribe", "feed": \#(ids[1]), "id": 2}"#)
                let refused = try await socket.next()
                #expect(refused?["type"] as? String == "error" && refused.flatMap { scopeAttackNumber($0["status"]) } == 404, "subscribed to feed B: \(String(describing: refused))")
                try await socket.send(#"{"action": "subscribe", "feed": \#(ids[1]), "datastream": "temp", "id": 3}"#)
                #expect(try await socket.next().flatMap { scopeAttackNumber($0["status"]) } == 404, "subscribed to a datastream of feed B")
            }
            try await gateway.converse("/v2/socket?key=\(key)") { socket in
                try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(ids[1])", "token": "b"}"#)
                #expect(try await socket.next().flatMap { scopeAttackNumber($0["status"]) } == 404, "subscribed to feed B over the v2 socket")
                try await socket.send(#"{"method": "subscribe", "resource": "/feeds/\#(ids[0])", "token": "a"}"#)
                #expect(try await socket.next().flatMap { scopeAttackNumber($0["status"]) } == 200)
            }
        }
    }
}

/// A JSON number as an `Int`, however JSONSerialization typed it.
func scopeAttackNumber(_ value: Any?) -> Int? {
    switch value {
    case let number as Int: number
    case let number as Double: Int(exactly: number)
    case let number as NSNumber: number.intValue
    default: nil
    }
}

/// A WebSocket conversation as an attacker's client holds it.
struct ScopeAttackSocket {
    var next: () async throws -> [String: Any]?
    var send: (String) async throws -> Void
}

extension ShippedGateway {
    /// Sends `body` (none when empty) of content type `type` with a session token.
    func send(_ method: HTTPMethod, _ path: String, bearer token: String, type: String, body: String,
              timeout: TimeAmount = .seconds(30)) async throws -> Reply {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if !body.isEmpty {
            request.headers.add(name: "Content-Type", value: type)
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        let collected = try await response.body.collect(upTo: 1 << 20)
        return Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: collected))
    }

    /// The status a WebSocket upgrade request to `target` gets (101 when the server switches
    /// protocols), read from the raw reply over a new connection.
    func upgradeStatus(_ target: String) async throws -> Int {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
        }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(string: "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"))
            var head = ""
            for try await chunk in inbound {
                head += String(buffer: chunk)
                if head.contains("\r\n\r\n") { break }
            }
            let status = head.split(separator: " ", maxSplits: 2).dropFirst().first.flatMap { Int($0) }
            return try #require(status, "no status line in \(head.prefix(100))")
        }
    }

    /// Opens a WebSocket at `target` and runs `body` with it; replies are read as JSON objects.
    func converse(_ target: String, _ body: @escaping @Sendable (ScopeAttackSocket) async throws -> Void) async throws {
        _ = try await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)\(target)", logger: Logger(label: "attack")) { inbound, outbound, _ in
            var iterator = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
            let socket = ScopeAttackSocket(
                next: {
                    guard case .text(let text) = try await iterator.next() else { return nil }
                    return (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
                },
                send: { text in try await outbound.write(.text(text)) })
            try await body(socket)
            try await outbound.close(.normalClosure, reason: nil)
        }
    }
}
