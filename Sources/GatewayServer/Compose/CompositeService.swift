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
    /// Each composite's templates with their references found once, not on every request.
    let compiled: [String: CompiledComposite]

    /// The rules of each composite's path parameters, from the operations they are passed to.
    let parameterRules: [String: [String: FieldRule]]

    /// `operations` (by name) are the gateway's others: a path parameter passed whole as a step's
    /// input is documented with the rules of the parameter it becomes.
    init(caller: InternalCaller, composites: [String: CompositeSettings], documenting operations: [String: Route] = [:]) {
        self.caller = caller
        self.composites = composites.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        compiled = composites.mapValues(CompiledComposite.init)
        parameterRules = composites.mapValues { Self.parameterRules(of: $0, operations: operations) }
    }

    static func parameterRules(of settings: CompositeSettings, operations: [String: Route]) -> [String: FieldRule] {
        var rules: [String: FieldRule] = [:]
        for name in Route.parameterNames(in: settings.path) {
            for step in settings.steps.values {
                guard let target = step.operation.flatMap({ operations[$0] }) else { continue }
                for (field, value) in step.input ?? [:] where value == .string("{{request.path.\(name)}}") {
                    var found: [FieldRule] = []
                    if let typed = (target.io.path as? any ValidatableInput.Type)?.fieldRules[field] { found.append(typed) }
                    if let typed = (target.io.query as? any ValidatableInput.Type)?.fieldRules[field] { found.append(typed) }
                    if let given = target.inputRules["path.\(field)"] ?? target.inputRules["query.\(field)"] { found.append(given) }
                    for rule in found { rules["path.\(name)"] = rules["path.\(name)"].map { $0.and(rule) } ?? rule }
                }
            }
        }
        return rules
    }

    var routes: [Route] {
        composites.map { name, settings in
            let method: HTTPRequest.Method = settings.method == "POST" ? .post : .get
            let composite = compiled[name] ?? CompiledComposite(settings)
            var operation = Route.define(
                "composite.\(name)", method, settings.path, summary: settings.summary ?? "The composite \(name): \(settings.steps.keys.sorted().joined(separator: ", "))")
                .access(CompositeSettings.accessRule(settings.access) ?? .public).tags("composite")
                .forwards(streamsBody: false) { request, context in
                    try await run(composite, request: request, context: context)
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
    func unknownOperations(among operations: [String: (operation: Route, mount: String)]) -> [String] {
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
        /// The replies of the steps that succeeded, as values (JSON parsed once).
        var values: [String: JSONValue] = [:]
    }

    func run(_ composite: CompiledComposite, request: RouteRequest, context: OperationContext) async throws -> RouteReply {
        let settings = composite.settings
        var body: JSONValue?
        if request.body.readableBytes > 0 {
            do { body = try JSONValue.parse(request.body) } catch { throw GatewayError.badRequest("The body is not JSON: \(error)") }
        }
        var environment = Environment(path: request.pathParameters, query: request.queryParameters, body: body)
        let needs = composite.needs
        var failed: [String: CallOutcome] = [:]
        while environment.outcomes.count < settings.steps.count {
            let ready = composite.order.filter { environment.outcomes[$0] == nil && (needs[$0] ?? []).allSatisfy { environment.outcomes[$0] != nil } }
            guard !ready.isEmpty else { throw GatewayError.internalError("The composite's steps could not be ordered.") }
            var wave: [(String, CallPlan?, Duration, CallOutcome?)] = []
            for name in ready {
                let step = composite.steps[name]!
                if let dependency = (needs[name] ?? []).sorted().first(where: { failed[$0] != nil }) {
                    wave.append((name, nil, .zero, CallOutcome(problem: .failedDependency("Not made: the step '\(dependency)' it needs failed."))))
                    continue
                }
                do {
                    wave.append((name, try plan(step, name: name, environment: environment), (step.step.timeout ?? settings.timeout).duration, nil))
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
                if outcome.succeeded {
                    environment.values[name] = Self.value(of: outcome)
                } else {
                    failed[name] = outcome
                }
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
            return RouteReply(status: HTTPResponse.Status(code: code), body: .bytes(problem.serialized(), contentType: "application/problem+json"))
        }
        var reply: JSONValue
        if let template = composite.reply {
            reply = template.evaluate(environment)
        } else {
            reply = .object(environment.values)
        }
        if !errors.isEmpty, case .object(var members) = reply {
            members["errors"] = .object(errors)
            reply = .object(members)
        }
        return RouteReply(status: .ok, body: .bytes(reply.serialized(), contentType: "application/json"))
    }

    /// The call a step makes, its references filled in.
    private func plan(_ compiled: CompiledComposite.Step, name: String, environment: Environment) throws -> CallPlan {
        let step = compiled.step
        if let operationName = step.operation {
            guard let (operation, mount) = caller.operation(named: operationName) else {
                throw GatewayError.internalError("No operation is named '\(operationName)'.")
            }
            let input = compiled.input.evaluate(environment).objectValue ?? [:]
            let arguments = input.filter { $0.value != .null }.sorted { $0.key < $1.key }.map { ($0.key, $0.value.stringValue ?? $0.value.jsonText) }
            do {
                let built = try CallRequest.build(operation: operation, mount: mount, arguments: arguments, body: nil)
                return CallPlan(id: name, method: operation.method, target: built.target, fields: [:], body: built.body, dependsOn: [])
            } catch let error as CallError {
                throw GatewayError.invalid("The step '\(name)' cannot be made: \(error.description)")
            }
        }
        let method = HTTPRequest.Method(step.method?.uppercased() ?? "GET") ?? .get
        let target = compiled.path.text(environment, encoded: true)
        let body = compiled.body.map { $0.evaluate(environment).serialized() }
        return CallPlan(id: name, method: method, target: target, fields: [:], body: body, dependsOn: [])
    }

    /// A step's reply as a value: its JSON, else its text.
    static func value(of outcome: CallOutcome) -> JSONValue {
        let rendered = outcome.rendered
        return rendered.json ?? rendered.text.map(JSONValue.string) ?? .null
    }

    static func resolve(_ reference: CompositeReference, _ environment: Environment) -> JSONValue? {
        let base: JSONValue?
        switch reference.source {
        case .path(let name): base = environment.path[name].map(JSONValue.string)
        case .query(let name): base = environment.query.first { $0.name == name }.map { .string($0.value) }
        case .body: base = environment.body
        case .step(let name): base = environment.values[name]
        case .status(let name): base = environment.outcomes[name].map { .number(Double($0.status)) }
        }
        guard let base else { return nil }
        return pointer(reference.tokens, in: base)
    }

    /// The value at a JSON pointer's reference tokens (RFC 6901, decoded: see ``CompositeReference/tokens``).
    static func pointer(_ tokens: [String], in value: JSONValue) -> JSONValue? {
        var current = value
        for key in tokens {
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

/// A composite with its templates compiled: what each step needs, and each template's
/// references found, once when the composite is set up.
struct CompiledComposite: Sendable {
    struct Step: Sendable {
        var step: CompositeStep
        var input: CompiledTemplate
        var path: CompiledTemplate
        var body: CompiledTemplate?
    }

    let settings: CompositeSettings
    let steps: [String: Step]
    /// The step names, sorted: the order in which ready steps start.
    let order: [String]
    /// For each step, the steps whose replies or statuses it refers to.
    let needs: [String: [String]]
    let reply: CompiledTemplate?

    init(_ settings: CompositeSettings) {
        self.settings = settings
        steps = settings.steps.mapValues { step in
            Step(step: step, input: CompiledTemplate(.object(step.input ?? [:])), path: CompiledTemplate(.string(step.path ?? "/")),
                 body: step.body.map(CompiledTemplate.init))
        }
        order = settings.steps.keys.sorted()
        needs = settings.steps.mapValues { step in
            Set(CompositeReference.all(in: .object(step.input ?? [:])) + CompositeReference.all(in: step.path.map(JSONValue.string))
                + CompositeReference.all(in: step.body)).compactMap { reference -> String? in
                switch reference.source {
                case .step(let name), .status(let name): name
                default: nil
                }
            }
        }
        reply = settings.reply.map(CompiledTemplate.init)
    }
}

/// A JSON template of a composite (a step's input, path or body, or the reply) with its
/// references found: a string that is one reference takes the referenced JSON as it is; references
/// inside longer text are put in as text.
indirect enum CompiledTemplate: Sendable {
    case literal(JSONValue)
    case reference(CompositeReference)
    case text([CompositeReference.Part])
    case array([CompiledTemplate])
    case object([String: CompiledTemplate])

    init(_ template: JSONValue) {
        switch template {
        case .string(let text):
            let parts = CompositeReference.parts(of: text)
            if parts.count == 1, case .reference(let reference) = parts[0] {
                self = .reference(reference)
            } else if parts.contains(where: { if case .reference = $0 { true } else { false } }) {
                self = .text(parts)
            } else {
                self = .literal(template)
            }
        case .array(let elements): self = .array(elements.map(CompiledTemplate.init))
        case .object(let members): self = .object(members.mapValues(CompiledTemplate.init))
        default: self = .literal(template)
        }
    }

    /// The template with its references filled in.
    func evaluate(_ environment: CompositeService.Environment) -> JSONValue {
        switch self {
        case .literal(let value): return value
        case .reference(let reference): return CompositeService.resolve(reference, environment) ?? .null
        case .text: return .string(text(environment, encoded: false))
        case .array(let elements): return .array(elements.map { $0.evaluate(environment) })
        case .object(let members): return .object(members.mapValues { $0.evaluate(environment) })
        }
    }

    /// The template as text, each reference put in as text (percent-encoded, in a path).
    func text(_ environment: CompositeService.Environment, encoded: Bool) -> String {
        let parts: [CompositeReference.Part]
        switch self {
        case .literal(let value): return value.stringValue ?? (value == .null ? "" : value.jsonText)
        case .reference(let reference): parts = [.reference(reference)]
        case .text(let pieces): parts = pieces
        case .array, .object: return evaluate(environment).jsonText
        }
        return parts.map { part in
            switch part {
            case .text(let text): return text
            case .reference(let reference):
                let value = CompositeService.resolve(reference, environment) ?? .null
                let text = value.stringValue ?? (value == .null ? "" : value.jsonText)
                return encoded ? PercentEncoding.component(text) : text
            }
        }.joined()
    }
}
