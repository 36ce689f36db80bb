import Foundation
import Hummingbird

// The framework's ceiling: a bare Hummingbird hello-world, built from the same package and
// settings as the gateway, so the benchmark's ratio isolates the gateway's own cost.
var port = 8081
if let index = CommandLine.arguments.firstIndex(of: "--port"), index + 1 < CommandLine.arguments.count, let value = Int(CommandLine.arguments[index + 1]) {
    port = value
}
let router = Router()
router.get("/") { _, _ in "Hello, world!" }
let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)))
try await app.runService()
