import Foundation
import GatewayCore
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore

/// Runs calls made of one request (a batch's calls, a composite's steps) through the gateway's
/// own pipeline, each as a request of its own: its routing, the caller's credential resolved
/// again, its authorization, rate-limit cost, cache and errors. The pipeline is attached once the
/// gateway is assembled (the endpoints that call it are part of it).
final class InternalCaller: Sendable {
    fileprivate let responder = NIOLockedValueBox<GatewayResponder?>(nil)
    private let operations = NIOLockedValueBox<[String: (operation: Route, mount: String)]>([:])

    /// Makes the caller usable: the pipeline, and the operations callable by name with their mounts.
    func attach(_ responder: GatewayResponder, operations: [String: (operation: Route, mount: String)]) {
        self.responder.withLockedValue { $0 = responder }
        self.operations.withLockedValue { $0 = operations }
    }

    /// Whether the running task serves a call made of another request (a batch's call, a
    /// composite's step). A batch refuses to run there, so that no batch runs inside another at
    /// any depth, whatever path or operation name reached it.
    @TaskLocal static var servesInnerCall = false

    func operation(named name: String) -> (operation: Route, mount: String)? {
        operations.withLockedValue { $0[name] }
    }

    /// Fields of the outer request every inner call carries: who is calling, in which language,
    /// within which trace.
    static let inherited: [HTTPField.Name] = [.authorization, HTTPField.Name("X-Api-Key")!, .acceptLanguage, HTTPField.Name("traceparent")!,
                                              HTTPField.Name("tracestate")!]

    /// One call. `fields` are the call's own; the outer request's credential is added unless the
    /// call gives one. `timeout` bounds it (504 problem past it).
    func call(_ method: HTTPRequest.Method, _ target: String, fields: HTTPFields, body: ByteBuffer?, outer: OperationContext, requestID: String,
              timeout: Duration?) async -> CallOutcome {
        guard let responder = responder.withLockedValue({ $0 }) else {
            return CallOutcome(problem: .unavailable("The gateway is starting."))
        }
        var headers = fields
        for name in Self.inherited where headers[name] == nil {
            if let value = outer.headers[name] { headers[name] = value }
        }
        headers[HTTPField.Name("X-Request-Id")!] = requestID
        if body != nil && headers[.contentType] == nil { headers[.contentType] = "application/json" }
        let address = outer.principal.address
        let fields = headers
        let run: @Sendable () async -> CallOutcome = {
            do {
                let response = try await InternalCaller.$servesInnerCall.withValue(true) {
                    try await responder.handle(method, target, headers: fields, body: body, from: address)
                }
                return CallOutcome(status: response.status, headers: response.headers, body: response.body)
            } catch {
                return CallOutcome(problem: ProblemResponse.gatewayError(from: error) ?? .internalError())
            }
        }
        guard let timeout else { return await run() }
        // Past its timeout the call is answered with a 504 at once, and cancelled.
        return await TimedCall.run(timeout: timeout, expired: {
            CallOutcome(problem: .gatewayTimeout("The call did not finish within \(ConfigDuration(timeout))."))
        }, run)
    }
}

extension InternalCaller {
    /// A request of the gateway's own making (the console's): through the whole pipeline with
    /// only the fields given, from `address`.
    func call(_ method: HTTPRequest.Method, _ target: String, fields: HTTPFields, body: ByteBuffer?, from address: String) async -> CallOutcome {
        guard let responder = responder.withLockedValue({ $0 }) else {
            return CallOutcome(problem: .unavailable("The gateway is starting."))
        }
        do {
            let response = try await responder.handle(method, target, headers: fields, body: body, from: address)
            return CallOutcome(status: response.status, headers: response.headers, body: response.body)
        } catch {
            return CallOutcome(problem: ProblemResponse.gatewayError(from: error) ?? .internalError())
        }
    }
}

/// What one inner call answered.
struct CallOutcome: Sendable {
    var status: Int
    var headers: HTTPFields
    var body: ByteBuffer
}

extension CallOutcome {
    /// An outcome that never reached a handler, as its problem document.
    init(problem: GatewayError) {
        status = Int(problem.status.code)
        headers = [.contentType: "application/problem+json"]
        body = ProblemResponse.body(problem, path: "", requestID: "")
    }

    var succeeded: Bool { (200..<400).contains(status) }

    /// The body as JSON when it is JSON; nil otherwise.
    var json: JSONValue? {
        guard let type = headers[.contentType].map(MediaType.essence), type == "application/json" || type.hasSuffix("+json") else { return nil }
        return try? JSONValue.parse(body)
    }

    /// The body as a batch or composite reply shows it: JSON as JSON, text as a string, other bytes in base64.
    var rendered: (json: JSONValue?, text: String?, base64: String?) {
        if body.readableBytes == 0 { return (nil, nil, nil) }
        if let json { return (json, nil, nil) }
        if let text = String(validating: body.readableBytesView, as: UTF8.self) { return (nil, text, nil) }
        return (nil, nil, Data(body.readableBytesView).base64EncodedString())
    }

    /// The reply's fields as one object (repeated names joined), without the ones that belong to
    /// the outer reply's own connection.
    var fieldObject: [String: String] {
        var result: [String: String] = [:]
        for field in headers where field.name != .contentLength && field.name != .setCookie {
            let name = field.name.canonicalName
            result[name] = result[name].map { $0 + ", " + field.value } ?? field.value
        }
        return result
    }
}
