#!/usr/bin/env python3
"""Arrivals at a stop as plain SQL on the gateway's SQLite file (after `gateway import transit`):
the SQL baseline beside the plugin's in-memory `GET /v1/transit/stops/{id}/arrivals`.

    plain_sql.py DB.sqlite --stop BENCH_HUB1 [--date 2026-11-24] [--times 2000] [--hours 6-23]
                 [--minimal] [--in-place] [--seed 42]

For each of TIMES instants of DATE in the feed's time zone (bench_random.py: with the defaults the
in-process bench's 2,000, SplitMix64 seeded 42, from 06:00 to 23:00, whole seconds), one statement returns the stop times at the stop whose scheduled departure
falls in [instant - 5 min, instant + 35 min] (the API's defaults), on every service day that can
reach the window, where the trip's service runs that day (calendar.txt's weekdays between its
first and last day, calendar_dates.txt's exceptions: a removed day never runs, an added day always
does), of the version transit_feeds serves, by departure: trip, route, route short name,
headsign, direction, stop sequence, service day, scheduled arrival and departure (UTC seconds),
and, as the API answers them, the trip's number of stops and `stopsAway` (the stop's place in the
trip less the number of the trip's stops already left at the instant); --minimal leaves those two
out. The statement's text is fixed, so Python's sqlite3 keeps it prepared (its statement cache).

The stop is the API's id (`{agencyId}_{gtfsStopId}`, e.g. BENCH_HUB1) or a GTFS stop_id.

The schema has no index by stop (transit_stop_times is indexed by (version, trip_id,
stop_sequence) only), so, as a fair SQL baseline, this script adds
`CREATE INDEX bench_stop_times_stop ON transit_stop_times (version, stop_id, departure)`, and
ANALYZE, to a copy of the database it makes first (SQLite's backup API, into a temporary folder,
deleted afterwards); --in-place adds them to DB.sqlite itself instead. The generated feed gives
every stop time both times, so the index on `departure` finds them all (the plugin interpolates
missing times, which plain SQL does not try).

Prints one JSON line: p50_us, p99_us, mean_us, n and the rows returned (mean, max, empty windows).
"""
import argparse
import datetime
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import zoneinfo

import bench_random

BEFORE, AFTER = 5 * 60, 35 * 60


def parse_args():
    parser = argparse.ArgumentParser(description="Arrivals at a stop as plain SQL on the gateway's SQLite file.")
    parser.add_argument("database")
    parser.add_argument("--stop", required=True, help="BENCH_HUB1 (the API's id) or a GTFS stop_id")
    parser.add_argument("--date", default="2026-11-24", help="yyyy-mm-dd in the feed's time zone")
    parser.add_argument("--times", type=int, default=2000, help="queries timed (after as many untimed)")
    parser.add_argument("--hours", default="6-23", help="the instants' range of the day, e.g. 0-24")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--minimal", action="store_true", help="leave out totalStops and stopsAway")
    parser.add_argument("--in-place", action="store_true", help="add the index to DATABASE itself, not to a copy")
    return parser.parse_args()


def service_day_start(day, zone):
    """Noon local time less 12 h, in UTC seconds, of `day` (days since 1970)."""
    date = datetime.date(1970, 1, 1) + datetime.timedelta(days=day)
    noon = datetime.datetime(date.year, date.month, date.day, 12, tzinfo=zone)
    return int(noon.timestamp()) - 43200


def local_day(instant, zone):
    date = datetime.datetime.fromtimestamp(instant, zone).date()
    return (date - datetime.date(1970, 1, 1)).days


def statement(day_slots, minimal):
    days = " UNION ALL ".join("SELECT :d%d AS day, :b%d AS base, :w%d AS weekday" % (n, n, n) for n in range(day_slots))
    runs = """
          AND NOT EXISTS (SELECT 1 FROM transit_calendar_dates x WHERE x.version = f.version AND x.service_id = t.service_id
                          AND x.day = d.day AND x.exception = 2)
          AND (EXISTS (SELECT 1 FROM transit_calendar_dates x WHERE x.version = f.version AND x.service_id = t.service_id
                       AND x.day = d.day AND x.exception = 1)
               OR EXISTS (SELECT 1 FROM transit_calendar c WHERE c.version = f.version AND c.service_id = t.service_id
                          AND d.day BETWEEN c.first_day AND c.last_day AND (c.weekdays >> d.weekday) & 1))"""
    columns = """st.trip_id, t.route_id, r.short_name, COALESCE(st.headsign, t.headsign) AS headsign, t.direction, st.stop_sequence,
               d.day, d.base + st.arrival AS arrival, d.base + st.departure AS departure"""
    # (CROSS JOIN fixes the order: the feed by its key, then each day's range of the stop's index.)
    joins = """
        FROM transit_feeds f
        CROSS JOIN d
        CROSS JOIN transit_stop_times st INDEXED BY bench_stop_times_stop ON st.version = f.version AND st.stop_id = :stop
             AND st.departure BETWEEN :from - d.base AND :to - d.base
        JOIN transit_trips t ON t.version = f.version AND t.trip_id = st.trip_id
        JOIN transit_routes r ON r.version = f.version AND r.route_id = t.route_id
"""
    if minimal:
        return """
        WITH d AS (%s)
        SELECT %s%s        WHERE f.id = :feed %s
        ORDER BY d.base + st.departure, st.trip_id""" % (days, columns, joins, runs)
    # The trip's stops counted in one grouped join: all of them, those before this one, and
    # those the trip has left at the instant (times only grow along a trip).
    return """
        WITH d AS (%s)
        SELECT %s,
               COUNT(*) AS total_stops,
               SUM(s2.stop_sequence < st.stop_sequence) - SUM(COALESCE(s2.departure, s2.arrival) < :time - d.base) AS stops_away%s        JOIN transit_stop_times s2 ON s2.version = f.version AND s2.trip_id = st.trip_id
        WHERE f.id = :feed %s
        GROUP BY d.day, st.rowid
        ORDER BY d.base + st.departure, st.trip_id""" % (days, columns, joins, runs)


