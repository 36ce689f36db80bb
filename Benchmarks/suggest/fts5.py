"""The reference for the suggestion index: SQLite FTS5 over the same terms and the same prefixes.

Loads jieba_dict.txt (word freq pos) and movies.tsv (keyword<TAB>text<TAB>weight) into an
in-memory FTS5 table (unicode61 tokenizer, prefix indexes for 1-3 characters) and times
`... WHERE terms MATCH '"prefix"*' ORDER BY weight DESC LIMIT 10` — the prefix of any word,
ranked by weight, as the index answers. Prints one JSON line: {"terms", "p50Us", "p99Us", ...}.
Usage: python3 fts5.py DATA_FOLDER PREFIX [PREFIX ...]
"""
import json, sqlite3, sys, time

folder, prefixes = sys.argv[1], sys.argv[2:]
rows = []
with open(folder + "/jieba_dict.txt", encoding="utf-8") as f:
    for line in f:
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            rows.append((parts[0], parts[0], float(parts[1])))
with open(folder + "/movies.tsv", encoding="utf-8") as f:
    for line in f:
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 2 and parts[0].strip():
            weight = float(parts[2]) if len(parts) > 2 and parts[2].replace(".", "", 1).isdigit() else 0.0
            rows.append((parts[0], parts[1], weight))

db = sqlite3.connect(":memory:")
db.execute("CREATE VIRTUAL TABLE terms USING fts5(keyword, text UNINDEXED, weight UNINDEXED, tokenize='unicode61', prefix='1 2 3')")
started = time.perf_counter()
db.executemany("INSERT INTO terms (keyword, text, weight) VALUES (?, ?, ?)", rows)
db.commit()
build = time.perf_counter() - started

query = "SELECT keyword, text FROM terms WHERE terms MATCH ? ORDER BY weight DESC LIMIT 10"
samples = []
for _ in range(20):
    for prefix in prefixes:
        pattern = '"' + prefix.replace('"', '""') + '"*'
        t0 = time.perf_counter()
        db.execute(query, (pattern,)).fetchall()
        samples.append((time.perf_counter() - t0) * 1e6)
samples.sort()
def percentile(p):
    return samples[min(len(samples) - 1, int(len(samples) * p))]
print(json.dumps({"engine": "sqlite-fts5", "sqlite": sqlite3.sqlite_version, "terms": len(rows), "buildSeconds": round(build, 3),
                  "lookups": len(samples), "p50Us": round(percentile(0.5), 2), "p99Us": round(percentile(0.99), 2)}))
