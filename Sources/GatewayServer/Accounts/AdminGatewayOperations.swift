import Crypto
import Foundation
import GatewayCore
import HTTPTypes
import NIOCore
import Synchronization

/// plugins.yaml as the admin API edits it: where the file is and how a text of it is read (the
/// same checks as at start and reload, located errors included).
public struct EditableConfiguration: Sendable {
    public var url: URL
    public var parse: @Sendable (Data) throws -> GatewayConfiguration

    public init(url: URL, parse: @escaping @Sendable (Data) throws -> GatewayConfiguration) {
        self.url = url
        self.parse = parse
    }
}

/// What the admin API reads of the running gateway, which is assembled after the API itself:
/// the parts known at start, and the views of the gateway attached once it exists (as
/// ``ReloadHandle`` does for reloads).
final class AdminHandle: Sendable {
    /// A plugin as the admin API and the console's overview show it.
    struct PluginStatus: Codable, Sendable {
        struct DialectMount: Codable, Sendable {
            var name: String
            var mount: String
        }

        var id: String
        /// The plugin type of an entry of its own id (an upstream service's `upstream`).
        var type: String
        var summary: String
        var mount: String
        var status: String
        var reason: String?
        var operations: Int
        var dialects: [DialectMount]
        /// What this instance answered for it since it started.
        var served: LiveTraffic.Totals
    }

    struct Views: Sendable {
        var plugins: @Sendable () async -> [PluginStatus]
        /// The configuration that serves, and what serving another would change.
        var running: @Sendable () -> GatewayConfiguration
        var plan: @Sendable (GatewayConfiguration) -> (changes: [String], restartNeeded: [String])
        /// The console pages the enabled plugins contribute.
        var pluginViews: @Sendable () -> [PluginView]
    }

    /// A console page of a plugin.
    struct PluginView: Sendable {
        var plugin: String
        var view: AdminView
        var id: String { view.id }
        var title: String { view.title }
    }

    let live: LiveTraffic
    let instances: InstanceRegistry
    let configurationFile: EditableConfiguration?
    let cacheLimits: (entries: Int, bytes: Int)
    let startedAt: Date
    /// Writing plugins.yaml and reloading it, one change at a time.
    let edits = ReloadQueue()
    private let views = Mutex<StoredClosure<Views>?>(nil)

    init(live: LiveTraffic, instances: InstanceRegistry, configurationFile: EditableConfiguration?, cacheLimits: (entries: Int, bytes: Int), startedAt: Date) {
        self.live = live
        self.instances = instances
        self.configurationFile = configurationFile
        self.cacheLimits = cacheLimits
        self.startedAt = startedAt
    }

    func attach(_ views: Views) { self.views.withLock { $0 = StoredClosure(views) } }

    func gateway() throws -> Views {
        guard let views = views.withLock({ $0?.call }) else { throw GatewayError.unavailable("The gateway is starting.") }
        return views
    }
}

/// `/v1/admin/cache`, `/v1/admin/configuration`, `/v1/admin/plugins`, `/v1/admin/instances` and
/// `/v1/admin/metrics/live`: administrators see the cache, read, check and change plugins.yaml,
/// see the plugins and instances, and watch the traffic, as the console does.
enum AdminGatewayOperations {
    struct CacheStats: Codable, Sendable {
        var entries: Int
        var bytes: Int
        var maxEntries: Int
        var maxBytes: Int
        var hits: Int
        var misses: Int
        var evictions: Int
        /// Hits among lookups since start (nil: none yet).
        var hitRate: Double?
    }

    struct ConfigurationText: Codable, Sendable {
        /// The file's name.
        var file: String
        /// Its text, each secret written in it as `********`.
        var text: String
        /// The key paths of the masked secrets.
        var masked: [String]
        /// The file's version (a hash of its text as it is on disk): send it back as `baseVersion`
        /// so that a change made meanwhile is not overwritten.
        var version: String
        /// Settings the file changes that need a restart to serve (they keep their running value).
        var restartPending: [String]
    }

