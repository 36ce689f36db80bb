import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization
import Testing

/// A resolver that answers from a table (and fails for other names), counting its lookups.
final class TableEgressResolver: EgressResolver {
    let table: [String: [String]]
    let lookups = Atomic<Int>(0)

    init(table: [String: [String]]) { self.table = table }

    func addresses(of host: String) async throws -> [IPAddress] {
        lookups.add(1, ordering: .relaxed)
        guard let answer = table[host.lowercased()] else { throw GatewayError.badGateway("no such name") }
        return answer.compactMap { IPAddress(host: $0) }
    }
}

@Suite("egress: addresses, their scopes and the check of callers' URLs")
struct EgressTests {
    @Test("every spelling a resolver reads is parsed to the address it means")
    func spellings() {
        let loopback: [UInt8] = [127, 0, 0, 1]
        for host in ["127.0.0.1", "127.1", "127.0.1", "2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7F000001", "017700000001", "0x7f.1",
                     "127.0.0.1.", "0177.0.0.01"] {
            #expect(IPAddress(host: host)?.bytes == loopback, "\(host)")
        }
        #expect(IPAddress(host: "0")?.bytes == [0, 0, 0, 0])
        #expect(IPAddress(host: "10.0x10.0377.1")?.bytes == [10, 16, 255, 1])
        #expect(IPAddress(host: "192.168.65535")?.bytes == [192, 168, 255, 255])
        #expect(IPAddress(host: "127.65536")?.bytes == [127, 1, 0, 0])
        for name in ["example.com", "08.0.0.1", "127.0.0.256", "1.2.3.4.5", "127..1", "4294967296", "0x1g.0.0.1", "", "127.0.0.1 x", "１２７.0.0.1",
                     "1::2::3", ":::", "1:2:3:4:5:6:7:8:9", "12345::", "[::1", "::ffff:1.2.3", "1.2.3.4::"] {
            #expect(IPAddress(host: name) == nil, "\(name)")
        }
        let one: [UInt8] = Array(repeating: 0, count: 15) + [1]
        for host in ["[::1]", "::1", "0:0:0:0:0:0:0:1", "[0:0:0:0:0:0:0:1]", "0000:0000:0000:0000:0000:0000:0000:0001", "::0:1", "[::1%25lo]", "::1%lo"] {
            #expect(IPAddress(host: host)?.bytes == one, "\(host)")
        }
        #expect(IPAddress(host: "[::ffff:7f00:1]")?.embeddedIPv4?.bytes == loopback)
        #expect(IPAddress(host: "::ffff:127.0.0.1")?.embeddedIPv4?.bytes == loopback)
        #expect(IPAddress(host: "::127.0.0.1")?.embeddedIPv4?.bytes == loopback)
        #expect(IPAddress(host: "64:ff9b::7f00:1")?.embeddedIPv4?.bytes == loopback)
        #expect(IPAddress(host: "2002:7f00:1::")?.embeddedIPv4?.bytes == loopback)
        #expect(IPAddress(host: "1:2:3:4:5:6:7:8")?.description == "1:2:3:4:5:6:7:8")
        #expect(IPAddress(host: "0x7f.1")?.description == "127.0.0.1")
    }

    @Test("only public addresses are public: loopback, private, link-local, metadata and their IPv6 forms are not")
    func scopes() {
        let expected: [(String, AddressScope)] = [
            ("127.0.0.1", .loopback), ("127.255.0.9", .loopback), ("::1", .loopback), ("::ffff:127.0.0.1", .loopback), ("[::ffff:7f00:1]", .loopback),
            ("::127.0.0.1", .loopback), ("64:ff9b::127.0.0.1", .loopback), ("2002:7f00:1::5", .loopback), ("::ffff:0:127.0.0.1", .loopback),
            ("0.0.0.0", .unspecified), ("0.1.2.3", .unspecified), ("::", .unspecified), ("::ffff:0.0.0.0", .unspecified),
            ("10.1.2.3", .private), ("172.16.0.1", .private), ("172.31.255.255", .private), ("192.168.1.1", .private), ("fec0::1", .private),
            ("::ffff:10.0.0.1", .private), ("::ffff:a00:1", .private),
            ("100.64.0.1", .sharedAddressSpace), ("100.127.255.255", .sharedAddressSpace),
            ("169.254.1.1", .linkLocal), ("fe80::1", .linkLocal), ("fe80::1%eth0", .linkLocal), ("febf::1", .linkLocal),
            ("fc00::1", .uniqueLocal), ("fd12:3456::1", .uniqueLocal),
            ("224.0.0.1", .multicast), ("239.255.255.250", .multicast), ("ff02::1", .multicast),
            ("255.255.255.255", .broadcast),
            ("169.254.169.254", .metadata), ("fd00:ec2::254", .metadata), ("168.63.129.16", .metadata), ("100.100.100.200", .metadata),
            ("::ffff:169.254.169.254", .metadata), ("0xa9fea9fe", .metadata), ("169.254.170.2", .metadata),
            ("192.0.2.1", .reserved), ("198.51.100.7", .reserved), ("203.0.113.9", .reserved), ("198.18.0.1", .reserved), ("240.0.0.1", .reserved),
            ("2001:db8::1", .reserved), ("2001::1", .reserved), ("100::1", .reserved), ("::8.8.8.8", .reserved), ("64:ff9b:1::1", .reserved),
            ("8.8.8.8", .public), ("1.1.1.1", .public), ("172.32.0.1", .public), ("100.128.0.1", .public), ("169.255.0.1", .public),
            ("2606:4700:4700::1111", .public), ("::ffff:8.8.8.8", .public), ("64:ff9b::8.8.8.8", .public), ("2002:808:808::1", .public),
        ]
        for (host, scope) in expected {
            #expect(IPAddress(host: host)?.scope == scope, "\(host)")
        }
    }

