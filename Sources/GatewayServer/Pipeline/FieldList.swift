import HTTPTypes

/// A reply's header fields while they are gathered: an array, made into `HTTPFields` once.
struct FieldList {
    /// Room for the fields Hummingbird adds after the responder (`Date`, and `Server` when one is
    /// configured): without it, adding one copies the whole list into a larger one.
    static let addedLater = 2
    private(set) var fields: [HTTPField] = []

    /// Room for `capacity` fields and for those Hummingbird adds later.
    init(capacity: Int) {
        fields.reserveCapacity(capacity + Self.addedLater)
    }

    mutating func append(_ field: HTTPField) {
        fields.append(field)
    }

    mutating func append(contentsOf more: [HTTPField]) {
        fields.append(contentsOf: more)
    }

    /// Puts `field` before every other.
    mutating func prepend(_ field: HTTPField) {
        fields.insert(field, at: 0)
    }

    /// The value of the first field named `name`. Setting one, as `HTTPFields` does, leaves a single
    /// field of the name (in the place of the first; appended when there was none), and nil removes
    /// them all.
    subscript(name: HTTPField.Name) -> String? {
        get { fields.first { $0.name == name }?.value }
        set {
            guard let first = fields.firstIndex(where: { $0.name == name }) else {
                if let newValue { fields.append(HTTPField(name: name, value: newValue)) }
                return
            }
            if let newValue {
                fields[first] = HTTPField(name: name, value: newValue)
                var index = first + 1
                while index < fields.count { if fields[index].name == name { fields.remove(at: index) } else { index += 1 } }
            } else {
                fields.removeAll { $0.name == name }
            }
        }
    }

    /// The fields as `HTTPFields`, with room for those Hummingbird adds. Appended one by one: with
    /// swift-http-types 1.8 this costs about two thirds of what copying a list of placeholders and
    /// setting each position did (measured over a reply's ten fields), and it is plain.
    var httpFields: HTTPFields {
        var result = HTTPFields()
        result.reserveCapacity(fields.count + Self.addedLater)
        for field in fields { result.append(field) }
        return result
    }
}
