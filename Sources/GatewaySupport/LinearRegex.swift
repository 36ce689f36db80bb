import Synchronization

/// A regular expression matched in time linear in the value's length, whatever the pattern: the
/// engine behind SQLite's `REGEXP` in the gateway, and the check that plugins run on a pattern a
/// client sends before it reaches a database.
///
/// A backtracking engine (ICU, PCRE) can take time exponential in the value's length on patterns
/// such as `a?a?a?…aaa…`; this one compiles the pattern to a Thompson automaton (one instruction
/// per character, class or branch) and runs it as a DFA built lazily from it, one set of
/// instruction positions per state, so every character of the value costs at most one pass over
/// the program (and usually one table lookup). Only whether the pattern matches somewhere is
/// answered: there are no captures, and lazy quantifiers match what greedy ones do.
///
/// The syntax is the one ICU reads for this subset: literal characters; classes `[...]` and
/// `[^...]` with ranges; `\t` `\n` `\r` `\f` `\v`, `\uhhhh`, and a backslash before ASCII
/// punctuation, a symbol or a space for that character (inside classes too); `^` (the start of the
/// value) and `\z` (its end); `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}` and their lazy forms (`*?`);
/// `|`; groups `(...)` and `(?:...)`; and a leading `(?i)`, which folds ASCII letters (only). The
/// search is unanchored unless the pattern says otherwise. Anything else is refused.
///
/// Counted repetitions are written out (`a{3,5}` is `aaaa?a?`), so the program's size, not the
/// pattern's length, is what a match costs: a pattern whose program would exceed
/// ``maximumProgramSize`` instructions is refused (``Failure/tooLarge(instructions:)``).
public final class LinearRegex: Sendable {
    /// The most instructions a program may have: a match costs at most this much work per
    /// character of the value.
    public static let maximumProgramSize = 1_000
    /// The largest count a repetition may give (`{n}`, `{n,m}`).
    public static let maximumCount = 1_000

    /// Why a pattern is refused.
    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// Not in the syntax above; the message says where.
        case syntax(String)
        /// Its program would have more than ``maximumProgramSize`` instructions.
        case tooLarge(instructions: Int)

        public var description: String {
            switch self {
            case .syntax(let message): message
            case .tooLarge(let instructions):
                "the pattern expands to about \(instructions) steps (repetitions are written out), more than \(LinearRegex.maximumProgramSize)"
            }
        }
    }

    /// The pattern as given.
    public let pattern: String
    let program: Program
    /// DFAs over the program, each used by one match at a time (taken out while it runs).
    private let idle = Mutex<[LazyDFA]>([])

    /// Compiles `pattern`; throws ``Failure`` when it is outside the syntax or too large.
    public init(_ pattern: String) throws(Failure) {
        self.pattern = pattern
        var parser = Parser(Array(pattern.unicodeScalars))
        let node = try parser.parse()
        let size = node.size
        guard size + 1 <= Self.maximumProgramSize else { throw .tooLarge(instructions: size + 1) }
        program = Program(node)
    }

    /// How many instructions the program has.
    public var programSize: Int { program.instructions.count }

    /// Whether the pattern matches somewhere in `value`.
    public func matches(_ value: String) -> Bool {
        withDFA { $0.matches(value.unicodeScalars) }
    }

    /// Whether the pattern matches somewhere in the UTF-8 text `bytes` (ill-formed sequences read
    /// as U+FFFD).
    public func matches(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        withDFA { $0.matches(UTF8Scalars(bytes)) }
    }

    private func withDFA(_ body: (LazyDFA) -> Bool) -> Bool {
        let dfa = idle.withLock { $0.popLast() } ?? LazyDFA(program)
        let result = body(dfa)
        idle.withLock { idle in
            // As many are kept as ever ran at once, up to a few.
            if idle.count < 4 { idle.append(dfa) }
        }
        return result
    }
}

// MARK: Compiled patterns, once each

