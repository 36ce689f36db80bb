#!/usr/bin/env python3
"""Writes expected.json: the occurrences of every *.ics fixture in this folder, as computed by an
established RFC 5545 implementation, for ICalendarTests.swift to compare the Swift expansion against.

Run it again after adding or changing a fixture:

    pip install icalendar recurring_ical_events python-dateutil   # tested with 7.3.0, 3.8.2, 2.9.0
    python3 generate.py

The occurrences come from `recurring_ical_events` (on `icalendar`), which expands RRULE with
`dateutil.rrule` and adds RDATE (PERIOD too), EXDATE and RECURRENCE-ID overrides on top. Each
fixture's rule is also expanded with `dateutil.rrule.rrulestr` alone, on wall-clock times localised
with `zoneinfo`, as a second opinion; the two must agree on every fixture where both apply.

Every answer was checked by hand against RFC 5545 (the RFC's own worked examples are among the
fixtures: weekly_wkst_mo/su, monthly_third_tue_wed_thu_setpos, yearly_byyearday, yearly_byweekno,
yearly_election_day, daily_count). Zones: both libraries read a wall-clock time in a daylight-saving
gap with the offset before the gap (Python's fold=0), which is what RFC 5545 §3.3.5 asks (02:30 in
New York on 2026-03-08 is 07:30Z), and an ambiguous time as its first occurrence, which the RFC also
asks. Two fixtures are corrected by hand, see CORRECTIONS below: an end that recurring_ical_events
puts before the start in a DST gap, and an unsynchronised DTSTART (RFC: undefined) where we follow
the RFC's COUNT wording rather than either library.

Each entry of expected.json gives the window (UTC, half-open), the zone the caller passes as the
default for floating times, and the occurrences overlapping the window in order: start and end as
UTC ISO 8601 instants, whether the occurrence is all-day, and its summary (which tells an override
from its master).
"""

import datetime as dt
import json
import pathlib
import re
from zoneinfo import ZoneInfo

import icalendar
import recurring_ical_events
from dateutil.rrule import rrulestr

HERE = pathlib.Path(__file__).resolve().parent
UTC = dt.timezone.utc
DEFAULT_WINDOW = ("2026-01-01T00:00:00Z", "2028-01-01T00:00:00Z")

# Per-fixture settings that differ from the defaults: window and the caller's default zone.
SETTINGS = {
    "weekly_wkst_mo.ics": {"window": ("1997-01-01T00:00:00Z", "1998-01-01T00:00:00Z")},
    "weekly_wkst_su.ics": {"window": ("1997-01-01T00:00:00Z", "1998-01-01T00:00:00Z")},
    "yearly_leap_day.ics": {"window": ("2024-01-01T00:00:00Z", "2037-01-01T00:00:00Z")},
    "yearly_election_day.ics": {"window": ("1996-01-01T00:00:00Z", "2030-01-01T00:00:00Z")},
    "yearly_byyearday.ics": {"window": ("2025-01-01T00:00:00Z", "2040-01-01T00:00:00Z")},
    "yearly_byweekno.ics": {"window": ("2026-01-01T00:00:00Z", "2031-01-01T00:00:00Z")},
    "yearly_ordinal_in_year.ics": {"window": ("2026-01-01T00:00:00Z", "2031-01-01T00:00:00Z")},
    "yearly_last_sunday_march_berlin.ics": {"window": ("2026-01-01T00:00:00Z", "2031-01-01T00:00:00Z")},
    "yearly_bymonth_byday.ics": {"window": ("2026-01-01T00:00:00Z", "2031-01-01T00:00:00Z"), "defaultTimeZone": "America/Chicago"},
    "floating_default_zone.ics": {"defaultTimeZone": "Australia/Sydney"},
    "allday_weekly.ics": {"defaultTimeZone": "America/Los_Angeles"},
    "monthly_last_friday_allday_until_date.ics": {"defaultTimeZone": "Europe/London"},
}