    @Test("a caller's URL is refused by its text when it names an internal address in any spelling, or this host by name")
    func textRefusals() {
        for url in ["http://[0:0:0:0:0:0:0:1]/", "http://[::ffff:7f00:1]/", "http://2130706433/", "http://127.1/", "http://0177.0.0.1/",
                    "http://0x7f.0.0.1/", "http://localhost:8080/x", "https://LOCALHOST./", "http://a.b.localhost/", "http://printer.local/",
                    "http://metadata.google.internal/computeMetadata/v1/", "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/",
                    "http://[fe80::1%25eth0]/", "http://user@10.0.0.1/", "ftp://example.com/", "file:///etc/passwd", "http:///x",
                    "http+unix://%2Fvar%2Frun%2Fdocker.sock/containers/json", "gopher://example.com/"] {
            #expect(EgressPolicy.textRefusal(of: url) != nil, "\(url)")
        }
        for url in ["https://example.com/hook", "http://8.8.8.8:8080/", "https://[2606:4700:4700::1111]/x", "http://hooks.example.org/a?b=c"] {
            #expect(EgressPolicy.textRefusal(of: url) == nil, "\(url)")
        }
    }

    @Test("the check resolves a name once, refuses it when any address is internal, and gives the address to connect to")
    func check() async throws {
        let resolver = TableEgressResolver(table: ["hooks.example.org": ["93.184.216.34"], "sneaky.example.org": ["93.184.216.34", "127.0.0.1"],
                                             "rebind.example.org": ["10.0.0.7"], "six.example.org": ["::ffff:169.254.169.254"]])
        let guarding = EgressGuard(resolver: resolver)
        let caller = EgressPolicy.callerSupplied()

        let target = try await guarding.check("https://hooks.example.org/x", policy: caller)
        #expect(target.host == "hooks.example.org")
        #expect(target.address?.description == "93.184.216.34")
        for (url, reason) in [("http://sneaky.example.org/", "loopback"), ("http://rebind.example.org/", "private"),
                              ("http://six.example.org/", "metadata"), ("http://2130706433/", "loopback"), ("http://[::ffff:7f00:1]/", "loopback"),
                              ("http://unknown.example.org/", "resolved"), ("ftp://hooks.example.org/", "http")] {
            do {
                _ = try await guarding.check(url, policy: caller)
                Issue.record("\(url) was allowed")
            } catch let error as GatewayError {
                #expect(error.status == 502, "\(url)")
                #expect(error.detail.contains(reason), "\(url): \(error.detail)")
            }
        }
        // A plain address goes as it is; a spelling only a resolver reads goes to the address it means.
        #expect(try await guarding.check("http://8.8.8.8/", policy: caller).address == nil)
        #expect(try await guarding.check("http://0x08080808/", policy: caller).address?.description == "8.8.8.8")
        // The operator's opt-out allows internal addresses, still checked and pinned.
        let internalTarget = try await guarding.check("http://rebind.example.org/", policy: .callerSupplied(allowingInternalAddresses: true))
        #expect(internalTarget.address?.description == "10.0.0.7")
    }

    @Test("the system resolver reads localhost as loopback")
    func systemResolver() async throws {
        let addresses = try await SystemEgressResolver().addresses(of: "localhost")
        #expect(!addresses.isEmpty)
        #expect(addresses.allSatisfy { $0.scope == .loopback })
    }

