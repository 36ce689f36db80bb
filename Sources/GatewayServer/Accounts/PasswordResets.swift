import Foundation
import GatewayCore
import Logging
import NIOCore
import NIOPosix
import SQLKit

/// Password resets: a one-time token mailed to the user as a link to a page the gateway serves
/// (`/v1/auth/password-reset/form?token=`), where they set a new password; every session of the
/// user then ends, and their API keys are revoked (unless `auth.keepKeysOnReset`). Tokens are
/// stored by SHA-256 only, live `auth.passwordReset.ttl`, and are used once. Links go only to a
/// verified address (``EmailVerifications``), at most once per `resendAfter`.
///
/// A request is answered the same way, in the same time, whatever the account: the lookup and the
/// mail happen later, in the ``MailOutbox``, so neither the answer nor its timing tells a caller
/// whether an account exists or has an address.
final class PasswordResets: Sendable {
    let store: AccountStore
    let authenticator: AccountAuthenticator
    let settings: PasswordResetSettings
    let outbox: MailOutbox
    /// The address checks a reset link waits for.
    let verifications: EmailVerifications
    /// Whether API keys survive a reset (`auth.keepKeysOnReset`).
    let keepKeys: Bool
    /// The gateway's public base URL, for the link (`server.publicURL`, or its listener).
    let baseURL: String

    init(store: AccountStore, authenticator: AccountAuthenticator, settings: PasswordResetSettings, mailer: any Mailer, baseURL: String,
         delivers: Bool = true, keepKeys: Bool = false, logger: Logger = Logger(label: "gateway.mail")) {
        self.store = store
        self.authenticator = authenticator
        self.settings = settings
        self.outbox = MailOutbox(mailer: mailer, delivers: delivers, logger: logger)
        self.keepKeys = keepKeys
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        verifications = EmailVerifications(store: store, outbox: outbox, settings: settings, baseURL: self.baseURL)
    }

    /// The link a token opens.
    func link(for token: String) -> String {
        if let page = settings.link { return page + (page.contains("?") ? "&" : "?") + "token=" + token }
        return baseURL + "/v1/auth/password-reset/form?token=" + token
    }

    /// Queues a reset link for the user named `username` or registered with `email`, and returns
    /// at once: whether there is such a user is decided later (``deliver(username:email:)``).
    func request(username: String?, email: String?) {
        outbox.enqueue { [self] in try await deliver(username: username, email: email) }
    }

    /// Mails a reset link to the user named `username` or registered with `email`; nothing when
    /// there is no such user, their address is not verified, mail is not delivered, or a link went
    /// out less than `resendAfter` ago.
    func deliver(username: String?, email: String?) async throws {
        var user: AccountStore.User?
        if let username, !username.isEmpty { user = try await store.user(named: username) }
        if user == nil, let email, !email.isEmpty { user = try await store.user(email: email) }
        guard let user, !user.disabled, let address = user.email, user.emailVerified else { return }
        guard outbox.delivers else {
            outbox.logger.notice("a password reset was asked for, but no mail: is configured; no link was made")
            return
        }
        let now = store.clock.now().timeIntervalSince1970
        let recent = try await store.database.select().column("created_at").from("gateway_password_resets")
            .where("user_id", .equal, user.id).where("created_at", .greaterThan, now - settings.resendAfter.seconds).first()
        guard recent == nil else { return }
        let token = AccountStore.randomToken(bytes: 32)
        try await store.database.insert(into: "gateway_password_resets")
            .columns("token_hash", "user_id", "created_at", "expires_at")
            .values(SQLBind(AccountStore.sha256(token)), SQLBind(user.id), SQLBind(now), SQLBind(now + settings.ttl.seconds)).run()
        let minutes = Int((settings.ttl.seconds / 60).rounded())
        try await outbox.mailer.send(to: address, subject: "Reset your password", body: """
            Someone (we hope you) asked to reset the password of the account "\(user.username)".

            Open this link within \(minutes) minutes to choose a new one:

            \(link(for: token))

            If you did not ask, ignore this message: your password stays as it is.
            """)
    }

