import Foundation
import GatewayCore
import NIOConcurrencyHelpers

/// A wall clock a test moves by hand (session expiry, token renewal).
public final class TestClock: WallClock {
    private let current: NIOLockedValueBox<Date>

    public init(_ start: Date = Date()) {
        current = NIOLockedValueBox(start)
    }

    public func now() -> Date { current.withLockedValue { $0 } }

    /// Moves the clock forward.
    public func advance(by seconds: Double) {
        current.withLockedValue { $0 = $0.addingTimeInterval(seconds) }
    }
}
