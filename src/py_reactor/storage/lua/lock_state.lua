-- Read a lock's state without changing it (tests, dashboards).
-- KEYS[1] hold hash {owner, count, token, waiting, by, seq, level:<n>}; KEYS[2] queue zset of
-- waiters
-- Returns {owner or "", live levels, token (0 when free), pttl_ms, waiters, by or ""}
-- #include _now
-- #include _lock_levels
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'by')
local live = 0
if h[1] then
  live = live_levels(KEYS[1], now_ms(), false)
end
if live == 0 then
  return {'', 0, 0, -2, redis.call('ZCARD', KEYS[2]), ''}
end
return {h[1], live, tonumber(h[2]), redis.call('PTTL', KEYS[1]), redis.call('ZCARD', KEYS[2]),
        h[3] or ''}
