import Foundation
import GatewayCore
import HTTPTypes
import NIOCore

/// The native password reset: ask for a link, set the password with its token, and the small
/// page the link opens (a form that posts the new password back).
enum PasswordResetOperations {
    struct RequestBody: Codable, Sendable, ValidatableInput {
        var username: String?
        var email: String?

        static let fieldRules: [String: FieldRule] = ["username": .text(1...1000), "email": .text(1...1000)]
        static let requiredAlternatives = [["username"], ["email"]]
    }

    struct ConfirmBody: Codable, Sendable, ValidatableInput {
        var token: String
        var password: String

        static let fieldRules: [String: FieldRule] = ["password": AccountRules.password]
    }

    struct Accepted: Codable, Sendable {
        var message: String
    }

    struct PageQuery: Codable, Sendable {
        var token: String?
    }

    /// `token=...&password=...&confirm=...` from the page's form.
    struct FormBody: RawBodyInput {
        static let acceptedMediaTypes = ["application/x-www-form-urlencoded"]
        var fields: [String: String]

        init(bytes: ByteBuffer, contentType: String) throws {
            fields = [:]
            guard bytes.readableBytes <= 16_384 else { throw GatewayError.contentTooLarge(limit: 16_384) }
            for pair in String(buffer: bytes).split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard let name = PercentDecoding.decode(parts[0], plusIsSpace: true),
                      let value = PercentDecoding.decode(parts.count > 1 ? parts[1] : "", plusIsSpace: true) else {
                    throw GatewayError.badRequest("The form is not validly encoded.")
                }
                fields[name] = value
            }
        }

        init(from decoder: any Decoder) throws { fields = try [String: String](from: decoder) }
    }

    static func operations(resets: PasswordResets) -> [Route] {
        [
            Route.define("accounts.passwordReset", .post, "/auth/password-reset", summary: "Mail a link to set a new password")
                .details("Send `username` or `email`. The answer is 202, in the same time, whether or not the account exists, so that it tells nobody which accounts do; the link goes only to a confirmed address (see `/v1/me/email/verification`) and works for `auth.passwordReset.ttl` (1h), once.")
                .body(RequestBody.self)
                .status(202)
                .replies(Accepted.self) { input, _ in
                    guard input.body.username != nil || input.body.email != nil else {
                        throw GatewayError.invalid(field: "/username", "send a username or an email address")
                    }
                    for (given, name) in [(input.body.username, "username"), (input.body.email, "email")] {
                        guard let given else { continue }
                        if given.isEmpty { throw GatewayError.invalid(field: "/\(name)", "must not be empty") }
                        if given.unicodeScalars.count > 1000 { throw GatewayError.invalid(field: "/\(name)", "must be at most 1000 characters") }
                    }
                    // Queued: the answer and its timing are the same whether or not the account exists.
                    resets.request(username: input.body.username, email: input.body.email)
                    return Reply(Accepted(message: "If the account exists and has an email address, a link to set a new password is on its way."), status: .accepted)
                },
            Route.define("accounts.passwordResetConfirm", .post, "/auth/password-reset/confirm", summary: "Set a new password with a reset link's token")
                .details("Ends every session of the user. 404 when the token was used already, has expired or is unknown.")
                .body(ConfirmBody.self)
                .returns(NoContent.self) { input, _ in
                    try await resets.confirm(token: input.body.token, password: input.body.password)
                    return NoContent()
                },
            Route.define("accounts.passwordResetPage", .get, "/auth/password-reset/form", summary: "The page a reset link opens")
                .query(PageQuery.self)
                .documentRawOutput(mediaTypes: "text/html")
                .returns(RawReply.self) { input, _ in
                    page(token: input.query.token ?? "", message: nil)
                },
            Route.define("accounts.passwordResetSubmit", .post, "/auth/password-reset/form", summary: "The reset page's form: sets the new password")
                .details("`confirm` repeats `password`. A refusal answers the page again with what is wrong: 400 for the form, 404 for a link that is used, expired or unknown.")
                .body(FormBody.self)
                .documentBody(schema: .object([
                    "type": .string("object"), "required": .array(["token", "password", "confirm"].map { .string($0) }),
                    "properties": .object(["token": .object(["type": .string("string")]), "password": .object(AccountRules.password.and(.init(keywords: ["type": .string("string")])).keywords),
                                           "confirm": .object(["type": .string("string")])]),
                ]))
                .documentRawOutput(mediaTypes: "text/html")
                .documentErrors([.badRequest, .notFound], mediaType: "text/html")
                .status(200)
                .replies(RawReply.self) { input, _ in
                    let token = input.body.fields["token"] ?? ""
                    let password = input.body.fields["password"] ?? ""
                    guard password == input.body.fields["confirm"] else {
                        return Reply(page(token: token, message: "The two passwords differ; type the same one twice."), status: 400)
                    }
                    do {
                        try await resets.confirm(token: token, password: password)
                    } catch let error as GatewayError where error.status.kind != .serverError {
                        return Reply(page(token: token, message: error.errors.first?.detail.capitalizedFirstLetter ?? error.detail), status: error.status == 422 ? .badRequest : error.status)
                    }
                    return Reply(done(), status: 200)
                },
        ] + EmailVerificationOperations.operations(verifications: resets.verifications)
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "\"", with: "&quot;").replacingOccurrences(of: "'", with: "&#39;")
    }

    static func html(_ body: String) -> RawReply {
        RawReply(text: """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="referrer" content="no-referrer"><title>Set a new password</title>
            <style>body{font-family:system-ui,sans-serif;max-width:26rem;margin:3rem auto;padding:0 1rem}label{display:block;margin:.8rem 0 .2rem}
            input{width:100%;padding:.5rem;box-sizing:border-box}button{margin-top:1rem;padding:.5rem 1rem}.problem{color:#a00}</style></head>
            <body>\(body)</body></html>
            """, contentType: "text/html; charset=utf-8")
    }

    static func page(token: String, message: String?) -> RawReply {
        html("""
            <h1>Set a new password</h1>
            \(message.map { "<p class=\"problem\">\(escape($0))</p>" } ?? "")
            <form method="post" action="form">
            <input type="hidden" name="token" value="\(escape(token))">
            <label for="password">New password</label><input id="password" name="password" type="password" autocomplete="new-password" required minlength="8">
            <label for="confirm">The same again</label><input id="confirm" name="confirm" type="password" autocomplete="new-password" required minlength="8">
            <button type="submit">Set the password</button>
            </form>
            """)
    }

    static func done() -> RawReply {
        html("<h1>Your password is set</h1><p>Sign in with it in the app. Every session that was open has ended.</p>")
    }
}

extension String {
    var capitalizedFirstLetter: String { prefix(1).uppercased() + dropFirst() }
}