    @Test("the client sends a caller's URL to the checked address without following redirects, and refuses internal ones")
    func client() async throws {
        let hits = Atomic<Int>(0)
        let router = Router()
        router.post("/hook") { _, _ -> Response in
            Response(status: .found, headers: [.location: "/internal"])
        }
        router.get("/internal") { _, _ -> String in
            hits.add(1, ordering: .relaxed)
            return "secret"
        }
        router.post("/internal") { _, _ -> String in
            hits.add(1, ordering: .relaxed)
            return "secret"
        }
        try await withLoopbackServer(router) { port in
            let resolver = TableEgressResolver(table: ["hooks.example.org": ["127.0.0.1"]])
            let client = AsyncUpstreamClient(resolver: resolver)
            // Refused: the name resolves to loopback.
            await #expect(throws: GatewayError.self) {
                _ = try await client.send(UpstreamRequest(method: .post, url: "http://hooks.example.org:\(port)/hook", egress: .callerSupplied()), maxBodySize: 1024)
            }
            await #expect(throws: GatewayError.self) {
                _ = try await client.open(UpstreamRequest(method: .post, url: "http://127.1:\(port)/hook", egress: .callerSupplied()), body: nil)
            }
            #expect(hits.load(ordering: .relaxed) == 0)
            // Allowed by the operator: sent to the address the name resolved to, the redirect is the reply.
            let reply = try await client.send(UpstreamRequest(method: .post, url: "http://hooks.example.org:\(port)/hook",
                                                              egress: .callerSupplied(allowingInternalAddresses: true)), maxBodySize: 1024)
            #expect(reply.status.code == 302)
            let opened = try await client.open(UpstreamRequest(method: .post, url: "http://hooks.example.org:\(port)/hook",
                                                               egress: .callerSupplied(allowingInternalAddresses: true)), body: nil)
            #expect(opened.status.code == 302)
            _ = try await opened.body.collect(upTo: 1024)
            #expect(hits.load(ordering: .relaxed) == 0)
            #expect(resolver.lookups.load(ordering: .relaxed) == 3)
            // An operator's URL follows the redirect, as before.
            let followed = try await client.send(UpstreamRequest(method: .post, url: "http://127.0.0.1:\(port)/hook"), maxBodySize: 1024)
            #expect(followed.status.code == 200)
            #expect(hits.load(ordering: .relaxed) == 1)
        }
    }

    @Test("a reply is stored only as its own cache directives allow")
    func storability() {
        let ttl = Duration.seconds(60)
        func lifetime(_ fields: [(String, String)]) -> Duration? {
            var headers = HTTPFields()
            for (name, value) in fields { headers.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
            return ReplyStorability.lifetime(of: headers, ttl: ttl, now: Date(timeIntervalSince1970: 1_700_000_000))
        }
        #expect(lifetime([]) == ttl)
        #expect(lifetime([("Content-Type", "text/plain")]) == ttl)
        for refused in [[("Cache-Control", "no-store")], [("Cache-Control", "private")], [("Cache-Control", "public, max-age=60, PRIVATE")],
                        [("Cache-Control", "no-cache")], [("Cache-Control", "no-cache=\"Set-Cookie\"")], [("Cache-Control", "private=\"x\"")],
                        [("Set-Cookie", "session=1")], [("Cache-Control", "max-age=0")], [("Cache-Control", "max-age=abc")],
                        [("Cache-Control", "max-age=30"), ("Age", "40")], [("Vary", "Accept, *")], [("Expires", "0")],
                        [("Expires", "Sun, 06 Nov 1994 08:49:37 GMT")], [("Cache-Control", "public"), ("Cache-Control", "no-store")]] {
            #expect(lifetime(refused) == nil, "\(refused)")
        }
        #expect(lifetime([("Cache-Control", "max-age=10")]) == .seconds(10))
        #expect(lifetime([("Cache-Control", "public, max-age=600")]) == ttl)
        #expect(lifetime([("Cache-Control", "max-age=600, s-maxage=5")]) == .seconds(5))
        #expect(lifetime([("Cache-Control", "max-age=20"), ("Age", "15")]) == .seconds(5))
        #expect(lifetime([("Cache-Control", "max-age=\"30\"")]) == .seconds(30))
        #expect(lifetime([("Expires", "Tue, 14 Nov 2023 22:13:40 GMT")]) == .seconds(20))
        #expect(lifetime([("Expires", "Tue, 14 Nov 2023 22:13:40 GMT"), ("Date", "Tue, 14 Nov 2023 22:13:30 GMT")]) == .seconds(10))
    }
}
