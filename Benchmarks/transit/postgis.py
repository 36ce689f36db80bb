#!/usr/bin/env python3
"""Nearest stops with PostGIS's KNN index: the baseline beside the plugin's in-memory spatial index.

    postgis.py DSN GTFS.zip [--n 2000] [--limit 10] [--points 2000] [--seed 42] [--skip-load]

DSN is a libpq connection string or URL of a database where `CREATE EXTENSION postgis` may run
(it is run if missing). Loads the zip's stops.txt into
`stops(id text primary key, geom geography(Point,4326))` (dropped and made anew unless
--skip-load) with a GiST index on geom, ANALYZEs it, then times N queries

    SELECT id, ST_Distance(geom, p) FROM stops ORDER BY geom <-> p LIMIT 10,
    p = ST_SetSRID(ST_MakePoint(lon, lat), 4326)::geography

as a server-side prepared statement (psycopg's prepare=True), over the POINTS points, in order and
round again when N > POINTS, after one untimed round over them all. The points are the in-process
bench's (bench_random.py: SplitMix64 seeded SEED, default 42; lat 25.0-25.3, lon 121.3-121.7,
six decimals). Each timing is the client's: the round trip
on the connection included (the DSN decides: a Unix socket is the cheapest), so the same prepared
`SELECT 1` is timed too, as the floor of any query on this connection.

Prints one JSON line: p50_us, p99_us, mean_us, n, select1_p50_us, select1_p99_us, rows and the plan.
Needs psycopg 3 (`pip install 'psycopg[binary]'`).
"""
import argparse
import csv
import io
import json
import sys
import time
import zipfile

import psycopg

import bench_random

QUERY = """SELECT id, ST_Distance(geom, ST_SetSRID(ST_MakePoint(%(lon)s, %(lat)s), 4326)::geography) AS distance
FROM stops ORDER BY geom <-> ST_SetSRID(ST_MakePoint(%(lon)s, %(lat)s), 4326)::geography LIMIT %(limit)s"""


def parse_args():
    parser = argparse.ArgumentParser(description="Nearest stops with PostGIS's KNN index.")
    parser.add_argument("dsn")
    parser.add_argument("zip")
    parser.add_argument("--n", type=int, default=2000, help="queries timed")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--skip-load", action="store_true", help="keep the stops table as it is")
    return parser.parse_args()


def load(conn, path):
    began = time.perf_counter()
    conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    conn.execute("DROP TABLE IF EXISTS stops")
    conn.execute("CREATE TABLE stops (id text PRIMARY KEY, geom geography(Point, 4326))")
    count = 0
    with zipfile.ZipFile(path) as archive, conn.cursor() as cursor:
        name = next(n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "stops.txt")
        with archive.open(name) as raw, cursor.copy("COPY stops (id, geom) FROM STDIN") as copy:
            for row in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8-sig")):
                if not row.get("stop_lat") or not row.get("stop_lon"):
                    continue
                copy.write_row((row["stop_id"], "SRID=4326;POINT(%s %s)" % (float(row["stop_lon"]), float(row["stop_lat"]))))
                count += 1
    conn.execute("CREATE INDEX stops_geom ON stops USING gist (geom)")
    conn.execute("VACUUM ANALYZE stops")
    return count, time.perf_counter() - began


def percentile(sorted_values, fraction):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


def main():
    args = parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        loaded = None
        if not args.skip_load:
            loaded = load(conn, args.zip)
        version = conn.execute("SELECT postgis_lib_version()").fetchone()[0]
        server = conn.execute("SHOW server_version").fetchone()[0]
        stops = conn.execute("SELECT count(*) FROM stops").fetchone()[0]
        chosen = bench_random.points(args.points, args.seed)
        plan = " / ".join(row[0].strip() for row in conn.execute(
            "EXPLAIN " + QUERY, {"lat": chosen[0][0], "lon": chosen[0][1], "limit": args.limit}).fetchall())

        cursor = conn.cursor()
        rows = 0
        for lat, lon in chosen:  # warm-up: every point once, the statement prepared
            rows += len(cursor.execute(QUERY, {"lat": lat, "lon": lon, "limit": args.limit}, prepare=True).fetchall())
        timings = []
        for i in range(args.n):
            lat, lon = chosen[i % len(chosen)]
            params = {"lat": lat, "lon": lon, "limit": args.limit}
            began = time.perf_counter()
            cursor.execute(QUERY, params, prepare=True).fetchall()
            timings.append((time.perf_counter() - began) * 1e6)
        floor = []
        for _ in range(args.n):
            began = time.perf_counter()
            cursor.execute("SELECT 1", prepare=True).fetchall()
            floor.append((time.perf_counter() - began) * 1e6)
    timings.sort()
    floor.sort()
    print(json.dumps({
        "name": "nearest-postgis", "n": len(timings), "limit": args.limit, "stops": stops,
        "p50_us": round(percentile(timings, 0.5), 1), "p99_us": round(percentile(timings, 0.99), 1),
        "mean_us": round(sum(timings) / len(timings), 1),
        "select1_p50_us": round(percentile(floor, 0.5), 1), "select1_p99_us": round(percentile(floor, 0.99), 1),
        "rows_per_query": round(rows / len(chosen), 2),
        "load_seconds": round(loaded[1], 2) if loaded else None,
        "first_point": chosen[0], "postgres": server, "postgis": version, "plan": plan,
    }))


if __name__ == "__main__":
    sys.exit(main())
