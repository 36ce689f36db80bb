import ArgumentParser
import AsyncHTTPClient
import Foundation
import GatewayCore
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

/// `--url` and `--key` of the account commands: with a URL, `gateway user` and `gateway key` work
/// through a running gateway's admin API (audited there, applied on every instance at once)
/// instead of opening its database.
struct RemoteOptions: ParsableArguments {
    @Option(help: "A running gateway's base URL: work through its admin API instead of the database.")
    var url: String?
    @Option(help: "With --url: an administrator's API key (a master key holding admin or *; default: $GATEWAY_ADMIN_KEY).")
    var key: String?

    /// The admin API's client, when `--url` is given.
    func client() throws -> AdminClient? {
        guard let url else { return nil }
        guard let key = key ?? ProcessInfo.processInfo.environment["GATEWAY_ADMIN_KEY"], !key.isEmpty else {
            throw ValidationError("--url needs an administrator's key: --key, or $GATEWAY_ADMIN_KEY")
        }
        let base = url.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if let parsed = URL(string: base), parsed.scheme?.lowercased() == "http", let host = parsed.host, host != "localhost", host != "::1", host != "[::1]", !host.hasPrefix("127.") {
            FileHandle.standardError.write(Data("warning: the administrator's key goes to \(host) unencrypted (http); use https beyond this machine\n".utf8))
        }
        return AdminClient(base: base, key: key)
    }
}

/// Calls of a running gateway's admin API; a refusal is a failure carrying its problem's detail.
struct AdminClient {
    let base: String
    let key: String

    @discardableResult
    func call(_ method: HTTPMethod, _ path: String, _ body: JSONValue? = nil) async throws -> JSONValue {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "X-Api-Key", value: key)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(body.serialized())
        }
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        } catch {
            throw CommandFailure(description: "no gateway answers at \(base) (\(error))")
        }
        let bytes = try await response.body.collect(upTo: 8 << 20)
        let value = bytes.readableBytes == 0 ? JSONValue.null : (try? JSONDecoder().decode(JSONValue.self, from: bytes)) ?? .string(String(buffer: bytes))
        guard response.status.code < 400 else {
            let problem = value.objectValue ?? [:]
            var detail = problem["detail"]?.stringValue ?? String(buffer: bytes)
            if let errors = problem["errors"]?.arrayValue {
                let fields = errors.compactMap(\.objectValue).map { error in
                    [error["pointer"]?.stringValue, error["detail"]?.stringValue].compactMap { $0 }.joined(separator: " ")
                }
                if !fields.isEmpty { detail += " (" + fields.joined(separator: "; ") + ")" }
            }
            throw CommandFailure(description: "\(base) answered \(response.status.code): \(detail)")
        }
        return value
    }

    /// A path segment, percent-encoded.
    static func segment(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
