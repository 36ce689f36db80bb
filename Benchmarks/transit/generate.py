#!/usr/bin/env python3
"""Writes the transit benchmark's generated GTFS feed.

    generate.py OUT.zip [--stops 100000] [--routes 2000] [--trips-per-route 10] [--seed 1]

One agency (agency_id BENCH, Asia/Taipei). STOPS stops: five hubs HUB1..HUB5 (the centre of the
box and the centres of its four quarters) and the rest S1, S2, ... on a jittered grid over lat
25.0-25.3, lon 121.3-121.7. Each route is a walk of 50 stops: the grid's cells in boustrophedon
order cut into runs of 50 (so with enough routes every stop is served), then random walks for any
routes left over. About 40 routes per hub (min(40, ROUTES // 10)), those whose walk comes nearest,
pass through it: their stop nearest to the hub is replaced by the hub (the replaced stops are the
only ones left unserved: the defaults have exactly 50 x ROUTES slots for STOPS stops, so ~200 go
unserved). Every route has TRIPS_PER_ROUTE trips alternating direction_id 0/1 (1 runs the walk
backwards), starting evenly from 05:00 to 24:30 (jittered, so some run past 24:00:00), 50-110 s
between stops and some 20 s dwells; four trips in five run on WEEKDAY (Mon-Fri), the rest on
WEEKEND (Sat-Sun), both 20250101-20301231, with calendar_dates moving Jan 1 and Oct 10 of each
year that falls on a weekday from WEEKDAY to WEEKEND. With the defaults: 2,000 routes, 20,000
trips, 1,000,000 stop_times; HUB1 has 40 routes, so about 40 x 8 trips x 40 min / 19.5 h ~ 11
arrivals in a weekday's 40-minute window (more or fewer by the time of day).

The random points and ids the other scripts use are independent of --seed. Files are streamed into
the zip, so memory holds the stops and the routes' walks only.
"""
import argparse
import datetime
import io
import math
import random
import sys
import zipfile

LAT0, LAT1, LON0, LON1 = 25.0, 25.3, 121.3, 121.7
ROUTE_LENGTH = 50
HUBS = [("HUB1", 25.15, 121.5), ("HUB2", 25.075, 121.4), ("HUB3", 25.075, 121.6), ("HUB4", 25.225, 121.4), ("HUB5", 25.225, 121.6)]
FIRST_START, LAST_START = 5 * 3600, 24 * 3600 + 1800  # trips start from 05:00 to 24:30


