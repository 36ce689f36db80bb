import Foundation
@testable import TransitPlugin

/// The GTFS import's readers: a table read record by record with its field formats, and a feed's
/// zip archive listed and extracted under a size cap, as the importer does. Both read files, so
/// the input is written to a file of this process first.
enum TransitFuzz {
    static let file = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-fuzz-\(getpid()).bin")

    static func write(_ bytes: UnsafeBufferPointer<UInt8>) -> URL? {
        (try? Data(buffer: bytes).write(to: file)) == nil ? nil : file
    }

    /// A table (its first record the header), every field read in every GTFS format.
    static let csv: FuzzTargets.Target = { bytes in
        guard let url = write(bytes), var table = try? GTFSTable(url: url, file: "stop_times.txt", required: []) else { return }
        let columns = ["stop_id", "stop_lat", "stop_lon", "arrival_time", "departure_time", "date", "stop_sequence"]
        var records = 0
        while (try? table.next()) == true, records < 10_000 {
            records += 1
            for column in columns {
                let value = table[column]
                _ = GTFSFormat.time(value)
                _ = GTFSFormat.date(value)
                _ = try? table.int(column)
                _ = try? table.double(column, in: -180...180)
                _ = table.optional(column)
            }
            _ = table.line
        }
    }

    /// A zip archive: its files listed as the importer lists them, each extracted with its size
    /// and CRC checked, stopping at a cap on the uncompressed bytes (a zip bomb stops there).
    static let zip: FuzzTargets.Target = { bytes in
        guard let url = write(bytes), let archive = try? ZipArchive(url: url) else { return }
        let files = archive.filesByName
        var extracted = 0
        let cap = 1 << 20
        struct TooLarge: Error {}
        for name in files.keys.sorted() {
            try? archive.extract(files[name]!) { data in
                extracted += data.count
                guard extracted <= cap else { throw TooLarge() }
            }
        }
    }
}