# TZIDs the Python libraries cannot resolve but the Swift parser must: they are rewritten to the
# IANA name before the libraries see the file. Resolving them is the parser's job, tested here by
# expecting the same occurrences as the canonical name gives.
TZID_REWRITES = {
    "america/new_york": "America/New_York",
    "W. Europe Standard Time": "Europe/Berlin",
    "Taipei Standard Time": "Asia/Taipei",
}


def correct_unsynchronized_dtstart(occurrences):
    """DTSTART 2026-01-05 is a Monday; the rule is FREQ=WEEKLY;BYDAY=WE;COUNT=3.

    RFC 5545 calls a DTSTART that the rule does not match "undefined" (§3.8.5.3), but its RRULE
    text is explicit: "The DTSTART property value always counts as the first occurrence" of COUNT
    (§3.3.10). dateutil leaves DTSTART out (Jan 7, 14, 21); recurring_ical_events adds it on top of
    dateutil's three (Jan 5, 7, 14, 21: four occurrences for COUNT=3). We follow the RFC's COUNT text
    (as libical does): Jan 5, 7 and 14. So the library's last occurrence is dropped.
    """
    return occurrences[:-1]


def correct_spring_gap_end(occurrences):
    """DTSTART 02:30 and DTEND 03:00 New York, daily. On 2026-03-08 02:30 does not exist and both
    libraries (rightly, RFC 5545 §3.3.5) start that instance at 03:30 EDT (07:30Z). But
    recurring_ical_events adds DTEND - DTSTART to the start as a wall-clock timedelta (Python's
    same-zone arithmetic), giving 03:00 EDT (07:00Z): an end before the start. RFC 5545 §3.8.5.3
    says every instance has "the same exact duration" as DTEND - DTSTART, 30 minutes, so that
    instance ends at 08:00Z. Every end is recomputed as start + 30 minutes.
    """
    corrected = []
    for occurrence in occurrences:
        end = parse_instant(occurrence["start"]) + dt.timedelta(minutes=30)
        corrected.append({**occurrence, "end": iso(end)})
    return corrected


CORRECTIONS = {
    "unsynchronized_dtstart.ics": correct_unsynchronized_dtstart,
    "spring_gap.ics": correct_spring_gap_end,
}


def parse_instant(text):
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def iso(instant):
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_utc(value, floating_zone):
    """An icalendar value (date, naive or aware datetime) as a UTC instant."""
    if not isinstance(value, dt.datetime):
        return dt.datetime.combine(value, dt.time(0, 0), tzinfo=floating_zone).astimezone(UTC)
    if value.tzinfo is None:
        return value.replace(tzinfo=floating_zone, fold=0).astimezone(UTC)
    return value.astimezone(UTC)


def rewrite_tzids(text):
    for odd, canonical in TZID_REWRITES.items():
        text = text.replace("TZID=" + odd + ":", "TZID=" + canonical + ":")
    return text


def overlaps(start, end, window_start, window_end):
    """The Swift expansion's rule: overlapping the half-open window; an instant kept when inside it."""
    return start < window_end and (end > window_start or (start == end and start >= window_start))


def expand_with_recurring_ical_events(text, window, floating_zone):
    calendar = icalendar.Calendar.from_ical(text)
    # Ask for a wider window and cut it here, so both sides apply the same overlap rule at its edges.
    margin = dt.timedelta(days=3)
    occurrences = []
    for event in recurring_ical_events.of(calendar).between(window[0] - margin, window[1] + margin):
        start = to_utc(event["DTSTART"].dt, floating_zone)
        end = to_utc(event["DTEND"].dt, floating_zone) if "DTEND" in event else start
        if overlaps(start, end, *window):
            occurrences.append({
                "start": iso(start),
                "end": iso(end),
                "allDay": not isinstance(event["DTSTART"].dt, dt.datetime),
                "summary": str(event.get("SUMMARY", "")),
            })
    occurrences.sort(key=lambda occurrence: (occurrence["start"], occurrence["end"]))
    return occurrences


