import Foundation
import GatewayCore
import HTTPTypes
import NIOCore

/// The composite endpoints of plugins.yaml (``CompositeSettings``), served as the operations
/// `composite.<name>` at their paths: listed in /openapi.json and callable with `gateway call`.
///
/// Steps run as soon as the steps they refer to are done (independent ones at once), each through
/// the whole pipeline as the caller, within its timeout. Partial failure is explicit: a failed
/// optional step's problem appears under `errors` and the reply is still 200; a failed required
/// step fails the composite with its status (a 5xx becomes 502) and every problem under `errors`.
/// A step that refers to a failed one is not made (424).
struct CompositeService: HostService {
    static let id = "composite"
    static let summary = "Endpoints composed in plugins.yaml from calls to other operations"

    let caller: InternalCaller
    let composites: [(name: String, settings: CompositeSettings)]

    /// The rules of each composite's path parameters, from the operations they are passed to.
    let parameterRules: [String: [String: FieldRule]]

    /// `operations` (by name) are the gateway's others: a path parameter passed whole as a step's
    /// input is documented with the rules of the parameter it becomes.
    init(caller: InternalCaller, composites: [String: CompositeSettings], documenting operations: [String: ServiceOperation] = [:]) {
        self.caller = caller
        self.composites = composites.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        parameterRules = composites.mapValues { Self.parameterRules(of: $0, operations: operations) }
    }

    static func parameterRules(of settings: CompositeSettings, operations: [String: ServiceOperation]) -> [String: FieldRule] {
        var rules: [String: FieldRule] = [:]
        for name in ServiceOperation.parameterNames(in: settings.path) {
            for step in settings.steps.values {
                guard let target = step.operation.flatMap({ operations[$0] }) else { continue }
                for (field, value) in step.input ?? [:] where value == .string("{{request.path.\(name)}}") {
                    var found: [FieldRule] = []
                    if let typed = (target.io.path as? any ConstrainedFields.Type)?.fieldRules[field] { found.append(typed) }
                    if let typed = (target.io.query as? any ConstrainedFields.Type)?.fieldRules[field] { found.append(typed) }
                    if let given = target.inputRules["path.\(field)"] ?? target.inputRules["query.\(field)"] { found.append(given) }
                    for rule in found { rules["path.\(name)"] = rules["path.\(name)"].map { $0.and(rule) } ?? rule }
                }
            }
        }
        return rules
    }

    var operations: [ServiceOperation] {
        composites.map { name, settings in
            let method: HTTPRequest.Method = settings.method == "POST" ? .post : .get
            var operation = ServiceOperation.forwarding(
                "composite.\(name)", method, settings.path, summary: settings.summary ?? "The composite \(name): \(settings.steps.keys.sorted().joined(separator: ", "))",
                access: CompositeSettings.accessRule(settings.access) ?? .public, tags: ["composite"], streamsBody: false
            ) { request, context in
                try await run(settings, request: request, context: context)
            }
            operation.rawMediaTypes = []
            operation.inputRules = parameterRules[name] ?? [:]
            operation.documentedOutput = .object(["type": .string("object"),
                                                  "description": .string("The declared reply; failed optional steps' problems under errors.")])
            return operation
        }
    }

    /// The names of operations the steps call that the gateway does not have.
    /// Steps naming an operation that is not among `operations`, as located problems.
    func unknownOperations(among operations: [String: (operation: ServiceOperation, mount: String)]) -> [String] {
        composites.flatMap { name, settings in
            settings.steps.compactMap { step, definition in
                definition.operation.flatMap { operations[$0] == nil ? "composites.\(name).steps.\(step): no operation is named '\($0)'" : nil }
            }
        }.sorted()
    }

    struct Environment: Sendable {
        var path: [String: String]
        var query: [(name: String, value: String)]
        var body: JSONValue?
        var outcomes: [String: CallOutcome] = [:]
    }

