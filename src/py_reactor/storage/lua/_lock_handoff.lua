-- _lock_handoff.lua: a library that scripts inline with an include line (see lua_source).
-- Needs _queue.
-- hand_off(hold, queue, prev_token, t): give a free lock to the oldest waiter
-- whose deadline has not passed, dropping the ones that gave up. The new hold gets count 1 (its
-- level 1, lapsing after the waiter's ttl: see _lock_levels), a fresh token (max(server us,
-- prev_token + 1)), the waiter's ttl and by, and the "waiting" flag when others still queue
-- (callers pass a hold without the flag, a by or any level); the token is pushed to the
-- waiter's wake list (see wake_prefix).
-- Returns the waiter handed the lock, or nil when nobody waits (the hold is left untouched).
local function hand_off(hold, queue, prev_token, t)
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now_ms = math.floor(now_us / 1000)
  local waiter, owner, ttl, deadline, by = pop_live(queue, now_ms)
  if not waiter then
    return nil
  end
  local token = math.max(now_us, prev_token + 1)
  local lapses = now_ms + ttl
  if redis.call('ZCARD', queue) > 0 then
    redis.call('HSET', hold, 'owner', owner, 'count', 1, 'token', token, 'seq', 1, 'level:1', lapses,
      'waiting', 1)
  else
    redis.call('HSET', hold, 'owner', owner, 'count', 1, 'token', token, 'seq', 1, 'level:1', lapses)
  end
  if by ~= '' then
    redis.call('HSET', hold, 'by', by)
  end
  redis.call('PEXPIRE', hold, ttl)
  local wake = wake_prefix(queue) .. waiter
  redis.call('RPUSH', wake, token)
  -- Outlive the handed hold: a waiter that reads it late must still learn it holds the key.
  redis.call('PEXPIRE', wake, deadline - now_ms + ttl + 1000)
  return waiter
end
