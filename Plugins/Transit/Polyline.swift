/// Google's encoded polyline format (as OneBusAway and map SDKs read it): each coordinate in
/// 1e-5 degrees, as the difference from the previous point, zig-zag and 5-bit chunks + 63.
enum Polyline {
    static func encode(_ points: [(lat: Double, lon: Double)]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(points.count * 8)
        var previousLat = 0, previousLon = 0
        for point in points {
            let lat = Int((point.lat * 1e5).rounded()), lon = Int((point.lon * 1e5).rounded())
            append(lat - previousLat, to: &output)
            append(lon - previousLon, to: &output)
            previousLat = lat
            previousLon = lon
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func append(_ value: Int, to output: inout [UInt8]) {
        var rest = value < 0 ? ~(value << 1) : value << 1
        while rest >= 0x20 {
            output.append(UInt8((0x20 | (rest & 0x1f)) + 63))
            rest >>= 5
        }
        output.append(UInt8(rest + 63))
    }

    /// The points of an encoded polyline (for tests and clients of the API).
    static func decode(_ text: String) -> [(lat: Double, lon: Double)]? {
        let bytes = Array(text.utf8)
        var index = 0, lat = 0, lon = 0
        var points: [(lat: Double, lon: Double)] = []
        func next() -> Int? {
            var result = 0, shift = 0
            while true {
                guard index < bytes.count, bytes[index] >= 63 else { return nil }
                let chunk = Int(bytes[index]) - 63
                index += 1
                result |= (chunk & 0x1f) << shift
                shift += 5
                if chunk < 0x20 { break }
                guard shift < 60 else { return nil }
            }
            return (result & 1) != 0 ? ~(result >> 1) : result >> 1
        }
        while index < bytes.count {
            guard let dLat = next(), let dLon = next() else { return nil }
            lat += dLat
            lon += dLon
            points.append((Double(lat) / 1e5, Double(lon) / 1e5))
        }
        return points
    }
}