    func run(_ settings: CompositeSettings, request: OperationRequest, context: OperationContext) async throws -> OperationReply {
        var body: JSONValue?
        if let bytes = request.body, bytes.readableBytes > 0 {
            do { body = try JSONValue.parse(bytes) } catch { throw GatewayError.badRequest("The body is not JSON: \(error)") }
        }
        var environment = Environment(path: request.pathParameters, query: request.queryParameters, body: body)
        let needs = settings.steps.mapValues { step in
            Set(CompositeReference.all(in: .object(step.input ?? [:])) + CompositeReference.all(in: step.path.map(JSONValue.string))
                + CompositeReference.all(in: step.body)).compactMap { reference -> String? in
                switch reference.source {
                case .step(let name), .status(let name): name
                default: nil
                }
            }
        }
        var failed: [String: CallOutcome] = [:]
        while environment.outcomes.count < settings.steps.count {
            let ready = settings.steps.keys.sorted().filter { environment.outcomes[$0] == nil && (needs[$0] ?? []).allSatisfy { environment.outcomes[$0] != nil } }
            guard !ready.isEmpty else { throw GatewayError.internalError("The composite's steps could not be ordered.") }
            var wave: [(String, CallPlan?, Duration, CallOutcome?)] = []
            for name in ready {
                let step = settings.steps[name]!
                if let dependency = (needs[name] ?? []).sorted().first(where: { failed[$0] != nil }) {
                    wave.append((name, nil, .zero, CallOutcome(problem: .failedDependency("Not made: the step '\(dependency)' it needs failed."))))
                    continue
                }
                do {
                    wave.append((name, try plan(step, name: name, environment: environment), (step.timeout ?? settings.timeout).duration, nil))
                } catch let error as GatewayError {
                    wave.append((name, nil, .zero, CallOutcome(problem: error)))
                }
            }
            let results = await withTaskGroup(of: (String, CallOutcome).self) { group in
                for (name, plan, timeout, ready) in wave {
                    if let ready {
                        group.addTask { (name, ready) }
                    } else if let plan {
                        group.addTask {
                            (name, await caller.call(plan.method, plan.target, fields: plan.fields, body: plan.body, outer: context,
                                                     requestID: "\(context.requestID).\(name)", timeout: timeout))
                        }
                    }
                }
                var results: [(String, CallOutcome)] = []
                for await result in group { results.append(result) }
                return results
            }
            for (name, outcome) in results {
                environment.outcomes[name] = outcome
                if !outcome.succeeded { failed[name] = outcome }
            }
        }

        var errors: [String: JSONValue] = [:]
        for (name, outcome) in failed { errors[name] = outcome.json ?? .object(["status": .number(Double(outcome.status))]) }
        // The composite fails with a required step's own failure (rather than with a step that was
        // not made because of it).
        let requiredFailures = failed.keys.sorted().filter { settings.steps[$0]?.optional != true }
        if let required = requiredFailures.first(where: { failed[$0]?.status != 424 }) ?? requiredFailures.first {
            let status = failed[required]!.status
            let code = (400..<500).contains(status) ? status : 502
            let problem: JSONValue = .object([
                "type": .string("https://gateway.dev/problems/composite-step-failed"), "title": .string("A step failed"),
                "status": .number(Double(code)), "detail": .string("The step '\(required)' answered \(status)."),
                "requestId": .string(context.requestID), "errors": .object(errors),
            ])
            return OperationReply(status: HTTPResponse.Status(code: code), body: .bytes(problem.serialized(), contentType: "application/problem+json"))
        }
        var reply: JSONValue
        if let template = settings.reply {
            reply = Self.evaluate(template, environment)
        } else {
            var members: [String: JSONValue] = [:]
            for (name, outcome) in environment.outcomes where outcome.succeeded { members[name] = Self.value(of: outcome) }
            reply = .object(members)
        }
        if !errors.isEmpty, case .object(var members) = reply {
            members["errors"] = .object(errors)
            reply = .object(members)
        }
        return OperationReply(status: .ok, body: .bytes(reply.serialized(), contentType: "application/json"))
    }

