-- wrk: the same indexed where + order query each time, through POST /query (never cached, so
-- every request reaches the database).
wrk.method = "POST"
wrk.path = "/v1/todo/buckets/todos/query"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"where":{"done":false},"order":"-updatedAt","limit":20}'