    /// Sets a new password with a token: 404 when the token is unknown, used or expired; 422 for
    /// a password the gateway refuses. Ends every session of the user, on every instance, and
    /// revokes their API keys unless `auth.keepKeysOnReset`.
    func confirm(token: String, password: String) async throws {
        if let problem = AccountStore.passwordProblem(password) { throw GatewayError.invalid(field: "/password", problem) }
        let now = store.clock.now().timeIntervalSince1970
        // Used in the statement that finds it: two confirmations of one token cannot both pass.
        let row = try await store.database.update("gateway_password_resets").set("used_at", to: now)
            .where("token_hash", .equal, AccountStore.sha256(token)).where("used_at", .is, SQLLiteral.null).where("expires_at", .greaterThan, now)
            .returning("user_id").first()
        guard let userID = try row?.decode(column: "user_id", as: String.self) else {
            throw GatewayError.notFound("This reset link is not valid: it was used already, has expired, or was mistyped. Ask for a new one.")
        }
        try await store.setPassword(userID: userID, secret: .plain(password))
        // Whoever knew the old password may have made keys: they end with it.
        if !keepKeys { try await store.revokeAllKeys(userID: userID) }
        authenticator.forget(userID: userID)
    }
}

/// `auth.passwordReset:` — how reset links behave.
public struct PasswordResetSettings: Decodable, Sendable, Equatable {
    /// How long a link works (default 1h).
    public var ttl = ConfigDuration(seconds: 3_600)
    /// How soon a user may ask again (default 1m).
    public var resendAfter = ConfigDuration(seconds: 60)
    /// A page of the app's own that takes `?token=` (default: the gateway's page).
    public var link: String?

    public init() {}

    enum CodingKeys: String, CodingKey { case ttl, resendAfter, link }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        ttl = try container.decodeIfPresent(ConfigDuration.self, forKey: .ttl) ?? ttl
        resendAfter = try container.decodeIfPresent(ConfigDuration.self, forKey: .resendAfter) ?? resendAfter
        link = try container.decodeIfPresent(String.self, forKey: .link)
        guard ttl.seconds >= 60, ttl.seconds <= 7 * 86_400 else {
            throw DecodingError.dataCorruptedError(forKey: .ttl, in: container, debugDescription: "must be between 1m and 7d")
        }
        if let link, !(link.hasPrefix("https://") || link.hasPrefix("http://")) {
            throw DecodingError.dataCorruptedError(forKey: .link, in: container, debugDescription: "must be an http(s) URL")
        }
    }
}

/// `mail:` — how the gateway sends mail (password reset links). Without it, messages are written
/// to the log instead.
public struct MailSettings: Decodable, Sendable, Equatable {
    /// The SMTP server: a relay on the same host or network (plain SMTP, no authentication; let the
    /// relay deliver onwards with TLS).
    public var host: String
    public var port: Int = 25
    /// The sender address.
    public var from: String
    /// How long one message may take to send (default 10s).
    public var timeout = ConfigDuration(seconds: 10)

    enum CodingKeys: String, CodingKey { case host, port, from, timeout }

    public init(host: String, port: Int = 25, from: String) {
        self.host = host
        self.port = port
        self.from = from
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        host = try container.decode(String.self, forKey: .host)
        port = try container.decodeIfPresent(Int.self, forKey: .port) ?? port
        from = try container.decode(String.self, forKey: .from)
        timeout = try container.decodeIfPresent(ConfigDuration.self, forKey: .timeout) ?? timeout
        guard (1...65535).contains(port) else { throw DecodingError.dataCorruptedError(forKey: .port, in: container, debugDescription: "\(port) is not a port") }
        guard AccountStore.emailProblem(from) == nil else {
            throw DecodingError.dataCorruptedError(forKey: .from, in: container, debugDescription: "'\(from)' is not an email address")
        }
    }
}

/// Sends a plain-text message.
protocol Mailer: Sendable {
    func send(to address: String, subject: String, body: String) async throws
}

/// Without `mail:`, nothing is sent. In development mode (`auth.developmentMail`) the message,
/// links included, goes to the log (at notice level) so that a developer can open them; otherwise
/// only that a message was not sent is logged, never its text (a link in it grants an account).
struct LogMailer: Mailer {
    let logger: Logger
    var development = false

