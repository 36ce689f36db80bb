import Foundation
import GatewayCore

/// The clock of the machine: what the gateway runs on outside tests.
public struct SystemClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}
