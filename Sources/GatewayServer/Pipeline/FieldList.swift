import HTTPTypes

/// A reply's header fields while they are gathered: an array, made into `HTTPFields` once.
///
/// `HTTPFields` has no specialized way in for a field from outside its module: `append` (and
/// `append(contentsOf:)`, and the initializer from a sequence) go through its generic, unspecialized
/// `replaceSubrange`, which boxes every field in a heap allocation of its own. So ``httpFields``
/// starts from a list of that many placeholder fields (copied from ``templates``) and sets each
/// position through the public, inlinable position subscript.
struct FieldList {
    /// For each count below its size, that many placeholder fields.
    static let templates: [HTTPFields] = (0..<32).map { count in
        HTTPFields(repeatElement(HTTPField(name: placeholderName, value: ""), count: count))
    }
    private static let placeholderName = HTTPField.Name("x-placeholder")!
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

    /// The fields as `HTTPFields`: a list of that many placeholder fields, each position then set
    /// (through the public position subscript, which is inlinable: no field is boxed).
    var httpFields: HTTPFields {
        let templates = Self.templates
        guard fields.count < templates.count else {
            var result = HTTPFields()
            result.reserveCapacity(fields.count + Self.addedLater)
            result.append(contentsOf: fields)
            return result
        }
        var result = templates[fields.count]
        // A list of its own, with room to spare; then each placeholder is replaced.
        result.reserveCapacity(fields.count + Self.addedLater)
        for index in fields.indices { result[index] = fields[index] }
        return result
    }
}
