-- _lock_handoff.lua: a library that scripts inline with an include line (see lua_source).
-- hand_off(hold, queue, deadlines, wake_prefix, prev_token, t): give a free lock to the oldest
-- waiter whose deadline has not passed, dropping the ones that gave up. The new hold gets
-- count 1, a fresh token (max(server us, prev_token + 1)), the waiter's ttl, and the "waiting"
-- flag when others still queue; the token is pushed to LIST <wake_prefix><waiter>.
-- Returns the member handed the lock, or nil when nobody waits (the hold is left untouched).
local function hand_off(hold, queue, deadlines, wake_prefix, prev_token, t)
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)
    if #head == 0 then
      return nil
    end
    local member = head[1]
    local deadline = tonumber(redis.call('HGET', deadlines, member) or '0')
    redis.call('ZREM', queue, member)
    redis.call('HDEL', deadlines, member)
    if deadline > now_ms then
      local waiter, owner, ttl = string.match(member, '^([^|]+)|(.*)|(%d+)$')
      local token = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), prev_token + 1)
      redis.call('HSET', hold, 'owner', owner, 'count', 1, 'token', token)
      if redis.call('ZCARD', queue) > 0 then
        redis.call('HSET', hold, 'waiting', 1)
      else
        redis.call('HDEL', hold, 'waiting')
      end
      redis.call('PEXPIRE', hold, ttl)
      local wake = wake_prefix .. waiter
      redis.call('RPUSH', wake, token)
      -- Outlive the handed hold: a waiter that reads it late must still learn it holds the key.
      redis.call('PEXPIRE', wake, deadline - now_ms + tonumber(ttl) + 1000)
      return member
    end
  end
end
