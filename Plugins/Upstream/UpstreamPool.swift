import Foundation
import GatewayCore
import Synchronization

/// The instances of an upstream service and what the gateway knows of them: which are up (active
/// health checks), which are ejected after failing in a row (passive checks), how many requests
/// each has in flight, and the service's circuit breaker.
///
/// Choosing an instance skips the ones down or ejected; when every one is, all are tried anyway
/// (a failing request then answers 502, which says more than refusing outright would).
final class UpstreamPool: Sendable {
    struct Target {
        let base: String
        var outstanding = 0
        var failuresInARow = 0
        var ejectedUntil: ContinuousClock.Instant?
        /// The active checks' verdict (up until they say otherwise).
        var up = true
        var checkStreak = 0
        /// When the active checks last asked it, and what it answered then.
        var lastCheck: (at: Date, up: Bool)?
    }

    enum Breaker {
        case closed(failuresInARow: Int)
        case open(until: ContinuousClock.Instant)
        /// One request is trying the service; the others are refused until it answers.
        case halfOpen
    }

    private struct State {
        var targets: [Target]
        var next = 0
        var breaker = Breaker.closed(failuresInARow: 0)
    }

    private let state: Mutex<State>
    let balance: UpstreamSettings.Balance
    let ejectAfter: Int
    let ejectFor: Duration
    let breakAfter: Int
    let breakFor: Duration
    let serviceName: String

    init(settings: UpstreamSettings, name: String) {
        state = Mutex(State(targets: settings.targets.map { Target(base: $0) }))
        balance = settings.balance
        ejectAfter = settings.ejectAfter
        ejectFor = settings.ejectFor
        breakAfter = settings.breakAfter
        breakFor = settings.breakFor
        serviceName = name
    }

    var bases: [String] { state.withLock { $0.targets.map(\.base) } }

    /// Lets a request through the breaker, or refuses it with 503 and `Retry-After`. A request let
    /// through an open breaker whose time is up is the one trial (`halfOpen`).
    func admit() throws {
        let now = ContinuousClock.now
        let refusal: Int? = state.withLock { state in
            switch state.breaker {
            case .closed: return nil
            case .open(let until):
                if now >= until {
                    state.breaker = .halfOpen
                    return nil
                }
                let left = until - now
                return max(1, Int(left.components.seconds) + (left.components.attoseconds > 0 ? 1 : 0))
            case .halfOpen: return 1
            }
        }
        if let retryAfter = refusal {
            throw GatewayError.unavailable("The upstream service '\(serviceName)' is failing; it is left alone for a while.", retryAfter: retryAfter)
        }
    }

    /// Chooses an instance (not one of `tried` where another is left) and counts the request as
    /// in flight there.
    func pick(excluding tried: Set<Int>) -> (index: Int, base: String) {
        let now = ContinuousClock.now
        return state.withLock { state in
            let count = state.targets.count
            func usable(_ index: Int) -> Bool {
                let target = state.targets[index]
                return target.up && (target.ejectedUntil.map { now >= $0 } ?? true)
            }
            var candidates = (0..<count).filter { usable($0) && !tried.contains($0) }
            if candidates.isEmpty { candidates = (0..<count).filter { !tried.contains($0) } }
            if candidates.isEmpty { candidates = Array(0..<count) }
            let chosen: Int
            switch balance {
            case .roundRobin:
                // The next usable one after the last chosen, in the list's order.
                let start = state.next % count
                chosen = candidates.min { ($0 - start + count) % count < ($1 - start + count) % count }!
            case .leastOutstanding:
                let start = state.next % count
                chosen = candidates.min { a, b in
                    let (ta, tb) = (state.targets[a].outstanding, state.targets[b].outstanding)
                    return ta != tb ? ta < tb : (a - start + count) % count < (b - start + count) % count
                }!
            }
            state.next = chosen + 1
            state.targets[chosen].outstanding += 1
            if let until = state.targets[chosen].ejectedUntil, now >= until { state.targets[chosen].ejectedUntil = nil }
            return (chosen, state.targets[chosen].base)
        }
    }

