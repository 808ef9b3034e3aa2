-- Release the caller's level of a re-entrant lock; with none left, hand it to the oldest live
-- waiter.
-- KEYS[1] hold      hash {owner, count, token, waiting, by, seq, level:<n>} (see _lock_levels)
-- KEYS[2] queue     zset of waiters "<waiter>|<by>|<owner>|<ttl_ms>|<wait_ms>" by enqueue time
-- KEYS[3] parked    list of execution ids parked on this lock (optional)
-- ARGV[1] owner; ARGV[2] the hold's fencing token (a stale hold of the same owner, whose key
-- expired and was taken again, frees nothing); ARGV[3] the caller's level: only that level is
-- given back, so a runner that wakes after its level lapsed (or after a recovered run of its
-- execution re-entered the hold) frees nothing of anyone else's
-- KEYS[1..3] and the wake lists share the lock's hash tag; a release that wakes a parked
-- execution writes its record's namespace's due set and ready list (see _wake_parked), so it
-- is cross-slot: parking cannot run on Redis Cluster until the due sets are sharded.
-- Writes on handoff: the hold (new owner, count 1, new token, the waiter's by) and the waiter's
-- wake list (named from the queue's, see _queue) = token;
-- when no waiter takes the freed lock, the oldest execution parked on it is made due now
-- Returns the live levels left (> 0: still held by ARGV[1], expiring with the latest of them),
-- 0 when released, -1 when the caller's level was not held (lapsed, or another hold's)
-- #include _now
-- #include _queue
-- #include _lock_handoff
-- #include _lock_levels
-- #include _wake_parked
local mine = 'level:' .. ARGV[3]
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token', 'waiting', mine)
if h[1] ~= ARGV[1] or tonumber(h[3]) ~= tonumber(ARGV[2]) then
  return -1
end
if not h[5] then  -- our level lapsed and was dropped: nothing of ours to give back
  return -1
end
-- A single level lapses with the hash itself, so finding it proves it live: only a hold of
-- several levels needs the clock.
if tonumber(h[2]) > 1 then
  local now = now_ms()
  if tonumber(h[5]) <= now then  -- our level lapsed: nothing of ours to give back
    return -1
  end
  redis.call('HDEL', KEYS[1], mine)
  local live, latest = live_levels(KEYS[1], now, true)
  if live > 0 then
    redis.call('HSET', KEYS[1], 'count', live)
    redis.call('PEXPIRE', KEYS[1], latest - now)  -- lives as long as its latest level
    return live
  end
end
-- the token stays until the key expires
redis.call('HDEL', KEYS[1], 'owner', 'count', 'waiting', 'by', 'seq', mine)
local handed = nil
if h[4] then  -- somebody queued while we held it
  handed = hand_off(KEYS[1], KEYS[2], tonumber(h[3]), redis.call('TIME'))
end
if not handed and KEYS[3] then
  wake_parked(KEYS[3], false)
end
return 0
