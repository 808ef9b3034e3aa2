-- Read a lock's state without changing it (tests, dashboards).
-- KEYS[1] hold hash {owner, count, token, waiting, by}; KEYS[2] queue zset of waiters
-- Returns {owner or "", count, token (0 when free), pttl_ms, waiters, by or ""}
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token', 'by')
if not h[1] then
  return {'', 0, 0, -2, redis.call('ZCARD', KEYS[2]), ''}
end
return {h[1], tonumber(h[2]), tonumber(h[3]), redis.call('PTTL', KEYS[1]),
        redis.call('ZCARD', KEYS[2]), h[4] or ''}
