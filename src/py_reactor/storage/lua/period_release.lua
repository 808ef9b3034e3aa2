-- Release a period claim: mark the claimed bucket done (on success), drop the claim (or one
-- nesting level of it) and wake every waiter so it checks again: the in-process waiters and
-- every execution parked on the period (they try again: the bucket is done, or one is due).
--
-- KEYS[1]  marker of the bucket recorded at claim time: py_reactor:period:{<key>}:done:<bucket>
-- KEYS[2]  claim: py_reactor:period:{<key>}:claim:<bucket id> (of the bucket claimed)
-- KEYS[3]  waiters: py_reactor:period:{<key>}:waiters
-- ARGV[1]  owner of the claim
-- ARGV[2]  '1' to mark the bucket done, '0' not to
-- ARGV[3]  marker expire-at, unix seconds (60 s past the bucket's end)
-- ARGV[4]  wake list prefix of this period's waiters: py_reactor:period:{<key>}:wake: (the
--          wake lists share the keys' hash tag)
-- KEYS[4]  parked: py_reactor:period:{<key>}:parked, list of execution ids parked on the period
--          (waking one writes its namespace's due set and ready list: cross-slot, as a
--          lock's release is)
--
-- Returns the claim's remaining nesting count (0 once dropped), or -1 if the owner no longer
-- held it (its lease lapsed); the marker is written either way when asked for.
--
-- Keys touched:
--   marker                  string (the owner): the bucket's work is done; EXPIREAT ARGV[3].
--   claim                   hash {owner, bucket, expire_at, count}: deleted when count hits 0.
--   waiters                 sorted set of waiter ids scored by server ms until which each
--                           waits: stale ones are dropped, the rest woken, then it is deleted.
--   <wake prefix><waiter>   list: one '1' pushed per wake-up; expires after 60 s.
--   parked                  every parked execution made due now (see _wake_parked).
-- #include _wake_parked
local owner = ARGV[1]
local remaining = -1
local woke = false

if ARGV[2] == '1' then
  redis.call('SET', KEYS[1], owner)
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
  woke = true
end
if redis.call('HGET', KEYS[2], 'owner') == owner then
  remaining = redis.call('HINCRBY', KEYS[2], 'count', -1)
  if remaining <= 0 then
    redis.call('DEL', KEYS[2])
    remaining = 0
    woke = true
  end
end

if woke then
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  local waiters = redis.call('ZRANGE', KEYS[3], 0, -1)
  for _, waiter in ipairs(waiters) do
    local wake = ARGV[4] .. waiter
    redis.call('RPUSH', wake, '1')
    redis.call('PEXPIRE', wake, 60000)
  end
  redis.call('DEL', KEYS[3])
  wake_parked(KEYS[4], true)
end
return remaining
