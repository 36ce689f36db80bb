import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A certificate authority and a leaf it signed, as PEM text, made for one test.
public struct TestCertificates: Sendable {
    public var authority: String
    public var leaf: String
    public var leafKey: String
    /// The authority's private key (PEM), to sign client certificates.
    public var authorityKey: String

    public static func make(_ name: String) throws -> TestCertificates {
        let now = Date()
        let authorityKey = P256.Signing.PrivateKey()
        let authorityName = try DistinguishedName { CommonName("Gateway test CA \(name)") }
        let authority = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(authorityKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 86_400, issuer: authorityName, subject: authorityName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true))
            },
            issuerPrivateKey: .init(authorityKey))
        let leafKey = P256.Signing.PrivateKey()
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 86_400, issuer: authorityName,
            subject: try DistinguishedName { CommonName("localhost") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames([.dnsName("localhost")])
                try ExtendedKeyUsage([.serverAuth])
            },
            issuerPrivateKey: .init(authorityKey))
        return TestCertificates(authority: try authority.serializeAsPEM().pemString, leaf: try leaf.serializeAsPEM().pemString,
                                leafKey: leafKey.pemRepresentation, authorityKey: authorityKey.pemRepresentation)
    }

    /// A client certificate this authority signed, for `commonName` in `organization`, with
    /// `alternativeNames`: its PEM and its private key's.
    public func client(_ commonName: String, organization: String = "Acme", alternativeNames: [GeneralName] = []) throws -> (certificate: String, key: String) {
        let now = Date()
        let signer = try P256.Signing.PrivateKey(pemRepresentation: authorityKey)
        let issuer = try Certificate(pemEncoded: authority).subject
        let key = P256.Signing.PrivateKey()
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 86_400, issuer: issuer,
            subject: try DistinguishedName {
                OrganizationName(organization)
                CommonName(commonName)
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                if !alternativeNames.isEmpty { SubjectAlternativeNames(alternativeNames) }
                try ExtendedKeyUsage([.clientAuth])
            },
            issuerPrivateKey: .init(signer))
        return (try certificate.serializeAsPEM().pemString, key.pemRepresentation)
    }

    /// A client's TLS configuration that trusts this authority and presents `client` (from ``client(_:organization:alternativeNames:)``).
    public func clientConfiguration(presenting client: (certificate: String, key: String)) throws -> TLSConfiguration {
        var tls = try clientConfiguration()
        tls.certificateChain = [.certificate(try NIOSSLCertificate(bytes: Array(client.certificate.utf8), format: .pem))]
        tls.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(client.key.utf8), format: .pem))
        return tls
    }

    /// Writes `cert.pem` (the leaf) and `key.pem` into `directory`.
    public func write(to directory: URL) throws {
        try leaf.write(to: directory.appendingPathComponent("cert.pem"), atomically: true, encoding: .utf8)
        try leafKey.write(to: directory.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
    }

    /// A client's TLS configuration that trusts only this authority; host names are not checked
    /// (tests connect to 127.0.0.1).
    public func clientConfiguration() throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(authority.utf8), format: .pem)])
        tls.certificateVerification = .noHostnameVerification
        return tls
    }
}
