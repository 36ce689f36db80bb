import HTTPTypes

/// A reply's header fields while they are gathered, kept as the `HTTPFields` the reply is sent
/// with: each field is copied into them once. (Gathering them in an array and appending each to
/// `HTTPFields` at the end copied every field twice more, with a retain of each of its strings per
/// copy, about a fifth of the retains of a small reply.)
struct FieldList {
    /// Room for the fields Hummingbird adds after the responder (`Date`, and `Server` when one is
    /// configured): without it, adding one copies the whole list into a larger one.
    static let addedLater = 2
    private(set) var httpFields = HTTPFields()

    /// Room for `capacity` fields and for those Hummingbird adds later.
    init(capacity: Int) {
        httpFields.reserveCapacity(capacity + Self.addedLater)
    }

    /// The fields, in order.
    var fields: HTTPFields { httpFields }

    mutating func append(_ field: HTTPField) {
        httpFields.append(field)
    }

    mutating func append(contentsOf more: [HTTPField]) {
        for field in more { httpFields.append(field) }
    }

    /// The value of the first field named `name`. Setting one, as `HTTPFields` does, leaves a single
    /// field of the name (in the place of the first; appended when there was none), and nil removes
    /// them all.
    subscript(name: HTTPField.Name) -> String? {
        get { httpFields.first { $0.name == name }?.value }
        set {
            guard let first = httpFields.firstIndex(where: { $0.name == name }) else {
                if let newValue { httpFields.append(HTTPField(name: name, value: newValue)) }
                return
            }
            if let newValue {
                httpFields[first] = HTTPField(name: name, value: newValue)
                var index = first + 1
                while index < httpFields.count { if httpFields[index].name == name { httpFields.remove(at: index) } else { index += 1 } }
            } else {
                httpFields.removeAll { $0.name == name }
            }
        }
    }
}