def parse_args():
    parser = argparse.ArgumentParser(description="Write a generated GTFS feed for the transit benchmark.")
    parser.add_argument("out")
    parser.add_argument("--stops", type=int, default=100_000)
    parser.add_argument("--routes", type=int, default=2000)
    parser.add_argument("--trips-per-route", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.stops < ROUTE_LENGTH + len(HUBS):
        parser.error("--stops must be at least %d" % (ROUTE_LENGTH + len(HUBS)))
    if args.routes < 1 or args.trips_per_route < 1:
        parser.error("--routes and --trips-per-route must be at least 1")
    return args


def gtfs_time(seconds):
    return "%02d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class Writer:
    """A CSV member of the zip, written as it goes."""

    def __init__(self, archive, name, header):
        info = zipfile.ZipInfo(name, datetime.datetime.now().timetuple()[:6])
        info.compress_type = zipfile.ZIP_DEFLATED
        self.stream = archive.open(info, "w", force_zip64=True)
        self.text = io.TextIOWrapper(self.stream, encoding="utf-8", newline="")
        self.rows = 0
        self.text.write(",".join(header) + "\r\n")

    def row(self, *values):
        self.text.write(",".join("" if v is None else str(v) for v in values) + "\r\n")
        self.rows += 1

    def close(self):
        self.text.flush()
        self.text.close()


def main():
    args = parse_args()
    rng = random.Random(args.seed)

    # Stops: the hubs, then the grid row by row (the first `regular` cells of a rows x cols grid
    # whose cells are about square on the ground).
    regular = args.stops - len(HUBS)
    aspect = (LON1 - LON0) * math.cos(math.radians((LAT0 + LAT1) / 2)) / (LAT1 - LAT0)
    cols = max(1, math.ceil(math.sqrt(regular * aspect)))
    rows = math.ceil(regular / cols)
    dlat, dlon = (LAT1 - LAT0) / rows, (LON1 - LON0) / cols
    ids, names, lats, lons = [], [], [], []
    for name, lat, lon in HUBS:
        ids.append(name)
        names.append("Hub %s" % name[3:])
        lats.append(lat)
        lons.append(lon)
    cell = {}  # (row, col) -> stop index
    for k in range(regular):
        r, c = divmod(k, cols)
        cell[(r, c)] = len(ids)
        ids.append("S%d" % (k + 1))
        names.append("Stop %d" % (k + 1))
        lats.append(LAT0 + (r + 0.5 + rng.uniform(-0.35, 0.35)) * dlat)
        lons.append(LON0 + (c + 0.5 + rng.uniform(-0.35, 0.35)) * dlon)

    # Walks: the boustrophedon order of the grid cut into runs of 50, then random walks.
    snake = []
    for r in range(rows):
        line = [cell[(r, c)] for c in range(cols) if (r, c) in cell]
        snake.extend(line if r % 2 == 0 else reversed(line))
    runs = [snake[i:i + ROUTE_LENGTH] for i in range(0, len(snake), ROUTE_LENGTH)]
    if len(runs[-1]) < ROUTE_LENGTH:
        runs[-1] = snake[-ROUTE_LENGTH:]
    if args.routes <= len(runs):
        walks = [runs[(i * len(runs)) // args.routes] for i in range(args.routes)]
    else:
        walks = runs[:]
        positions = list(cell.keys())
        steps = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if dr or dc]
        while len(walks) < args.routes:
            here = rng.choice(positions)
            walk, seen = [cell[here]], {here}
            while len(walk) < ROUTE_LENGTH:
                options = [(here[0] + dr, here[1] + dc) for dr, dc in steps]
                options = [p for p in options if p in cell and p not in seen]
                if not options:
                    break
                here = rng.choice(options)
                seen.add(here)
                walk.append(cell[here])
            if len(walk) == ROUTE_LENGTH:
                walks.append(walk)

    # Hubs: the routes passing nearest take the hub in place of their stop nearest to it.
    coslat = math.cos(math.radians((LAT0 + LAT1) / 2))

    def distance2(a, lat, lon):
        return (lats[a] - lat) ** 2 + ((lons[a] - lon) * coslat) ** 2

    per_hub = min(40, args.routes // 10)
    taken = set()
    hub_routes = {}
    for hub, (name, lat, lon) in enumerate(HUBS):
        nearest = []
        for route, walk in enumerate(walks):
            if route in taken:
                continue
            position = min(range(len(walk)), key=lambda p: distance2(walk[p], lat, lon))
            nearest.append((distance2(walk[position], lat, lon), route, position))
        nearest.sort()
        for _, route, position in nearest[:per_hub]:
            taken.add(route)
            walks[route] = walks[route][:position] + [hub] + walks[route][position + 1:]
        hub_routes[name] = len(nearest[:per_hub])
    served = set()
    for walk in walks:
        served.update(walk)

    counts = {}
    with zipfile.ZipFile(args.out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        archive.writestr("agency.txt", "agency_id,agency_name,agency_url,agency_timezone,agency_lang\r\n"
                                       "BENCH,Bench Transit,https://bench.example.com,Asia/Taipei,zh-TW\r\n")
        counts["agency"] = 1

        out = Writer(archive, "stops.txt", ["stop_id", "stop_code", "stop_name", "stop_lat", "stop_lon", "location_type", "wheelchair_boarding"])
        for k, stop in enumerate(ids):
            out.row(stop, k + 1, names[k], "%.6f" % lats[k], "%.6f" % lons[k], 0, 1 if k % 3 else 0)
        out.close()
        counts["stops"] = out.rows

        out = Writer(archive, "routes.txt", ["route_id", "agency_id", "route_short_name", "route_long_name", "route_type"])
        for route, walk in enumerate(walks):
            out.row("R%d" % (route + 1), "BENCH", route + 1, "%s - %s" % (names[walk[0]], names[walk[-1]]), 3)
        out.close()
        counts["routes"] = out.rows

        archive.writestr("calendar.txt", "service_id,monday,tuesday,wednesday,thursday,friday,saturday,sunday,start_date,end_date\r\n"
                                         "WEEKDAY,1,1,1,1,1,0,0,20250101,20301231\r\n"
                                         "WEEKEND,0,0,0,0,0,1,1,20250101,20301231\r\n")
        counts["calendar"] = 2
        out = Writer(archive, "calendar_dates.txt", ["service_id", "date", "exception_type"])
        for year in range(2025, 2031):
            for month, day in ((1, 1), (10, 10)):
                date = datetime.date(year, month, day)
                if date.weekday() < 5:
                    out.row("WEEKDAY", date.strftime("%Y%m%d"), 2)
                    out.row("WEEKEND", date.strftime("%Y%m%d"), 1)
        out.close()
        counts["calendar_dates"] = out.rows

        # trips.txt is small: it is kept in memory while stop_times.txt is written (one member at a time).
        trips = io.StringIO()
        trips.write("route_id,service_id,trip_id,trip_headsign,direction_id,wheelchair_accessible\r\n")
        trip_count = 0
        times = Writer(archive, "stop_times.txt", ["trip_id", "arrival_time", "departure_time", "stop_id", "stop_sequence"])
        span = (LAST_START - FIRST_START) / args.trips_per_route
        latest = 0
        for route, walk in enumerate(walks):
            hops = [rng.randrange(50, 111) for _ in range(len(walk) - 1)]
            dwells = [20 if rng.random() < 0.2 else 0 for _ in walk]
            for trip in range(args.trips_per_route):
                direction = trip % 2
                order = list(range(len(walk))) if direction == 0 else list(range(len(walk) - 1, -1, -1))
                trip_id = "R%d_T%d" % (route + 1, trip + 1)
                service = "WEEKEND" if trip % 5 == 4 else "WEEKDAY"
                trips.write("R%d,%s,%s,%s,%d,1\r\n" % (route + 1, service, trip_id, names[walk[order[-1]]], direction))
                trip_count += 1
                clock = FIRST_START + int((trip + rng.random()) * span)
                for sequence, position in enumerate(order):
                    if sequence:
                        clock += hops[position if direction else position - 1]
                    arrival, departure = clock, clock + dwells[position]
                    times.row(trip_id, gtfs_time(arrival), gtfs_time(departure), ids[walk[position]], sequence + 1)
                    clock = departure
                latest = max(latest, clock)
        times.close()
        archive.writestr("trips.txt", trips.getvalue())
        counts["trips"] = trip_count
        counts["stop_times"] = times.rows

    counts["unserved_stops"] = len(ids) - len(served)
    counts["routes_per_hub"] = hub_routes
    counts["latest_time"] = gtfs_time(latest)
    counts["grid"] = "%d x %d" % (rows, cols)
    for key, value in counts.items():
        print("%-15s %s" % (key, "{:,}".format(value) if isinstance(value, int) else value))


if __name__ == "__main__":
    sys.exit(main())