    func send(to address: String, subject: String, body: String) async throws {
        if development {
            logger.notice("mail not sent (no mail: in plugins.yaml; auth.developmentMail is on); its text follows",
                          metadata: ["to": "\(address)", "subject": "\(subject)", "body": "\(body)"])
        } else {
            logger.notice("mail not sent (no mail: in plugins.yaml)", metadata: ["subject": "\(subject)"])
        }
    }
}

/// SMTP (RFC 5321) to one server: EHLO, MAIL FROM, RCPT TO, DATA (dot-stuffed, CRLF), QUIT.
struct SMTPMailer: Mailer {
    let settings: MailSettings
    let logger: Logger

    func send(to address: String, subject: String, body: String) async throws {
        guard AccountStore.emailProblem(address) == nil, !address.contains("\r"), !address.contains("\n") else {
            throw GatewayError.badRequest("'\(address)' is not an address mail can be sent to.")
        }
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await deliver(to: address, subject: subject, body: body) }
                group.addTask {
                    try await Task.sleep(for: .seconds(settings.timeout.seconds))
                    throw GatewayError.gatewayTimeout("The mail server did not answer in time.")
                }
                try await group.next()
                group.cancelAll()
            }
        } catch let error as GatewayError {
            logger.error("mail not sent", metadata: ["to": "\(address)", "error": "\(error.detail)"])
            throw GatewayError.unavailable("The message could not be sent; try again later.")
        } catch {
            logger.error("mail not sent", metadata: ["to": "\(address)", "error": "\(error)"])
            throw GatewayError.unavailable("The message could not be sent; try again later.")
        }
    }

    /// The message: headers, a blank line, the body with CRLF line ends and dot-stuffing.
    static func message(from: String, to: String, subject: String, body: String, date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss '+0000'"
        let lines = body.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix(".") ? "." + $0 : String($0) }
        return ["From: \(from)", "To: \(to)", "Subject: \(subject)", "Date: \(formatter.string(from: date))", "MIME-Version: 1.0",
                "Content-Type: text/plain; charset=utf-8", "Content-Transfer-Encoding: 8bit", ""].joined(separator: "\r\n")
            + "\r\n" + lines.joined(separator: "\r\n") + "\r\n.\r\n"
    }

    private func deliver(to address: String, subject: String, body: String) async throws {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: settings.host, port: settings.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LineDecoder()))
                    return try NIOAsyncChannel<String, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        try await channel.executeThenClose { inbound, outbound in
            var lines = inbound.makeAsyncIterator()
            /// Reads a reply (its last line has a space after the code) and checks its code.
            func expect(_ codes: ClosedRange<Int>) async throws {
                while true {
                    guard let line = try await lines.next() else { throw GatewayError.badGateway("The mail server closed the connection.") }
                    let code = Int(line.prefix(3)) ?? 0
                    if line.count > 3, line[line.index(line.startIndex, offsetBy: 3)] == "-" { continue }
                    guard codes.contains(code) else { throw GatewayError.badGateway("The mail server answered: \(line.prefix(200))") }
                    return
                }
            }
            func say(_ text: String) async throws { try await outbound.write(ByteBuffer(string: text + "\r\n")) }
            try await expect(220...220)
            try await say("EHLO gateway")
            try await expect(250...250)
            try await say("MAIL FROM:<\(settings.from)>")
            try await expect(250...250)
            try await say("RCPT TO:<\(address)>")
            try await expect(250...251)
            try await say("DATA")
            try await expect(354...354)
            try await outbound.write(ByteBuffer(string: Self.message(from: settings.from, to: address, subject: subject, body: body, date: Date())))
            try await expect(250...250)
            try await say("QUIT")
        }
    }
}

/// Splits SMTP replies into lines (CRLF or LF), at most 4 KB each.
struct LineDecoder: ByteToMessageDecoder {
    typealias InboundOut = String

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let end = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.readableBytes > 4_096 { throw GatewayError.badGateway("The mail server sent a line longer than 4 KB.") }
            return .needMoreData
        }
        let length = end - buffer.readerIndex
        var line = buffer.readString(length: length) ?? ""
        buffer.moveReaderIndex(forwardBy: 1)
        if line.hasSuffix("\r") { line.removeLast() }
        context.fireChannelRead(wrapInboundOut(line))
        return .continue
    }
}
