#!/usr/bin/env python3
"""Helpers of Benchmarks/feeds/run for the gateway's feeds API and InfluxDB 1.x.

  feeds.py send    TARGET URL BATCH     send one batch; print the reply; exit 1 unless 2xx
  feeds.py fill    TARGET URL           send every batch of the first POINTS datapoints that is not
                                        complete, then compare three batches with value(i); print
                                        {"count", "resent", "checked"} as JSON
  feeds.py history TARGET URL KIND      time RUNS history queries (KIND: sample or avg) on one
                                        keep-alive connection after WARMUP untimed ones; print JSON

TARGET is gateway or influx. The environment gives the rest: EPOCH (seconds of datapoint 0),
POINTS, BATCH (1000), INTERVAL (seconds, 3600), RUNS, WARMUP, and for the gateway FEED_PATH
(/v1/feeds/N/datastreams/load/datapoints) and TOKEN; for InfluxDB the database is `bench` and the
measurement `load`. Datapoint i is at EPOCH + i seconds with value(i), the rule of ingest.lua.

Each timed query is different (its end moves on by a microsecond per request, still inside the
second after the last datapoint), so the gateway's response cache never answers one.
"""
import http.client
import json
import math
import os
import sys
import time
import urllib.parse
from datetime import datetime, timezone

EPOCH = int(os.environ.get("EPOCH", "1578096000"))
POINTS = int(os.environ.get("POINTS", "1000000"))
BATCH = int(os.environ.get("BATCH", "1000"))
INTERVAL = int(os.environ.get("INTERVAL", "3600"))
RUNS = int(os.environ.get("RUNS", "200"))
WARMUP = int(os.environ.get("WARMUP_QUERIES", "20"))
FEED_PATH = os.environ.get("FEED_PATH", "")
TOKEN = os.environ.get("TOKEN", "")


