-- Read a semaphore's live holders without changing anything (tests, dashboards).
-- KEYS[1] holders zset owner -> lease expiry (server ms); KEYS[2] queue zset of waiters
-- Returns {number of live holders, number of queued waiters}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'), redis.call('ZCARD', KEYS[2])}
