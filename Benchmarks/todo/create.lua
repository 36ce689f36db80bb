-- wrk: POST a new todo per request (keep-alive), alternating done so that queries on `done` select half.
local counter = 0
local headers = { ["Content-Type"] = "application/json" }

request = function()
    counter = counter + 1
    local body = string.format('{"description":"benchmark todo %d","done":%s,"tags":["bench","t%d"]}',
        counter, (counter % 2 == 0) and "true" or "false", counter % 10)
    return wrk.format("POST", "/v1/todo/buckets/todos/objects", headers, body)
end
