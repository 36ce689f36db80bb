-- wrk: GET /v1/suggest with a different prefix each request (Latin and Chinese, 1-6 characters).
-- The requests are formatted once, up front: wrk shares the machine with the server, so the
-- less it spends per request, the less it takes from the server being measured.
local prefixes = { "b", "be", "bea", "st", "sta", "star", "the", "lov", "love", "matr", "harr", "god", "inter", "jack",
    "%E5%8C%97", "%E5%8C%97%E4%BA%AC", "%E4%B8%AD", "%E4%B8%AD%E5%9B%BD", "%E4%B8%8A%E6%B5%B7", "%E7%94%B5%E5%BD%B1" }
local requests = {}
local counter = 0

init = function(args)
    for index, prefix in ipairs(prefixes) do
        requests[index] = wrk.format("GET", "/v1/suggest?limit=10&q=" .. prefix)
    end
end

request = function()
    counter = counter + 1
    return requests[(counter % #requests) + 1]
end
