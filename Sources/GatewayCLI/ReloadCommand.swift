import ArgumentParser
import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

struct Reload: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Have a running gateway read its configuration file again and apply what can change live.",
        discussion: """
        Routes, mounts, upstream services, composites, batches, rate limits, cache settings and the \
        request pipeline's settings change without dropping a request; storage, listeners and \
        accounts settings are reported as needing a restart. On PostgreSQL every instance of the \
        database reloads its own file. The same happens on SIGHUP and on POST /v1/admin/reload.
        """)
    @OptionGroup var options: ConfigOptions
    @Option(help: "The gateway's base URL (default: the admin listener of the file, else its server.host and server.port).")
    var url: String?
    @Option(help: "An administrator's API key, unless the admin listener is reached (default: $GATEWAY_ADMIN_KEY).")
    var key: String?

    func run() async throws {
        // Checked here first: a mistake is shown with its place, and the gateway is not asked.
        let configuration = try options.load()
        let server = configuration.server
        let base: String
        if let url {
            base = url.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        } else if let admin = server.admin {
            base = "http://\(Self.hostForURL(admin.host)):\(admin.port)"
        } else {
            base = "\(server.tls == nil ? "http" : "https")://\(Self.hostForURL(server.host)):\(server.port)"
        }
        var request = HTTPClientRequest(url: base + "/v1/admin/reload")
        request.method = .POST
        if let key = key ?? ProcessInfo.processInfo.environment["GATEWAY_ADMIN_KEY"] { request.headers.add(name: "X-Api-Key", value: key) }
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        } catch {
            throw CommandFailure(description: "no gateway answers at \(base) (\(error)); give its address with --url")
        }
        let body = try await response.body.collect(upTo: 1 << 20)
        if response.status == .ok, let report = try? JSONDecoder().decode(ReloadReport.self, from: body) {
            print("\(base): \(report.summary)")
            return
        }
        let detail = (try? JSONDecoder().decode([String: JSONValue].self, from: body))?["detail"].flatMap { value -> String? in
            if case .string(let text) = value { return text }
            return nil
        } ?? String(buffer: body)
        if response.status.code == 422 {
            FileHandle.standardError.write(Data("Error: \(detail)\n".utf8))
            throw ExitCode(78)
        }
        throw CommandFailure(description: "\(base) answered \(response.status.code): \(detail)")
    }

    /// `host` as it goes in a URL: a wildcard listener is reached on loopback, IPv6 in brackets.
    static func hostForURL(_ host: String) -> String {
        if host == "0.0.0.0" { return "127.0.0.1" }
        if host == "::" { return "[::1]" }
        return host.contains(":") ? "[\(host)]" : host
    }
}
