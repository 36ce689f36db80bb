import Foundation
import GatewayCore
import HTTPTypes
import NIOCore

/// `POST /v1/batch`: several calls in one request, run concurrently, each through the whole
/// pipeline as a request of its own (its authorization, rate-limit cost, cache and errors), with
/// the caller's credential; answered with each call's status, fields and body, in the order given.
///
/// A call names an operation with its input (`{"operation": "todo.list", "input": {"bucket": "todos"}}`)
/// or a method and path (`{"method": "GET", "path": "/v1/suggest?q=ab"}`), optionally with fields
/// and a JSON body. `dependsOn` lists calls (by `id`) that must finish first; a call whose
/// dependency failed (a 4xx or 5xx) is not made and answers 424.
struct BatchService: HostService {
    static let id = "batch"
    static let summary = "Several calls in one request"

    let caller: InternalCaller
    let maxCalls: Int

    init(caller: InternalCaller, maxCalls: Int) {
        self.caller = caller
        self.maxCalls = maxCalls
    }

    struct Request: Decodable, Sendable {
        /// The calls, at most `batch.maxCalls` of plugins.yaml.
        var calls: [Call]
    }

    struct Call: Decodable, Sendable, ValidatableInput {
        static let fieldRules: [String: FieldRule] = [
            "id": FieldRule.text(1...100).described("Names the call (default: its position, from 0); unique in the batch."),
            "method": FieldRule.pattern("^(" + ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"].map { name in
                name.map { "[\($0)\($0.lowercased())]" }.joined()
            }.joined(separator: "|") + ")$").described("With path, instead of operation."),
            "path": FieldRule.pattern("^/(?!/|v1/batch)[!-~]{0,4095}$").described("A path under the gateway with its query, percent-encoded; not a batch."),
            "headers": FieldRule(keywords: [
                "propertyNames": .object(["pattern": .string("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")]),
                "additionalProperties": .object(["pattern": .string(#"^([^\x00-\x20\x7F]([^\x00-\x08\x0A-\x1F\x7F]*[^\x00-\x20\x7F])?)?$"#)]),
            ]),
            "dependsOn": FieldRule.each(.text(1...100)).described("Ids of other calls of the batch, which run first."),
        ]

        /// Names the call for `dependsOn` and in the reply (default: its position, from 0).
        var id: String?
        /// An operation's name (`todo.list`), with `input`: its path, query and body members by name.
        var operation: String?
        var input: [String: JSONValue]?
        /// Or a method and a path under the gateway (with its query), and optionally `body`.
        var method: String?
        var path: String?
        var headers: [String: String]?
        var body: JSONValue?
        var dependsOn: [String]?
    }

    struct Reply: Encodable, Sendable {
        var results: [Result]
    }

    struct Result: Encodable, Sendable {
        var id: String
        var status: Int
        var headers: [String: String]
        /// The body when it is JSON.
        var body: JSONValue?
        /// The body when it is other text.
        var bodyText: String?
        /// The body when it is not text.
        var bodyBase64: String?
    }

    var routes: [Route] {
        [Route.define("batch.run", .post, "", summary: "Run several calls in one request")
            .details("Each call goes through the whole pipeline as a request of its own, with the caller's credential. Calls run concurrently, after the ones they depend on.")
            .body(Request.self)
            .rules(["body.calls": .list(1...maxCalls)])
            .status(.ok)
            .returns(Reply.self) { input, context in try await run(input.body, context: context) }]
    }

    func run(_ request: Request, context: OperationContext) async throws -> Reply {
        // A batch's calls fan out; a batch inside one would multiply them (20 calls of 20 calls...).
        guard !InternalCaller.servesInnerCall else { throw GatewayError.badRequest("A batch cannot run inside a batch or a composite.") }
        let plans = try CallPlan.make(request.calls, maxCalls: maxCalls, caller: caller)
        let outcomes = await CallPlan.execute(plans, caller: caller, context: context, timeout: nil)
        return Reply(results: zip(plans, outcomes).map { plan, outcome in
            let body = outcome.rendered
            return Result(id: plan.id, status: outcome.status, headers: outcome.fieldObject, body: body.json, bodyText: body.text, bodyBase64: body.base64)
        })
    }
}

/// One call of a batch, checked and ready to send.
struct CallPlan: Sendable {
    var id: String
    var method: HTTPRequest.Method
    var target: String
    var fields: HTTPFields
    var body: ByteBuffer?
    var dependsOn: [Int]

