import Foundation
import GatewayServer
import GatewayTesting
import NIOCore
import NIOHTTP1
import Testing

/// An iCalendar import is text from outside (`POST /v1/events/import`, for an administrator or a
/// user granted `events:write`): the time zones it defines itself (`VTIMEZONE`) must not cost more
/// than their bounds, whatever they claim — a rule with an onset every second for 68 years, an
/// observance list without end, an RDATE list of thousands.
@Suite("security: hostile time zones in an iCalendar import")
struct CalendarAttackTests {
    static func zone(_ id: String, _ lines: [String]) -> String {
        (["BEGIN:VTIMEZONE", "TZID:\(id)"] + lines + ["END:VTIMEZONE"]).joined(separator: "\r\n") + "\r\n"
    }

    static func observance(_ start: String, _ extra: [String] = []) -> [String] {
        ["BEGIN:STANDARD", "DTSTART:\(start)", "TZOFFSETFROM:+0100", "TZOFFSETTO:+0100"] + extra + ["END:STANDARD"]
    }

    static var calendar: String {
        let busy = zone("Busy", observance("19700101T000000", ["RRULE:FREQ=SECONDLY"]))
        let many = zone("Many", (0..<1_000).flatMap { observance(String(format: "19%02d0101T000000", 70 + $0 % 30)) })
        let dates = (0..<4_000).map { String(format: "%04d0101T000000", 1970 + $0 % 60) }.joined(separator: ",")
        let rdates = zone("Dates", observance("19700101T000000", ["RDATE:" + dates]))
        var events = ""
        for (index, id) in (0..<30).map({ ["Busy", "Many", "Dates"][$0 % 3] }).enumerated() {
            events += "BEGIN:VEVENT\r\nUID:zone-\(index)@attack\r\nDTSTART;TZID=\(id):20261201T100000\r\nSUMMARY:Zone \(index)\r\nEND:VEVENT\r\n"
        }
        return "BEGIN:VCALENDAR\r\nVERSION:2.0\r\n" + busy + many + rdates + events + "END:VCALENDAR\r\n"
    }

    @Test("an import whose VTIMEZONEs claim endless onsets, observances and dates is read within its bounds: the events are imported, the zones reported",
          arguments: securityStorages)
    func hostileZones(storage: TestStorage) async throws {
        try await ShippedGateway.with(storage: storage, limits: false) { gateway in
            let admin = try await gateway.administrator("root")
            let body = Self.calendar
            let start = ContinuousClock.now
            let reply = try await gateway.send(.POST, "/v1/events/import", bearer: admin.token, type: "text/calendar", body: body,
                                         timeout: .seconds(180))
            let took = ContinuousClock.now - start
            print("hostile VTIMEZONEs: \(body.utf8.count) bytes imported in \(took)")
            #expect(reply.status == 200, "\(reply.status) \(reply.body.prefix(300))")
            #expect(reply.json?["imported"] as? Int == 30, "\(reply.body.prefix(300))")
            let reasons = (reply.json?["rejected"] as? [[String: Any]] ?? []).compactMap { $0["reason"] as? String }
            #expect(reasons.contains { $0.contains("RRULE must be FREQ=YEARLY") }, "\(reasons.prefix(5))")
            // Each refusal is reported once, not once for every observance it skips.
            #expect(reasons.filter { $0.contains("more than 20 observances") }.count == 1, "\(reasons.prefix(5))")
            #expect(reasons.count < 10, "\(reasons.count) rejections for three zones")
            // Bounded work, not a hang: 0.1 s alone here, up to 20 s beside the whole suite on two
            // cores; expanding the SECONDLY rule would take hours.
            #expect(took < .seconds(180), "the import took \(took)")
            #expect(try await gateway.send(.GET, "/healthz").status == 200)
        }
    }
}
