import GatewayCore
import Testing

@Suite("secret path parameters")
struct SecretParametersTests {
    @Test("a route's secret parameters are written as *** and the others as they came; without one the path is untouched")
    func redaction() {
        let tags = ["v2-manages-keys", SecretParameters.tag("key")]
        #expect(SecretParameters.names(in: tags) == ["key"])
        #expect(SecretParameters.redact("/v2/keys/gk_abc.json", template: "/v2/keys/{key}", parameters: ["key": "gk_abc.json"], secret: ["key"])
                == "/v2/keys/***")
        #expect(SecretParameters.redact("/a/1/b/s3cret/rest/of/it", template: "/a/{id}/b/{token}/{rest...}",
                                        parameters: ["id": "1", "token": "s3cret", "rest": "rest/of/it"], secret: ["token"]) == "/a/1/b/***/rest/of/it")
        #expect(SecretParameters.redact("/v2/feeds/12", template: "/v2/feeds/{feed}", parameters: ["feed": "12"], secret: []) == "/v2/feeds/12")
    }
}
