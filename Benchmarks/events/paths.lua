-- wrk: GET each path of PATHS_FILE (a JSON array of request targets, written by the run script)
-- in turn, one per request, so every request is a different query.
local paths = {}
local i = 0
function init(args)
    local file = io.open(args[1], "r")
    local text = file:read("*a")
    file:close()
    for target in text:gmatch('"([^"]+)"') do paths[#paths + 1] = target end
end
function request()
    i = i % #paths + 1
    return wrk.format("GET", paths[i])
end