def main():
    args = parse_args()
    if not os.path.exists(args.database):
        sys.exit("%s does not exist" % args.database)
    scratch = None
    if args.in_place:
        path = args.database
    else:
        scratch = tempfile.mkdtemp(prefix="transit-plain-sql.")
        path = os.path.join(scratch, "copy.sqlite")
        source = sqlite3.connect("file:%s?mode=ro" % args.database, uri=True)
        target = sqlite3.connect(path)
        source.backup(target)
        source.close()
        target.close()
    try:
        run(args, path)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def run(args, path):
    db = sqlite3.connect(path, cached_statements=16)
    # The fair baseline's index (see above): stop times by stop and departure, per version.
    db.execute("CREATE INDEX IF NOT EXISTS bench_stop_times_stop ON transit_stop_times (version, stop_id, departure)")
    db.execute("ANALYZE")
    db.commit()

    feeds = db.execute("SELECT id, version, agency_id, time_zone FROM transit_feeds ORDER BY id").fetchall()
    if not feeds:
        sys.exit("no feed is served (transit_feeds is empty)")
    feed = stop = None
    for feed_id, version, agency, zone_name in feeds:
        if args.stop.startswith(agency + "_"):
            candidate = args.stop[len(agency) + 1:]
            if db.execute("SELECT 1 FROM transit_stops WHERE version = ? AND stop_id = ?", (version, candidate)).fetchone():
                feed, stop = (feed_id, version, agency, zone_name), candidate
                break
    if feed is None:
        for feed_id, version, agency, zone_name in feeds:
            if db.execute("SELECT 1 FROM transit_stops WHERE version = ? AND stop_id = ?", (version, args.stop)).fetchone():
                feed, stop = (feed_id, version, agency, zone_name), args.stop
                break
    if feed is None:
        sys.exit("stop %s is in no served feed" % args.stop)
    feed_id, version, _, zone_name = feed
    zone = zoneinfo.ZoneInfo(zone_name)

    # Service days that can reach a window: from the window's first day less the longest a
    # service day runs (the latest time in the feed, past 24:00:00) to the day after it.
    latest = db.execute("SELECT MAX(MAX(COALESCE(departure, 0)), MAX(COALESCE(arrival, 0))) FROM transit_stop_times WHERE version = ?",
                        (version,)).fetchone()[0] or 0
    reach = latest // 86400 + 1
    slots = reach + 2
    sql = statement(slots, args.minimal)

    date = datetime.date.fromisoformat(args.date)
    first_hour, last_hour = (float(x) for x in args.hours.split("-"))
    instants = bench_random.instants(date, zone, args.times, first_hour, last_hour, args.seed)

    def bind(instant):
        named = {"stop": stop, "feed": feed_id, "from": instant - BEFORE, "to": instant + AFTER, "time": instant}
        first = local_day(instant - BEFORE, zone) - reach
        for n in range(slots):
            day = first + n
            named["d%d" % n], named["b%d" % n], named["w%d" % n] = day, service_day_start(day, zone), (day + 3) % 7
        return named

    bound = [bind(instant) for instant in instants]
    for params in bound:  # warm-up: the pages in the cache, the statement prepared
        db.execute(sql, params).fetchall()
    timings, counts = [], []
    for params in bound:
        began = time.perf_counter()
        rows = db.execute(sql, params).fetchall()
        timings.append((time.perf_counter() - began) * 1e6)
        counts.append(len(rows))
    plan = " / ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, bound[0]).fetchall())
    timings.sort()
    print(json.dumps({
        "name": "arrivals-plain-sql" + ("-minimal" if args.minimal else ""),
        "stop": args.stop, "date": args.date, "hours": args.hours,
        "n": len(timings), "p50_us": round(timings[len(timings) // 2], 1), "p99_us": round(timings[min(len(timings) - 1, int(len(timings) * 0.99))], 1),
        "mean_us": round(sum(timings) / len(timings), 1),
        "rows_mean": round(sum(counts) / len(counts), 2), "rows_max": max(counts), "empty": counts.count(0),
        "first_instant": instants[0], "plan": plan,
    }))


if __name__ == "__main__":
    sys.exit(main())
