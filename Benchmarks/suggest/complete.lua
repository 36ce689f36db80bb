-- wrk: GET /v1/suggest with a different prefix each request (Latin and Chinese, 1-6 characters).
local prefixes = { "b", "be", "bea", "st", "sta", "star", "the", "lov", "love", "matr", "harr", "god", "inter", "jack",
    "%E5%8C%97", "%E5%8C%97%E4%BA%AC", "%E4%B8%AD", "%E4%B8%AD%E5%9B%BD", "%E4%B8%8A%E6%B5%B7", "%E7%94%B5%E5%BD%B1" }
local counter = 0

request = function()
    counter = counter + 1
    return wrk.format("GET", "/v1/suggest?limit=10&q=" .. prefixes[(counter % #prefixes) + 1])
end
