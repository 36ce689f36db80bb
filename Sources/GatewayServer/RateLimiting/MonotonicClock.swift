import Foundation

/// The monotonic clock (the one `ContinuousClock` reads) in seconds, without `Duration`'s 128-bit
/// arithmetic: the local rate limiter reads it for every request.
enum MonotonicClock {
    static var seconds: Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
