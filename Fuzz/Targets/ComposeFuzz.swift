import Foundation
import GatewayCore
import HTTPTypes
import NIOCore
@testable import GatewayServer

/// Composite templates: a composite's settings (JSON, as the configuration gives them) checked and
/// compiled, then every template filled from a request (path parameter, query string, JSON body)
/// and from steps' replies, as a call of the composite does.
enum ComposeFuzz {
    /// Four lines: the settings, the request's body, its query string, a path parameter's value.
    static let template: FuzzTargets.Target = { bytes in
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
        let settingsText = lines[0]
        let body = lines.count > 1 ? try? JSONValue.parse(lines[1]) : nil
        let query = lines.count > 2 ? (try? PercentDecoding.queryParameters(lines[2][...])) ?? [] : []
        let parameter = lines.count > 3 ? lines[3] : ""
        _ = CompositeReference.problem(in: settingsText)
        _ = CompositeReference.parts(of: settingsText)
        guard let settings = try? JSONDecoder().decode(CompositeSettings.self, from: Data(settingsText.utf8)) else { return }
        let composite = CompiledComposite(settings)
        var environment = CompositeService.Environment(path: Dictionary(Route.parameterNames(in: settings.path).map { ($0, parameter) }, uniquingKeysWith: { first, _ in first }),
                                                      query: query, body: body)
        for name in composite.order {
            environment.values[name] = body ?? .string(parameter)
            environment.outcomes[name] = CallOutcome(status: 200, headers: [:], body: ByteBuffer(string: lines.count > 1 ? lines[1] : ""))
        }
        for name in composite.order {
            guard let step = composite.steps[name] else { continue }
            _ = step.input.evaluate(environment)
            _ = step.path.text(environment, encoded: true)
            _ = step.body?.evaluate(environment)
        }
        _ = composite.reply?.evaluate(environment)
    }
}
