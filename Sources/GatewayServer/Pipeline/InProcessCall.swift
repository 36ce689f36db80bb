import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A reply to an in-process request.
public struct InProcessResponse: Sendable {
    public var status: Int
    public var headers: HTTPFields
    public var body: ByteBuffer
}

extension Gateway {
    /// Sends a request through the full pipeline without a socket (used by `gateway call`):
    /// the same routing, principal, limits, cache, decoding and errors as over HTTP.
    /// `address` stands for the socket's peer.
    public func handle(_ method: HTTPRequest.Method, _ target: String, headers: HTTPFields = [:], body: ByteBuffer? = nil,
                       from address: String = "local") async throws -> InProcessResponse {
        try await responder.handle(method, target, headers: headers, body: body, from: address)
    }

    /// Finds an operation by name.
    public func operation(named name: String) -> (plugin: LoadedPlugin, operation: GatewayCore.Route)? {
        for plugin in plugins {
            if let operation = plugin.instance.operations.first(where: { $0.name == name }) { return (plugin, operation) }
        }
        return nil
    }
}

extension GatewayResponder {
    /// A request through the whole pipeline, without a socket: `address` stands for the peer.
    func handle(_ method: HTTPRequest.Method, _ target: String, headers: HTTPFields, body: ByteBuffer?, from address: String) async throws -> InProcessResponse {
        let head = HTTPRequest(method: method, scheme: "http", authority: "localhost", path: target, headerFields: headers)
        let request = Request(head: head, body: .init(buffer: body ?? ByteBuffer()))
        let context = GatewayRequestContext(logger: logger, remoteAddress: address)
        let response = try await respond(to: request, context: context)
        let sink = CollectedBody()
        try await response.body.write(CollectingWriter(sink: sink))
        return InProcessResponse(status: response.status.code, headers: response.headers, body: sink.buffer)
    }
}

private final class CollectedBody: Sendable {
    private let storage = NIOLockedValueBox(ByteBuffer())
    var buffer: ByteBuffer { storage.withLockedValue { $0 } }
    func append(_ bytes: ByteBuffer) {
        storage.withLockedValue { stored in
            var bytes = bytes
            stored.writeBuffer(&bytes)
        }
    }
}

private struct CollectingWriter: ResponseBodyWriter {
    let sink: CollectedBody
    mutating func write(_ buffer: ByteBuffer) async throws { sink.append(buffer) }
    mutating func write(contentsOf buffers: some Sequence<ByteBuffer>) async throws {
        for buffer in buffers { sink.append(buffer) }
    }
    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
