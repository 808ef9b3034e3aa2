-- _semaphore_handoff.lua: a library that scripts inline with an include line (see lua_source).
-- hand_slots(holders, counts, queue, deadlines, wake_prefix, free): give up to `free` free slots
-- to the oldest waiters whose deadline has not passed, dropping the ones that gave up. Each gets
-- a lease of its own length and a "1" pushed to LIST <wake_prefix><waiter>, kept alive past that
-- lease. A waiter whose owner already holds a slot re-enters it and uses up no free slot.
-- Returns how many of the `free` slots are still free.
local function hand_slots(holders, counts, queue, deadlines, wake_prefix, free)
  local now_ms = nil
  while free > 0 do
    local head = redis.call('ZRANGE', queue, 0, 0)
    if #head == 0 then
      return free
    end
    if not now_ms then  -- the clock is read only when someone waits
      local t = redis.call('TIME')
      now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local member = head[1]
    local deadline = tonumber(redis.call('HGET', deadlines, member) or '0')
    redis.call('ZREM', queue, member)
    redis.call('HDEL', deadlines, member)
    if deadline > now_ms then
      local waiter, owner, lease = string.match(member, '^([^|]+)|(.*)|(%d+)$')
      local had_slot = redis.call('ZSCORE', holders, owner)
      redis.call('ZADD', holders, now_ms + tonumber(lease), owner)
      redis.call('HINCRBY', counts, owner, 1)
      if redis.call('PTTL', holders) < tonumber(lease) then
        redis.call('PEXPIRE', holders, lease)
        redis.call('PEXPIRE', counts, lease)
      end
      local wake = wake_prefix .. waiter
      redis.call('RPUSH', wake, '1')
      redis.call('PEXPIRE', wake, deadline - now_ms + tonumber(lease) + 1000)
      if not had_slot then
        free = free - 1
      end
    end
  end
  return free
end
