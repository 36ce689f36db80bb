import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import HTTPTypes
import Hummingbird
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import Testing

/// A service behind the gateway, on loopback: `/admin/...` is what the gateway guards for
/// administrators; `/cache/{kind}` answers with the cache directives its name says and a counter;
/// `/live/...` records the query a WebSocket upgrade came with (and refuses it); anything else
/// echoes the path and query it got.
private final class ServiceBehind: Sendable {
    let adminHits = Atomic<Int>(0)
    let cacheHits = Mutex<[String: Int]>([:])
    let upgradeQueries = Mutex<[String]>([])

    func serve<R: Sendable>(_ body: @Sendable (Int) async throws -> R) async throws -> R {
        let router = Router()
        router.get("/cache/{kind}") { _, context -> Response in
            let kind = context.parameters.get("kind") ?? ""
            let count = self.cacheHits.withLock { hits -> Int in
                hits[kind, default: 0] += 1
                return hits[kind]!
            }
            var headers: HTTPFields = [.contentType: "text/plain"]
            switch kind {
            case "private": headers[.cacheControl] = "private, max-age=600"
            case "nostore": headers[.cacheControl] = "no-store"
            case "nocache": headers[.cacheControl] = "no-cache"
            case "cookie": headers[.setCookie] = "session=for-the-first-caller-only; HttpOnly"
            case "short": headers[.cacheControl] = "public, max-age=4"
            default: break
            }
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: "\(kind) #\(count)")))
        }
        router.get("/live/**") { request, _ -> Response in
            self.upgradeQueries.withLock { $0.append(request.uri.query ?? "") }
            return Response(status: .notFound)
        }
        for method in [HTTPRequest.Method.get, .post, .put, .delete] {
            router.on("**", method: method) { request, _ -> Response in
                let path = request.uri.path
                let read = (path.removingPercentEncoding ?? path).lowercased().replacingOccurrences(of: "\\", with: "/")
                if read.contains("admin") { self.adminHits.add(1, ordering: .relaxed) }
                let echo = "\(path)?\(request.uri.query ?? "")"
                return Response(status: .ok, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: echo)))
            }
        }
        return try await withLoopbackServer(router) { port in try await body(port) }
    }

    /// The shipped plugins.yaml with this service appended as `svc` (mounted at /v1/svc): an
    /// administrators' part, a cached part, a WebSocket part for users and a public catch-all.
    static func entry(port: Int) -> @Sendable (String) -> String {
        { yaml in
            yaml + """

              svc:
                type: upstream
                config:
                  upstreams: ["http://127.0.0.1:\(port)"]
                  routes:
                    - { path: "/admin/{rest...}", access: admin }
                    - { path: "/cache/{kind}", methods: [GET], cache: 60s, cacheScope: shared }
                    - { path: "/live/{rest...}", methods: [GET], websocket: true, access: user }
                    - { path: "/{rest...}", access: public }

            """
        }
    }
}

