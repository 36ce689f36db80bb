import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Waits before a child process is started while this process has many descriptors open.
///
/// On Linux, Foundation's `Process.run()` finds the highest open descriptor by reading
/// `/proc/self/fd` and copying each entry's whole 256-byte name field, which reads past the end of
/// the directory buffer once that buffer is full: with more than about 1,360 descriptors open, the
/// copy of the last entry can cross into unmapped memory and crash the process. When every suite
/// ran side by side the test process held up to about 1,700 at its peak (every test's SQLite files
/// and sockets), and one full run crashed there; tests now take turns for databases (`TestSlots`),
/// and this gate stays as the guard. Peaks pass in seconds, so a spawn waits (at most a minute)
/// until fewer than 1,000 are open.
enum SpawnGate {
    static let limit = 1_000

    static func waitForFewDescriptors(within seconds: Double = 60) async {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while openDescriptors() >= limit && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// The entries of `/proc/self/fd`, counted without reading their names; 0 where there is none.
    static func openDescriptors() -> Int {
        #if canImport(Glibc)
        guard let directory = opendir("/proc/self/fd") else { return 0 }
        defer { closedir(directory) }
        var count = 0
        while readdir(directory) != nil { count += 1 }
        return count
        #else
        return 0
        #endif
    }
}
