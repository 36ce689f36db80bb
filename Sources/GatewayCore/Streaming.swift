import HTTPTypes
import NIOCore

/// A body that arrives or leaves in pieces: a request body an operation forwards without holding
/// it (``Route/streamsBody``), a reply too large to hold
/// (``RouteReply/Body/stream(_:contentType:length:)``), an upstream's reply
/// (``UpstreamHTTPClient/open(_:body:)``).
///
/// One pass only: a stream is read once, by one reader, and pieces are pulled as the reader asks
/// for them, so a slow reader slows the writer down rather than filling memory.
public struct ByteStream: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer

    private let makeNext: @Sendable () -> @Sendable () async throws -> ByteBuffer?

    /// A stream over any sequence of buffers.
    public init<Source: AsyncSequence & Sendable>(_ source: Source) where Source.Element == ByteBuffer {
        makeNext = {
            let box = IteratorBox(source.makeAsyncIterator())
            return { try await box.next() }
        }
    }

    /// A stream whose pieces `next` gives, one call per piece, nil at the end. Read once only.
    public init(next: @escaping @Sendable () async throws -> ByteBuffer?) {
        makeNext = { next }
    }

    /// A stream of the given buffers.
    public init(_ buffers: [ByteBuffer]) {
        makeNext = {
            let box = IteratorBox(buffers.makeIterator())
            return { box.nextBuffer() }
        }
    }

    /// Copies of an iterator share its place: the stream's state is the stream's, not the iterator's.
    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let pull: @Sendable () async throws -> ByteBuffer?
        public mutating func next() async throws -> ByteBuffer? { try await pull() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(pull: makeNext()) }

    /// Reads the whole stream into one buffer; throws ``GatewayError`` 413 past `limit` bytes.
    public func collect(upTo limit: Int) async throws -> ByteBuffer {
        var result = ByteBuffer()
        for try await var piece in self {
            guard result.readableBytes + piece.readableBytes <= limit else { throw GatewayError.contentTooLarge(limit: limit) }
            result.writeBuffer(&piece)
        }
        return result
    }
}

/// Holds an iterator that is not `Sendable` for the one reader a ``ByteStream`` has: the stream's
/// contract (one pass, one reader, one piece at a time) is what makes sharing it safe.
private final class IteratorBox<Iterator>: @unchecked Sendable {
    var iterator: Iterator
    init(_ iterator: Iterator) { self.iterator = iterator }
}

extension IteratorBox where Iterator: AsyncIteratorProtocol, Iterator.Element == ByteBuffer {
    func next() async throws -> ByteBuffer? {
        var copy = iterator
        defer { iterator = copy }
        return try await copy.next()
    }
}

extension IteratorBox where Iterator: IteratorProtocol, Iterator.Element == ByteBuffer {
    func nextBuffer() -> ByteBuffer? { iterator.next() }
}

extension UpstreamHTTPClient {
    /// Sends `request` with `body` streamed after it (when given, it replaces ``UpstreamRequest/body``)
    /// and answers once the reply's head has arrived — within ``UpstreamRequest/timeout`` — with
    /// its body still to read. This default reads the whole reply first; the host's client streams.
    public func open(_ request: UpstreamRequest, body: ByteStream?) async throws -> UpstreamResponse<ByteStream> {
        var request = request
        if let body { request.body = try await body.collect(upTo: 64 << 20) }
        let response = try await send(request, maxBodySize: 64 << 20)
        return UpstreamResponse(status: response.status, headers: response.headers, body: ByteStream([response.body]))
    }
}
