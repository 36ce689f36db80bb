-- wrk: POST the benchmark series in batches, each request the next batch (keep-alive).
-- Datapoint i is at INGEST_EPOCH + i seconds; its value is the rule of feeds.py's `value` (a daily
-- triangle wave plus pseudo-random noise, in integer thousandths so that Lua and Python write the
-- same text). Batch b holds datapoints b·BATCH … b·BATCH + BATCH − 1, so every time is sent once.
-- Environment:
--   INGEST_TARGET       gateway (JSON {"datapoints": [{"at", "value"}]}) or influx (line protocol, µs)
--   INGEST_PATH         the request path (with its query)
--   INGEST_EPOCH        seconds since 1970 of datapoint 0
--   INGEST_FIRST_BATCH  the first batch this run sends
--   INGEST_BATCH        datapoints per request (default 1000)
-- With several wrk threads, thread k of n sends batches first + k, first + k + n, … . At the end
-- the script prints "next batch: N", the first batch no thread has sent, for the next run.
local target = os.getenv("INGEST_TARGET") or "gateway"
local epoch = tonumber(os.getenv("INGEST_EPOCH") or "1578096000")
local first = tonumber(os.getenv("INGEST_FIRST_BATCH") or "0")
local batch = tonumber(os.getenv("INGEST_BATCH") or "1000")
wrk.method = "POST"
wrk.path = os.getenv("INGEST_PATH") or "/"
wrk.headers["Content-Type"] = (target == "influx") and "text/plain; charset=utf-8" or "application/json"

-- Set by setup() in each thread's Lua state; counter is the number of batches the thread built.
id = 0
threads = 1
counter = 0

local all = {}
function setup(thread)
    thread:set("id", #all)
    table.insert(all, thread)
    for _, t in ipairs(all) do t:set("threads", #all) end
end

local function value(i)
    local phase = i % 86400
    local wave = (phase < 43200) and phase or (86400 - phase)
    local milli = 15000 + math.floor(wave / 6) + (i * 7919) % 1000 - 500
    return string.format("%d.%03d", math.floor(milli / 1000), milli % 1000)
end

local two = {}
for n = 0, 59 do two[n] = string.format("%02d", n) end
local day, dayPrefix = nil, nil
local function stamp(seconds)
    local d = math.floor(seconds / 86400)
    if d ~= day then
        day, dayPrefix = d, os.date("!%Y-%m-%dT", d * 86400)
    end
    local s = seconds % 86400
    return dayPrefix .. two[math.floor(s / 3600)] .. ":" .. two[math.floor(s / 60) % 60] .. ":" .. two[s % 60] .. ".000000Z"
end

local function body(b)
    local parts = {}
    local base = b * batch
    if target == "influx" then
        for j = 0, batch - 1 do
            local i = base + j
            parts[j + 1] = string.format("load value=%s %d000000", value(i), epoch + i)
        end
        return table.concat(parts, "\n")
    end
    for j = 0, batch - 1 do
        local i = base + j
        parts[j + 1] = '{"at":"' .. stamp(epoch + i) .. '","value":"' .. value(i) .. '"}'
    end
    return '{"datapoints":[' .. table.concat(parts, ",") .. "]}"
end

-- wrk calls request() once in thread 0 before the run to check the request it returns (that one is
-- not sent): it gets the thread's first batch without using it up.
local checked = false
function request()
    if id == 0 and not checked then
        checked = true
        return wrk.format(nil, nil, nil, body(first))
    end
    local b = first + counter * threads + id
    counter = counter + 1
    return wrk.format(nil, nil, nil, body(b))
end

function done(summary, latency, requests)
    local nextBatch = first
    for _, t in ipairs(all) do
        local n, k, c = t:get("threads"), t:get("id"), t:get("counter")
        if c > 0 then nextBatch = math.max(nextBatch, first + (c - 1) * n + k + 1) end
    end
    io.write(string.format("next batch: %d\n", nextBatch))
end
