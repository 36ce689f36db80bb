@testable import GatewayServer
import HTTPTypes
import Testing

@Suite("reply fields")
struct FieldListTests {
    @Test("fields gathered in a list end as HTTPFields with the same order and setting rules")
    func matchesHTTPFields() {
        let tag = HTTPField.Name("X-Tag")!
        var list = FieldList(capacity: 4)
        var fields = HTTPFields()
        for field in [HTTPField(name: .contentType, value: "a"), HTTPField(name: tag, value: "1"), HTTPField(name: .eTag, value: "\"e\""),
                      HTTPField(name: tag, value: "2")] {
            list.append(field)
            fields.append(field)
        }
        #expect(list.httpFields == fields)
        #expect(list[.eTag] == "\"e\"" && list[.cacheControl] == nil)
        // Setting a name held twice leaves one field, in the first one's place.
        list[tag] = "3"
        fields[tag] = "3"
        #expect(list.httpFields == fields)
        #expect(list.fields.map(\.name.canonicalName) == ["content-type", "x-tag", "etag"])
        // A new name is appended; nil removes.
        list[.cacheControl] = "no-cache"
        fields[.cacheControl] = "no-cache"
        list[.contentType] = nil
        fields[.contentType] = nil
        #expect(list.httpFields == fields)
        list.append(contentsOf: [HTTPField(name: tag, value: "4"), HTTPField(name: tag, value: "5")])
        list[tag] = nil
        #expect(list.fields.map(\.name.canonicalName) == ["etag", "cache-control"])
    }

    @Test("every count of fields keeps its fields in order and nothing else", arguments: [0, 1, 2, 12, 31, 32, 41])
    func everyCount(count: Int) {
        var list = FieldList(capacity: count)
        for index in 0..<count { list.append(HTTPField(name: HTTPField.Name("X-Field-\(index % 5)")!, value: "value \(index)")) }
        do {
            let convert = { (list: FieldList) in list.httpFields }
            var first = convert(list)
            #expect(first == list.fields)
            // What Hummingbird adds afterwards leaves the list as it was.
            first[.date] = "Sun, 22 Nov 2026 12:00:00 GMT"
            first[.contentType] = "text/plain"
            #expect(first.count == count + 2 && first[.date] != nil)
            #expect(convert(list) == list.fields)
            #expect(convert(list)[.date] == nil)
        }
    }
}