extension LinearRegex {
    private static let compiled = Mutex<[String: LinearRegex]>([:])
    /// The most patterns ``cached(_:)`` keeps.
    static let cacheSize = 64

    /// The compiled `pattern`, compiled once and kept (up to 64 patterns; a full cache
    /// starts again).
    public static func cached(_ pattern: String) throws(Failure) -> LinearRegex {
        if let known = compiled.withLock({ $0[pattern] }) { return known }
        let regex = try LinearRegex(pattern)
        compiled.withLock { cache in
            if cache.count >= cacheSize { cache.removeAll(keepingCapacity: true) }
            cache[pattern] = regex
        }
        return regex
    }
}

// MARK: Syntax

/// A set of Unicode scalars as sorted, disjoint, non-adjacent ranges, with a bitmap for ASCII.
struct ScalarSet: Equatable {
    private(set) var ranges: [ClosedRange<UInt32>]
    private var low: UInt64 = 0, high: UInt64 = 0

    init(_ ranges: [ClosedRange<UInt32>]) {
        var merged: [ClosedRange<UInt32>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound &+ 1 {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        self.ranges = merged
        for range in merged where range.lowerBound < 128 {
            for scalar in range.lowerBound...min(range.upperBound, 127) {
                if scalar < 64 { low |= 1 << UInt64(scalar) } else { high |= 1 << UInt64(scalar - 64) }
            }
        }
    }

    /// Every scalar not in this set.
    var complement: ScalarSet {
        var result: [ClosedRange<UInt32>] = []
        var next: UInt32 = 0
        for range in ranges {
            if range.lowerBound > next { result.append(next...(range.lowerBound - 1)) }
            next = range.upperBound + 1
        }
        if next <= 0x10FFFF { result.append(next...0x10FFFF) }
        return ScalarSet(result)
    }

    /// This set with the other case of every ASCII letter in it.
    var foldingASCII: ScalarSet {
        var added = ranges
        for (from, to) in [(UInt32(65)...90, Int64(32)), (UInt32(97)...122, Int64(-32))] {
            for range in ranges where range.overlaps(from) {
                let lower = max(range.lowerBound, from.lowerBound), upper = min(range.upperBound, from.upperBound)
                added.append(UInt32(Int64(lower) + to)...UInt32(Int64(upper) + to))
            }
        }
        return ScalarSet(added)
    }

    func contains(_ scalar: UInt32) -> Bool {
        if scalar < 64 { return low & (1 << UInt64(scalar)) != 0 }
        if scalar < 128 { return high & (1 << UInt64(scalar - 64)) != 0 }
        var lower = 0, upper = ranges.count
        while lower < upper {
            let middle = (lower + upper) / 2
            if ranges[middle].upperBound < scalar { lower = middle + 1 } else { upper = middle }
        }
        return lower < ranges.count && ranges[lower].lowerBound <= scalar
    }
}

/// A parsed pattern.
indirect enum RegexNode {
    case empty
    case set(ScalarSet)
    case start
    case end
    case sequence([RegexNode])
    case choice([RegexNode])
    /// `node` at least `min` times and at most `max` (nil: no limit).
    case repetition(RegexNode, min: Int, max: Int?)

    /// The instructions the node compiles to (saturating: a huge count stays huge, never overflows).
    var size: Int {
        switch self {
        case .empty: return 0
        case .set, .start, .end: return 1
        case .sequence(let nodes): return nodes.reduce(0) { min($0 + $1.size, Int(Int32.max)) }
        case .choice(let nodes): return min(nodes.reduce(0) { min($0 + $1.size, Int(Int32.max)) } + 2 * (nodes.count - 1), Int(Int32.max))
        case .repetition(let node, let lower, let upper):
            let body = node.size
            let optional = upper.map { ($0 - lower) * (body + 1) } ?? (body + 2)
            let total = lower.multipliedReportingOverflow(by: body)
            return total.overflow ? Int(Int32.max) : min(total.partialValue + optional, Int(Int32.max))
        }
    }
}

/// Reads a pattern (see ``LinearRegex``).
struct Parser {
    private let scalars: [Unicode.Scalar]
    private var index = 0
    private var caseInsensitive = false
    private var depth = 0

    init(_ scalars: [Unicode.Scalar]) { self.scalars = scalars }

    private var current: Unicode.Scalar? { index < scalars.count ? scalars[index] : nil }

    private func failure(_ message: String) -> LinearRegex.Failure {
        .syntax("\(message) at position \(index + 1)")
    }

    mutating func parse() throws(LinearRegex.Failure) -> RegexNode {
        if scalars.starts(with: "(?i)".unicodeScalars) {
            caseInsensitive = true
            index = 4
        }
        let node = try choice()
        if current != nil { throw failure("unbalanced ')'") }
        return node
    }

    private mutating func choice() throws(LinearRegex.Failure) -> RegexNode {
        var branches = [try sequence()]
        while current == "|" {
            index += 1
            branches.append(try sequence())
        }
        return branches.count == 1 ? branches[0] : .choice(branches)
    }

    private mutating func sequence() throws(LinearRegex.Failure) -> RegexNode {
        var nodes: [RegexNode] = []
        while let scalar = current, scalar != "|", scalar != ")" {
            var node = try atom()
            var quantified = false
            while let (lower, upper) = try quantifier() {
                if quantified { throw failure("a repetition must not follow a repetition (write a group)") }
                quantified = true
                node = .repetition(node, min: lower, max: upper)
                if current == "?" { index += 1 }  // lazy: the same answer to "does it match"
            }
            nodes.append(node)
        }
        return nodes.count == 1 ? nodes[0] : .sequence(nodes)
    }

    /// A quantifier at the current position (consumed), or nil.
    private mutating func quantifier() throws(LinearRegex.Failure) -> (Int, Int?)? {
        switch current {
        case "*": index += 1; return (0, nil)
        case "+": index += 1; return (1, nil)
        case "?": index += 1; return (0, 1)
        case "{":
            index += 1
            let lower = try number()
            var upper: Int? = lower
            if current == "," {
                index += 1
                upper = current == "}" ? nil : try number()
            }
            guard current == "}" else { throw failure("a repetition {n}, {n,} or {n,m} is not closed") }
            index += 1
            if let upper, upper < lower { throw failure("a repetition's maximum is below its minimum") }
            return (lower, upper)
        default: return nil
        }
    }

    private mutating func number() throws(LinearRegex.Failure) -> Int {
        var value = 0
        let start = index
        while let scalar = current, ("0"..."9").contains(scalar) {
            value = value * 10 + Int(scalar.value - 48)
            if value > LinearRegex.maximumCount { throw failure("a repetition count above \(LinearRegex.maximumCount)") }
            index += 1
        }
        if index == start { throw failure("a repetition needs a number") }
        return value
    }

    private mutating func atom() throws(LinearRegex.Failure) -> RegexNode {
        guard let scalar = current else { throw failure("the pattern ends early") }
        index += 1
        switch scalar {
        case "(":
            if current == "?" {
                guard index + 1 < scalars.count, scalars[index + 1] == ":" else { throw failure("only (?:...) groups are supported") }
                index += 2
            }
            depth += 1
            if depth > 100 { throw failure("groups nest deeper than 100") }
            let inner = try choice()
            guard current == ")" else { throw failure("unbalanced '('") }
            index += 1
            depth -= 1
            return inner
        case "[":
            return .set(try characterClass())
        case "^":
            return .start
        case "\\":
            if current == "z" {
                index += 1
                return .end
            }
            return literal(try escape())
        case "*", "+", "?", "{":
            throw failure("nothing to repeat")
        case ".", "$", "}":
            throw failure("'\(scalar)' must be escaped")
        default:
            return literal(scalar.value)
        }
    }

    private func literal(_ scalar: UInt32) -> RegexNode {
        let set = ScalarSet([scalar...scalar])
        return .set(caseInsensitive ? set.foldingASCII : set)
    }

    /// The character of an escape (after the backslash, consumed).
    private mutating func escape() throws(LinearRegex.Failure) -> UInt32 {
        guard let scalar = current else { throw failure("a pattern must not end with '\\'") }
        index += 1
        switch scalar {
        case "t": return 9
        case "n": return 10
        case "v": return 11
        case "f": return 12
        case "r": return 13
        case "u":
            guard index + 4 <= scalars.count else { throw failure("\\u needs four hexadecimal digits") }
            var value: UInt32 = 0
            for digit in scalars[index..<(index + 4)] {
                guard let number = Self.hexDigit(digit) ?? Self.hexLetter(digit) else {
                    throw failure("\\u needs four hexadecimal digits")
                }
                value = value * 16 + number
            }
            index += 4
            guard Unicode.Scalar(value) != nil else { throw failure("\\u names a surrogate") }
            return value
        default:
            if scalar.isASCII, scalar == " " || (33...126).contains(scalar.value) && !Self.isAlphanumeric(scalar) { return scalar.value }
            throw failure("\\\(scalar) is not supported")
        }
    }

    private static func isAlphanumeric(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
    }

    private static func hexDigit(_ scalar: Unicode.Scalar) -> UInt32? {
        ("0"..."9").contains(scalar) ? scalar.value - 48 : nil
    }

    private static func hexLetter(_ scalar: Unicode.Scalar) -> UInt32? {
        if ("a"..."f").contains(scalar) { return scalar.value - 87 }
        if ("A"..."F").contains(scalar) { return scalar.value - 55 }
        return nil
    }

    /// A class, after its `[` (consumed up to and with its `]`).
    private mutating func characterClass() throws(LinearRegex.Failure) -> ScalarSet {
        let negated = current == "^"
        if negated { index += 1 }
        var ranges: [ClosedRange<UInt32>] = []
        var first = true
        while true {
            guard let scalar = current else { throw failure("unbalanced '['") }
            if scalar == "]", !first { index += 1; break }
            first = false
            let lower = try classMember()
            if current == "-", index + 1 < scalars.count, scalars[index + 1] != "]" {
                index += 1
                let upper = try classMember()
                guard lower <= upper else { throw failure("a range in a class runs backwards") }
                ranges.append(lower...upper)
            } else {
                ranges.append(lower...lower)
            }
        }
        var set = ScalarSet(ranges)
        if caseInsensitive { set = set.foldingASCII }
        return negated ? set.complement : set
    }

    private mutating func classMember() throws(LinearRegex.Failure) -> UInt32 {
        guard let scalar = current else { throw failure("unbalanced '['") }
        index += 1
        switch scalar {
        case "\\": return try escape()
        case "[": throw failure("'[' inside a class must be escaped")
        case "]": throw failure("']' must be escaped at the start of a class")
        default: return scalar.value
        }
    }
}

// MARK: Program

/// The Thompson automaton: instructions that consume one scalar (a set), assert a position, or
/// branch without consuming.
struct Program {
    enum Instruction {
        /// Consumes one scalar of the set (an index into ``Program/sets``).
        case set(Int32)
        case start
        case end
        /// Continues at both.
        case split(Int32, Int32)
        case jump(Int32)
        case match
    }

    private(set) var instructions: [Instruction] = []
    private(set) var sets: [ScalarSet] = []
    /// For each `end` instruction's position, whether a match follows it once the value has ended
    /// (index 0: elsewhere; index 1: at the start too, for the empty value).
    private(set) var endMatches: [[Bool]] = [[], []]

    init(_ node: RegexNode) {
        emit(node)
        instructions.append(.match)
        endMatches = [false, true].map { atStart in
            instructions.indices.map { position in
                guard case .end = instructions[position] else { return false }
                return reachesMatchAtEnd(from: position + 1, atStart: atStart)
            }
        }
    }

    private mutating func emit(_ node: RegexNode) {
        switch node {
        case .empty: break
        case .set(let set):
            if let known = sets.firstIndex(of: set) {
                instructions.append(.set(Int32(known)))
            } else {
                sets.append(set)
                instructions.append(.set(Int32(sets.count - 1)))
            }
        case .start: instructions.append(.start)
        case .end: instructions.append(.end)
        case .sequence(let nodes): for node in nodes { emit(node) }
        case .choice(let branches):
            var jumps: [Int] = []
            for (number, branch) in branches.enumerated() {
                if number < branches.count - 1 {
                    let split = instructions.count
                    instructions.append(.split(Int32(split + 1), 0))
                    emit(branch)
                    jumps.append(instructions.count)
                    instructions.append(.jump(0))
                    instructions[split] = .split(Int32(split + 1), Int32(instructions.count))
                } else {
                    emit(branch)
                }
            }
            for jump in jumps { instructions[jump] = .jump(Int32(instructions.count)) }
        case .repetition(let body, let lower, let upper):
            for _ in 0..<lower { emit(body) }
            if let upper {
                // Each optional copy may be skipped to the end: x{0,3} is (x(x(x)?)?)?.
                var splits: [Int] = []
                for _ in lower..<upper {
                    splits.append(instructions.count)
                    instructions.append(.split(0, 0))
                    emit(body)
                }
                for split in splits { instructions[split] = .split(Int32(split + 1), Int32(instructions.count)) }
            } else {
                let loop = instructions.count
                instructions.append(.split(0, 0))
                emit(body)
                instructions.append(.jump(Int32(loop)))
                instructions[loop] = .split(Int32(loop + 1), Int32(instructions.count))
            }
        }
    }

    /// Whether `match` is reachable from `position` without consuming, the value having ended.
    private func reachesMatchAtEnd(from position: Int, atStart: Bool) -> Bool {
        var seen = Set<Int>(), stack = [position]
        while let position = stack.popLast() {
            guard seen.insert(position).inserted else { continue }
            switch instructions[position] {
            case .match: return true
            case .set: break
            case .start: if atStart { stack.append(position + 1) }
            case .end: stack.append(position + 1)
            case .split(let first, let second): stack.append(Int(first)); stack.append(Int(second))
            case .jump(let target): stack.append(Int(target))
            }
        }
        return false
    }
}

// MARK: Matching

/// A DFA over a ``Program``, built as a match needs it. A state is the set of consuming
/// instructions the automaton may be at (and whether the value may end there); its transitions
/// are found once and kept (for ASCII in a table, others in a small map). At most
/// ``maximumStates`` states (and ``maximumPositions`` positions in all) are kept: past that
/// everything is forgotten and built again, so the memory is bounded (at most about 400 KB) and a match
/// still costs at most one pass over the program per scalar.
/// Mutable, and used by one match at a time (``LinearRegex`` hands each match one of its own).
final class LazyDFA: @unchecked Sendable {
    static let maximumStates = 256
    static let maximumPositions = 32_768
    private static let unknown: Int32 = -1

    private struct State {
        /// Consuming instructions (``Program/Instruction/set``) the automaton may be at.
        let positions: [Int32]
        /// Whether a match has been found (all transitions lead here again).
        let matched: Bool
        /// Whether a match is found if the value ends here.
        let acceptsAtEnd: Bool
        var ascii: [Int32]
        var other: [UInt32: Int32] = [:]
    }

    private let program: Program
    private var states: [State] = []
    private var known: [[Int32]: Int32] = [:]
    private var positionsKept = 0
    private var start: Int32 = -1
    // Scratch for closures: the generation each instruction was last visited in.
    private var visited: [UInt32]
    private var generation: UInt32 = 0
    private var stack: [Int32] = []

    init(_ program: Program) {
        self.program = program
        visited = Array(repeating: 0, count: program.instructions.count)
    }

    func matches<Scalars: Sequence<Unicode.Scalar>>(_ scalars: Scalars) -> Bool {
        if start < 0 || states.count >= Self.maximumStates || positionsKept >= Self.maximumPositions { reset() }
        var current = start
        for scalar in scalars {
            if states[Int(current)].matched { return true }
            let value = scalar.value
            var next = value < 128 ? states[Int(current)].ascii[Int(value)] : states[Int(current)].other[value] ?? Self.unknown
            if next == Self.unknown {
                if states.count >= Self.maximumStates || positionsKept >= Self.maximumPositions {
                    // Forget every state, keeping the one we are in.
                    let positions = states[Int(current)].positions
                    reset()
                    current = state(positions, atStart: false)
                }
                next = step(current, value)
                if value < 128 {
                    states[Int(current)].ascii[Int(value)] = next
                } else if states[Int(current)].other.count < 64 {
                    states[Int(current)].other[value] = next
                }
            }
            current = next
        }
        return states[Int(current)].matched || states[Int(current)].acceptsAtEnd
    }

    private func reset() {
        states.removeAll(keepingCapacity: true)
        known.removeAll(keepingCapacity: true)
        positionsKept = 0
        start = -1
        start = closure(from: [0], atStart: true)
    }

    /// The state after `state` reads `scalar`: the successors of the instructions that accept it,
    /// and the start of the program again (the search is unanchored).
    private func step(_ state: Int32, _ scalar: UInt32) -> Int32 {
        var targets: [Int32] = []
        for position in states[Int(state)].positions {
            guard case .set(let set) = program.instructions[Int(position)], program.sets[Int(set)].contains(scalar) else { continue }
            targets.append(position + 1)
        }
        targets.append(0)
        return closure(from: targets, atStart: false)
    }

    /// The state of every instruction reachable from `targets` without consuming.
    private func closure(from targets: [Int32], atStart: Bool) -> Int32 {
        generation &+= 1
        if generation == 0 {
            for index in visited.indices { visited[index] = 0 }
            generation = 1
        }
        var positions: [Int32] = []
        var matched = false, acceptsAtEnd = false
        stack.removeAll(keepingCapacity: true)
        stack.append(contentsOf: targets.reversed())
        while let position = stack.popLast() {
            guard visited[Int(position)] != generation else { continue }
            visited[Int(position)] = generation
            switch program.instructions[Int(position)] {
            case .set: positions.append(position)
            case .match: matched = true
            case .start: if atStart { stack.append(position + 1) }
            case .end: if program.endMatches[atStart ? 1 : 0][Int(position)] { acceptsAtEnd = true }
            case .split(let first, let second):
                stack.append(second)
                stack.append(first)
            case .jump(let target): stack.append(target)
            }
        }
        if matched { positions = [] }
        positions.sort()
        return state(positions, matched: matched, acceptsAtEnd: acceptsAtEnd)
    }

    private func state(_ positions: [Int32], atStart: Bool) -> Int32 {
        closure(from: positions, atStart: atStart)
    }

    private func state(_ positions: [Int32], matched: Bool, acceptsAtEnd: Bool) -> Int32 {
        // The flags are part of the key: the positions alone do not say them.
        let key = positions + [matched ? -1 : -2, acceptsAtEnd ? -3 : -4]
        if let index = known[key] { return index }
        let index = Int32(states.count)
        positionsKept += positions.count
        states.append(State(positions: positions, matched: matched, acceptsAtEnd: acceptsAtEnd,
                            ascii: Array(repeating: Self.unknown, count: 128)))
        known[key] = index
        return index
    }
}

/// The scalars of UTF-8 text, ill-formed sequences as U+FFFD.
struct UTF8Scalars: Sequence, IteratorProtocol {
    private var iterator: UnsafeBufferPointer<UInt8>.Iterator
    private var decoder = UTF8()

    init(_ bytes: UnsafeBufferPointer<UInt8>) { iterator = bytes.makeIterator() }

    mutating func next() -> Unicode.Scalar? {
        switch decoder.decode(&iterator) {
        case .scalarValue(let scalar): scalar
        case .emptyInput: nil
        case .error: "\u{FFFD}"
        }
    }
}
