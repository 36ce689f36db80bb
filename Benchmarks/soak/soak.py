"""The gateway under a long mixed load, and its shutdown (issue 27). Run by Benchmarks/soak/run.

Stages, each printed and written to Benchmarks/results/soak.json:
1. capacity: the mix of mix.lua as fast as it goes (CAPACITY_SECONDS, CONNECTIONS): requests/s.
2. soak: SOAK_MINUTES one-minute runs paced at half that capacity, SUBSCRIBERS WebSocket clients
   subscribed to a feed's datastream the whole time while a writer changes it every second; per
   minute: requests, errors (non-2xx/3xx and socket errors), p99, resident memory. Goals: 0 errors,
   memory after the last minute within 5 % of after the first, p99 steady; every subscriber gets
   every change.
3. SIGTERM at full load: wrk at full speed, SIGTERM after 3 s; seconds until exit, exit status, and
   any request answered 5xx or cut mid-reply (in-flight failures) by a client of our own.
4. kill -9 during writes: a client creating todos and posting datapoints records each acknowledged
   one; SIGKILL; restart; every acknowledged write is read back.
"""
import base64, http.client, json, os, re, signal, socket, struct, subprocess, sys, threading, time, urllib.parse

ROOT = os.environ["ROOT"]
GATEWAY = os.environ["GATEWAY_BIN"]
WORK = os.environ["WORK"]
CONNECTIONS = int(os.environ.get("CONNECTIONS", "16"))
CAPACITY_SECONDS = int(os.environ.get("CAPACITY_SECONDS", "20"))
SOAK_MINUTES = int(os.environ.get("SOAK_MINUTES", "10"))
SUBSCRIBERS = int(os.environ.get("SUBSCRIBERS", "8"))
MINUTE = int(os.environ.get("SOAK_MINUTE_SECONDS", "60"))  # shorter only to try the script out
HERE = os.path.join(ROOT, "Benchmarks", "soak")
results = {}


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port


class Server:
    def __init__(self, port):
        self.port = port
        self.log = open(os.path.join(WORK, "gateway.log"), "ab")
        self.process = subprocess.Popen([GATEWAY, "serve", "--port", str(port), "--log-level", "warning"], cwd=WORK,
                                        stdout=subprocess.PIPE, stderr=self.log)
        self.process.stdout.readline()  # the URL: it listens
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def rss(self, kind="VmRSS"):
        """Resident bytes: all (`VmRSS`), or the heap and stacks alone (`RssAnon`), or mapped files
        alone (`RssFile`: SQLite's memory-mapped database grows with the data it holds)."""
        with open(f"/proc/{self.process.pid}/status") as status:
            return int(re.search(kind + r":\s+(\d+)", status.read()).group(1)) * 1024


def call(port, method, path, body=None, token=None, timeout=30):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token: headers["Authorization"] = "Bearer " + token
    connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, (json.loads(data) if data else None)


def setup(port):
    call(port, "POST", "/v1/auth/register", {"username": "soak", "password": "soak-password-1"})
    status, reply = call(port, "POST", "/v1/auth/login", {"username": "soak", "password": "soak-password-1"})
    token = reply["token"]
    status, feed = call(port, "POST", "/v1/feeds", {"title": "Soak", "datastreams": [{"id": "temp"}, {"id": "load"}]}, token)
    return token, feed["id"]


def wrk(port, seconds, rate, token, feed, connections=CONNECTIONS):
    env = dict(os.environ, SOAK_TOKEN=token, SOAK_FEED=str(feed), SOAK_RATE=str(rate), SOAK_CONNECTIONS=str(connections))
    out = subprocess.run(["wrk", "--latency", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", os.path.join(HERE, "mix.lua"),
                          f"http://127.0.0.1:{port}"], env=env, capture_output=True, text=True).stdout
    def number(pattern, default=0.0):
        found = re.search(pattern, out)
        return float(found.group(1)) if found else default
    def millis(text):
        value, unit = float(text[:-2] if text.endswith(("us", "ms")) else text[:-1]), text[-2:] if text.endswith(("us", "ms")) else text[-1:]
        return value / 1000 if unit == "us" else value if unit == "ms" else value * 1000
    # The latency distribution's line (the stdev column may read 99.99% too).
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out)) + int(number(r"Non-2xx or 3xx responses: (\d+)"))
    return {"requests": int(number(r"(\d+) requests in")), "rps": number(r"Requests/sec:\s+([\d.]+)"),
            "p99_ms": millis(p99.group(1)) if p99 else None, "errors": errors, "raw": out}