    /// Checks `calls` and resolves operations by name; a problem names the call's member (`/calls/2/path`).
    static func make(_ calls: [BatchService.Call], maxCalls: Int, caller: InternalCaller) throws -> [CallPlan] {
        guard !calls.isEmpty else { throw GatewayError.invalid(field: "/calls", "Give at least one call.") }
        guard calls.count <= maxCalls else { throw GatewayError.invalid(field: "/calls", "At most \(maxCalls) calls go in one batch.") }
        var ids: [String: Int] = [:]
        for (index, call) in calls.enumerated() {
            let id = call.id ?? String(index)
            guard !id.isEmpty, id.unicodeScalars.count <= 100 else { throw GatewayError.invalid(field: "/calls/\(index)/id", "An id is 1 to 100 characters.") }
            guard ids.updateValue(index, forKey: id) == nil else { throw GatewayError.invalid(field: "/calls/\(index)/id", "The id '\(id)' is given twice.") }
        }
        var plans: [CallPlan] = []
        for (index, call) in calls.enumerated() {
            let pointer = "/calls/\(index)"
            var fields = HTTPFields()
            for (name, value) in (call.headers ?? [:]).sorted(by: { $0.key < $1.key }) {
                guard let field = HTTPField.Name(name), HTTPField.isValidValue(value) else {
                    throw GatewayError.invalid(field: "\(pointer)/headers/\(name)", "Not a valid header field.")
                }
                fields[field] = value
            }
            let method: HTTPRequest.Method
            let target: String
            var body = call.body?.serialized()
            if let name = call.operation {
                guard call.method == nil, call.path == nil else {
                    throw GatewayError.invalid(field: pointer, "Give either operation (with input) or method and path, not both.")
                }
                guard let (operation, mount) = caller.operation(named: name) else {
                    throw GatewayError.invalid(field: "\(pointer)/operation", "No operation is named '\(name.prefix(100))'.")
                }
                guard operation.name != "batch.run" else { throw GatewayError.invalid(field: "\(pointer)/operation", "A batch cannot contain a batch.") }
                let arguments = (call.input ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value.stringValue ?? $0.value.jsonText) }
                do {
                    let built = try CallRequest.build(operation: operation, mount: mount, arguments: arguments, body: body.map { String(buffer: $0) })
                    target = built.target
                    body = built.body
                } catch let error as CallError {
                    throw GatewayError.invalid(field: "\(pointer)/input", error.description)
                }
                method = operation.method
            } else {
                guard call.input == nil else { throw GatewayError.invalid(field: "\(pointer)/input", "input goes with operation.") }
                guard let text = call.method, let given = HTTPRequest.Method(text.uppercased()),
                      [.get, .head, .post, .put, .patch, .delete].contains(given) else {
                    throw GatewayError.invalid(field: "\(pointer)/method", "Give operation, or method (GET, HEAD, POST, PUT, PATCH, DELETE) and path.")
                }
                guard let path = call.path, path.hasPrefix("/"), !path.hasPrefix("//"), path.utf8.count <= 4096,
                      path.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
                    throw GatewayError.invalid(field: "\(pointer)/path", "Give a path under the gateway, such as /v1/todo/buckets (percent-encoded, with its query).")
                }
                let bare = path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? path
                guard !bare.hasPrefix("/v1/batch") else { throw GatewayError.invalid(field: "\(pointer)/path", "A batch cannot contain a batch.") }
                method = given
                target = path
            }
            var dependsOn: [Int] = []
            for (offset, name) in (call.dependsOn ?? []).enumerated() {
                guard let other = ids[name], other != index else {
                    throw GatewayError.invalid(field: "\(pointer)/dependsOn/\(offset)", "No other call has the id '\(name.prefix(100))'.")
                }
                dependsOn.append(other)
            }
            plans.append(CallPlan(id: call.id ?? String(index), method: method, target: target, fields: fields, body: body, dependsOn: dependsOn))
        }
        if let cycle = Self.cycle(in: plans.map(\.dependsOn)) {
            throw GatewayError.invalid(field: "/calls/\(cycle)/dependsOn", "The calls depend on each other in a circle.")
        }
        return plans
    }

    /// A node on a cycle of `edges` (node → the nodes it waits for), if there is one.
    static func cycle(in edges: [[Int]]) -> Int? {
        var state = [Int](repeating: 0, count: edges.count)  // 0 new, 1 on the path, 2 done
        func visit(_ node: Int) -> Int? {
            if state[node] == 1 { return node }
            if state[node] == 2 { return nil }
            state[node] = 1
            for next in edges[node] { if let found = visit(next) { return found } }
            state[node] = 2
            return nil
        }
        for node in edges.indices { if let found = visit(node) { return found } }
        return nil
    }

    /// Runs the calls: each as soon as those it depends on are done, independent ones at once. A
    /// call whose dependency failed answers 424 without being made.
    static func execute(_ plans: [CallPlan], caller: InternalCaller, context: OperationContext, timeout: Duration?) async -> [CallOutcome] {
        var outcomes = [CallOutcome?](repeating: nil, count: plans.count)
        while outcomes.contains(where: { $0 == nil }) {
            let ready = plans.indices.filter { index in outcomes[index] == nil && plans[index].dependsOn.allSatisfy { outcomes[$0] != nil } }
            await withTaskGroup(of: (Int, CallOutcome).self) { group in
                for index in ready {
                    let plan = plans[index]
                    if let failed = plan.dependsOn.first(where: { !(outcomes[$0]?.succeeded ?? false) }) {
                        outcomes[index] = CallOutcome(problem: .failedDependency("Not made: the call '\(plans[failed].id)' it depends on failed."))
                        continue
                    }
                    group.addTask {
                        (index, await caller.call(plan.method, plan.target, fields: plan.fields, body: plan.body, outer: context,
                                                  requestID: "\(context.requestID).\(index)", timeout: timeout))
                    }
                }
                for await (index, outcome) in group { outcomes[index] = outcome }
            }
        }
        return outcomes.map { $0! }
    }
}
