import GatewayCore
import Testing
@testable import UpstreamPlugin

@Suite("upstream paths: read once, written in one encoding, refused when a service could read them otherwise")
struct UpstreamPathTests {
    @Test("a rest's segments are decoded once and checked; dot segments, encoded slashes, NULs and ';' are refused")
    func segments() throws {
        #expect(try UpstreamForwarder.segments("a//b/", matrix: false) == ["a", "b"])
        #expect(try UpstreamForwarder.segments("t%C3%A4by/%7Eme/a%20b", matrix: false) == ["täby", "~me", "a b"])
        #expect(try UpstreamForwarder.segments("items;v=2/x", matrix: true) == ["items;v=2", "x"])
        for rest in ["..", ".", "a/../b", "%2e%2E", "a%2Fb", "a%2fb", "a%5Cb", "a\\b", "a%00b", "a;b", "%zz", "..%2F..%2Fetc"] {
            #expect(throws: GatewayError.self, "\(rest)") { _ = try UpstreamForwarder.segments(rest, matrix: false) }
        }
        // With ';' parameters allowed, an encoded ';' would turn into one more separator.
        #expect(throws: GatewayError.self) { _ = try UpstreamForwarder.segments("a%3Bb", matrix: true) }
        #expect(UpstreamForwarder.segment("a;b/c d") == "a%3Bb%2Fc%20d")
        #expect(UpstreamForwarder.segment("a;b", matrix: true) == "a;b")
    }

    @Test("route paths are matched as the router matches them, without regard to case")
    func shadows() {
        let shadows = RouteShadows(paths: ["/admin/{rest...}", "/files/{name}", "/files/secret", "/{rest...}", "/Reports"])
        #expect(shadows.route(for: ["admin", "x"]) == "/admin/{rest...}")
        #expect(shadows.route(for: ["admin"]) == "/admin/{rest...}")
        #expect(shadows.route(for: ["files", "secret"]) == "/files/secret")
        #expect(shadows.route(for: ["files", "other"]) == "/files/{name}")
        #expect(shadows.route(for: ["files", "a", "b"]) == "/{rest...}")
        #expect(shadows.route(for: ["reports"]) == "/reports")
        #expect(shadows.route(for: ["elsewhere", "x"]) == "/{rest...}")
        #expect(shadows.route(for: []) == "/{rest...}")
        #expect(!shadows.isSingle)
        #expect(RouteShadows(paths: ["/{path...}", "/{path...}"]).isSingle)
    }
}
