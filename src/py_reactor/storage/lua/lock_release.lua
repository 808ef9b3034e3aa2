-- Release one level of a re-entrant lock; at zero, hand it to the oldest live waiter.
-- KEYS[1] hold      hash {owner, count, token, waiting, by}
-- KEYS[2] queue     zset of waiters "<waiter>|<by>|<owner>|<ttl_ms>|<wait_ms>" by enqueue time
-- KEYS[3] parked    list of execution ids parked on this lock (optional, with KEYS[4], KEYS[5])
-- KEYS[4] due       zset of parked execution ids -> due time; KEYS[5] ready: list dispatchers pop
-- ARGV[1] owner; ARGV[2] the hold's fencing token (a stale hold of the same owner, whose key
-- expired and was taken again, frees nothing)
-- KEYS[1..3] and the wake lists share the lock's hash tag; KEYS[4] and KEYS[5] are global (one
-- due set for every key), so a release that may wake a parked execution is cross-slot: parking
-- cannot run on Redis Cluster until the due set is sharded.
-- Writes on handoff: the hold (new owner, count 1, new token, the waiter's by) and the waiter's
-- wake list (named from the queue's, see _queue) = token;
-- when no waiter takes the freed lock, the oldest execution parked on it is made due now
-- Returns the remaining count (> 0: still held by ARGV[1]), 0 when released, -1 when not held
-- #include _queue
-- #include _lock_handoff
-- #include _wake_parked
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token', 'waiting')
if h[1] ~= ARGV[1] or (ARGV[2] and tonumber(h[3]) ~= tonumber(ARGV[2])) then
  return -1
end
if tonumber(h[2]) > 1 then
  return redis.call('HINCRBY', KEYS[1], 'count', -1)
end
redis.call('HDEL', KEYS[1], 'owner', 'count', 'waiting', 'by')  -- the token stays till it expires
local handed = nil
if h[4] then  -- somebody queued while we held it
  handed = hand_off(KEYS[1], KEYS[2], tonumber(h[3]), redis.call('TIME'))
end
if not handed and KEYS[3] then
  wake_parked(KEYS[3], KEYS[4], KEYS[5], false)
end
return 0
