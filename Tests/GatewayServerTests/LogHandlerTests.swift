import Foundation
import GatewayServer
import Logging
import Synchronization
import Testing

/// Lines collected from several threads (log lines, names of things that happened), in order.
final class Lines: Sendable {
    let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite("log lines")
struct LogHandlerTests {
    @Test("lines read as StreamLogHandler's: time, level, label, sorted metadata (set, provided, per line, error), source, message")
    func format() throws {
        let lines = Lines()
        let provider = Logger.MetadataProvider { ["trace": "t1"] }
        var logger = Logger(label: "gateway") { label in GatewayLogHandler(label: label, metadataProvider: provider) { lines.append($0) } }
        logger.logLevel = .info
        logger[metadataKey: "request.id"] = "abc"
        logger[metadataKey: "a"] = "first"
        logger.debug("not written")
        logger.info("served", metadata: ["a": "override", "micros": "12"])
        struct Failure: Error {}
        logger.error("failed", error: Failure())
        logger[metadataKey: "request.id"] = nil
        logger.warning("plain")
        #expect(logger[metadataKey: "a"] == "first")
        let written = lines.all
        try #require(written.count == 3)
        let first = try #require(written[0].firstMatch(of: /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}) info gateway: (.*) \[(\w+)\] served\n$/))
        #expect(first.output.2 == "a=override micros=12 request.id=abc trace=t1")
        #expect(first.output.3 == "GatewayServerTests")
        #expect(written[1].contains(" error gateway: a=first error.message=Failure() error.type=GatewayServerTests.LogHandlerTests.(unknown context at "))
        #expect(written[1].hasSuffix("] failed\n"))
        #expect(written[2].hasSuffix(" warning gateway: a=first trace=t1 [GatewayServerTests] plain\n"))
    }

    @Test("logFormat json: one JSON object per line, fixed members first, metadata as members, a clashing key kept under metadata.")
    func jsonLines() throws {
        let lines = Lines()
        var logger = Logger(label: "gateway") { label in GatewayLogHandler(label: label, format: .json) { lines.append($0) } }
        logger.logLevel = .info
        logger[metadataKey: "request.id"] = "abc"
        logger.info("served \"quoted\"\nline", metadata: ["micros": .stringConvertible(12), "message": "clash",
                                                          "tags": ["a", "b"], "nested": ["k": "v"]])
        struct Failure: Error {}
        logger.error("failed", error: Failure())
        let written = lines.all
        try #require(written.count == 2)
        #expect(written.allSatisfy { $0.hasSuffix("}\n") && $0.filter { $0 == "\n" }.count == 1 })
        let first = try #require(try JSONSerialization.jsonObject(with: Data(written[0].utf8)) as? [String: Any])
        #expect(first["level"] as? String == "info")
        #expect(first["logger"] as? String == "gateway")
        #expect(first["message"] as? String == "served \"quoted\"\nline")
        #expect(first["metadata.message"] as? String == "clash")
        #expect(first["request.id"] as? String == "abc")
        #expect(first["micros"] as? String == "12")
        #expect(first["tags"] as? [String] == ["a", "b"])
        #expect((first["nested"] as? [String: String])?["k"] == "v")
        let time = try #require(first["time"] as? String)
        #expect(time.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z/) != nil)
        #expect(written[0].hasPrefix(#"{"time":"#), "the fixed members lead")
        let second = try #require(try JSONSerialization.jsonObject(with: Data(written[1].utf8)) as? [String: Any])
        #expect(second["error.message"] as? String == "Failure()")
    }

    @Test("server.logFormat is text or json; anything else is an error at its line")
    func logFormatSetting() throws {
        #expect(try GatewayConfiguration.parse(Data("server:\n  logFormat: json\n".utf8), file: "plugins.yaml", knownPlugins: []).server.logFormat == .json)
        #expect(try GatewayConfiguration.parse(Data("server: {}\n".utf8), file: "plugins.yaml", knownPlugins: []).server.logFormat == .text)
        #expect(throws: ConfigurationFileError.self) {
            try GatewayConfiguration.parse(Data("server:\n  logFormat: xml\n".utf8), file: "plugins.yaml", knownPlugins: [])
        }
    }

    @Test("a handler fits a logger's inline storage, and the server's own per-request id is not kept")
    func compact() {
        // Three words: an existential's inline buffer. Larger, every logger copy that sets a key
        // (the server does so per request) would allocate a box.
        #expect(MemoryLayout<GatewayLogHandler>.size <= 3 * MemoryLayout<Int>.size)
        let lines = Lines()
        var logger = Logger(label: "x") { label in GatewayLogHandler(label: label) { lines.append($0) } }
        logger[metadataKey: "hb.request.id"] = "42"
        logger[metadataKey: "request.id"] = "abc"
        var copy = logger
        copy.logLevel = .error
        copy[metadataKey: "only"] = "copy"
        logger.info("kept")
        copy.info("dropped")
        copy.error("copied")
        #expect(logger[metadataKey: "hb.request.id"] == nil)
        #expect(lines.all.count == 2)
        #expect(lines.all.first?.hasSuffix(" info x: request.id=abc [GatewayServerTests] kept\n") == true)
        #expect(lines.all.last?.hasSuffix(" error x: only=copy request.id=abc [GatewayServerTests] copied\n") == true)
    }

    @Test("with no metadata at all, the line has none")
    func bare() {
        let lines = Lines()
        let logger = Logger(label: "x") { label in GatewayLogHandler(label: label) { lines.append($0) } }
        logger.info("hello")
        #expect(lines.all.count == 1)
        #expect(lines.all.first?.hasSuffix(" info x: [GatewayServerTests] hello\n") == true)
    }
}
