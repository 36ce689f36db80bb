import Dispatch

/// The monotonic clock in seconds, without `Duration`'s 128-bit arithmetic: the local rate limiter
/// reads it for every request.
enum MonotonicClock {
    static var seconds: Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }
}
