-- wrk: one-seat reservations of unlimited showings (ids from SHOWINGS_FILE, a JSON array), as the
-- user whose session token is the second argument.
local showings = {}
local i = 0
local token
function init(args)
    local file = io.open(args[1], "r")
    local text = file:read("*a")
    file:close()
    for id in text:gmatch("%d+") do showings[#showings + 1] = id end
    token = args[2]
end
function request()
    i = i % #showings + 1
    return wrk.format("POST", "/v1/events/showings/" .. showings[i] .. "/reservations",
        { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }, '{"seats": 1}')
end