class Subscriber(threading.Thread):
    """A WebSocket client of /v1/feeds/live subscribed to one datastream, counting its changes."""
    def __init__(self, port, token, feed):
        super().__init__(daemon=True)
        self.port, self.token, self.feed = port, token, feed
        self.changes, self.values, self.ready, self.failed = 0, [], threading.Event(), None

    def send(self, text, opcode=0x1):
        data = text.encode() if isinstance(text, str) else text
        mask = os.urandom(4)
        header = bytes([0x80 | opcode]) + (bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + struct.pack(">H", len(data)))
        self.socket.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def frame(self):
        def exactly(n):
            data = b""
            while len(data) < n:
                chunk = self.socket.recv(n - len(data))
                if not chunk: raise EOFError
                data += chunk
            return data
        first, second = exactly(2)
        length = second & 0x7F
        if length == 126: length = struct.unpack(">H", exactly(2))[0]
        elif length == 127: length = struct.unpack(">Q", exactly(8))[0]
        return first & 0x0F, exactly(length)

    def run(self):
        try:
            self.socket = socket.create_connection(("127.0.0.1", self.port), timeout=120)
            key = base64.b64encode(os.urandom(16)).decode()
            self.socket.sendall((f"GET /v1/feeds/live?access_token={self.token} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            head = b""
            while b"\r\n\r\n" not in head: head += self.socket.recv(1)
            if b" 101 " not in head.split(b"\r\n")[0]: raise RuntimeError(head.decode(errors="replace"))
            self.send(json.dumps({"action": "subscribe", "feed": self.feed, "datastream": "temp", "id": 1}))
            while True:
                opcode, payload = self.frame()
                if opcode == 8: return
                if opcode == 9: self.send(payload, opcode=0xA)   # answer the server's ping, as every client must
                if opcode != 1: continue
                message = json.loads(payload)
                if message.get("type") == "subscribed": self.ready.set()
                elif message.get("type") == "change":
                    self.changes += 1
                    self.values.append(message["data"].get("currentValue"))
        except Exception as error:  # noqa: BLE001 — recorded and reported
            if not isinstance(error, EOFError): self.failed = repr(error)
            self.ready.set()


def soak(server, token, feed, capacity):
    rate = max(1, int(capacity / 2))
    subscribers = [Subscriber(server.port, token, feed) for _ in range(SUBSCRIBERS)]
    for s in subscribers: s.start()
    for s in subscribers: s.ready.wait(30)
    # The writer: one datapoint a second on the subscribed datastream, each value distinct.
    writes, stop = [], threading.Event()
    def writer():
        n = 0
        while not stop.is_set():
            n += 1
            status, _ = call(server.port, "POST", f"/v1/feeds/{feed}/datastreams/temp/datapoints", [{"value": 100000 + n}], token)
            if status == 200: writes.append(100000 + n)
            else: print(f"  writer: {status}", flush=True)
            time.sleep(1)
    writing = threading.Thread(target=writer, daemon=True); writing.start()
    minutes = []
    for minute in range(SOAK_MINUTES):
        figures = wrk(server.port, MINUTE, rate, token, feed)
        figures.pop("raw")
        figures["rss_mb"] = round(server.rss() / 1e6, 1)
        figures["anon_mb"] = round(server.rss("RssAnon") / 1e6, 1)
        figures["file_mb"] = round(server.rss("RssFile") / 1e6, 1)
        minutes.append(figures)
        print(f"  minute {minute + 1}: {figures['requests']} requests, {figures['errors']} errors, p99 {figures['p99_ms']} ms, "
              f"RSS {figures['rss_mb']} MB (anonymous {figures['anon_mb']}, files {figures['file_mb']})", flush=True)
    stop.set(); writing.join()
    time.sleep(2)
    # Only the writer writes to the subscribed datastream (the mix writes to "load"): each of its
    # values is a change every subscriber must see, in order.
    lost = []
    for s in subscribers:
        seen = [v for v in s.values if isinstance(v, (int, float))]
        missing = sorted(set(writes) - set(seen))
        ordered = seen == sorted(seen)
        lost.append({"changes": s.changes, "writer_values_seen": len(seen), "missing": len(missing), "in_order": ordered, "failed": s.failed})
    first, last = minutes[0]["rss_mb"], minutes[-1]["rss_mb"]
    anon_first, anon_last = minutes[0]["anon_mb"], minutes[-1]["anon_mb"]
    results["soak"] = {"rate": rate, "minutes": minutes, "writer_values": len(writes), "subscribers": lost,
                       "rss_growth_after_first_minute_pct": round(100 * (last - first) / first, 2),
                       "anonymous_growth_after_first_minute_pct": round(100 * (anon_last - anon_first) / anon_first, 2),
                       "errors": sum(m["errors"] for m in minutes)}


def sigterm(server, token, feed):
    """Our own client: each request's outcome is known (a reply, a 5xx, or cut mid-reply)."""
    outcomes = {"ok": 0, "server_error": 0, "cut": 0, "refused_after_close": 0}
    lock, stop = threading.Lock(), threading.Event()
    def client():
        while not stop.is_set():
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            try:
                for _ in range(50):
                    connection.request("GET", "/v1/events?city=15")
                    try:
                        response = connection.getresponse()
                    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                        # Closed before any reply byte: never handled (an idle keep-alive closed at shutdown); a client retries.
                        with lock: outcomes["refused_after_close"] += 1
                        break
                    try:
                        body = response.read()
                        key = "server_error" if response.status >= 500 else "ok"
                        if len(body) != int(response.getheader("Content-Length", len(body))): key = "cut"
                    except (http.client.IncompleteRead, ConnectionResetError):
                        key = "cut"
                    with lock: outcomes[key] += 1
            except (ConnectionRefusedError, OSError):
                with lock: outcomes["refused_after_close"] += 1
                time.sleep(0.05)
            finally:
                connection.close()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(CONNECTIONS)]
    for t in threads: t.start()
    load = subprocess.Popen(["wrk", "-t1", "-c16", "-d8s", "-s", os.path.join(HERE, "mix.lua"), f"http://127.0.0.1:{server.port}"],
                            env=dict(os.environ, SOAK_TOKEN=token, SOAK_FEED=str(feed), SOAK_RATE="0", SOAK_CONNECTIONS="16"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)
    started = time.time()
    server.process.send_signal(signal.SIGTERM)
    status = server.process.wait(60)
    exited = time.time() - started
    stop.set()
    for t in threads: t.join(35)
    load.wait()
    results["sigterm"] = {"exit_status": status, "seconds_to_exit": round(exited, 2), **outcomes}


def kill9(port):
    server = Server(port)
    status, reply = call(port, "POST", "/v1/auth/login", {"username": "soak", "password": "soak-password-1"})
    token = reply["token"]
    status, feed = call(port, "POST", "/v1/feeds", {"title": "Durable", "datastreams": [{"id": "d"}]}, token)
    acknowledged_todos, acknowledged_points, stop = [], [], threading.Event()
    def todos():
        n = 0
        while not stop.is_set():
            n += 1
            try:
                status, reply = call(port, "POST", "/v1/todo/buckets/todos/objects", {"description": f"durable {n}"}, token, timeout=5)
                if status == 201: acknowledged_todos.append(reply["id"])
            except OSError:
                return
    numbers, numbering = iter(range(1, 10**9)), threading.Lock()
    def points():
        while not stop.is_set():
            with numbering: n = next(numbers)   # one time per datapoint across the writers
            try:
                status, _ = call(port, "POST", f"/v1/feeds/{feed['id']}/datastreams/d/datapoints",
                                 [{"at": f"2026-01-01T00:00:{n // 1000000:02d}.{n % 1000000:06d}Z", "value": n}], token, timeout=5)
                if status == 200: acknowledged_points.append(n)
            except OSError:
                return
    workers = [threading.Thread(target=todos, daemon=True) for _ in range(4)] + [threading.Thread(target=points, daemon=True) for _ in range(4)]
    for w in workers: w.start()
    time.sleep(5)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    stop.set()
    for w in workers: w.join(10)
    again = Server(port)
    missing_todos = sum(1 for i in acknowledged_todos if call(port, "GET", f"/v1/todo/buckets/todos/objects/{i}", token=token)[0] != 200)
    # Every datapoint read back, a page of 1000 at a time.
    stored, start = set(), "2026-01-01T00:00:00Z"
    while True:
        query = urllib.parse.urlencode({"start": start, "end": "2026-01-02T00:00:00Z", "limit": 1000})
        status, page = call(port, "GET", f"/v1/feeds/{feed['id']}/datastreams/d/datapoints?{query}", token=token)
        points = (page or {}).get("datapoints", [])
        stored.update(int(p["value"]) for p in points)
        if len(points) < 1000: break
        last = points[-1]["at"]
        micros = int(last[20:26]) + 1
        start = f"{last[:20]}{micros:06d}Z"
    counted = len(stored & set(acknowledged_points))
    again.process.send_signal(signal.SIGTERM)
    again.process.wait(60)
    results["kill9"] = {"acknowledged_todos": len(acknowledged_todos), "missing_todos": missing_todos,
                        "acknowledged_datapoints": len(acknowledged_points), "acknowledged_datapoints_found": counted,
                        "missing_datapoints": len(acknowledged_points) - counted}


def main():
    shutil_copy = subprocess.run(["cp", "-r", os.path.join(ROOT, "plugins.yaml"), os.path.join(ROOT, "data"), WORK], check=True)
    subprocess.run(["rm", "-f", os.path.join(WORK, "data", "gateway.sqlite")], check=True)
    # Limits high enough that the load is not refused: the soak measures the gateway, not its limits.
    config = open(os.path.join(WORK, "plugins.yaml")).read()
    config = re.sub(r"anonymous: \S+", "anonymous: 10000000/min", config)
    config = re.sub(r"\n  user: \S+", "\n  user: 10000000/min", config)
    open(os.path.join(WORK, "plugins.yaml"), "w").write(config)
    port = free_port()
    server = Server(port)
    token, feed = setup(port)
    print("== capacity", flush=True)
    capacity = wrk(port, CAPACITY_SECONDS, 0, token, feed)
    capacity.pop("raw")
    results["capacity"] = capacity
    print(f"  {capacity['rps']:.0f} requests/s, p99 {capacity['p99_ms']} ms, {capacity['errors']} errors", flush=True)
    print(f"== soak: {SOAK_MINUTES} minutes at half capacity, {SUBSCRIBERS} WebSocket subscribers", flush=True)
    soak(server, token, feed, capacity["rps"])
    s = results["soak"]
    print(f"  errors {s['errors']}, RSS growth after the first minute {s['rss_growth_after_first_minute_pct']} % "
          f"(anonymous {s['anonymous_growth_after_first_minute_pct']} %), writer values {s['writer_values']}", flush=True)
    for i, sub in enumerate(s["subscribers"]): print(f"  subscriber {i}: {sub}", flush=True)
    print("== SIGTERM at full load", flush=True)
    sigterm(server, token, feed)
    print(f"  {results['sigterm']}", flush=True)
    print("== kill -9 during writes", flush=True)
    kill9(port)
    print(f"  {results['kill9']}", flush=True)
    json.dump(results, open(os.path.join(ROOT, "Benchmarks", "results", "soak.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
