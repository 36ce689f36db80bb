import Foundation
import GatewayCore
import NIOCore
import Synchronization

/// Suggestions from another KKBOX-format service (`GET <url>?query=` → `keyword<TAB>text` lines),
/// merged with the local ones in upstream mode.
///
/// Guarantees: a call never takes longer than the timeout; after `failureThreshold` failures in a
/// row the circuit opens and the service is left alone for `cooldown` (then one trial call decides);
/// while it is down, the last good answer for the same query is served; replies are parsed as the
/// old client did — split on `\n`, split each line on tabs, skip lines without one, keyword before
/// the first tab, text after it.
final class UpstreamSuggestions: Sendable {
    struct Settings: Sendable {
        var url: String
        var timeout: Duration
        var failureThreshold: Int
        var cooldown: Duration
    }

    /// The circuit breaker's view of the service.
    enum Circuit: Sendable, Equatable {
        case closed
        case open(until: Date)
        case halfOpen
    }

    private struct State {
        var consecutiveFailures = 0
        var circuit = Circuit.closed
        /// Last good answers by normalized query, oldest first when evicting.
        var lastGood: [String: [(keyword: String, text: String)]] = [:]
        var order: [String] = []
    }

    static let maximumRemembered = 10_000
    static let maximumBody = 256 * 1024

    let settings: Settings
    private let http: any UpstreamHTTPClient
    private let clock: any WallClock
    private let state = Mutex(State())

    init(settings: Settings, http: any UpstreamHTTPClient, clock: any WallClock) {
        self.settings = settings
        self.http = http
        self.clock = clock
    }

    var circuit: Circuit { state.withLock { $0.circuit } }

    /// The service's suggestions for `query`: fresh when it answers, otherwise the last good
    /// answer for the same query (or none).
    func suggestions(for query: String) async -> [(keyword: String, text: String)] {
        let key = SuggestNormalizer.normalize(query)
        guard !key.isEmpty else { return [] }
        let now = clock.now()
        let mayCall = state.withLock { state -> Bool in
            switch state.circuit {
            case .closed: return true
            case .halfOpen: return false  // a trial call is under way
            case .open(let until):
                guard now >= until else { return false }
                state.circuit = .halfOpen
                return true
            }
        }
        guard mayCall else { return remembered(key) }
        do {
            let lines = try await fetch(query)
            state.withLock { state in
                state.consecutiveFailures = 0
                state.circuit = .closed
                if state.lastGood.updateValue(lines, forKey: key) == nil {
                    state.order.append(key)
                    if state.order.count > Self.maximumRemembered {
                        state.lastGood[state.order.removeFirst()] = nil
                    }
                }
            }
            return lines
        } catch {
            state.withLock { state in
                state.consecutiveFailures += 1
                if state.circuit == .halfOpen || state.consecutiveFailures >= settings.failureThreshold {
                    state.circuit = .open(until: clock.now().addingTimeInterval(Self.seconds(settings.cooldown)))
                }
            }
            return remembered(key)
        }
    }

    private func remembered(_ key: String) -> [(keyword: String, text: String)] {
        state.withLock { $0.lastGood[key] ?? [] }
    }

    private func fetch(_ query: String) async throws -> [(keyword: String, text: String)] {
        let trimmed = query.trimmingCharacters(in: .whitespacesAndNewlines)
        let encoded = trimmed.addingPercentEncoding(withAllowedCharacters: Self.queryValueCharacters) ?? ""
        let separator = settings.url.contains("?") ? "&" : "?"
        let request = UpstreamRequest(url: settings.url + separator + "query=" + encoded, timeout: settings.timeout)
        let response = try await http.send(request, maxBodySize: Self.maximumBody)
        guard response.status.kind == .successful else {
            throw GatewayError.badGateway("The upstream suggestion service answered \(response.status.code).")
        }
        return Self.parse(String(decoding: response.body.readableBytesView, as: UTF8.self))
    }

    /// The old client's parsing: lines split on `\n` (bytes: a `\r\n` is not one character here);
    /// a line without a tab is skipped; the keyword is the part before the first tab, the text the
    /// part after it (up to a second tab), without a trailing `\r`.
    static func parse(_ body: String) -> [(keyword: String, text: String)] {
        body.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).compactMap { line in
            let parts = line.split(separator: UInt8(ascii: "\t"), omittingEmptySubsequences: false)
            guard parts.count >= 2 else { return nil }
            var text = parts[1]
            if text.last == UInt8(ascii: "\r") { text = text.dropLast() }
            return (String(decoding: parts[0], as: UTF8.self), String(decoding: text, as: UTF8.self))
        }
    }

    /// Unreserved characters (RFC 3986): everything else in the query value is percent-encoded.
    static let queryValueCharacters = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