def expand_with_dateutil(text, window, floating_zone):
    """The starts of the first VEVENT's DTSTART + RRULE + RDATE - EXDATE, by dateutil alone, or None
    when the fixture uses something this simple reading does not cover (PERIODs, overrides, values
    in more than one zone)."""
    if "RECURRENCE-ID" in text or "VALUE=PERIOD" in text:
        return None
    event = text.split("BEGIN:VEVENT", 1)[1].split("END:VEVENT", 1)[0]
    lines = [line for line in event.splitlines() if re.match(r"^(DTSTART|RRULE|RDATE|EXDATE)[;:]", line)]
    values = [line for line in lines if not line.startswith("RRULE")]
    zones = {zone for line in values for zone in re.findall(r"TZID=([^;:]+)", line)}
    has_utc_values = any(re.search(r"\d{8}T\d{6}Z", line) for line in values)
    if len(zones) > 1 or (zones and has_utc_values):
        return None
    zone = ZoneInfo(zones.pop()) if zones else (UTC if has_utc_values else floating_zone)
    # Wall-clock times without zones, so that dateutil expands on the wall clock as RFC 5545 asks.
    naive = "\n".join(re.sub(r";(TZID|VALUE)=[^;:]+", "", line) for line in lines)
    until = re.search(r"UNTIL=(\d{8}T\d{6})Z", naive)
    until_instant = None
    if until and not has_utc_values:
        # A UTC UNTIL bounds local times by instant, which naive times cannot express: apply it below.
        until_instant = dt.datetime.strptime(until.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
        naive = re.sub(r";?UNTIL=\d{8}T\d{6}Z", "", naive)
    naive = re.sub(r"(\d{8}T\d{6})Z", r"\1", naive)
    starts = []
    for value in rrulestr(naive, forceset=True):
        instant = to_utc(value, zone)
        if instant >= window[1] or (until_instant and instant > until_instant):
            break
        starts.append(instant)
    return starts


def main():
    expected = {}
    disagreements = []
    for path in sorted(HERE.glob("*.ics")):
        settings = SETTINGS.get(path.name, {})
        window_text = settings.get("window", DEFAULT_WINDOW)
        window = (parse_instant(window_text[0]), parse_instant(window_text[1]))
        default_zone_name = settings.get("defaultTimeZone", "UTC")
        text = rewrite_tzids(path.read_text())
        wr_zone = re.search(r"^X-WR-TIMEZONE:(.+)$", text, re.MULTILINE)
        floating_zone = ZoneInfo(wr_zone.group(1).strip() if wr_zone else default_zone_name)

        occurrences = expand_with_recurring_ical_events(text, window, floating_zone)
        second_opinion = expand_with_dateutil(text, window, floating_zone)
        if second_opinion is not None:
            library_starts = [o["start"] for o in occurrences if parse_instant(o["start"]) >= window[0]]
            dateutil_starts = [iso(instant) for instant in second_opinion if instant >= window[0]]
            if library_starts != dateutil_starts and path.name not in CORRECTIONS:
                disagreements.append((path.name, library_starts, dateutil_starts))
        entry = {
            "window": {"from": window_text[0], "to": window_text[1]},
            "defaultTimeZone": default_zone_name,
        }
        if path.name in CORRECTIONS:
            occurrences = CORRECTIONS[path.name](occurrences)
            entry["correction"] = " ".join(CORRECTIONS[path.name].__doc__.split())
        entry["occurrences"] = occurrences
        expected[path.name] = entry

    for name, library, second in disagreements:
        print(f"DISAGREEMENT {name}:\n  recurring_ical_events {library}\n  dateutil              {second}")
    if disagreements:
        raise SystemExit("the libraries disagree; read RFC 5545 and correct by hand before writing expected.json")
    output = HERE / "expected.json"
    output.write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {output.name}: {len(expected)} fixtures, {sum(len(e['occurrences']) for e in expected.values())} occurrences")


if __name__ == "__main__":
    main()
