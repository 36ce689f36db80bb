/// What an input's fields must satisfy beyond their types — a range, a length, a pattern, a
/// format, a fixed set of values — written as JSON Schema keywords, so /openapi.json states every
/// constraint the operation enforces.
///
/// A rule documents; the input's ``ValidatableInput/validate()`` enforces. Keep the two on the same
/// constants (``PageQuery/limits`` is both the documented range of `limit` and the checked one), and
/// `.ci/run`'s property-based run of /openapi.json holds them together: a value the document allows
/// but the operation refuses fails it, and so does one the document forbids but the operation takes.
///
/// ```swift
/// extension NearQuery: ValidatableInput {
///     static let fieldRules: [String: FieldRule] = [
///         "lat": .number(-90...90), "lon": .number(-180...180),
///         "radius": .number(1...50_000).described("Metres (default 2,000)."),
///         "limit": PageQuery.limitRule,
///     ]
/// }
/// ```
public struct FieldRule: Sendable, Equatable {
    /// The JSON Schema keywords the rule adds to the field's schema (`minimum`, `maxLength`,
    /// `pattern`, `format`, `enum`, `items`, ...). An `items` object is merged into the items'
    /// own schema rather than replacing it.
    public var keywords: [String: JSONValue]

    public init(keywords: [String: JSONValue]) {
        self.keywords = keywords
    }

    /// The rule with `other`'s keywords added (`other` wins where both set one).
    public func and(_ other: FieldRule) -> FieldRule {
        FieldRule(keywords: Self.merge(keywords, other.keywords))
    }

    /// The rule with a description of the field for the document.
    public func described(_ text: String) -> FieldRule {
        and(FieldRule(keywords: ["description": .string(text)]))
    }

    // MARK: Numbers

    /// An integer from `range.lowerBound` to `range.upperBound`.
    public static func integer(_ range: ClosedRange<Int>) -> FieldRule {
        FieldRule(keywords: ["minimum": .number(Double(range.lowerBound)), "maximum": .number(Double(range.upperBound))])
    }

    /// An integer of at least `minimum` (`1` for a positive id).
    public static func integer(atLeast minimum: Int) -> FieldRule {
        FieldRule(keywords: ["minimum": .number(Double(minimum))])
    }

    /// A number from `range.lowerBound` to `range.upperBound`.
    public static func number(_ range: ClosedRange<Double>) -> FieldRule {
        FieldRule(keywords: ["minimum": .number(range.lowerBound), "maximum": .number(range.upperBound)])
    }

    /// A number above `lowerBound` (not equal to it), and at most `maximum` when given.
    public static func number(above lowerBound: Double, atMost maximum: Double? = nil) -> FieldRule {
        var keywords: [String: JSONValue] = ["exclusiveMinimum": .number(lowerBound)]
        if let maximum { keywords["maximum"] = .number(maximum) }
        return FieldRule(keywords: keywords)
    }

    // MARK: Text

    /// Text of `length` characters (Unicode code points, as JSON Schema counts).
    public static func text(_ length: ClosedRange<Int>) -> FieldRule {
        FieldRule(keywords: ["minLength": .number(Double(length.lowerBound)), "maxLength": .number(Double(length.upperBound))])
    }

    /// Text of at most `maxLength` characters.
    public static func text(maxLength: Int) -> FieldRule {
        FieldRule(keywords: ["maxLength": .number(Double(maxLength))])
    }

    /// Text with at least one character that is not white space, at most `maxLength` long.
    public static func nonBlank(maxLength: Int? = nil) -> FieldRule {
        var keywords: [String: JSONValue] = ["minLength": .number(1), "pattern": .string("\\S")]
        if let maxLength { keywords["maxLength"] = .number(Double(maxLength)) }
        return FieldRule(keywords: keywords)
    }

    /// Text matching an ECMA-262 regular expression (unanchored unless it says `^...$`).
    public static func pattern(_ expression: String) -> FieldRule {
        FieldRule(keywords: ["pattern": .string(expression)])
    }

    /// Text in a JSON Schema format: `date`, `date-time`, `email`, `uri`, ...
    public static func format(_ name: String) -> FieldRule {
        FieldRule(keywords: ["format": .string(name)])
    }

    /// A day, `yyyy-MM-dd`.
    public static let date = FieldRule(keywords: ["format": .string("date"), "pattern": .string("^[0-9]{4}-[0-9]{2}-[0-9]{2}$")])

    /// One of a fixed set of names.
    public static func oneOf(_ names: [String]) -> FieldRule {
        FieldRule(keywords: ["enum": .array(names.map { .string($0) })])
    }

    /// One of a fixed set of integers (the configured cities' ids, say).
    public static func oneOf(_ numbers: [Int]) -> FieldRule {
        FieldRule(keywords: ["enum": .array(numbers.map { .number(Double($0)) })])
    }

    // MARK: Lists

    /// A list of `count` elements, each satisfying `element` when given.
    public static func list(_ count: ClosedRange<Int>, of element: FieldRule? = nil) -> FieldRule {
        var keywords: [String: JSONValue] = ["minItems": .number(Double(count.lowerBound)), "maxItems": .number(Double(count.upperBound))]
        if let element { keywords["items"] = .object(element.keywords) }
        return FieldRule(keywords: keywords)
    }

    /// A list of at most `maxCount` elements, each satisfying `element` when given.
    public static func list(maxCount: Int, of element: FieldRule? = nil) -> FieldRule {
        var keywords: [String: JSONValue] = ["maxItems": .number(Double(maxCount))]
        if let element { keywords["items"] = .object(element.keywords) }
        return FieldRule(keywords: keywords)
    }

    /// A list whose every element satisfies `element`, of any length.
    public static func each(_ element: FieldRule) -> FieldRule {
        FieldRule(keywords: ["items": .object(element.keywords)])
    }

    /// An object with these members required (for ``Route/inputRules``' `body` key, where
    /// one body type serves a create that needs them and an update that does not).
    public static func requiring(_ members: [String]) -> FieldRule {
        FieldRule(keywords: ["required": .array(members.map { .string($0) })])
    }

    /// `base` with `added` merged in: nested objects (such as `items`) merge member by member, and
    /// `required` lists are joined.
    public static func merge(_ base: [String: JSONValue], _ added: [String: JSONValue]) -> [String: JSONValue] {
        var result = base
        for (key, value) in added {
            if case .object(let existing)? = result[key], case .object(let more) = value {
                result[key] = .object(merge(existing, more))
            } else if key == "required", case .array(let existing)? = result[key], case .array(let more) = value {
                result[key] = .array(existing + more.filter { !existing.contains($0) })
            } else {
                result[key] = value
            }
        }
        return result
    }
}

extension KeyedDecodingContainer {
    /// A member that may be left out but, when given, is never null. `decodeIfPresent` also takes
    /// null (and the document says so); a type that documents a body it reads another way uses
    /// this for members whose null the operation refuses.
    public func decodeIfGiven<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        contains(key) ? try decode(type, forKey: key) : nil
    }
}
