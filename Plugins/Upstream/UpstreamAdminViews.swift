import Foundation
import GatewayCore

/// The admin console's page of an upstream service: its instances with what the health checks
/// and the failures of requests say of each, and the circuit breaker's state.
extension UpstreamPlugin {
    public var adminViews: [AdminView] {
        let pool = self.pool
        let settings = self.settings
        return [
            AdminView(id: "instances", title: "Instances", refresh: 10, load: { _ in
                Self.instanceSections(pool: pool, settings: settings)
            }),
        ]
    }

    /// `1.5s`, `30s`, `2m`, `1h`.
    static func adminDuration(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        if seconds >= 3600, seconds.truncatingRemainder(dividingBy: 3600) == 0 { return "\(Int(seconds / 3600))h" }
        if seconds >= 120, seconds.truncatingRemainder(dividingBy: 60) == 0 { return "\(Int(seconds / 60))m" }
        if seconds == seconds.rounded() { return "\(Int(seconds))s" }
        return String(format: "%.1fs", seconds)
    }

    static func instanceSections(pool: UpstreamPool, settings: UpstreamSettings) -> [AdminSection] {
        let (instances, breaker) = pool.status()
        let breakerText: String = switch breaker {
        case .closed(let failures): "closed (\(failures) failure\(failures == 1 ? "" : "s") in a row)"
        case .open(let left): "open (requests refused for \(adminDuration(left)) more)"
        case .halfOpen: "half-open (the next request is a trial)"
        }
        var figures = [
            AdminFigure("Circuit breaker", breakerText),
            AdminFigure("Instances up", "\(instances.filter { $0.up && $0.ejectedFor == nil }.count) of \(instances.count)"),
            AdminFigure("Balance", settings.balance == .roundRobin ? "round robin" : "fewest requests in flight"),
            AdminFigure("Health checks", settings.health.map { "GET \($0.path) every \(adminDuration($0.interval))" } ?? "none (only failed requests count)"),
            AdminFigure("Ejection", settings.ejectAfter > 0 ? "after \(settings.ejectAfter) failures in a row, for \(adminDuration(settings.ejectFor))" : "off"),
            AdminFigure("Breaker opens", settings.breakAfter > 0 ? "after \(settings.breakAfter) failures in a row, for \(adminDuration(settings.breakFor))" : "never"),
        ]
        if instances.isEmpty { figures.append(AdminFigure("Note", "no instance is configured")) }
        let rows = instances.map { instance in
            let health: String
            if let ejected = instance.ejectedFor {
                health = "ejected (\(adminDuration(ejected)) more)"
            } else {
                health = instance.up ? "healthy" : "unhealthy"
            }
            let lastCheck = instance.lastCheck.map { check in
                UTCTimestamp.format(micros: UTCTimestamp.micros(check.at), fractionDigits: 0) + (check.up ? " (up)" : " (down)")
            } ?? (settings.health == nil ? "not checked" : "not yet")
            return AdminRow([AdminView.redacted(url: instance.base), health, lastCheck, String(instance.checkStreak), String(instance.failuresInARow), String(instance.outstanding)])
        }
        return [
            .figures(title: "Service", figures),
            .table(title: "Instances", columns: ["Instance", "Health", "Last check", "Checks toward a change", "Failures in a row", "In flight"], rows: rows),
        ]
    }
}
