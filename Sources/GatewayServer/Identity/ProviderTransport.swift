import AsyncHTTPClient
import Foundation
import GatewayCore
import NIOCore
import NIOHTTP1
import NIOSSL

/// How the gateway reaches one identity provider: its discovery document, its keys and its
/// introspection endpoint, over https with the system's trust store or the provider's `ca:` file
/// (plain http only to a loopback address: ``ProviderSettings/transportProblem(_:)``), following
/// no redirect, with a deadline, and reading at most ``maxDocument`` bytes of an answer.
final class ProviderTransport: Sendable {
    private let client: HTTPClient
    /// How long one exchange with the provider may take.
    let deadline: TimeAmount
    static let maxDocument = 1 << 20

    /// An answer: its status, its body, and how long it may be kept (`Cache-Control: max-age`).
    struct Answer: Sendable {
        var status: Int
        var body: Data
        var maxAge: Int?
    }

    /// The certificates of a provider's `ca:` file (nil without one: the system's trust store).
    static func authorities(_ ca: String?, baseDirectory: URL) throws -> [NIOSSLCertificate]? {
        guard let ca else { return nil }
        let path = ca.hasPrefix("/") ? ca : baseDirectory.appendingPathComponent(ca).path
        do {
            return try NIOSSLCertificate.fromPEMFile(path)
        } catch {
            throw GatewayError.badRequest("The provider's ca: file \(path) cannot be read as PEM certificates: \(error)")
        }
    }

    /// `authorities`: the certificate authorities to trust instead of the system's.
    init(authorities: [NIOSSLCertificate]?, deadline: TimeAmount = .seconds(10)) {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let authorities { tls.trustRoots = .certificates(authorities) }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls, redirectConfiguration: .disallow,
                                                     timeout: .init(connect: .seconds(5), read: deadline))
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 16)
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.deadline = deadline
    }

    /// GETs `url` asking for JSON.
    func get(_ url: String) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Accept", value: "application/json")
        return try await send(request)
    }

    /// POSTs `fields` as a form to `url`, authenticated with HTTP Basic (RFC 6749 §2.3.1).
    func postForm(_ url: String, fields: [(String, String)], user: String, password: String) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        let credentials = Self.formEncode(user) + ":" + Self.formEncode(password)
        request.headers.add(name: "Authorization", value: "Basic " + Data(credentials.utf8).base64EncodedString())
        let body = fields.map { Self.formEncode($0.0) + "=" + Self.formEncode($0.1) }.joined(separator: "&")
        request.body = .bytes(ByteBuffer(string: body))
        return try await send(request)
    }

    private func send(_ request: HTTPClientRequest) async throws -> Answer {
        guard ProviderSettings.transportProblem(request.url) == nil else {
            throw ProviderError.unreachable("\(request.url) is neither https nor loopback http")
        }
        do {
            let response = try await client.execute(request, timeout: deadline)
            let body = try await response.body.collect(upTo: Self.maxDocument)
            return Answer(status: Int(response.status.code), body: Data(body.readableBytesView),
                          maxAge: Self.maxAge(response.headers.first(name: "Cache-Control")))
        } catch let error as ProviderError {
            throw error
        } catch {
            throw ProviderError.unreachable("\(request.url): \(error)")
        }
    }

    func shutdown() async {
        try? await client.shutdown()
    }

    /// `max-age` of a `Cache-Control` value (nil with `no-store`, `no-cache` or none).
    static func maxAge(_ value: String?) -> Int? {
        guard let value else { return nil }
        var age: Int?
        for directive in value.lowercased().split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            switch parts.first {
            case "no-store", "no-cache": return nil
            case "max-age": age = parts.count == 2 ? Int(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\" "))) : nil
            default: continue
            }
        }
        return age
    }

    private static let formUnreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    /// `application/x-www-form-urlencoded` (RFC 6749 appendix B), every other byte percent-encoded.
    static func formEncode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: formUnreserved) ?? ""
    }
}

/// Why a provider could not answer (the caller's token is not at fault: a 503, not a 401).
enum ProviderError: Error, CustomStringConvertible {
    case unreachable(String)
    case badDocument(String)

    var description: String {
        switch self {
        case .unreachable(let text): "unreachable: \(text)"
        case .badDocument(let text): "bad answer: \(text)"
        }
    }
}
