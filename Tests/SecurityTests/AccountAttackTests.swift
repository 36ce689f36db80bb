import AsyncHTTPClient
import Foundation
import GatewayCore
import GatewayServer
import GatewayTesting
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SQLKit
import Synchronization
import Testing

/// Attacks on accounts: guessing passwords in parallel, locking an owner out, finding out which
/// accounts exist, taking an account through an address nobody verified, and reading secrets from
/// logs and the database.
@Suite("attacks on accounts", .serialized)
struct AccountAttackTests {
    static let password = "correct horse battery"

    /// The shipped file as a test starts it: the demo files it names found in the repository
    /// (the test runs in a directory of its own), changed by `edit`.
    static func shipped(_ edit: @escaping @Sendable (String) -> String = { $0 }) -> @Sendable (String) -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        return { edit($0.replacingOccurrences(of: "data/demo/", with: "\(root)/data/demo/")) }
    }

    /// The shipped file with the attacker's and the owner's addresses believed from
    /// `X-Forwarded-For` (as behind a load balancer), so that a test can speak from several.
    static func behindProxy(_ yaml: String) -> String {
        yaml.replacingOccurrences(of: "  # trustedProxies: [10.0.0.0/8]", with: "  trustedProxies: [127.0.0.1]")
    }

    static func login(_ gateway: ShippedGateway, _ username: String, _ password: String, from address: String) async throws -> ShippedGateway.Reply {
        try await gateway.send(.POST, "/v1/auth/login", headers: [("X-Forwarded-For", address)],
                               json: #"{"username": "\#(username)", "password": "\#(password)"}"#)
    }

    @Test("40 parallel wrong passwords for one account: at most the allowance is checked, the rest are refused at once", arguments: securityStorages)
    func parallelGuesses(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false, edit: Self.shipped(Self.behindProxy)) { gateway in
            _ = try await gateway.register("victim")
            let replies = try await withThrowingTaskGroup(of: (Int, Duration, String?).self) { group in
                for index in 0..<40 {
                    group.addTask {
                        let started = ContinuousClock.now
                        let reply = try await Self.login(gateway, "victim", "guess number \(index)", from: "203.0.113.7")
                        return (reply.status, ContinuousClock.now - started, reply.headers.first(name: "Retry-After"))
                    }
                }
                var all: [(Int, Duration, String?)] = []
                for try await reply in group { all.append(reply) }
                return all
            }
            let checked = replies.filter { $0.0 == 401 }
            let refused = replies.filter { $0.0 == 429 }
            #expect(checked.count + refused.count == 40, "\(replies.map(\.0))")
            // Each 401 cost one bcrypt verification; the allowance is five, then one more after each
            // doubling wait (1 s, 2 s, 4 s, ...): on a machine slow enough that the guesses arrive over
            // several seconds, those few more. Never anything near the forty sent at once.
            let spread = Double((replies.map(\.1).max() ?? .zero).components.seconds) + 1
            let allowance = 5 + 1 + Int(log2(spread))
            #expect(checked.count <= allowance, "\(checked.count) of 40 parallel guesses had their password checked (allowance \(allowance) over \(spread) s)")
            #expect(refused.allSatisfy { $0.2 != nil }, "a refusal says when to try again")
            let slowestRefusal = refused.map(\.1).max() ?? .zero
            let slowestCheck = checked.map(\.1).max() ?? .zero
            print("parallel guesses (\(storage)): \(checked.count) checked (slowest \(slowestCheck)), \(refused.count) refused (slowest \(slowestRefusal))")
        }
    }

    @Test("an attacker's failures do not lock the owner out from another address", arguments: securityStorages)
    func strangerCannotLockOut(storage: TestStorage) async throws {
        // Delays from 60 s: a busy machine checks the five free guesses slowly, and with the shipped
        // 1 s the next guesses could come after their delay and be checked (correctly).
        try await ShippedGateway.with(storage: storage, limits: false, edit: Self.shipped(Self.behindProxy),
                                      configure: { $0.loginThrottle = LoginThrottle(baseDelay: .seconds(60)) }) { gateway in
            _ = try await gateway.register("owner")
            var statuses: [Int] = []
            for index in 0..<12 {
                statuses.append(try await Self.login(gateway, "owner", "guess \(index)", from: "203.0.113.7").status)
            }
            #expect(statuses.prefix(5).allSatisfy { $0 == 401 })
            #expect(statuses.dropFirst(5).allSatisfy { $0 == 429 }, "\(statuses)")
            // The attacker stays refused, even with the right password, while the backoff runs.
            #expect(try await Self.login(gateway, "owner", Self.password, from: "203.0.113.7").status == 429)
            // The owner, elsewhere, signs in.
            #expect(try await Self.login(gateway, "owner", Self.password, from: "198.51.100.20").status == 200)
        }
    }

    @Test("the username and the email address of one account share one count; an unknown name is throttled the same", arguments: securityStorages)
    func usernameAndEmailCountTogether(storage: TestStorage) async throws {
        // Delays from 60 s, so that no slow check on a busy machine outlasts one (see above).
        try await ShippedGateway.with(storage: storage, limits: false, edit: Self.shipped(Self.behindProxy),
                                      configure: { $0.loginThrottle = LoginThrottle(baseDelay: .seconds(60)) }) { gateway in
            _ = try await gateway.gateway.accounts.register(username: "dual", secret: .plain(Self.password), email: "dual@example.com")
            var statuses: [Int] = []
            for index in 0..<5 {
                let name = index.isMultiple(of: 2) ? "dual" : "DUAL@example.com"
                statuses.append(try await Self.login(gateway, name, "guess \(index)", from: "203.0.113.8").status)
            }
            #expect(statuses == [401, 401, 401, 401, 401])
            #expect(try await Self.login(gateway, "dual@example.com", "guess 5", from: "203.0.113.8").status == 429)
            #expect(try await Self.login(gateway, "Dual", "guess 6", from: "203.0.113.8").status == 429)
            // A name nobody has is counted and refused exactly as an account is.
            var unknown: [Int] = []
            for index in 0..<6 { unknown.append(try await Self.login(gateway, "nobody-here", "guess \(index)", from: "203.0.113.8").status) }
            #expect(unknown == [401, 401, 401, 401, 401, 429])
        }
    }

    @Test("a reset request answers unknown and known users alike: status, body and time (native and NEC)", arguments: securityStorages)
    func resetAnswersAlike(storage: TestStorage) async throws {
        let slow = try await SlowSMTP.start(delay: .milliseconds(400))
        defer { Task { await slow.stop() } }
        let yaml: @Sendable (String) -> String = { $0 + "\nmail: { host: 127.0.0.1, port: \(slow.port), from: gateway@example.com }\n" }
        try await ShippedGateway.with(storage: storage, limits: false, edit: Self.shipped(yaml)) { gateway in
            // One verified account per round, so that each known request has a link to send.
            for round in 0..<6 {
                let user = try await gateway.gateway.accounts.register(username: "known-\(round)", secret: .plain(Self.password),
                                                                       email: "known-\(round)@example.com")
                try await gateway.gateway.accounts.markEmailVerified(userID: user.id)
            }
            var known: [Duration] = []
            var unknown: [Duration] = []
            var bodies: Set<String> = []
            var statuses: Set<Int> = []
            for round in 0..<6 {
                for (name, isKnown) in [("known-\(round)", true), ("nobody-\(round)", false)] {
                    let started = ContinuousClock.now
                    let reply = try await gateway.send(.POST, "/v1/auth/password-reset", json: #"{"username": "\#(name)"}"#)
                    let elapsed = ContinuousClock.now - started
                    if isKnown { known.append(elapsed) } else { unknown.append(elapsed) }
                    statuses.insert(reply.status)
                    bodies.insert(reply.body)
                }
            }
            #expect(statuses == [202])
            #expect(bodies.count == 1)
            let median = { (times: [Duration]) in times.sorted()[times.count / 2] }
            let gap = median(known) - median(unknown)
            print("reset timing (\(storage)): known median \(median(known)), unknown median \(median(unknown))")
            #expect(gap < .milliseconds(100) && gap > .milliseconds(-100), "known \(median(known)), unknown \(median(unknown))")

            // The NEC dialect: the same answer for a user that exists and one that does not.
            let app = [("X-Application-Id", "demo-app"), ("X-Application-Key", "demo-app-key")]
            let necKnown = try await gateway.send(.POST, "/1/tutorial/request_password_reset", headers: app, json: #"{"email": "known-0@example.com"}"#)
            let necUnknown = try await gateway.send(.POST, "/1/tutorial/request_password_reset", headers: app, json: #"{"email": "nobody@example.com"}"#)
            #expect(necKnown.status == necUnknown.status)
            #expect(necKnown.body == necUnknown.body)
            #expect(necUnknown.status == 200, "\(necUnknown.body)")
        }
    }

    @Test("an unverified email address receives no reset link; once verified it does, and a changed address is unverified again", arguments: securityStorages)
    func unverifiedAddressGetsNoReset(storage: TestStorage) async throws {
        let sink = try await SMTPSink.start()
        defer { Task { await sink.stop() } }
        let yaml: @Sendable (String) -> String = { $0 + "\nmail: { host: 127.0.0.1, port: \(sink.port), from: gateway@example.com }\n" }
        try await ShippedGateway.with(storage: storage, limits: false, edit: Self.shipped(yaml)) { gateway in
            // The attacker registers with the victim's address in the profile.
            let registered = try await gateway.send(.POST, "/v1/auth/register",
                                                    json: #"{"username": "mallory", "password": "\#(Self.password)", "profile": {"email": "victim@example.com"}}"#)
            #expect(registered.status == 201)
            let token = try #require(registered.json?["token"] as? String)
            // Registration mailed a verification link to the address.
            let verification = try await sink.waitForMessages(1)
            #expect(verification.last?.to == "victim@example.com")
            #expect(verification.last?.data.contains("Confirm your email address") == true)

            // A reset asked for now sends nothing to the unverified address, and answers as ever.
            let asked = try await gateway.send(.POST, "/v1/auth/password-reset", json: #"{"username": "mallory"}"#)
            #expect(asked.status == 202)
            try await Task.sleep(for: .milliseconds(500))
            #expect(sink.all.count == 1, "\(sink.all.map(\.data))")

            // The owner of the address opens the link: now resets go there.
            let link = try #require(sink.lastLink)
            let path = String(link[try #require(link.range(of: "/v1/")).lowerBound...])
            let opened = try await gateway.send(.GET, path)
            #expect(opened.status == 200)
            #expect(try await gateway.send(.GET, path).status == 404, "a link works once")
            #expect(try await gateway.send(.POST, "/v1/auth/password-reset", json: #"{"username": "mallory"}"#).status == 202)
            let reset = try await sink.waitForMessages(2)
            #expect(reset.last?.data.contains("Reset your password") == true)

            // A changed address is unverified: a verification link goes to it, no reset.
            let changed = try await gateway.send(.PATCH, "/v1/me", headers: [("Authorization", "Bearer \(token)")],
                                                 json: #"{"profile": {"email": "other@example.com"}}"#)
            #expect(changed.status == 200)
            #expect(changed.json?["emailVerified"] as? Bool == false)
            let third = try await sink.waitForMessages(3)
            #expect(third.last?.to == "other@example.com")
            #expect(third.last?.data.contains("Confirm your email address") == true)
            #expect(try await gateway.send(.POST, "/v1/auth/password-reset", json: #"{"username": "mallory"}"#).status == 202)
            try await Task.sleep(for: .milliseconds(500))
            #expect(sink.all.count == 3, "no reset link goes to the changed address")
        }
    }
}

/// Log lines a test collects from the gateway.
final class CapturedLines: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }

    /// A gateway logger that writes here.
    var logger: Logger {
        var logger = Logger(label: "gateway") { label in GatewayLogHandler(label: label) { self.append($0) } }
        logger.logLevel = .info
        return logger
    }
}

extension AccountAttackTests {
    @Test("a v2 key's secret reaches neither the access log nor the database in plain text; its owner still reads it back", arguments: securityStorages)
    func v2SecretsHidden(storage: TestStorage) async throws {
        let lines = CapturedLines()
        try await ShippedGateway.with(storage: storage, limits: false, edit: Self.shipped { $0.replacingOccurrences(of: "accessLog: false", with: "accessLog: true") },
                                      configure: { $0.logger = lines.logger }) { gateway in
            let (token, _) = try await gateway.register("keeper")
            let session = [("Authorization", "Bearer \(token)")]
            let created = try await gateway.send(.POST, "/v2/keys", headers: session,
                                                 json: #"{"key": {"label": "device", "permissions": [{"access_methods": ["get"]}]}}"#)
            #expect(created.status == 201, "\(created.body)")
            let location = try #require(created.headers.first(name: "Location"))
            let secret = String(try #require(location.split(separator: "/").last))
            #expect(secret.count > 20)

            // The owner reads the key back, as the old API allowed.
            let read = try await gateway.send(.GET, "/v2/keys/\(secret)", headers: session)
            #expect(read.status == 200)
            #expect((read.json?["key"] as? [String: Any])?["api_key"] as? String == secret)
            let listed = try await gateway.send(.GET, "/v2/keys", headers: session)
            #expect(((listed.json?["keys"] as? [[String: Any]]) ?? []).contains { $0["api_key"] as? String == secret })

            // The database keeps no plain copy.
            let rows = try await gateway.gateway.accounts.database.raw("SELECT * FROM feeds_keys").all()
            #expect(rows.count == 1)
            for row in rows {
                for column in row.allColumns {
                    let text = (try? row.decode(column: column, as: String?.self)) ?? nil
                    #expect(text?.contains(secret) != true, "column \(column) holds the secret")
                }
            }
            #expect(try await gateway.send(.DELETE, "/v2/keys/\(secret)", headers: session).status == 200)

            let written = lines.all
            #expect(written.contains { $0.contains("GET /v2/keys/*** 200") }, "the access log names the route")
            #expect(!written.contains { $0.contains(secret) }, "the secret is in the log: \(written.filter { $0.contains(secret) })")
        }
    }

    @Test("without mail, a reset link is written to the log only in development mode")
    func resetLinksNotLogged() async throws {
        for development in [false, true] {
            let lines = CapturedLines()
            let edit: @Sendable (String) -> String = { development ? $0.replacingOccurrences(of: "\nauth:\n", with: "\nauth:\n  developmentMail: true\n") : $0 }
            try await ShippedGateway.with(limits: false, edit: Self.shipped(edit), configure: { $0.logger = lines.logger }) { gateway in
                let user = try await gateway.gateway.accounts.register(username: "forgetful", secret: .plain(Self.password), email: "forgetful@example.com")
                try await gateway.gateway.accounts.markEmailVerified(userID: user.id)
                #expect(try await gateway.send(.POST, "/v1/auth/password-reset", json: #"{"username": "forgetful"}"#).status == 202)
                let deadline = ContinuousClock.now + .seconds(2)
                while !lines.all.contains(where: { $0.contains("password reset") || $0.contains("mail not sent") }), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            let links = lines.all.filter { $0.contains("password-reset/form?token=") }
            #expect(links.count == (development ? 1 : 0), "development mode \(development): \(links)")
        }
    }

    @Test("a password reset revokes the user's API keys", arguments: securityStorages)
    func resetRevokesKeys(storage: TestStorage) async throws {
        let sink = try await SMTPSink.start()
        defer { Task { await sink.stop() } }
        let yaml: @Sendable (String) -> String = { $0 + "\nmail: { host: 127.0.0.1, port: \(sink.port), from: gateway@example.com }\n" }
        try await ShippedGateway.with(storage: storage, limits: false, edit: Self.shipped(yaml)) { gateway in
            let user = try await gateway.gateway.accounts.register(username: "robbed", secret: .plain(Self.password), email: "robbed@example.com")
            try await gateway.gateway.accounts.markEmailVerified(userID: user.id)
            // Whoever took the account made a key for later.
            let session = try await gateway.gateway.accounts.createSession(userID: user.id)
            let key = try await gateway.test.createKey(token: session.token, grant: #"{"label": "backdoor", "scopes": ["accounts:read", "todo:read"]}"#)
            let before = try await gateway.send(.GET, "/v1/me", headers: [("X-Api-Key", key.secret)])
            #expect(before.status == 200, "\(before.body)")

            // The owner resets the password through the link mailed to them.
            #expect(try await gateway.send(.POST, "/v1/auth/password-reset", json: #"{"username": "robbed"}"#).status == 202)
            let mail = try await sink.waitForMessages(1)
            let link = try #require(mail.last.flatMap { message in
                message.data.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.contains("token=") }
            })
            let resetToken = String(try #require(link.split(separator: "=").last))
            let confirmed = try await gateway.send(.POST, "/v1/auth/password-reset/confirm",
                                                   json: #"{"token": "\#(resetToken)", "password": "a new password entirely"}"#)
            #expect(confirmed.status == 204, "\(confirmed.body)")
            #expect(try await gateway.send(.GET, "/v1/me", headers: [("X-Api-Key", key.secret)]).status == 401)
        }
    }
}

/// An SMTP server on loopback that greets each connection only after `delay` (a slow or distant
/// mail server), then accepts every message: for telling whether a request waits for its mail.
final class SlowSMTP: Sendable {
    let port: Int
    private let channel: any Channel

    private init(port: Int, channel: any Channel) {
        self.port = port
        self.channel = channel
    }

    static func start(delay: TimeAmount) async throws -> SlowSMTP {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Session(delay: delay)) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return SlowSMTP(port: channel.localAddress?.port ?? 0, channel: channel)
    }

    func stop() async { try? await channel.close() }

    final class Session: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let delay: TimeAmount
        var pending = ""
        var inData = false

        init(delay: TimeAmount) { self.delay = delay }

        func channelActive(context: ChannelHandlerContext) {
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: delay) {
                bound.value.writeAndFlush(NIOAny(ByteBuffer(string: "220 slow ready\r\n")), promise: nil)
            }
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            pending += String(buffer: unwrapInboundIn(data))
            while let end = pending.range(of: "\r\n") {
                let line = String(pending[..<end.lowerBound])
                pending = String(pending[end.upperBound...])
                let reply: String?
                if inData {
                    if line == "." { inData = false; reply = "250 kept" } else { reply = nil }
                } else if line.uppercased().hasPrefix("DATA") {
                    inData = true
                    reply = "354 go on"
                } else if line.uppercased().hasPrefix("QUIT") {
                    reply = "221 bye"
                } else {
                    reply = "250 ok"
                }
                if let reply { context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: reply + "\r\n")), promise: nil) }
            }
        }
    }
}
