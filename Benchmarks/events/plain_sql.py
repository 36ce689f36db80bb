#!/usr/bin/env python3
"""The events list as plain SQL against the same SQLite file: the two statements that answer
`GET /v1/events?city=&category=&from=&to=&limit=50` from the tables (the page of events by their
first showing in the window, from the listing's index; then those events with their categories,
their showings in the window and their venues) — what the plugin ran before it read lists from
memory — timed in-process for the same requests the HTTP run sends.
Prints one JSON line: p50 and p99 in ms.

    plain_sql.py DATABASE PATHS.json SECONDS
"""
import json
import sqlite3
import sys
import time
import urllib.parse

path, paths_file, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
paths = json.load(open(paths_file))
OFFSET = 8 * 3600
db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)

def window(day_from, day_to):
    import datetime
    start = int(datetime.datetime.strptime(day_from, "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc).timestamp()) - OFFSET
    end = int(datetime.datetime.strptime(day_to, "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc).timestamp()) - OFFSET + 86400
    return start, end

def list_page(city, category, start, end, limit=50):
    rows = db.execute("""
        SELECT w.event_id AS event_id, MIN(w.starts_at) AS first_start FROM (
          SELECT event_id, starts_at, showing_id FROM events_listing WHERE city_id = ? AND category_id = ? AND starts_at >= ? AND starts_at < ?
            AND (ends_at > ? OR starts_at >= ?) AND span <= 86400
          UNION ALL SELECT event_id, starts_at, showing_id FROM events_listing WHERE city_id = ? AND category_id = ? AND span > 86400
            AND ends_at > ? AND starts_at < ?) w
        GROUP BY w.event_id ORDER BY first_start, event_id LIMIT ?""",
        (city, category, start - 86400, end, start, start, city, category, start, end, limit + 1)).fetchall()
    ids = [r[0] for r in rows[:limit]]
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    page = db.execute("""
        SELECT e.id, e.title, e.image_url, e.city_id, e.status,
          (SELECT group_concat(category_id) FROM events_event_categories c WHERE c.event_id = e.id),
          s.id, s.event_id, s.starts_at, s.ends_at, s.all_day, s.price_text, s.is_free, s.capacity, s.seats_taken, s.venue_id,
          v.id, v.name, v.address, v.city_id, v.lat, v.lon, v.owner_id
        FROM events_events e
        LEFT JOIN events_showings s ON s.event_id = e.id AND s.starts_at < ? AND (s.ends_at > ? OR s.starts_at >= ?)
        LEFT JOIN events_venues v ON v.id = s.venue_id
        WHERE e.id IN (%s) ORDER BY e.id, s.starts_at, s.id""" % marks, [end, start, start] + ids).fetchall()
    return len(page)

requests = []
for target in paths:
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(target).query))
    requests.append((int(query["city"]), int(query["category"])) + window(query["from"], query["to"]))

# Warm up, then measure for `seconds`.
for request in requests[:200]:
    list_page(*request)
timings = []
deadline = time.perf_counter() + seconds
index = 0
while time.perf_counter() < deadline:
    request = requests[index % len(requests)]
    index += 1
    began = time.perf_counter()
    list_page(*request)
    timings.append((time.perf_counter() - began) * 1000)
timings.sort()
print(json.dumps({"name": "plain-sql", "requests": len(timings), "p50Ms": timings[len(timings) // 2], "p99Ms": timings[int(len(timings) * 0.99)],
                  "requestsPerSecond": len(timings) / seconds}))
