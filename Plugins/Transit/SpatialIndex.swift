import Foundation

/// Points in a uniform grid of latitude/longitude cells: the nearest points to a place are found by
/// visiting rings of cells outwards until no unvisited cell can hold a nearer point.
struct SpatialIndex: Sendable {
    static let earthRadius = 6_371_008.8
    static let metresPerDegree = earthRadius * .pi / 180

    /// The cell's side in degrees.
    let cell: Double
    private let cells: [Int64: Range<Int32>]
    private let members: [Int32]
    private let lat: [Double]
    private let lon: [Double]

    /// Indexes `points`, skipping those whose `include` is false.
    init(points: [(lat: Double, lon: Double)], include: [Bool]) {
        lat = points.map(\.lat)
        lon = points.map(\.lon)
        let chosen = points.indices.filter { include[$0] }
        // About four points per cell where points are, whatever the network's size.
        var cell = 0.01
        if chosen.count > 1 {
            let lats = chosen.map { points[$0].lat }, lons = chosen.map { points[$0].lon }
            let area = max((lats.max()! - lats.min()!) * (lons.max()! - lons.min()!), 1e-8)
            cell = min(max((area / Double(chosen.count) * 4).squareRoot(), 0.0005), 0.02)
        }
        self.cell = cell
        let keyed = chosen.map { (key: Self.key(Self.cellOf(points[$0].lat, cell), Self.cellOf(points[$0].lon, cell)), index: Int32($0)) }
            .sorted { $0.key != $1.key ? $0.key < $1.key : $0.index < $1.index }
        members = keyed.map(\.index)
        var cells: [Int64: Range<Int32>] = [:]
        var start = 0
        while start < keyed.count {
            var end = start
            while end < keyed.count, keyed[end].key == keyed[start].key { end += 1 }
            cells[keyed[start].key] = Int32(start)..<Int32(end)
            start = end
        }
        self.cells = cells
    }

    private static func cellOf(_ degrees: Double, _ cell: Double) -> Int64 { Int64((degrees / cell).rounded(.down)) }
    private static func key(_ y: Int64, _ x: Int64) -> Int64 { (y &+ (1 << 30)) << 32 | ((x &+ (1 << 30)) & 0xFFFF_FFFF) }

    /// Great-circle distance in metres.
    static func distance(_ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double) -> Double {
        let p1 = lat1 * .pi / 180, p2 = lat2 * .pi / 180
        let dp = p2 - p1, dl = (lon2 - lon1) * .pi / 180
        let a = sin(dp / 2) * sin(dp / 2) + cos(p1) * cos(p2) * sin(dl / 2) * sin(dl / 2)
        return 2 * earthRadius * asin(min(1, a.squareRoot()))
    }