    struct ConfigurationEdit: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "text": FieldRule.text(0...1_000_000).described("The whole of plugins.yaml; a secret left as ******** keeps its value."),
            "baseVersion": FieldRule.pattern("^[0-9a-f]{64}$").described("The `version` the text was read at: refused (409) if the file changed since."),
        ]
        var text: String
        var baseVersion: String?

        func validate() -> [GatewayError.FieldError] {
            var problems: [GatewayError.FieldError] = []
            if text.unicodeScalars.count > 1_000_000 { problems.append(.init(pointer: "/text", detail: "must be at most 1000000 characters")) }
            if let baseVersion, baseVersion.range(of: "^[0-9a-f]{64}$", options: .regularExpression) == nil {
                problems.append(.init(pointer: "/baseVersion", detail: "is not a version of the file"))
            }
            return problems
        }
    }

    /// A problem of a configuration text, at its place.
    struct ConfigurationProblem: Codable, Sendable, Equatable, Error {
        var line: Int?
        var column: Int?
        var keyPath: String
        var message: String
    }

    struct Validation: Codable, Sendable {
        var valid: Bool
        var errors: [ConfigurationProblem]
        /// What applying it would change live, and what would wait for a restart.
        var changes: [String]
        var restartNeeded: [String]
    }

    struct LiveQuery: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "seconds": FieldRule.integer(1...3600).described("How long to stream, in seconds (default and most: an hour; an EventSource then reconnects)."),
        ]
        var seconds: Int?

        func validate() -> [GatewayError.FieldError] {
            guard let seconds, !(1...3600).contains(seconds) else { return [] }
            return [.init(pointer: "/seconds", detail: "must be 1 to 3600")]
        }
    }

    /// One event of the live stream: the last complete second, overall, per plugin and per instance.
    struct LiveEvent: Codable, Sendable {
        var at: Double
        var overall: LiveTraffic.Sample
        var plugins: [String: LiveTraffic.Sample]
        var instances: [InstanceRegistry.Instance]
    }

    struct ViewPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "plugin": FieldRule.pattern("^[a-z][a-z0-9-]{0,39}$").described("A plugin's id."),
            "view": FieldRule.pattern("^[a-z][a-z0-9-]{0,39}$").described("One of the plugin's console views."),
        ]
        var plugin: String
        var view: String
    }

    struct ActionPath: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = ViewPath.fieldRules.merging([
            "action": FieldRule.pattern("^[A-Za-z][A-Za-z0-9_-]{0,39}$").described("One of the view's actions."),
        ]) { $1 }
        var plugin: String
        var view: String
        var action: String
    }

    struct ViewQuery: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "arguments": FieldRule.text(0...2000).described("The view's arguments as a query string (`q=tai` for a search)."),
        ]
        var arguments: String?

        func validate() -> [GatewayError.FieldError] {
            guard let arguments, arguments.unicodeScalars.count > 2000 else { return [] }
            return [.init(pointer: "/arguments", detail: "must be at most 2000 characters")]
        }
    }

    struct ActionBody: Codable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "arguments": FieldRule(keywords: ["maxProperties": .number(50), "additionalProperties": .object(["type": .string("string"), "maxLength": .number(10_000)])])
                .described("The action's arguments (at most 50, each up to 10000 characters)."),
        ]
        var arguments: [String: String]?

        func validate() -> [GatewayError.FieldError] {
            guard let arguments else { return [] }
            if arguments.count > 50 { return [.init(pointer: "/arguments", detail: "must have at most 50 members")] }
            if let long = arguments.first(where: { $0.value.unicodeScalars.count > 10_000 }) {
                return [.init(pointer: "/arguments/\(long.key)", detail: "must be at most 10000 characters")]
            }
            return []
        }
    }

    /// A plugin's console view as JSON: its sections, each with the fields of its kind.
    struct ViewDocument: Codable, Sendable {
        struct Figure: Codable, Sendable { var label: String; var value: String }
        struct Action: Codable, Sendable { var label: String; var action: String; var arguments: [String: String] }
        struct Row: Codable, Sendable { var cells: [String]; var actions: [Action] }
        struct Point: Codable, Sendable { var at: Date; var value: Double }
        struct Field: Codable, Sendable { var name: String; var label: String; var value: String }
        struct Section: Codable, Sendable {
            /// `figures`, `table`, `chart`, `form` or `text`.
            var kind: String
            var title: String
            var figures: [Figure]?
            var columns: [String]?
            var rows: [Row]?
            var label: String?
            var points: [Point]?
            var action: String?
            var submitLabel: String?
            var fields: [Field]?
            var text: String?
        }

        var plugin: String
        var id: String
        var title: String
        var refresh: Int?
        var sections: [Section]

        init(_ view: AdminHandle.PluginView, sections: [AdminSection]) {
            plugin = view.plugin
            id = view.id
            title = view.title
            refresh = view.view.refresh
            self.sections = sections.map { section in
                switch section {
                case .figures(let title, let figures):
                    Section(kind: "figures", title: title, figures: figures.map { Figure(label: $0.label, value: $0.value) })
                case .table(let title, let columns, let rows):
                    Section(kind: "table", title: title, columns: columns, rows: rows.map { row in
                        Row(cells: row.cells, actions: row.actions.map { Action(label: $0.label, action: $0.action, arguments: $0.arguments) })
                    })
                case .chart(let title, let label, let points):
                    Section(kind: "chart", title: title, label: label, points: points.map { Point(at: $0.at, value: $0.value) })
                case .form(let title, let action, let submitLabel, let fields):
                    Section(kind: "form", title: title, action: action, submitLabel: submitLabel,
                            fields: fields.map { Field(name: $0.name, label: $0.label, value: $0.value) })
                case .text(let title, let text):
                    Section(kind: "text", title: title, text: text)
                }
            }
        }
    }

    struct ActionOutcome: Codable, Sendable {
        var message: String
    }

    static func version(of data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    static func problem(_ error: any Error) -> ConfigurationProblem {
        if let located = error as? ConfigurationFileError {
            return ConfigurationProblem(line: located.line, column: located.column, keyPath: located.keyPath, message: located.message)
        }
        return ConfigurationProblem(line: nil, column: nil, keyPath: "", message: "\(error)")
    }

    /// The edited text made whole (its masks given their values) and checked: the configuration,
    /// or the problem at its place.
    static func check(_ edit: ConfigurationEdit, file: EditableConfiguration, current: Data) -> Result<(Data, GatewayConfiguration), ConfigurationProblem> {
        let original = String(decoding: current, as: UTF8.self)
        let whole: ConfigurationMasking.Unmasked
        do {
            whole = try ConfigurationMasking.unmasked(edit.text, original: original, file: file.url.lastPathComponent)
        } catch {
            return .failure(problem(error))
        }
        do {
            let data = Data(whole.text.utf8)
            return .success((data, try file.parse(data)))
        } catch {
            // Placed on the edited text's lines, and never quoting a secret the masks stood for.
            var found = problem(error)
            found.line = found.line.map(whole.editedLine)
            found.message = ConfigurationMasking.redacted(found.message, secretsOf: original)
            found.keyPath = ConfigurationMasking.redacted(found.keyPath, secretsOf: original)
            return .failure(found)
        }
    }

    static func operations(admin: AdminHandle, cache: any ResponseCacheStore, reloads: ReloadHandle, audit: AuditLog, clock: any WallClock,
                           authenticator: any Authenticator) -> [Route] {
        @Sendable func file() throws -> EditableConfiguration {
            guard let file = admin.configurationFile else {
                throw GatewayError.conflict("This gateway was not started from a configuration file: there is none to show or change.")
            }
            return file
        }
        @Sendable func read(_ file: EditableConfiguration) throws -> Data {
            do {
                return try Data(contentsOf: file.url)
            } catch {
                throw GatewayError.unavailable("\(file.url.lastPathComponent) cannot be read: \(error.localizedDescription)")
            }
        }
        return [
            Route.define("accounts.admin.cache", .get, "/admin/cache", summary: "The response cache: entries, bytes, hits, misses, evictions")
                .access(.admin)
                .returns(CacheStats.self) { _, _ in
                    let stats = (cache as? MemoryResponseCache)?.statistics ?? (entries: 0, bytes: 0, hits: 0, misses: 0, evictions: 0)
                    let lookups = stats.hits + stats.misses
                    return CacheStats(entries: stats.entries, bytes: stats.bytes, maxEntries: admin.cacheLimits.entries, maxBytes: admin.cacheLimits.bytes,
                                      hits: stats.hits, misses: stats.misses, evictions: stats.evictions,
                                      hitRate: lookups == 0 ? nil : Double(stats.hits) / Double(lookups))
                },
            Route.define("accounts.admin.configuration", .get, "/admin/configuration",
                         summary: "plugins.yaml as the gateway reads it, each secret written in it masked")
                .access(.admin)
                .returns(ConfigurationText.self) { _, _ in
                    let file = try file()
                    let data = try read(file)
                    let masked = ConfigurationMasking.masked(String(decoding: data, as: UTF8.self))
                    let views = try admin.gateway()
                    let pending = (try? file.parse(data)).map { views.plan($0).restartNeeded } ?? []
                    return ConfigurationText(file: file.url.lastPathComponent, text: masked.text, masked: masked.paths, version: version(of: data),
                                             restartPending: pending)
                },
            Route.define("accounts.admin.configuration.validate", .post, "/admin/configuration/validate",
                         summary: "Check an edited plugins.yaml: its errors at their lines, or what applying it would change")
                .access(.admin)
                .status(200)
                .body(ConfigurationEdit.self)
                .returns(Validation.self) { input, _ in
                    let file = try file()
                    switch check(input.body, file: file, current: try read(file)) {
                    case .failure(let problem):
                        return Validation(valid: false, errors: [problem], changes: [], restartNeeded: [])
                    case .success(let (_, configuration)):
                        let plan = try admin.gateway().plan(configuration)
                        return Validation(valid: true, errors: [], changes: plan.changes, restartNeeded: plan.restartNeeded)
                    }
                },
            Route.define("accounts.admin.configuration.apply", .put, "/admin/configuration",
                         summary: "Write plugins.yaml and reload it (on every instance of the database); a text with errors is refused whole")
                .access(.admin)
                .body(ConfigurationEdit.self)
                .returns(ReloadReport.self) { input, context in
                    let file = try file()
                    let outcome: Result<ReloadReport, GatewayError> = await admin.edits.run {
                        do {
                            let current = try read(file)
                            if let base = input.body.baseVersion, base != version(of: current) {
                                return .failure(.conflict("\(file.url.lastPathComponent) changed since it was read: read it again and redo the edit."))
                            }
                            let data: Data
                            switch check(input.body, file: file, current: current) {
                            case .failure(let problem):
                                let place = [problem.line.map { "line \($0)" }, problem.column.map { "column \($0)" }].compactMap { $0 }.joined(separator: ", ")
                                return .failure(.invalid("The configuration was not applied; the running one stays. \(place.isEmpty ? "" : place + ": ")\(problem.keyPath.isEmpty ? "" : problem.keyPath + ": ")\(problem.message)"))
                            case .success(let (whole, _)):
                                data = whole
                            }
                            try data.write(to: file.url, options: .atomic)
                            let report = await reloads.reload()
                            if report.status == .refused {
                                let reason = ConfigurationMasking.redacted(report.error ?? "", secretsOf: String(decoding: current, as: UTF8.self))
                                // What the file held goes back: the running configuration and the file agree again.
                                do {
                                    try current.write(to: file.url, options: .atomic)
                                } catch {
                                    return .failure(.unavailable("The configuration was not applied (\(reason)), and \(file.url.lastPathComponent) "
                                        + "could not be put back as it was (\(error.localizedDescription)): it holds the refused text; the running configuration stays."))
                                }
                                return .failure(.invalid("The configuration was not applied; the running one stays. \(reason)"))
                            }
                            return .success(report)
                        } catch let error as GatewayError {
                            return .failure(error)
                        } catch {
                            return .failure(.unavailable("\(file.url.lastPathComponent) cannot be written: \(error.localizedDescription)"))
                        }
                    }
                    let report = try outcome.get()
                    try await audit.record(context, action: "configuration.apply", target: file.url.lastPathComponent,
                                           detail: ["status": .string(report.status.rawValue), "changes": .array(report.changes.map(JSONValue.string)),
                                                    "restartNeeded": .array(report.restartNeeded.map(JSONValue.string))])
                    return report
                },
            Route.define("accounts.admin.plugins", .get, "/admin/plugins", summary: "The plugins: health, mounts, dialects and what this instance served")
                .access(.admin)
                .returns(Page<AdminHandle.PluginStatus>.self) { _, _ in
                    Page(items: await (try admin.gateway()).plugins(), nextCursor: nil)
                },
            Route.define("accounts.admin.views.show", .get, "/admin/plugins/{plugin}/views/{view}",
                         summary: "A console view a plugin contributes: its sections (figures, tables with actions, charts, forms)")
                .access(.admin)
                .path(ViewPath.self)
                .query(ViewQuery.self)
                .returns(ViewDocument.self) { input, context in
                    let view = try pluginView(admin, input.path.plugin, input.path.view)
                    let arguments = ConsoleRequest.form(input.query.arguments ?? "")
                    return ViewDocument(view, sections: try await view.view.load(AdminViewRequest(principal: context.principal, arguments: arguments)))
                },
            Route.define("accounts.admin.views.act", .post, "/admin/plugins/{plugin}/views/{view}/actions/{action}",
                         summary: "Run an action of a plugin's console view (confirm a reservation, try a query)")
                .access(.admin)
                .status(200)
                .path(ActionPath.self)
                .body(ActionBody.self)
                .returns(ActionOutcome.self) { input, context in
                    let view = try pluginView(admin, input.path.plugin, input.path.view)
                    guard let action = view.view.actions[input.path.action] else {
                        throw GatewayError.notFound("The view \(view.plugin)/\(view.id) has no action '\(input.path.action)'.")
                    }
                    let arguments = input.body.arguments ?? [:]
                    var detail = arguments.mapValues { JSONValue.string(String($0.prefix(200))) }
                    let target = "\(view.plugin)/\(view.id)/\(input.path.action)"
                    // Recorded whether it is done or refused.
                    do {
                        let message = try await action(AdminViewRequest(principal: context.principal, arguments: arguments))
                        try await audit.record(context, action: "plugin.action", target: target, detail: detail)
                        return ActionOutcome(message: message)
                    } catch {
                        let refusal = ProblemResponse.gatewayError(from: error) ?? .internalError()
                        detail["refused"] = .string("\(refusal.status.code) \(refusal.detail)".prefix(300).description)
                        try? await audit.record(context, action: "plugin.action", target: target, detail: detail)
                        throw error
                    }
                },
            Route.define("accounts.admin.instances", .get, "/admin/instances",
                         summary: "The gateway instances serving the database, their version and load (this one first)")
                .access(.admin)
                .returns(Page<InstanceRegistry.Instance>.self) { _, _ in
                    Page(items: try await admin.instances.list(), nextCursor: nil)
                },
            Route.define("accounts.admin.metrics.live", .get, "/admin/metrics/live",
                         summary: "Live traffic as server-sent events: each second, requests/s, p50/p99, errors, cache hits and 429s, overall, per plugin and per instance")
                .access(.admin)
                .query(LiveQuery.self)
                .documentRawOutput(mediaTypes: "text/event-stream")
                .handleDecoded { input, context in
                    // The credential is checked again every few seconds: revoked, disabled or demoted, the stream ends.
                    let credential = NativeCredentials.extract(from: context.headers)
                    let address = context.principal.address
                    let stream = liveStream(admin: admin, clock: clock, seconds: input.query.seconds ?? 3600) {
                        (try? await authenticator.principal(for: credential, address: address))?.isAdmin == true
                    }
                    return RouteReply(status: .ok, headers: [.cacheControl: "no-store", HTTPField.Name("X-Accel-Buffering")!: "no"],
                                      body: .stream(stream, contentType: "text/event-stream", length: nil))
                },
        ]
    }

    static func pluginView(_ admin: AdminHandle, _ plugin: String, _ id: String) throws -> AdminHandle.PluginView {
        guard let view = try admin.gateway().pluginViews().first(where: { $0.plugin == plugin && $0.id == id }) else {
            throw GatewayError.notFound("No plugin \(plugin) with a console view '\(id)'.")
        }
        return view
    }

    /// Server-sent events, one a second (`event: traffic`), for `seconds` or until the client goes
    /// or `allowed` (asked every five events) says no; the instances are read again every five.
    static func liveStream(admin: AdminHandle, clock: any WallClock, seconds: Int, allowed: @escaping @Sendable () async -> Bool) -> ByteStream {
        let state = Mutex((sent: 0, instances: [InstanceRegistry.Instance]()))
        return ByteStream(next: {
            let sent = state.withLock { $0.sent }
            if sent >= seconds { return nil }
            if sent > 0 {
                // Each event just after a second of the counters ends, so that it carries that second whole.
                try await Task.sleep(until: admin.live.nextSecond() + .milliseconds(2), clock: .continuous)
            }
            var instances = state.withLock { $0.instances }
            if sent % 5 == 0 {
                if sent > 0, !(await allowed()) { return nil }
                instances = (try? await admin.instances.list()) ?? instances
            }
            let sample = admin.live.sample(lastSeconds: 1)
            let event = LiveEvent(at: clock.now().timeIntervalSince1970.rounded(.down) - 1, overall: sample.overall, plugins: sample.plugins, instances: instances)
            state.withLock { $0 = (sent + 1, instances) }
            var buffer = ByteBuffer(string: "event: traffic\ndata: ")
            buffer.writeImmutableBuffer(try JSONStreamEncoder.encodeBuffer(event))
            buffer.writeString("\n\n")
            return buffer
        })
    }
}
