-- Recovery pass: make executions whose runner's lease lapsed due again, and list what is due.
-- KEYS[1] leases zset; KEYS[2] due zset; KEYS[3] ready list
-- ARGV[1] how many at most
-- Returns {ids due now (not removed: a claim takes them), ids recovered from lapsed leases}.
-- #include _now
local now = now_ms()
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(lapsed) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], now, id)
end
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
return {due, lapsed}