    /// Up to `limit` points within `radius` metres of a place, nearest first, with their distances.
    func nearest(lat: Double, lon: Double, radius: Double, limit: Int, where accept: (Int32) -> Bool = { _ in true }) -> [(index: Int32, distance: Double)] {
        guard limit > 0, !cells.isEmpty else { return [] }
        let cosLat = max(cos(lat * .pi / 180), 0.01)
        let northSouth = cell * Self.metresPerDegree, eastWest = northSouth * cosLat
        let maxY = Int64((radius / northSouth).rounded(.up)) + 1
        let maxX = min(Int64((radius / eastWest).rounded(.up)) + 1, Int64(180 / cell) + 1)
        let cy = Self.cellOf(lat, cell), cx = Self.cellOf(lon, cell)
        var best: [(index: Int32, distance: Double)] = []
        best.reserveCapacity(limit + 1)

        func visit(_ y: Int64, _ x: Int64) {
            var wrapped = x
            let columns = Int64((360 / cell).rounded(.up))
            if Double(x) * cell >= 180 { wrapped -= columns } else if Double(x) * cell < -180 { wrapped += columns }
            guard let range = cells[Self.key(y, wrapped)] else { return }
            for position in range {
                let index = members[Int(position)]
                let d = Self.distance(lat, lon, self.lat[Int(index)], self.lon[Int(index)])
                guard d <= radius else { continue }
                if best.count == limit, d >= best[limit - 1].distance { continue }
                guard accept(index) else { continue }
                var at = best.count
                while at > 0, best[at - 1].distance > d || (best[at - 1].distance == d && best[at - 1].index > index) { at -= 1 }
                best.insert((index, d), at: at)
                if best.count > limit { best.removeLast() }
            }
        }

        var ring: Int64 = 0
        while ring <= max(maxX, maxY) {
            // Every point of this ring's outside is at least `ring` cells away.
            if ring > 0 {
                let reach = Double(ring - 1) * min(northSouth, eastWest)
                if reach > radius || (best.count == limit && best[limit - 1].distance <= reach) { break }
            }
            let ry = min(ring, maxY), rx = min(ring, maxX)
            for dy in -ry...ry {
                if abs(dy) == ring {
                    for dx in -rx...rx { visit(cy + dy, cx + dx) }
                } else if ring <= maxX {
                    visit(cy + dy, cx - ring)
                    if ring > 0 { visit(cy + dy, cx + ring) }
                }
            }
            ring += 1
        }
        return best
    }
}

/// Stop names by every word they contain: a prefix of any word (and, for Chinese, Japanese and
/// Korean text, of any character onwards) finds the name, whatever its case or accents.
struct NameIndex: Sendable {
    private let keys: [String]
    private let owners: [Int32]
    private let starts: [Bool]

    init(names: [String], include: [Bool]) {
        var entries: [(key: String, owner: Int32, start: Bool)] = []
        for (index, name) in names.enumerated() where include[index] {
            let folded = Array(Self.fold(name))
            var previousWordChar = false
            var added = 0
            for (position, character) in folded.enumerated() {
                let wordChar = character.isLetter || character.isNumber
                if wordChar && (!previousWordChar || Self.isIdeographic(character)) {
                    entries.append((String(folded[position...]), Int32(index), position == 0))
                    added += 1
                    if added >= 24 { break }
                }
                previousWordChar = wordChar
            }
        }
        entries.sort { $0.key != $1.key ? $0.key < $1.key : $0.owner < $1.owner }
        keys = entries.map(\.key)
        owners = entries.map(\.owner)
        starts = entries.map(\.start)
    }

    /// Lowercased, without accents, full-width letters as ASCII.
    static func fold(_ text: String) -> String {
        text.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
    }

    static func isIdeographic(_ character: Character) -> Bool {
        guard let scalar = character.unicodeScalars.first?.value else { return false }
        return (0x3040...0x30FF).contains(scalar) || (0x3400...0x9FFF).contains(scalar) || (0xAC00...0xD7AF).contains(scalar)
            || (0xF900...0xFAFF).contains(scalar) || (0x20000...0x2FFFF).contains(scalar)
    }

    /// The names matching `query`, those that start with it first; at most `limit`.
    func search(_ query: String, limit: Int, rank: (Int32, Int32) -> Bool) -> [Int32] {
        let folded = Self.fold(query).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !folded.isEmpty, limit > 0 else { return [] }
        var low = 0, high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if keys[middle] < folded { low = middle + 1 } else { high = middle }
        }
        var leading: [Int32] = [], inner: [Int32] = []
        var seen = Set<Int32>()
        var position = low
        // Gather a bounded number of matches, then rank them.
        while position < keys.count, keys[position].hasPrefix(folded), seen.count < 2000 {
            let owner = owners[position]
            if seen.insert(owner).inserted { (starts[position] ? { leading.append(owner) } : { inner.append(owner) })() }
            else if starts[position], let at = inner.firstIndex(of: owner) { inner.remove(at: at); leading.append(owner) }
            position += 1
        }
        return Array((leading.sorted(by: rank) + inner.sorted(by: rank)).prefix(limit))
    }
}
