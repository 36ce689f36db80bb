import GatewayCore
import Hummingbird
import HTTPTypes

/// Who is calling: reads the credential the way the route's API takes it and resolves it to a
/// principal. A native request carries `Authorization: Bearer` or `X-Api-Key`; a credential the
/// gateway cannot verify is a 401, even beside one it can (both are checked). A dialect reads its
/// old clients' credential (a query parameter, a field of the body, ...), and may serve a caller
/// whose credential does not resolve as a guest, as its old service did.
struct IdentifyStage {
    let authenticator: any Authenticator
    let metrics: GatewayMetrics
    let bodyLimit: BodyLimit
    /// `auth.certificates`: the callers client certificates name.
    var certificateRules: [CertificateRule] = []

    func run(_ call: inout RouteCall) async throws {
        var invalid = CredentialExtractor.InvalidCredential.refuse
        let headers = call.exchange.request.headers
        if let dialect = call.mounted.dialect {
            call.body = try await bodyLimit.collect(call.exchange.request)
            let request = call.routeRequest()
            call.request = request
            call.credential = dialect.credentials(request)
            invalid = dialect.credentials.invalid
        } else {
            if let refusal = NativeCredentials.refusal(in: headers) { throw refusal }
            call.credential = NativeCredentials.extract(from: headers)
            if let second = NativeCredentials.secondKey(in: headers) {
                _ = try await principal(for: second, address: call.exchange.client, invalid: .refuse)
            }
        }
        let (credential, address) = (call.credential, call.exchange.client)
        // A verified client certificate names the caller of a native request that presents no
        // other credential (dialects keep their old clients' credentials).
        if credential == nil, call.mounted.dialect == nil, let certificate = call.exchange.context.clientCertificate,
           let accounts = authenticator as? AccountAuthenticator {
            do {
                call.principal = try await accounts.principal(for: certificate, rules: certificateRules, address: address)
            } catch let error as GatewayError where error.kind == .unauthorized {
                metrics.recordAuthenticationFailure()
                throw error
            }
            return
        }
        (call.principal, call.credentialRefused) = try await GatewayTracing.span("principal") {
            try await principal(for: credential, address: address, invalid: invalid)
        }
    }

    /// The principal, and whether the credential was refused and the caller served as a guest.
    /// Answered without suspending when the authenticator can (no credential, or a remembered one).
    private func principal(for credential: Credential?, address: String,
                           invalid: CredentialExtractor.InvalidCredential) async throws -> (Principal, Bool) {
        do {
            if let known = try authenticator.knownPrincipal(for: credential, address: address) { return (known, false) }
            return (try await authenticator.principal(for: credential, address: address), false)
        } catch let error as GatewayError where error.kind == .unauthorized {
            metrics.recordAuthenticationFailure()
            guard invalid == .guest else { throw error }
            return (.anonymous(address: address), true)
        }
    }
}
