#!/usr/bin/env python3
"""Fills a migrated gateway SQLite file with the events benchmark's data set.

    seed.py DATABASE EVENTS SHOWINGS_PER_EVENT TODAY(yyyy-mm-dd) OUT.json

Twenty cities (ids 1..20, Asia/Taipei) around points 0.3 degrees apart, 250 venues in each within
about 5 km of its centre, EVENTS published events spread evenly over the cities, each in one or
two of the old service's categories, each with SHOWINGS_PER_EVENT two-hour showings on random days
from 30 days before TODAY to 335 days after (2% of events are exhibitions whose showings run for
30 to 90 days). Half the showings have 100 seats, half are unlimited. The rows are the ones the
plugin's store writes (EventStore.insertEvent / insertShowing): the same columns, the same
derived values (span, published, city_id copied from the event, search_text, the listing rows). Writes the city
centres and a sample of unlimited showing ids to OUT.json for the load scripts.
"""
import datetime
import json
import random
import sqlite3
import sys
import time

path, events, per_event, today, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
random.seed(20261124)
CATEGORIES = [1, 2, 3, 4, 6, 7, 8, 15, 17]
CITIES = [{"id": i + 1, "lat": 22.0 + (i // 5) * 0.3, "lon": 120.0 + (i % 5) * 0.3} for i in range(20)]
OFFSET = 8 * 3600  # Asia/Taipei, no DST
midnight = int(datetime.datetime.strptime(today, "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc).timestamp()) - OFFSET
now = int(time.time())

db = sqlite3.connect(path)
db.execute("PRAGMA journal_mode = WAL")
db.execute("PRAGMA synchronous = OFF")
started = time.time()
with db:
    venues = {}
    for city in CITIES:
        for n in range(250):
            lat = city["lat"] + random.uniform(-0.045, 0.045)
            lon = city["lon"] + random.uniform(-0.045, 0.045)
            cursor = db.execute(
                "INSERT INTO events_venues (name, address, city_id, lat, lon, owner_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, NULL, ?, ?)",
                ("Venue %d-%d" % (city["id"], n), "Street %d" % n, city["id"], lat, lon, now, now))
            venues.setdefault(city["id"], []).append((cursor.lastrowid, "Venue %d-%d" % (city["id"], n)))
    showing_rows = []
    unlimited = []
    for index in range(events):
        city = CITIES[index % len(CITIES)]["id"]
        title = "Event %d %s" % (index, random.choice(["音樂會", "戲劇", "舞蹈", "展覽", "講座", "電影"]))
        description = "A generated event number %d." % index
        chosen = random.sample(venues[city], 2)
        search = "\n".join([title, description] + sorted(name for _, name in chosen)).lower()
        cursor = db.execute(
            "INSERT INTO events_events (title, description, organizer, info_source, sale_url, image_url, city_id, owner_id, status, reservation_policy, "
            "tags, uid, search_text, created_at, updated_at) VALUES (?, ?, 'Bench', NULL, NULL, ?, ?, NULL, 'published', NULL, '[]', NULL, ?, ?, ?)",
            (title, description, "https://img.example.com/%d.jpg" % index, city, search, now, now))
        event = cursor.lastrowid
        for category in random.sample(CATEGORIES, random.choice([1, 2])):
            db.execute("INSERT INTO events_event_categories (event_id, category_id) VALUES (?, ?)", (event, category))
        long_running = random.random() < 0.02
        for n in range(per_event):
            day = random.randrange(-30, 335)
            start = midnight + day * 86400 + random.randrange(10, 22) * 3600
            end = start + (random.randrange(30, 91) * 86400 if long_running else 7200)
            venue = chosen[n % 2][0]
            capacity = 100 if n % 2 == 0 else None
            showing_rows.append((event, venue, city, start, end, end - start, capacity))
        if len(showing_rows) >= 100_000:
            db.executemany(
                "INSERT INTO events_showings (event_id, venue_id, city_id, published, starts_at, ends_at, span, all_day, price_text, is_free, capacity, seats_taken) "
                "VALUES (?, ?, ?, 1, ?, ?, ?, 0, NULL, 0, ?, 0)", showing_rows)
            showing_rows = []
    if showing_rows:
        db.executemany(
            "INSERT INTO events_showings (event_id, venue_id, city_id, published, starts_at, ends_at, span, all_day, price_text, is_free, capacity, seats_taken) "
            "VALUES (?, ?, ?, 1, ?, ?, ?, 0, NULL, 0, ?, 0)", showing_rows)
with db:
    # The listing (EventStore.relist): one row per category of each showing of a published event.
    db.execute("INSERT INTO events_listing (category_id, city_id, starts_at, ends_at, span, event_id, showing_id) "
               "SELECT c.category_id, s.city_id, s.starts_at, s.ends_at, s.span, s.event_id, s.id FROM events_showings s "
               "JOIN events_event_categories c ON c.event_id = s.event_id WHERE s.published = 1")
db.execute("ANALYZE")
unlimited = [row[0] for row in db.execute(
    "SELECT id FROM events_showings WHERE capacity IS NULL AND ends_at > ? ORDER BY id LIMIT 5000", (now,))]
counts = db.execute("SELECT (SELECT COUNT(*) FROM events_events), (SELECT COUNT(*) FROM events_showings), (SELECT COUNT(*) FROM events_venues)").fetchone()
db.close()
json.dump({"cities": CITIES, "unlimitedShowings": unlimited, "events": counts[0], "showings": counts[1], "venues": counts[2]}, open(out, "w"))
print("  seeded %d events, %d showings, %d venues in %.1f s" % (counts[0], counts[1], counts[2], time.time() - started))