    /// The call a step makes, its references filled in.
    private func plan(_ step: CompositeStep, name: String, environment: Environment) throws -> CallPlan {
        if let operationName = step.operation {
            guard let (operation, mount) = caller.operation(named: operationName) else {
                throw GatewayError.internalError("No operation is named '\(operationName)'.")
            }
            let input = Self.evaluate(.object(step.input ?? [:]), environment).objectValue ?? [:]
            let arguments = input.filter { $0.value != .null }.sorted { $0.key < $1.key }.map { ($0.key, $0.value.stringValue ?? $0.value.jsonText) }
            do {
                let built = try CallRequest.build(operation: operation, mount: mount, arguments: arguments, body: nil)
                return CallPlan(id: name, method: operation.method, target: built.target, fields: [:], body: built.body, dependsOn: [])
            } catch let error as CallError {
                throw GatewayError.invalid("The step '\(name)' cannot be made: \(error.description)")
            }
        }
        let method = HTTPRequest.Method(step.method?.uppercased() ?? "GET") ?? .get
        let target = Self.text(step.path ?? "/", environment, encoded: true)
        let body = step.body.map { Self.evaluate($0, environment).serialized() }
        return CallPlan(id: name, method: method, target: target, fields: [:], body: body, dependsOn: [])
    }

    /// A step's reply as a value: its JSON, else its text.
    static func value(of outcome: CallOutcome) -> JSONValue {
        let rendered = outcome.rendered
        return rendered.json ?? rendered.text.map(JSONValue.string) ?? .null
    }

    /// `template` with its references filled in.
    static func evaluate(_ template: JSONValue, _ environment: Environment) -> JSONValue {
        switch template {
        case .string(let text):
            let parts = CompositeReference.parts(of: text)
            if parts.count == 1, case .reference(let reference) = parts[0] { return resolve(reference, environment) ?? .null }
            return .string(Self.text(text, environment, encoded: false))
        case .array(let elements): return .array(elements.map { evaluate($0, environment) })
        case .object(let members): return .object(members.mapValues { evaluate($0, environment) })
        default: return template
        }
    }

    /// `text` with each reference put in as text (percent-encoded, in a path).
    static func text(_ text: String, _ environment: Environment, encoded: Bool) -> String {
        CompositeReference.parts(of: text).map { part in
            switch part {
            case .text(let text): return text
            case .reference(let reference):
                let value = resolve(reference, environment) ?? .null
                let text = value.stringValue ?? (value == .null ? "" : value.jsonText)
                return encoded ? PercentEncoding.component(text) : text
            }
        }.joined()
    }

    static func resolve(_ reference: CompositeReference, _ environment: Environment) -> JSONValue? {
        let base: JSONValue?
        switch reference.source {
        case .path(let name): base = environment.path[name].map(JSONValue.string)
        case .query(let name): base = environment.query.first { $0.name == name }.map { .string($0.value) }
        case .body: base = environment.body
        case .step(let name): base = environment.outcomes[name].flatMap { $0.succeeded ? value(of: $0) : nil }
        case .status(let name): base = environment.outcomes[name].map { .number(Double($0.status)) }
        }
        guard let base else { return nil }
        return pointer(reference.pointer, in: base)
    }

    /// RFC 6901: `/a/0/b`, with `~1` for `/` and `~0` for `~`.
    static func pointer(_ pointer: String, in value: JSONValue) -> JSONValue? {
        guard !pointer.isEmpty else { return value }
        var current = value
        for token in pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            let key = token.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
            switch current {
            case .object(let members):
                guard let next = members[key] else { return nil }
                current = next
            case .array(let elements):
                guard let index = Int(key), elements.indices.contains(index) else { return nil }
                current = elements[index]
            default:
                return nil
            }
        }
        return current
    }
}