def value(i):
    phase = i % 86400
    wave = phase if phase < 43200 else 86400 - phase
    milli = 15000 + wave // 6 + (i * 7919) % 1000 - 500
    return "%d.%03d" % (milli // 1000, milli % 1000)


def iso(micros):
    seconds, fraction = divmod(micros, 1_000_000)
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + ".%06dZ" % fraction


def parse_micros(text):
    """2020-01-04T00:00:00.123456Z (the fraction optional) as microseconds since 1970."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return int(seconds) * 1_000_000 + int((fraction + "000000")[:6])


class Client:
    def __init__(self, target, url):
        self.target = target
        parts = urllib.parse.urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        self.headers = {"Authorization": "Bearer " + TOKEN} if target == "gateway" and TOKEN else {}

    def request(self, method, path, body=None, content_type=None):
        headers = dict(self.headers)
        if content_type:
            headers["Content-Type"] = content_type
        self.connection.request(method, path, body=body, headers=headers)
        response = self.connection.getresponse()
        return response.status, response.read()

    def get_json(self, path):
        status, body = self.request("GET", path)
        if status != 200:
            sys.exit("GET %s answered %d: %s" % (path, status, body[:500].decode(errors="replace")))
        return json.loads(body)

    def send(self, batch):
        base = batch * BATCH
        if self.target == "influx":
            body = "\n".join("load value=%s %d000000" % (value(i), EPOCH + i) for i in range(base, base + BATCH))
            return self.request("POST", "/write?db=bench&precision=u", body.encode(), "text/plain; charset=utf-8")
        points = ",".join('{"at":"%s","value":"%s"}' % (iso((EPOCH + i) * 1_000_000), value(i)) for i in range(base, base + BATCH))
        return self.request("POST", FEED_PATH, ('{"datapoints":[%s]}' % points).encode(), "application/json")

    def influx_query(self, q):
        return "/query?" + urllib.parse.urlencode({"db": "bench", "epoch": "s", "q": q})

    def batch_counts(self):
        """{batch: datapoints} for the batches of the first POINTS datapoints that hold any."""
        counts = {}
        window = BATCH * 1000  # 1,000 batches a query (the gateway's largest limit)
        for low in range(0, POINTS, window):
            high = min(POINTS, low + window)
            if self.target == "influx":
                q = "SELECT count(value) FROM load WHERE time >= %ds AND time < %ds GROUP BY time(%ds)" % (EPOCH + low, EPOCH + high, BATCH)
                for result in self.get_json(self.influx_query(q))["results"]:
                    if "error" in result:
                        sys.exit("InfluxDB: " + result["error"])
                    for series in result.get("series", []):
                        for at, n in series["values"]:
                            if n:
                                counts[(at - EPOCH) // BATCH] = int(n)
            else:
                # The start moves back by a few microseconds each call so that no cached reply answers.
                jitter = int(time.time() * 1_000_000) % 997 + 1
                query = urllib.parse.urlencode({"start": iso((EPOCH + low) * 1_000_000 - jitter), "end": iso((EPOCH + high - 1) * 1_000_000),
                                                "interval": BATCH, "function": "count", "limit": 1000})
                for point in self.get_json(FEED_PATH + "?" + query)["datapoints"]:
                    offset = parse_micros(point["at"]) - (EPOCH + low) * 1_000_000
                    counts[low // BATCH + round(offset / (BATCH * 1_000_000))] = int(float(point["value"]))
        return counts

    def stored(self, batch):
        """{i: value} of the datapoints of one batch as stored."""
        low, high = EPOCH + batch * BATCH, EPOCH + (batch + 1) * BATCH
        if self.target == "influx":
            q = "SELECT value FROM load WHERE time >= %ds AND time < %ds" % (low, high)
            series = self.get_json(self.influx_query(q))["results"][0].get("series", [])
            return {at - EPOCH: v for s in series for at, v in s["values"]}
        jitter = int(time.time() * 1_000_000) % 997 + 1
        query = urllib.parse.urlencode({"start": iso(low * 1_000_000 - jitter), "end": iso((high - 1) * 1_000_000), "limit": 1000})
        return {parse_micros(p["at"]) // 1_000_000 - EPOCH: p["value"] for p in self.get_json(FEED_PATH + "?" + query)["datapoints"]}

    def check(self, batch):
        """Exits unless the batch's datapoints are stored with the times and values of value(i)."""
        stored = self.stored(batch)
        expected = {i: value(i) for i in range(batch * BATCH, (batch + 1) * BATCH)}
        wrong = [i for i in expected if i not in stored or abs(float(stored[i]) - float(expected[i])) > 1e-9]
        if wrong or len(stored) != len(expected):
            sys.exit("%s: batch %d is stored wrong: %d of %d datapoints differ (first: %d, expected %s, stored %s)" % (
                self.target, batch, len(wrong), BATCH, wrong[0] if wrong else -1, expected.get(wrong[0]) if wrong else "",
                stored.get(wrong[0]) if wrong else len(stored)))

    def history_path(self, kind, k):
        start = EPOCH * 1_000_000
        end = (EPOCH + POINTS - 1) * 1_000_000 + k  # k < 1,000,000 µs: the same points each time
        if self.target == "influx":
            if kind == "sample":
                q = "SELECT last(value) FROM load WHERE time >= %du AND time <= %du GROUP BY time(%ds) fill(previous)" % (start, end, INTERVAL)
            else:
                q = "SELECT mean(value) FROM load WHERE time >= %du AND time <= %du GROUP BY time(%ds)" % (start, end, INTERVAL)
            return self.influx_query(q)
        parameters = {"start": iso(start), "end": iso(end), "interval": INTERVAL, "limit": 1000}
        if kind == "avg":
            parameters["function"] = "avg"
        return FEED_PATH + "?" + urllib.parse.urlencode(parameters, safe=":")

    def returned(self, body):
        data = json.loads(body)
        if self.target == "influx":
            result = data["results"][0]
            if "error" in result:
                sys.exit("InfluxDB: " + result["error"])
            return sum(1 for series in result.get("series", []) for row in series["values"] if row[1] is not None)
        return len(data["datapoints"])


def percentile(sorted_values, pct):
    """The nearest-rank percentile."""
    return sorted_values[max(0, math.ceil(pct / 100 * len(sorted_values)) - 1)]


def main():
    command, target, url = sys.argv[1:4]
    client = Client(target, url)
    if command == "send":
        status, body = client.send(int(sys.argv[4]))
        print("%d %s" % (status, body[:1000].decode(errors="replace")))
        sys.exit(0 if 200 <= status < 300 else 1)
    if command == "fill":
        batches = (POINTS + BATCH - 1) // BATCH
        counts = client.batch_counts()
        missing = [b for b in range(batches) if counts.get(b, 0) < BATCH]
        for b in missing:
            status, body = client.send(b)
            if not 200 <= status < 300:
                sys.exit("batch %d answered %d: %s" % (b, status, body[:500].decode(errors="replace")))
        count = sum(client.batch_counts().values()) if missing else sum(counts.values())
        checked = sorted({min(1, batches - 1), batches // 2, batches - 1})  # ingest.lua's batches, as a rule
        for b in checked:
            client.check(b)
        print(json.dumps({"count": count, "resent": len(missing), "checked": checked}))
        return
    if command == "history":
        kind = sys.argv[4]
        k = 0
        for _ in range(WARMUP):
            k += 1
            status, body = client.request("GET", client.history_path(kind, k))
            if status != 200:
                sys.exit("%s history (%s) answered %d: %s" % (target, kind, status, body[:500].decode(errors="replace")))
        times, returned, errors = [], set(), 0
        for _ in range(RUNS):
            k += 1
            path = client.history_path(kind, k)
            began = time.perf_counter()
            status, body = client.request("GET", path)
            times.append((time.perf_counter() - began) * 1000)
            if status != 200:
                errors += 1
                continue
            returned.add(client.returned(body))
        times.sort()
        print(json.dumps({"target": target, "kind": kind, "runs": RUNS, "p50Ms": round(percentile(times, 50), 3),
                          "p99Ms": round(percentile(times, 99), 3), "meanMs": round(sum(times) / len(times), 3),
                          "returned": sorted(returned), "errors": errors, "example": path}))
        return
    sys.exit("unknown command " + command)


if __name__ == "__main__":
    main()
