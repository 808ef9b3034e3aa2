-- _semaphore_handoff.lua: a library that scripts inline with an include line (see lua_source).
-- Needs _queue.
-- hand_slots(holders, counts, by, queue, free): give up to `free` free slots to the
-- oldest waiters whose deadline has not passed, dropping the ones that gave up. Each gets a
-- lease of its own length, its by recorded, and a "1" pushed to its wake list (see
-- wake_prefix), kept alive past that lease. A waiter whose owner already holds a slot
-- re-enters it and uses up no free slot (the slot keeps the by it was taken for).
-- Returns how many of the `free` slots are still free.
local function hand_slots(holders, counts, by_owner, queue, free)
  if free <= 0 or redis.call('EXISTS', queue) == 0 then
    return free
  end
  local t = redis.call('TIME')  -- the clock is read only when someone waits
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while free > 0 do
    local waiter, owner, lease, deadline, by = pop_live(queue, now_ms)
    if not waiter then
      return free
    end
    local had_slot = redis.call('ZSCORE', holders, owner)
    redis.call('ZADD', holders, now_ms + lease, owner)
    redis.call('HINCRBY', counts, owner, 1)
    if not had_slot and by ~= '' then
      redis.call('HSET', by_owner, owner, by)
    end
    if redis.call('PTTL', holders) < lease then
      redis.call('PEXPIRE', holders, lease)
      redis.call('PEXPIRE', counts, lease)
      redis.call('PEXPIRE', by_owner, lease)
    end
    local wake = wake_prefix(queue) .. waiter
    redis.call('RPUSH', wake, '1')
    redis.call('PEXPIRE', wake, deadline - now_ms + lease + 1000)
    if not had_slot then
      free = free - 1
    end
  end
  return free
end
