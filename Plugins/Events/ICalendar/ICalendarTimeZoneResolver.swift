import Foundation

/// Finds the IANA zone a TZID means.
///
/// Calendars in the wild name zones in several ways, tried in this order:
/// 1. an IANA name, also in the wrong letter case (`America/New_York`, `america/new_york`);
/// 2. a Windows zone name, as Outlook and Exchange write it (`W. Europe Standard Time`), through CLDR's
///    default mapping (`ICalendarWindowsTimeZones`);
/// 3. an IANA name behind a vendor prefix, as older Mozilla and Evolution wrote them
///    (`/mozilla.org/20050126_1/America/New_York`, `/softwarestudio.org/Olson_20011030_5/Europe/Paris`);
/// 4. anything else `TimeZone(identifier:)` accepts (`GMT+0530`).
///
/// Surrounding quotes and spaces are ignored. A TZID that a VTIMEZONE of the file defines means what
/// the definition says instead (``ICalendarTimeZoneDefinition``); this is what the name alone means.
/// A resolver remembers its answers, since a calendar repeats the same few TZIDs thousands of times.
struct ICalendarTimeZoneResolver {
    private var answers: [String: TimeZone?] = [:]

    mutating func resolve(_ tzid: String) -> TimeZone? {
        if let known = answers[tzid] { return known }
        let answer = Self.resolveUncached(tzid)
        answers[tzid] = answer
        return answer
    }

    static func resolveUncached(_ tzid: String) -> TimeZone? {
        let name = tzid.trimmingCharacters(in: CharacterSet(charactersIn: "\" \t"))
        guard !name.isEmpty else { return nil }
        if let identifier = identifiersByLowercasedName[name.lowercased()] {
            return TimeZone(identifier: identifier)
        }
        let parts = name.split(separator: "/", omittingEmptySubsequences: true)
        if parts.count > 1 {
            for first in 1..<parts.count {
                let suffix = parts[first...].joined(separator: "/").lowercased()
                if let identifier = identifiersByLowercasedName[suffix] {
                    return TimeZone(identifier: identifier)
                }
            }
        }
        return TimeZone(identifier: name)
    }

    /// IANA names (which win) and Windows names, keyed by their lower-case spelling.
    private static let identifiersByLowercasedName: [String: String] = {
        var table: [String: String] = [:]
        for (windowsName, identifier) in ICalendarWindowsTimeZones.ianaIdentifiers {
            table[windowsName.lowercased()] = identifier
        }
        for identifier in TimeZone.knownTimeZoneIdentifiers {
            table[identifier.lowercased()] = identifier
        }
        for identifier in ["UTC", "GMT", "Etc/UTC", "Etc/GMT"] where table[identifier.lowercased()] == nil {
            table[identifier.lowercased()] = identifier
        }
        return table
    }()
}
