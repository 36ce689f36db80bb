import Foundation

/// How datapoints are stored: in chunks, one row per run of up to `capacity` consecutive datapoints
/// of a stream, their times and values packed in a blob, with a summary of them beside it
/// (first and last time, count, minimum, maximum, sum, first and last value).
///
/// A batch of a thousand datapoints is then two or three rows to write instead of a thousand index
/// entries: the single SQLite writer spends a tenth of the time on it. An aggregate over a whole
/// chunk that falls inside one interval is read from the summary, without the blob.
///
/// Invariants (kept by `FeedStore`): a chunk holds at least one datapoint, its datapoints are in
/// increasing time with no time twice, and the chunks of a stream do not overlap, so the stream's
/// datapoints are its chunks' in the order of `first_at`.
enum DatapointChunks {
    /// The most datapoints in one chunk: under 8 KiB of blob, so that adding one datapoint to a
    /// stream's newest chunk rewrites at most that much, and so that a full chunk's row (8,108 bytes)
    /// fits in one PostgreSQL page beside nothing else and stays there (`toast_tuple_target`, set by
    /// the feeds migrations) instead of being cut into four or five rows of a TOAST table.
    static let capacity = 500
    /// Bytes per datapoint in a blob: the time (Int64) and the value's bits (Double), little-endian.
    static let bytesPerPoint = 16

    /// A chunk's summary columns.
    struct Summary: Equatable {
        var firstAt: Int64
        var lastAt: Int64
        var count: Int
        var low: Double
        var high: Double
        var total: Double
        var firstValue: Double
        var lastValue: Double
    }

    static func summary(of points: ArraySlice<Datapoint>) -> Summary {
        let first = points[points.startIndex]
        let last = points[points.endIndex - 1]
        var low = first.value
        var high = first.value
        var sum = CompensatedSum()
        for point in points {
            low = min(low, point.value)
            high = max(high, point.value)
            sum.add(point.value)
        }
        return Summary(firstAt: first.at, lastAt: last.at, count: points.count, low: low, high: high, total: sum.value,
                       firstValue: first.value, lastValue: last.value)
    }

    static func encode(_ points: ArraySlice<Datapoint>) -> Data {
        var data = Data(count: points.count * bytesPerPoint)
        data.withUnsafeMutableBytes { raw in
            var offset = 0
            for point in points {
                raw.storeBytes(of: point.at.littleEndian, toByteOffset: offset, as: Int64.self)
                raw.storeBytes(of: point.value.bitPattern.littleEndian, toByteOffset: offset + 8, as: UInt64.self)
                offset += bytesPerPoint
            }
        }
        return data
    }

    /// The datapoints of a blob, appended to `points`. A blob that is not whole datapoints in
    /// increasing time (a damaged row) throws rather than giving wrong answers.
    static func decode(_ data: Data, into points: inout [Datapoint]) throws {
        guard data.count % bytesPerPoint == 0, !data.isEmpty else { throw ChunkError.damaged }
        let count = data.count / bytesPerPoint
        points.reserveCapacity(points.count + count)
        let startCount = points.count
        data.withUnsafeBytes { raw in
            var offset = 0
            for _ in 0..<count {
                let at = Int64(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: Int64.self))
                let bits = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self))
                points.append(Datapoint(at: at, value: Double(bitPattern: bits)))
                offset += bytesPerPoint
            }
        }
        for index in (startCount + 1)..<points.count where points[index - 1].at >= points[index].at {
            throw ChunkError.damaged
        }
    }

    static func decode(_ data: Data) throws -> [Datapoint] {
        var points: [Datapoint] = []
        try decode(data, into: &points)
        return points
    }

    enum ChunkError: Error { case damaged }

    /// The datapoints in increasing time, each time once: where a batch names a time twice, its
    /// later datapoint wins (as if they had been sent one after the other).
    static func normalized(_ points: [Datapoint]) -> [Datapoint] {
        var ordered = true
        for index in points.indices.dropFirst() where points[index - 1].at >= points[index].at {
            ordered = false
            break
        }
        if ordered { return points }
        let sorted = points.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }
        var result: [Datapoint] = []
        result.reserveCapacity(points.count)
        for (_, point) in sorted {
            if let last = result.last, last.at == point.at { result[result.count - 1] = point } else { result.append(point) }
        }
        return result
    }

    /// Both sequences in increasing time, each time once; where both have a time, `incoming` wins.
    static func merge(_ existing: [Datapoint], _ incoming: [Datapoint]) -> [Datapoint] {
        if existing.isEmpty { return incoming }
        if incoming.isEmpty { return existing }
        if existing[existing.count - 1].at < incoming[0].at { return existing + incoming }
        var result: [Datapoint] = []
        result.reserveCapacity(existing.count + incoming.count)
        var i = 0
        var j = 0
        while i < existing.count, j < incoming.count {
            let a = existing[i]
            let b = incoming[j]
            if a.at < b.at {
                result.append(a)
                i += 1
            } else {
                if a.at == b.at { i += 1 }
                result.append(b)
                j += 1
            }
        }
        result.append(contentsOf: existing[i...])
        result.append(contentsOf: incoming[j...])
        return result
    }

    /// Consecutive runs of at most `capacity` datapoints, as few as can be and of even sizes, so
    /// that one datapoint added to a full chunk leaves two halves with room rather than a full
    /// chunk and a chunk of one.
    static func split(_ points: [Datapoint]) -> [ArraySlice<Datapoint>] {
        guard !points.isEmpty else { return [] }
        let pieces = (points.count + capacity - 1) / capacity
        let base = points.count / pieces
        let larger = points.count % pieces
        var result: [ArraySlice<Datapoint>] = []
        var start = 0
        for piece in 0..<pieces {
            let size = base + (piece < larger ? 1 : 0)
            result.append(points[start..<(start + size)])
            start += size
        }
        return result
    }

    /// The index of the last datapoint at or before `at` in `points` (increasing time), or nil.
    static func lastIndex(atOrBefore at: Int64, in points: [Datapoint]) -> Int? {
        var low = 0
        var high = points.count
        while low < high {
            let middle = (low + high) / 2
            if points[middle].at <= at { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : low - 1
    }
}

/// A sum of doubles with the rounding error of each addition carried along (Neumaier), so that a
/// sum over a million datapoints does not drift with their order.
struct CompensatedSum {
    private var sum = 0.0
    private var compensation = 0.0

    mutating func add(_ value: Double) {
        let total = sum + value
        if !total.isFinite {
            sum = total
        } else if abs(sum) >= abs(value) {
            compensation += (sum - total) + value
        } else {
            compensation += (value - total) + sum
        }
        sum = total
    }

    /// The sum; ±infinity past the largest double, NaN once both infinities are in.
    var value: Double { sum.isFinite ? sum + compensation : sum }
}
