import Crypto
import Foundation
import GatewayCore
import NIOCore
import NIOSSL
import NIOTLS
import SwiftASN1
import Synchronization
import X509

/// `server.tls.clientCertificates`: the listener asks clients for a certificate signed by `ca`
/// (PEM, one or more authorities). `optional`: a client without one is served as before (a
/// certificate that does not verify still fails the handshake); `required`: the handshake fails
/// without a verified certificate. A verified certificate names a caller through `auth.certificates`.
public struct ClientCertificateSettings: Decodable, Sendable, Equatable {
    public enum Mode: String, Decodable, Sendable, Equatable { case optional, required }
    public var ca: String
    public var mode: Mode = .optional

    enum CodingKeys: String, CodingKey { case ca, mode }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        ca = try container.decode(String.self, forKey: .ca)
        if let text = try container.decodeIfPresent(String.self, forKey: .mode) {
            guard let mode = Mode(rawValue: text) else {
                throw DecodingError.dataCorruptedError(forKey: .mode, in: container, debugDescription: "\"\(text)\" is not one of optional, required")
            }
            self.mode = mode
        }
    }
}

/// What the gateway knows of a verified client certificate: its subject (RFC 4514, most specific
/// first: `CN=billing,O=Acme`), its subject alternative names as `dns:…`, `email:…`, `uri:…`,
/// `ip:…`, and the SHA-256 of its DER (hexadecimal).
public struct ClientCertificate: Sendable, Hashable {
    public var subject: String
    public var alternativeNames: [String]
    public var fingerprint: String

    public init(subject: String, alternativeNames: [String], fingerprint: String) {
        self.subject = subject
        self.alternativeNames = alternativeNames
        self.fingerprint = fingerprint
    }

    /// Reads the DER of a certificate the TLS handshake verified. One it cannot read has no
    /// subject and no names: no rule names it, so it is refused (401), never served as a guest.
    init(der: [UInt8]) {
        fingerprint = SHA256.hash(data: der).map { String(format: "%02x", $0) }.joined()
        guard let certificate = try? Certificate(derEncoded: der) else {
            subject = ""
            alternativeNames = []
            return
        }
        subject = certificate.subject.description
        var names: [String] = []
        let alternatives: [GeneralName] = ((try? certificate.extensions.subjectAlternativeNames) ?? nil).map(Array.init) ?? []
        for name in alternatives {
            switch name {
            case .dnsName(let value): names.append("dns:" + value)
            case .rfc822Name(let value): names.append("email:" + value)
            case .uniformResourceIdentifier(let value): names.append("uri:" + value)
            case .ipAddress(let bytes):
                if let address = IPAddress(bytes: Array(bytes.bytes)) { names.append("ip:" + address.description) }
            default: continue
            }
        }
        alternativeNames = names
    }
}

/// The client certificate of one connection, recorded when its TLS handshake completes and read
/// by each request on it (HTTP/1.1 and HTTP/2 streams alike, through the task-local set around
/// the connection's handling).
final class ConnectionCertificate: Sendable {
    @TaskLocal static var current: ConnectionCertificate?
    private let stored = Mutex<ClientCertificate?>(nil)

    var certificate: ClientCertificate? { stored.withLock { $0 } }

    func record(_ certificate: ClientCertificate?) { stored.withLock { $0 = certificate } }
}

/// Records the verified peer certificate when the handshake completes, then leaves the pipeline.
/// It sits right after the TLS handler (the ALPN handler after it swallows the handshake event).
final class ClientCertificateRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    let connection: ConnectionCertificate

    init(_ connection: ConnectionCertificate) { self.connection = connection }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case TLSUserEvent.handshakeCompleted = event else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        // Verified by the handshake against the configured authorities (or the handshake failed);
        // nil when the mode is optional and the client sent none.
        if let leaf = try? context.pipeline.syncOperations.nioSSL_peerCertificate(), let der = try? leaf.toDERBytes() {
            connection.record(ClientCertificate(der: der))
        }
        context.fireUserInboundEventTriggered(event)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    /// Adds a recorder after the TLS handler of `channel`.
    static func install(on channel: any Channel) throws -> ConnectionCertificate {
        let connection = ConnectionCertificate()
        let operations = channel.pipeline.syncOperations
        try operations.addHandler(ClientCertificateRecorder(connection), position: .after(try operations.handler(type: NIOSSLServerHandler.self)))
        return connection
    }
}
