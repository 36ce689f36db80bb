-- wrk: a mix over every plugin, reads and writes, one request after another on each connection.
-- Environment: SOAK_TOKEN (a user's session), SOAK_FEED (a feed of that user with datastream
-- "load"; its "temp" is what the WebSocket subscribers watch), SOAK_RATE (requests per second for the whole run, 0 = as fast as possible) and
-- SOAK_CONNECTIONS (wrk's -c, to spread the rate).
local token = os.getenv("SOAK_TOKEN") or ""
local feed = os.getenv("SOAK_FEED") or "1"
local rate = tonumber(os.getenv("SOAK_RATE") or "0")
local connections = tonumber(os.getenv("SOAK_CONNECTIONS") or "1")
local counter = 0
local auth = { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }
local plain = {}
local words = { "star", "mich", "北", "jack", "the", "love", "s", "ma" }

local mix = {
    function() return wrk.format("GET", "/v1/suggest?q=" .. words[counter % #words + 1], plain) end,
    function() return wrk.format("GET", "/v1/events?city=15", plain) end,
    function() return wrk.format("GET", "/v1/transit/stops/near?lat=36.915682&lon=-116.751677", plain) end,
    function() return wrk.format("GET", "/v1/todo/buckets/todos/objects?limit=20", plain) end,
    function() return wrk.format("POST", "/v1/todo/buckets/todos/objects", auth,
                                 string.format('{"description":"soak %d","done":false}', counter)) end,
    function() return wrk.format("GET", "/v1/feeds/1/datastreams/glucose/datapoints?limit=50", plain) end,
    function() return wrk.format("POST", "/v1/feeds/" .. feed .. "/datastreams/load/datapoints", auth,
                                 string.format('[{"value": %d}]', counter % 100)) end,
    function() return wrk.format("GET", "/healthz", plain) end,
}

request = function()
    counter = counter + 1
    return mix[counter % #mix + 1]()
end

-- Pacing: each connection waits its share of the interval (wrk has no rate option).
delay = function()
    if rate <= 0 then return 0 end
    return 1000 * connections / rate
end
