import Foundation
import GatewayCore
import Logging
import SQLKit
import Synchronization

/// Mail sent off the request path: a request queues its message (and the lookups that decide
/// whether there is one) and answers at once, so that neither the time of the answer nor a mail
/// server that is down tells a caller whether an account exists. One worker sends the queued
/// messages in order; at most ``capacity`` wait, further ones are dropped (and logged).
final class MailOutbox: Sendable {
    typealias Job = @Sendable () async throws -> Void

    let mailer: any Mailer
    /// Whether messages reach anyone: a mail server is configured, or development mode logs them.
    let delivers: Bool
    let logger: Logger
    static let capacity = 1_000

    private let jobs: AsyncStream<Job>.Continuation
    private let worker: Task<Void, Never>
    private let waiting: Waiting

    /// How many jobs wait, shared by the queue and its worker.
    private final class Waiting: Sendable {
        let count = Atomic<Int>(0)
    }

    init(mailer: any Mailer, delivers: Bool, logger: Logger) {
        self.mailer = mailer
        self.delivers = delivers
        self.logger = logger
        let (stream, continuation) = AsyncStream.makeStream(of: Job.self)
        let waiting = Waiting()
        jobs = continuation
        self.waiting = waiting
        worker = Task {
            for await job in stream {
                waiting.count.wrappingSubtract(1, ordering: .relaxed)
                do {
                    try await job()
                } catch {
                    logger.warning("queued mail failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    /// Queues `job`; false (and logged) when the queue is full or closed.
    @discardableResult
    func enqueue(_ job: @escaping Job) -> Bool {
        guard waiting.count.wrappingAdd(1, ordering: .relaxed).newValue <= Self.capacity else {
            waiting.count.wrappingSubtract(1, ordering: .relaxed)
            logger.warning("mail queue full; a message was dropped")
            return false
        }
        if case .terminated = jobs.yield(job) {
            waiting.count.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Sends what is queued, then stops taking messages.
    func close() async {
        jobs.finish()
        await worker.value
    }
}

/// Email address verification: a one-time link mailed to a user's address, which marks that
/// address verified when opened. Only a verified address receives password reset links; a changed
/// address is unverified until its own link is opened. Links are sent at registration and when the
/// address changes (when mail is delivered at all: `mail:`, or `auth.developmentMail`), and on
/// request (`POST /v1/me/email/verification`). Tokens are stored by SHA-256 only, live one day and
/// are used once; a user is sent at most one link per `auth.passwordReset.resendAfter`.
final class EmailVerifications: Sendable {
    let store: AccountStore
    let outbox: MailOutbox
    let settings: PasswordResetSettings
    let baseURL: String
    /// How long a verification link works.
    static let ttl = 86_400.0

    init(store: AccountStore, outbox: MailOutbox, settings: PasswordResetSettings, baseURL: String) {
        self.store = store
        self.outbox = outbox
        self.settings = settings
        self.baseURL = baseURL
    }

    /// The link a token opens.
    func link(for token: String) -> String {
        baseURL + "/v1/auth/verify-email?token=" + token
    }

    /// Queues a verification link for `user`'s address when it has one that is not verified and
    /// mail is delivered. Never fails the request that asks.
    func offer(_ user: AccountStore.User) {
        guard outbox.delivers, user.email != nil, !user.emailVerified else { return }
        let userID = user.id
        outbox.enqueue { [self] in try await send(userID: userID) }
    }

    /// Mails a link to the current address of `userID`, unless it is verified, or a link went out
    /// to it less than `resendAfter` ago.
    func send(userID: String) async throws {
        guard let user = try await store.user(id: userID), !user.disabled, !user.emailVerified, let address = user.email else { return }
        let now = store.clock.now().timeIntervalSince1970
        let recent = try await store.database.select().column("created_at").from("gateway_email_verifications")
            .where("user_id", .equal, userID).where("email_key", .equal, AccountStore.emailKey(address))
            .where("created_at", .greaterThan, now - settings.resendAfter.seconds).first()
        guard recent == nil else { return }
        let token = AccountStore.randomToken(bytes: 32)
        try await store.database.insert(into: "gateway_email_verifications")
            .columns("token_hash", "user_id", "email_key", "created_at", "expires_at")
            .values(SQLBind(AccountStore.sha256(token)), SQLBind(userID), SQLBind(AccountStore.emailKey(address)), SQLBind(now), SQLBind(now + Self.ttl))
            .run()
        try await outbox.mailer.send(to: address, subject: "Confirm your email address", body: """
            Someone (we hope you) gave this address to the account "\(user.username)".

            Open this link within 24 hours to confirm it:

            \(link(for: token))

            Until it is confirmed, no password reset link is sent here. If it was not you, ignore this message.
            """)
    }

    /// Marks the address a token was sent to as verified. 404 when the token is unknown, used or
    /// expired. An address the user has changed since stays unverified.
    func confirm(token: String) async throws {
        let now = store.clock.now().timeIntervalSince1970
        // Used in the statement that finds it: two confirmations of one token cannot both pass.
        let row = try await store.database.update("gateway_email_verifications").set("used_at", to: now)
            .where("token_hash", .equal, AccountStore.sha256(token)).where("used_at", .is, SQLLiteral.null).where("expires_at", .greaterThan, now)
            .returning("user_id", "email_key").first()
        guard let row, let userID = try? row.decode(column: "user_id", as: String.self),
              let emailKey = try? row.decode(column: "email_key", as: String.self) else {
            throw GatewayError.notFound("This verification link is not valid: it was used already, has expired, or was mistyped. Ask for a new one.")
        }
        try await store.database.update("gateway_users").set("verified_email", to: emailKey).where("id", .equal, userID).run()
    }
}

extension AccountStore {
    /// Revokes every API key of `userID` (after a password reset).
    public func revokeAllKeys(userID: String) async throws {
        try await database.update("gateway_api_keys").set("revoked_at", to: clock.now().timeIntervalSince1970)
            .where("user_id", .equal, userID).where("revoked_at", .is, SQLLiteral.null).run()
    }

    /// Marks the current address of `userID` verified without a link (the CLI and tests, for an
    /// address an operator vouches for). False when the user has no address.
    @discardableResult
    public func markEmailVerified(userID: String) async throws -> Bool {
        guard let email = try await user(id: userID)?.email else { return false }
        try await database.update("gateway_users").set("verified_email", to: Self.emailKey(email)).where("id", .equal, userID).run()
        return true
    }
}

/// The operations of email verification: ask for a link, and the link itself.
enum EmailVerificationOperations {
    struct TokenBody: Codable, Sendable {
        var token: String
    }

    struct PageQuery: Codable, Sendable {
        var token: String?
    }

    struct Accepted: Codable, Sendable {
        var message: String
    }

    static func operations(verifications: EmailVerifications) -> [Route] {
        [
            Route.define("accounts.emailVerification", .post, "/me/email/verification", summary: "Mail a link that confirms the profile's email address")
                .details("Only a confirmed address receives password reset links. 202 whether or not a link is sent (none when the address is confirmed already, or a link went out moments ago); 409 when the profile has no address.")
                .access(.user)
                .status(202)
                .replies(Accepted.self) { _, context in
                    guard let userID = context.principal.userID, let user = try await verifications.store.user(id: userID) else {
                        throw GatewayError.forbidden("This credential acts for no user.")
                    }
                    // A valid request the account's state cannot serve: 409, not 422 (nothing in the request is wrong).
                    guard user.email != nil else { throw GatewayError.conflict("The profile has no email address to confirm: set one first.") }
                    verifications.offer(user)
                    return Reply(Accepted(message: user.emailVerified ? "The address is confirmed already." : "A link to confirm the address is on its way."),
                                 status: .accepted)
                },
            Route.define("accounts.emailVerificationConfirm", .post, "/auth/verify-email", summary: "Confirm an email address with a link's token")
                .details("404 when the token was used already, has expired or is unknown.")
                .body(TokenBody.self)
                .returns(NoContent.self) { input, _ in
                    try await verifications.confirm(token: input.body.token)
                    return NoContent()
                },
            Route.define("accounts.emailVerificationPage", .get, "/auth/verify-email", summary: "The page a verification link opens: confirms the address")
                .query(PageQuery.self)
                .documentRawOutput(mediaTypes: "text/html")
                .documentErrors([.notFound], mediaType: "text/html")
                .status(200)
                .replies(RawReply.self) { input, _ in
                    do {
                        try await verifications.confirm(token: input.query.token ?? "")
                    } catch let error as GatewayError where error.status == 404 {
                        return Reply(PasswordResetOperations.html("<h1>This link does not work</h1><p>\(PasswordResetOperations.escape(error.detail))</p>"),
                                     status: 404, headers: [.cacheControl: "no-store"])
                    }
                    return Reply(PasswordResetOperations.html("<h1>Your email address is confirmed</h1><p>You may close this page.</p>"),
                                 status: 200, headers: [.cacheControl: "no-store"])
                },
        ]
    }
}
