import Foundation
import GatewayCore
import Synchronization

/// What a reload of plugins.yaml did.
public struct ReloadReport: Sendable, Codable, Equatable {
    public enum Status: String, Sendable, Codable, CaseIterable {
        /// The file differed and its live settings now serve.
        case applied
        /// Nothing the gateway can change live differed.
        case unchanged
        /// The file cannot be used: the running configuration stays whole.
        case refused
    }

    public var status: Status
    /// What now serves differently, by key path: `plugins.weather (added)`, `limits`, `composites.trip (changed)`.
    public var changes: [String]
    /// Settings that differ from the running ones and take effect only when the gateway restarts.
    public var restartNeeded: [String]
    /// Why the file was refused, located (`plugins.yaml:4:13: limits.user: ...`).
    public var error: String?

    public init(status: Status, changes: [String], restartNeeded: [String], error: String? = nil) {
        self.status = status
        self.changes = changes
        self.restartNeeded = restartNeeded
        self.error = error
    }

    static func refused(_ error: String) -> ReloadReport {
        ReloadReport(status: .refused, changes: [], restartNeeded: [], error: error)
    }

    /// One line for logs and the command line.
    public var summary: String {
        switch status {
        case .refused:
            return "refused, the running configuration stays: \(error ?? "")"
        case .unchanged, .applied:
            var text = status == .applied ? "applied: \(changes.joined(separator: ", "))" : "nothing to change live"
            if !restartNeeded.isEmpty { text += "; needs a restart: \(restartNeeded.joined(separator: ", "))" }
            return text
        }
    }
}

/// How a configuration read again becomes the running one: what changes live, and what keeps
/// its running value until a restart (storage, listeners, accounts, the plugins that are not
/// instances of a type serving ids of the file's choice).
struct ReloadPlan {
    /// The configuration to serve: the file's, with every setting that needs a restart kept as it runs.
    var effective: GatewayConfiguration
    var changes: [String] = []
    var restartNeeded: [String] = []

    /// `replaceable` says whether a plugins.yaml entry can be created, replaced and removed live.
    init(running old: GatewayConfiguration, read new: GatewayConfiguration, replaceable: (PluginSettings, String) -> Bool) {
        effective = new
        func keep<Value: Equatable>(_ path: String, _ keyPath: WritableKeyPath<GatewayConfiguration, Value>) {
            guard old[keyPath: keyPath] != new[keyPath: keyPath] else { return }
            restartNeeded.append(path)
            effective[keyPath: keyPath] = old[keyPath: keyPath]
        }
        keep("storage", \.storage)
        keep("database", \.database)
        keep("server.host", \.server.host)
        keep("server.port", \.server.port)
        keep("server.tls", \.server.tls)
        keep("server.admin", \.server.admin)
        keep("server.socketListeners", \.server.socketListeners)
        keep("server.logFormat", \.server.logFormat)
        keep("server.publicURL", \.server.publicURL)
        keep("server.tracing", \.server.tracing)
        keep("server.timeouts", \.server.timeouts)
        keep("server.maxConnections", \.server.maxConnections)
        keep("server.maxConnectionsPerAddress", \.server.maxConnectionsPerAddress)
        keep("auth", \.auth)
        keep("mail", \.mail)
        keep("cache.maxEntries", \.cache.maxEntries)
        keep("cache.maxBytes", \.cache.maxBytes)
        keep("limits.policy", \.limits.policy)
        keep("demo", \.demo)

        func live<Value: Equatable>(_ path: String, _ keyPath: KeyPath<GatewayConfiguration, Value>) {
            if old[keyPath: keyPath] != effective[keyPath: keyPath] { changes.append(path) }
        }
        live("server.maxBodySize", \.server.maxBodySize)
        live("server.cors", \.server.cors)
        live("server.accessLog", \.server.accessLog)
        live("server.trustedProxies", \.server.trustedProxies)
        live("server.publicMetrics", \.server.publicMetrics)
        live("server.compression", \.server.compression)
        live("limits", \.limits)
        live("batch", \.batch)

        for id in Set(old.plugins.keys).union(new.plugins.keys).sorted() {
            let before = old.plugins[id]
            let after = new.plugins[id]
            guard before != after else { continue }
            let wasOn = before?.enabled == true
            let isOn = after?.enabled == true
            guard wasOn || isOn else { continue }
            if (before.map { replaceable($0, id) } ?? true) && (after.map { replaceable($0, id) } ?? true) {
                changes.append("plugins.\(id) (\(!wasOn ? "added" : (!isOn ? "removed" : "changed")))")
                continue
            }
            // A plugin of its own id: whether it runs and how it is configured need a restart;
            // where it is mounted, its limits and its caching change live.
            guard wasOn == isOn, let before, let after else {
                restartNeeded.append("plugins.\(id).enabled")
                effective.plugins[id] = before
                continue
            }
            var kept = after
            if before.type != after.type || before.config != after.config {
                restartNeeded.append("plugins.\(id).config")
                kept.type = before.type
                kept.config = before.config
            }
            effective.plugins[id] = kept
            for (name, differs) in [("mount", before.mount != kept.mount), ("dialectMount", before.dialectMount != kept.dialectMount),
                                    ("limits", before.limits != kept.limits), ("cache", before.cache != kept.cache)] where differs {
                changes.append("plugins.\(id).\(name)")
            }
        }

        for name in Set(old.composites.keys).union(new.composites.keys).sorted() where old.composites[name] != new.composites[name] {
            changes.append("composites.\(name) (\(old.composites[name] == nil ? "added" : (new.composites[name] == nil ? "removed" : "changed")))")
        }
    }
}

/// Runs reloads one after another: a second waits for the first rather than interleaving with it.
actor ReloadQueue {
    private var tail: Task<Void, Never>?

    func run<T: Sendable>(_ work: @escaping @Sendable () async -> T) async -> T {
        let previous = tail
        let task = Task {
            await previous?.value
            return await work()
        }
        tail = Task { _ = await task.value }
        return await task.value
    }
}

/// Reaches the gateway's reload from the parts built before the gateway itself (the admin
/// operation and the admin listener).
final class ReloadHandle: Sendable {
    private let action = Mutex<StoredClosure<@Sendable () async -> ReloadReport>?>(nil)

    func attach(_ reload: @escaping @Sendable () async -> ReloadReport) {
        action.withLock { $0 = StoredClosure(reload) }
    }

    func reload() async -> ReloadReport {
        guard let reload = action.withLock({ $0 }) else { return .refused("The gateway is starting.") }
        return await reload.call()
    }
}