    /// The request at `index` is no longer in flight.
    func release(_ index: Int) {
        state.withLock { $0.targets[index].outstanding -= 1 }
    }

    /// What became of a request at `index`: a failure (no connection, a timeout, a 5xx) counts
    /// toward its ejection and the breaker; a success resets both counts.
    func record(_ index: Int, success: Bool) {
        let now = ContinuousClock.now
        state.withLock { state in
            if success {
                state.targets[index].failuresInARow = 0
                state.breaker = .closed(failuresInARow: 0)
                return
            }
            state.targets[index].failuresInARow += 1
            if ejectAfter > 0, state.targets[index].failuresInARow >= ejectAfter {
                state.targets[index].ejectedUntil = now + ejectFor
                state.targets[index].failuresInARow = 0
            }
            switch state.breaker {
            case .closed(let failures):
                if breakAfter > 0 && failures + 1 >= breakAfter {
                    state.breaker = .open(until: now + breakFor)
                } else {
                    state.breaker = .closed(failuresInARow: failures + 1)
                }
            case .halfOpen:
                state.breaker = .open(until: now + breakFor)
            case .open:
                break
            }
        }
    }

    /// An active check's answer for `index`, given at `at`.
    func checked(_ index: Int, up: Bool, healthyAfter: Int, unhealthyAfter: Int, at: Date = Date()) {
        state.withLock { state in
            var target = state.targets[index]
            target.lastCheck = (at, up)
            if up == target.up {
                target.checkStreak = 0
            } else {
                target.checkStreak += 1
                if target.checkStreak >= (up ? healthyAfter : unhealthyAfter) {
                    target.up = up
                    target.checkStreak = 0
                    if up { target.ejectedUntil = nil }
                }
            }
            state.targets[index] = target
        }
    }

    /// An instance as the admin console shows it.
    struct InstanceStatus: Sendable {
        var base: String
        /// The active checks' verdict.
        var up: Bool
        /// Checks in a row that disagree with the verdict (toward changing it).
        var checkStreak: Int
        var lastCheck: (at: Date, up: Bool)?
        /// Failed requests in a row (toward an ejection).
        var failuresInARow: Int
        /// How long it stays ejected after failing (nil: not ejected).
        var ejectedFor: Duration?
        var outstanding: Int
    }

    /// The breaker as the admin console shows it.
    enum BreakerStatus: Sendable, Equatable {
        case closed(failuresInARow: Int)
        case open(left: Duration)
        case halfOpen
    }

    /// Every instance's state and the breaker's, read at once.
    func status() -> (instances: [InstanceStatus], breaker: BreakerStatus) {
        let now = ContinuousClock.now
        return state.withLock { state in
            let instances = state.targets.map { target in
                InstanceStatus(base: target.base, up: target.up, checkStreak: target.checkStreak, lastCheck: target.lastCheck,
                               failuresInARow: target.failuresInARow, ejectedFor: target.ejectedUntil.flatMap { now < $0 ? $0 - now : nil },
                               outstanding: target.outstanding)
            }
            let breaker: BreakerStatus = switch state.breaker {
            case .closed(let failures): .closed(failuresInARow: failures)
            // An open breaker whose time is up lets the next request through as its trial.
            case .open(let until): now < until ? .open(left: until - now) : .halfOpen
            case .halfOpen: .halfOpen
            }
            return (instances, breaker)
        }
    }

    /// For `/readyz`: failing when no instance is usable or the breaker is open.
    func health() -> PluginHealth {
        let now = ContinuousClock.now
        return state.withLock { state in
            if case .open = state.breaker { return .failing("the circuit breaker is open") }
            let down = state.targets.filter { !$0.up || ($0.ejectedUntil.map { now < $0 } ?? false) }
            if down.count == state.targets.count { return .failing("no instance of the upstream service is up") }
            if !down.isEmpty { return .degraded("\(down.count) of \(state.targets.count) instances are down: \(down.map(\.base).joined(separator: ", "))") }
            return .ok
        }
    }
}