/// Item: a service behind the gateway (`type: upstream`) gets neither the caller's gateway
/// credential, nor a chance to have its private replies served to others, nor a path that it
/// reads as a route the gateway guards.
@Suite("attack: upstream services (credentials in the query, cache directives, path confusion)")
struct UpstreamAttackTests {
    @Test("the gateway's credential in the query never reaches the service, over a WebSocket or plain HTTP", arguments: securityStorages)
    func credentialsInTheQuery(storage: TestStorage) async throws {
        let service = ServiceBehind()
        try await service.serve { port in
            try await ShippedGateway.with(storage: storage, edit: ServiceBehind.entry(port: port)) { gateway in
                let victim = try await gateway.register("victim")
                // A browser's WebSocket presents the session in the query: the gateway reads it, the service must not.
                _ = try? await WebSocketClient.connect(url: "ws://127.0.0.1:\(gateway.port)/v1/svc/live/room?access_token=\(victim.token)&lang=en",
                                                       logger: Logger(label: "attack")) { inbound, _, _ in
                    for try await _ in inbound.messages(maxSize: 1 << 16) {}
                }
                let queries = service.upgradeQueries.withLock { $0 }
                #expect(queries == ["lang=en"], "\(queries)")
                #expect(!queries.contains { $0.contains(victim.token) })

                let key = try await gateway.test.createKey(token: victim.token, grant: #"{"label": "k", "scopes": ["svc:read"]}"#)
                let reply = try await gateway.send(.GET, "/v1/svc/files/a?api_key=\(key.secret)&access_token=\(victim.token)&lang=en")
                #expect(reply.status == 200)
                #expect(reply.body == "/files/a?lang=en", "\(reply.body)")
            }
        }
    }

    @Test("a cached route honours the service's no-store, private, no-cache and max-age, and never stores a Set-Cookie",
          arguments: securityStorages)
    func cacheDirectives(storage: TestStorage) async throws {
        let service = ServiceBehind()
        try await service.serve { port in
            try await ShippedGateway.with(storage: storage, edit: ServiceBehind.entry(port: port)) { gateway in
                let victim = try await gateway.register("victim")
                for kind in ["private", "nostore", "nocache", "cookie"] {
                    // The victim's reply, then a stranger's request for the same URL.
                    let first = try await gateway.send(.GET, "/v1/svc/cache/\(kind)", headers: [("Authorization", "Bearer \(victim.token)")])
                    let second = try await gateway.send(.GET, "/v1/svc/cache/\(kind)")
                    #expect(first.body == "\(kind) #1" && second.body == "\(kind) #2", "\(kind): \(first.body) / \(second.body)")
                    #expect(second.headers["X-Cache"].first != "HIT", "\(kind)")
                    #expect(second.headers["Set-Cookie"].first == nil || kind == "cookie")
                    // What the service said about caching reaches the client unchanged.
                    #expect(!(first.headers["Cache-Control"].first ?? "").contains("public"), "\(kind): \(first.headers["Cache-Control"])")
                }
                #expect(service.cacheHits.withLock { $0 } == ["private": 2, "nostore": 2, "nocache": 2, "cookie": 2])

                // max-age shortens the route's 60s (4 s: room for a busy machine between the first two requests).
                let short = try await gateway.send(.GET, "/v1/svc/cache/short")
                let again = try await gateway.send(.GET, "/v1/svc/cache/short")
                #expect(short.headers["X-Cache"].first == "MISS" && again.headers["X-Cache"].first == "HIT")
                #expect(again.headers["Cache-Control"].first == "public, max-age=4", "\(again.headers["Cache-Control"])")
                try await Task.sleep(for: .milliseconds(4_300))
                let later = try await gateway.send(.GET, "/v1/svc/cache/short")
                #expect(later.body == "short #2" && later.headers["X-Cache"].first == "MISS", "\(later.body)")

                // A reply that says nothing is cached as the route says.
                let plain = try await gateway.send(.GET, "/v1/svc/cache/plain")
                let cached = try await gateway.send(.GET, "/v1/svc/cache/plain")
                #expect(plain.body == "plain #1" && cached.body == "plain #1" && cached.headers["X-Cache"].first == "HIT")
            }
        }
    }

    @Test("a path the service could read as the administrators' route is refused with 400, never forwarded", arguments: securityStorages)
    func pathConfusion(storage: TestStorage) async throws {
        let service = ServiceBehind()
        try await service.serve { port in
            try await ShippedGateway.with(storage: storage, edit: ServiceBehind.entry(port: port)) { gateway in
                // The guard itself holds.
                #expect(try await gateway.send(.GET, "/v1/svc/admin/secret").status == 401)
                for path in ["/v1/svc/ADMIN/secret", "/v1/svc/Admin/secret", "/v1/svc/admin%2Fsecret", "/v1/svc/admin%2fsecret",
                             "/v1/svc/%61dmin/secret", "/v1/svc/%41DMIN/secret", "/v1/svc/admin;jsessionid=1/secret", "/v1/svc/admin;/secret",
                             "/v1/svc/public/..%2Fadmin/secret", "/v1/svc/public/%2e%2e/admin/secret", "/v1/svc/public/%2E%2E%2Fadmin%2Fsecret",
                             "/v1/svc/admin%5Csecret", "/v1/svc/x/%2e/admin", "/v1/svc/admin%00/secret"] {
                    let reply = try await gateway.send(.GET, path)
                    #expect(reply.status == 400, "\(path): \(reply.status) \(reply.body)")
                }
                for path in ["/v1/svc/public/../admin/secret", "/v1/svc//admin/secret", "/v1/svc/./admin/secret"] {
                    let reply = try await gateway.send(.GET, path)
                    #expect([400, 401, 404].contains(reply.status), "\(path): \(reply.status) \(reply.body)")
                }
                #expect(service.adminHits.load(ordering: .relaxed) == 0)

                // What is unambiguous goes through, in one encoding.
                let plain = try await gateway.send(.GET, "/v1/svc/files/t%C3%A4by/a%20b/%7Euser?q=1")
                #expect(plain.status == 200 && plain.body == "/files/t%C3%A4by/a%20b/~user?q=1", "\(plain.body)")
                let administrator = try await gateway.administrator("root")
                let reply = try await gateway.send(.GET, "/v1/svc/admin/secret", headers: [("Authorization", "Bearer \(administrator.token)")])
                #expect(reply.status == 200 && reply.body == "/admin/secret?", "\(reply.body)")
            }
        }
    }
}
