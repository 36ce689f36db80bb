import Foundation
import GatewayCore

/// A page of event summaries, `{"items": [...], "nextCursor": ...}` like ``Page``, that writes its
/// own JSON: lists are the plugin's hottest replies (every scroll of the old app's table, every
/// keystroke of a search box), and writing fifty events with their showings and venues through
/// `Encodable` was an eighth of a list's work. What it writes is what its `Encodable` shape
/// encodes (a test holds the two together).
struct EventPage: Encodable, Sendable, JSONWritable, PagedOutput {
    var items: [EventSummary]
    var nextCursor: String?

    init(_ page: Page<EventSummary>) {
        items = page.items
        nextCursor = page.nextCursor
    }

    private enum Key: String, CodingKey { case items, nextCursor }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(items, forKey: .items)
        try container.encode(nextCursor, forKey: .nextCursor)
    }

    func writeJSON(into bytes: inout [UInt8]) {
        bytes.reserveCapacity(bytes.count + 64 + items.count * 400)
        JSONValue.write(literal: #"{"items":["#, into: &bytes)
        for (index, item) in items.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            item.writeJSON(into: &bytes)
        }
        JSONValue.write(literal: #"],"nextCursor":"#, into: &bytes)
        if let nextCursor { JSONValue.write(string: nextCursor, into: &bytes) } else { JSONValue.write(literal: "null", into: &bytes) }
        bytes.append(UInt8(ascii: "}"))
    }
}

/// Members written in declaration order, optional ones left out when nil: what `Encodable`'s
/// synthesized conformance and the gateway's encoder produce.
private struct ObjectWriter {
    var bytes: [UInt8]
    var first = true

    init(into bytes: inout [UInt8]) {
        self.bytes = []
        swap(&self.bytes, &bytes)
        self.bytes.append(UInt8(ascii: "{"))
    }

    mutating func key(_ name: StaticString) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "\""))
        JSONValue.write(literal: name, into: &bytes)
        JSONValue.write(literal: "\":", into: &bytes)
    }

    mutating func string(_ name: StaticString, _ value: String?) {
        guard let value else { return }
        key(name)
        JSONValue.write(string: value, into: &bytes)
    }

    mutating func int(_ name: StaticString, _ value: Int64?) {
        guard let value else { return }
        key(name)
        JSONValue.write(int64: value, into: &bytes)
    }

    mutating func number(_ name: StaticString, _ value: Double?) {
        guard let value else { return }
        key(name)
        JSONValue.write(number: value, into: &bytes)
    }

    mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        JSONValue.write(literal: value ? "true" : "false", into: &bytes)
    }

    mutating func date(_ name: StaticString, _ value: Date) {
        key(name)
        JSONValue.write(string: UTCTimestamp.format(value), into: &bytes)
    }

    mutating func finish(into bytes: inout [UInt8]) {
        self.bytes.append(UInt8(ascii: "}"))
        swap(&self.bytes, &bytes)
    }
}

extension EventSummary: JSONWritable {
    public func writeJSON(into bytes: inout [UInt8]) {
        var object = ObjectWriter(into: &bytes)
        object.int("id", id)
        object.string("title", title)
        object.string("imageURL", imageURL)
        object.int("city", city.map(Int64.init))
        object.key("categories")
        object.bytes.append(UInt8(ascii: "["))
        for (index, category) in categories.enumerated() {
            if index > 0 { object.bytes.append(UInt8(ascii: ",")) }
            JSONValue.write(int64: Int64(category), into: &object.bytes)
        }
        object.bytes.append(UInt8(ascii: "]"))
        object.string("status", status.rawValue)
        object.number("distance", distance)
        object.key("showings")
        object.bytes.append(UInt8(ascii: "["))
        for (index, showing) in showings.enumerated() {
            if index > 0 { object.bytes.append(UInt8(ascii: ",")) }
            showing.writeJSON(into: &object.bytes)
        }
        object.bytes.append(UInt8(ascii: "]"))
        object.finish(into: &bytes)
    }
}

extension Showing: JSONWritable {
    public func writeJSON(into bytes: inout [UInt8]) {
        var object = ObjectWriter(into: &bytes)
        object.int("id", id)
        object.int("event", event)
        object.date("start", start)
        object.date("end", end)
        object.bool("allDay", allDay)
        if let venue {
            object.key("venue")
            venue.writeJSON(into: &object.bytes)
        }
        object.string("priceText", priceText)
        object.bool("isFree", isFree)
        object.int("capacity", capacity.map(Int64.init))
        object.int("seatsRemaining", seatsRemaining.map(Int64.init))
        object.finish(into: &bytes)
    }
}

extension Venue: JSONWritable {
    public func writeJSON(into bytes: inout [UInt8]) {
        var object = ObjectWriter(into: &bytes)
        object.int("id", id)
        object.string("name", name)
        object.string("address", address)
        object.int("city", city.map(Int64.init))
        object.number("lat", lat)
        object.number("lon", lon)
        object.string("owner", owner)
        object.finish(into: &bytes)
    }
}
