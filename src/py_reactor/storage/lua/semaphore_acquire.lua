-- Take one of `limit` slots under a lease, or queue up to be handed one on release.
-- KEYS[1] holders   zset owner -> lease expiry (server ms); expired leases are swept here
-- KEYS[2] counts    hash owner -> nesting count (an owner re-entering holds one slot)
-- KEYS[3] queue     zset of waiters, member "<waiter>|<by>|<owner>|<lease_ms>|<wait_ms>",
--                   score = enqueue time (server us); see _queue
-- KEYS[4] by        hash owner -> the execution and step its slot was taken for
-- KEYS[5] wake      the waiter's list a release pushes to when it hands over a slot: passed only
--                   when retrying after a sleep (only then can we be queued or handed a slot)
-- ARGV[1] owner; ARGV[2] limit; ARGV[3] lease_ms; ARGV[4] queue member, when the caller will wait
-- ('' if not); ARGV[5] by: written with a fresh slot ('' for none)
-- Returns {1, count, 0} when held, {0, ms until the soonest lease lapses, 0} when all are taken
-- A caller that will wait passes its member on the first call too: a free slot is simply
-- taken, a full semaphore queues it, so contention costs no extra round trip.
-- Every key shares KEYS[1]'s hash tag (the semaphore's key), wake lists included (see _queue).
-- Slots that lease lapses freed (their holders died) go to the oldest live waiters first.
-- #include _queue
-- #include _semaphore_handoff
local member = ARGV[4] or ''
local retry = KEYS[5] ~= nil
local queue = KEYS[3]
if retry and redis.call('LPOP', KEYS[5]) then
  -- A release handed us a slot after our last sleep ended: that is our hold.
  return {1, tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '1'), 0}
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local lease = tonumber(ARGV[3])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('ZREM', KEYS[1], gone)
  redis.call('HDEL', KEYS[2], gone)
  redis.call('HDEL', KEYS[4], gone)
end
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
local limit = tonumber(ARGV[2])
local free = limit - redis.call('ZCARD', KEYS[1])
-- Free slots while waiters queue: leases lapsed (their holders died), and nobody released
-- them, so nobody handed them on. Do it now, oldest waiter first.
if free > 0 then
  hand_slots(KEYS[1], KEYS[2], KEYS[4], queue, free)
  if retry and redis.call('LPOP', KEYS[5]) then
    return {1, tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '1'), 0}  -- we were among them
  end
end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if retry then  -- another waiter of this owner was handed a slot: we share it
    redis.call('ZREM', queue, member)
  end
  local count = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  keep(KEYS[1], lease)
  keep(KEYS[2], lease)
  keep(KEYS[4], lease)
  return {1, count, 0}
end
if redis.call('ZCARD', KEYS[1]) < limit then
  if retry then
    redis.call('ZREM', queue, member)
  end
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], 1)
  if (ARGV[5] or '') ~= '' then
    redis.call('HSET', KEYS[4], ARGV[1], ARGV[5])
  end
  keep(KEYS[1], lease)
  keep(KEYS[2], lease)
  keep(KEYS[4], lease)
  return {1, 1, 0}
end
if member ~= '' then
  join_queue(queue, member, now_us, lease)
end
local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(tonumber(soonest[2]) - now, 1), 0}
