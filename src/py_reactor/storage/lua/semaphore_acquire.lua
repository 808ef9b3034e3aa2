-- Take one of `limit` slots under a lease, or queue up to be handed one on release.
-- KEYS[1] holders   zset owner -> lease expiry (server ms); expired leases are swept here
-- KEYS[2] counts    hash owner -> nesting count (an owner re-entering holds one slot)
-- KEYS[3] queue     zset of waiters, member "<waiter>|<owner>|<lease_ms>", score = enqueue time
-- KEYS[4] deadlines hash member -> server ms after which the waiter has given up
-- KEYS[5] wake      the waiter's list a release pushes to when it hands over a slot (waiting only)
-- ARGV[1] owner; ARGV[2] limit; ARGV[3] lease_ms; ARGV[4] wake-list prefix of this semaphore's
-- waiters ("py_reactor:semaphore:{<key>}:wake:"); ARGV[5] queue member; ARGV[6] wait_ms;
-- ARGV[7] "1" when retrying after a sleep (only then can we be queued or handed a slot)
-- Returns {1, count, 0} when held, {0, ms until the soonest lease lapses, 0} when all are taken
-- A caller that will not wait passes only KEYS[1..4] and ARGV[1..4] (the common, cheap call).
-- Every key shares KEYS[1]'s hash tag (the semaphore's key), wake lists included.
-- Slots that lease lapses freed (their holders died) go to the oldest live waiters first.
-- #include _semaphore_handoff
local member = ARGV[5] or ''
local retry = ARGV[7] == '1'
local queue, deadlines = KEYS[3], KEYS[4]
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
end
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
local limit = tonumber(ARGV[2])
local free = limit - redis.call('ZCARD', KEYS[1])
if free > 0 and redis.call('EXISTS', queue) == 1 then
  -- Free slots while waiters queue: leases lapsed (their holders died), and nobody released
  -- them, so nobody handed them on. Do it now, oldest waiter first.
  hand_slots(KEYS[1], KEYS[2], queue, deadlines, ARGV[4], free)
  if member ~= '' and redis.call('LPOP', KEYS[5]) then
    return {1, tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '1'), 0}  -- we were among them
  end
end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if member ~= '' then  -- another waiter of this owner was handed a slot: we share it
    redis.call('ZREM', queue, member)
    redis.call('HDEL', deadlines, member)
  end
  local count = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  keep(KEYS[1], lease)
  keep(KEYS[2], lease)
  return {1, count, 0}
end
if redis.call('ZCARD', KEYS[1]) < limit then
  if retry then
    redis.call('ZREM', queue, member)
    redis.call('HDEL', deadlines, member)
  end
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], 1)
  keep(KEYS[1], lease)
  keep(KEYS[2], lease)
  return {1, 1, 0}
end
if member ~= '' then
  if redis.call('ZADD', queue, 'NX', now_us, member) == 1 then
    redis.call('HSET', deadlines, member, now + tonumber(ARGV[6]))
  end
  keep(queue, tonumber(ARGV[6]) + lease)
  keep(deadlines, tonumber(ARGV[6]) + lease)
end
local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(tonumber(soonest[2]) - now, 1), 0}
