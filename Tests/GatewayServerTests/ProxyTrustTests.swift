import Foundation
import GatewayCore
@testable import GatewayServer
import GatewayTesting
import HTTPTypes
import NIOCore
import NotesFixturePlugin
import Testing

@Suite("clients behind trusted proxies")
struct ProxyTrustTests {
    static let xff = HTTPField.Name("X-Forwarded-For")!
    static let forwarded = HTTPField.Name("Forwarded")!
    static let forwardedHost = HTTPField.Name("X-Forwarded-Host")!
    static let apiKey = HTTPField.Name("X-Api-Key")!

    @Test("the right-most address that is not a trusted proxy is the client; untrusted peers' forwarding fields are dropped")
    func resolution() {
        let trust = ProxyTrust(["10.0.0.0/8", "192.0.2.1"])
        var headers: HTTPFields = [Self.xff: "203.0.113.9, 198.51.100.4, 10.1.2.3", Self.forwardedHost: "api.example.com"]
        #expect(trust.client(peer: "10.0.0.5", headers: &headers) == "198.51.100.4", "a spoofed left-most entry is not believed")
        #expect(headers[Self.forwardedHost] == "api.example.com", "a trusted proxy's host is kept")

        var forwardedHeaders: HTTPFields = [Self.forwarded: #"for=198.51.100.17;proto=https, for="[2001:db8:cafe::17]:4711""#]
        #expect(trust.client(peer: "192.0.2.1", headers: &forwardedHeaders) == "2001:db8:cafe::17")
        var twoFields = HTTPFields()
        twoFields.append(HTTPField(name: Self.xff, value: "203.0.113.9"))
        twoFields.append(HTTPField(name: Self.xff, value: "10.0.0.7"))
        #expect(trust.client(peer: "10.0.0.5", headers: &twoFields) == "203.0.113.9", "every field of the name, in order")
        var onlyProxies: HTTPFields = [Self.xff: "10.0.0.9"]
        #expect(trust.client(peer: "10.0.0.5", headers: &onlyProxies) == "10.0.0.9")
        var garbage: HTTPFields = [Self.xff: "not-an-address"]
        #expect(trust.client(peer: "10.0.0.5", headers: &garbage) == "10.0.0.5")

        var fromAnyone: HTTPFields = [Self.xff: "203.0.113.9", Self.forwardedHost: "evil.example", Self.forwarded: "for=1.2.3.4",
                                      HTTPField.Name("X-Forwarded-Proto")!: "https", .accept: "*/*"]
        #expect(trust.client(peer: "198.51.100.200", headers: &fromAnyone) == "198.51.100.200")
        #expect(fromAnyone.count == 1 && fromAnyone[.accept] == "*/*")
        var nobodyTrusted: HTTPFields = [Self.xff: "203.0.113.9"]
        #expect(ProxyTrust([]).client(peer: "10.0.0.5", headers: &nobodyTrusted) == "10.0.0.5")
        #expect(nobodyTrusted[Self.xff] == nil)
    }

    @Test("server.trustedProxies names addresses or CIDRs; anything else is an error at its line")
    func configuration() throws {
        let good = try GatewayConfiguration.parse(Data("server:\n  trustedProxies: [10.0.0.0/8, 192.0.2.7, \"2001:db8::1\"]\n".utf8),
                                                  file: "plugins.yaml", knownPlugins: [])
        #expect(good.server.trustedProxies.count == 3)
        #expect(throws: ConfigurationFileError.self) {
            try GatewayConfiguration.parse(Data("server:\n  trustedProxies: [the-load-balancer]\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
    }

    @Test("limits, key address rules and the log use the forwarded client, only from a trusted proxy")
    func pipeline() async throws {
        let yaml = notesYAML + "\nserver:\n  trustedProxies: [10.0.0.0/8]\nlimits:\n  anonymous: 2/min\n"
        try await TestGateway.with(notes, yaml: yaml, limits: true) { gateway in
            // Guests behind one load balancer get a bucket each.
            for _ in 0..<2 {
                #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [Self.xff: "203.0.113.1"], from: "10.0.0.2").status == 200)
            }
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [Self.xff: "203.0.113.1"], from: "10.0.0.2").status == 429)
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [Self.xff: "203.0.113.2"], from: "10.0.0.2").status == 200)
            // An untrusted peer cannot pick a fresh bucket by sending the field.
            for _ in 0..<2 { _ = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", from: "198.51.100.7") }
            #expect(try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [Self.xff: "203.0.113.3"], from: "198.51.100.7").status == 429)
        }
        try await TestGateway.with(notes, yaml: notesYAML + "\nserver:\n  trustedProxies: [10.0.0.0/8]\n") { gateway in
            let (token, _) = try await gateway.register("office")
            let key = try await gateway.createKey(token: token, grant: #"{"label": "office", "scopes": ["notes:read"], "allowedAddresses": ["203.0.113.0/24"]}"#)
            let fromOffice = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [Self.apiKey: key.secret, Self.xff: "203.0.113.50"],
                                                              from: "10.0.0.2")
            #expect(fromOffice.status == 200)
            let spoofed = try await gateway.gateway.handle(.get, "/v1/notes/echo?name=a", headers: [Self.apiKey: key.secret, Self.xff: "203.0.113.50"],
                                                           from: "198.51.100.7")
            #expect(spoofed.status == 403, "the field is not believed from an untrusted peer")
        }
    }
}
