import Foundation
import GatewayCore
import NIOCore
import NIOSSL
import Synchronization

/// `server.tls`: the main listener speaks HTTPS with this certificate chain and private key (PEM
/// files; relative paths against plugins.yaml's folder). With `http2` (the default) clients pick
/// HTTP/2 or HTTP/1.1 by ALPN; WebSocket upgrades need HTTP/1.1, so a gateway with WebSocket routes
/// serves them over TLS only with `http2: false` (or on a `socketListeners` port). The files are
/// read again on SIGHUP (`gateway` keeps the old pair when the new one is unusable).
public struct TLSSettings: Decodable, Sendable, Equatable {
    /// The certificate chain, leaf first (PEM).
    public var certificate: String
    /// The private key of the leaf certificate (PEM, unencrypted).
    public var key: String
    /// Whether HTTP/2 is offered by ALPN beside HTTP/1.1.
    public var http2 = true
    /// The oldest TLS version accepted: `1.2` (default) or `1.3`.
    public var minimumVersion = "1.2"
    /// Client certificates the handshake asks for (see ``ClientCertificateSettings``).
    public var clientCertificates: ClientCertificateSettings?

    public init(certificate: String, key: String, http2: Bool = true) {
        self.certificate = certificate
        self.key = key
        self.http2 = http2
    }

    enum CodingKeys: String, CodingKey { case certificate, key, http2, minimumVersion, clientCertificates }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        certificate = try container.decode(String.self, forKey: .certificate)
        key = try container.decode(String.self, forKey: .key)
        http2 = try container.decodeIfPresent(Bool.self, forKey: .http2) ?? http2
        minimumVersion = try container.decodeIfPresent(String.self, forKey: .minimumVersion) ?? minimumVersion
        clientCertificates = try container.decodeIfPresent(ClientCertificateSettings.self, forKey: .clientCertificates)
        guard ["1.2", "1.3"].contains(minimumVersion) else {
            throw DecodingError.dataCorruptedError(forKey: .minimumVersion, in: container, debugDescription: "'\(minimumVersion)' is not a TLS version this gateway accepts as the oldest (1.2 or 1.3)")
        }
    }
}

/// The certificate and key the TLS listener presents, read from their files and swapped whole on
/// ``reload()``: each TLS handshake asks for the current pair (NIOSSL's per-handshake context
/// callback), so new connections get the new certificate while open ones keep theirs.
public final class CertificateStore: Sendable {
    struct Pair: Sendable {
        var chain: [NIOSSLCertificate]
        var key: NIOSSLPrivateKey
    }

    let certificateFile: URL
    let keyFile: URL
    let settings: TLSSettings
    private let current: Mutex<Pair>
    /// The authorities client certificates must chain to (`clientCertificates.ca`), read at start.
    private let clientAuthorities: [NIOSSLCertificate]

    /// Reads the pair; a missing, unreadable or mismatched file is an error naming it.
    public init(_ settings: TLSSettings, baseDirectory: URL) throws {
        self.settings = settings
        func resolve(_ path: String) -> URL {
            (path.hasPrefix("/") ? URL(fileURLWithPath: path) : baseDirectory.appendingPathComponent(path)).standardizedFileURL
        }
        certificateFile = resolve(settings.certificate)
        keyFile = resolve(settings.key)
        current = Mutex(try Self.read(certificateFile, keyFile))
        if let clients = settings.clientCertificates {
            let file = resolve(clients.ca)
            let authorities: [NIOSSLCertificate]
            do {
                authorities = try NIOSSLCertificate.fromPEMFile(file.path)
            } catch {
                throw GatewayStartupError("server.tls.clientCertificates.ca: \(file.path) is not a readable PEM file of certificates (\(error))")
            }
            guard !authorities.isEmpty else { throw GatewayStartupError("server.tls.clientCertificates.ca: \(file.path) holds no certificate") }
            clientAuthorities = authorities
        } else {
            clientAuthorities = []
        }
    }

    /// The leaf certificate's serial number, as hexadecimal (for logs and tests).
    public var serialNumber: String {
        current.withLock { pair in pair.chain.first.map { Data($0.serialNumber).map { String(format: "%02x", $0) }.joined() } ?? "" }
    }

    /// Reads the files again and, when they make a usable pair, serves it from the next handshake
    /// on. Otherwise throws, and the pair in use stays.
    public func reload() throws {
        let pair = try Self.read(certificateFile, keyFile)
        current.withLock { $0 = pair }
    }

    static func read(_ certificateFile: URL, _ keyFile: URL) throws -> Pair {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateFile.path)
        } catch {
            throw GatewayStartupError("server.tls.certificate: \(certificateFile.path) is not a readable PEM certificate chain (\(error))")
        }
        guard !chain.isEmpty else { throw GatewayStartupError("server.tls.certificate: \(certificateFile.path) holds no certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: keyFile.path, format: .pem)
        } catch {
            throw GatewayStartupError("server.tls.key: \(keyFile.path) is not a readable, unencrypted PEM private key (\(error))")
        }
        // A context checks that the key belongs to the leaf certificate.
        do {
            _ = try NIOSSLContext(configuration: .makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key)))
        } catch {
            throw GatewayStartupError("server.tls: the key in \(keyFile.path) does not belong to the certificate in \(certificateFile.path) (\(error))")
        }
        return Pair(chain: chain, key: key)
    }

    /// The server configuration: the current pair at every handshake, ALPN `h2` and `http/1.1`
    /// when `http2`, else `http/1.1` only.
    func configuration() -> TLSConfiguration {
        let pair = current.withLock { $0 }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: pair.chain.map { .certificate($0) }, privateKey: .privateKey(pair.key))
        configuration.minimumTLSVersion = settings.minimumVersion == "1.3" ? .tlsv13 : .tlsv12
        configuration.applicationProtocols = settings.http2 ? ["h2", "http/1.1"] : ["http/1.1"]
        if let clients = settings.clientCertificates {
            // Only the configured authorities, never the system's; no host name check (a client's
            // name is not its address). Optional: a client may send none, but one it sends must verify.
            configuration.trustRoots = .certificates(clientAuthorities)
            configuration.additionalTrustRoots = []
            configuration.certificateVerification = clients.mode == .required ? .noHostnameVerification : .optionalVerification
            configuration.sendCANameList = true
        }
        configuration.sslContextCallback = { [self] _, promise in
            let pair = current.withLock { $0 }
            var override = NIOSSLContextConfigurationOverride()
            override.certificateChain = pair.chain.map { .certificate($0) }
            override.privateKey = .privateKey(pair.key)
            promise.succeed(override)
        }
        return configuration
    }
}
