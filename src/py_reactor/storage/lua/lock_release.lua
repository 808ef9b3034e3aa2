-- Release one level of a re-entrant lock; at zero, hand it to the oldest live waiter.
-- KEYS[1] hold      hash {owner, count, token, waiting}
-- KEYS[2] queue     zset of waiters, member "<waiter>|<owner>|<ttl_ms>", score = enqueue time
-- KEYS[3] deadlines hash member -> server ms after which the waiter has given up
-- KEYS[4] parked    list of execution ids parked on this lock (optional, with KEYS[5], KEYS[6])
-- KEYS[5] due       zset of parked execution ids -> due time; KEYS[6] ready: list dispatchers pop
-- ARGV[1] owner; ARGV[2] wake-list prefix of this lock's waiters ("py_reactor:lock:{<key>}:wake:");
-- ARGV[3] the hold's fencing token (a stale hold of the same owner, whose key expired and was
-- taken again, frees nothing)
-- KEYS[1..4] and the wake lists share the lock's hash tag; KEYS[5] and KEYS[6] are global (one
-- due set for every key), so a release that may wake a parked execution is cross-slot: parking
-- cannot run on Redis Cluster until the due set is sharded.
-- Writes on handoff: the hold (new owner, count 1, new token) and LIST <prefix><waiter> = token;
-- when no waiter takes the freed lock, the oldest execution parked on it is made due now
-- Returns the remaining count (> 0: still held by ARGV[1]), 0 when released, -1 when not held
-- #include _lock_handoff
-- #include _wake_parked
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token', 'waiting')
if h[1] ~= ARGV[1] or (ARGV[3] and tonumber(h[3]) ~= tonumber(ARGV[3])) then
  return -1
end
if tonumber(h[2]) > 1 then
  return redis.call('HINCRBY', KEYS[1], 'count', -1)
end
redis.call('HDEL', KEYS[1], 'owner', 'count', 'waiting')  -- the token stays until the key expires
local handed = nil
if h[4] then  -- somebody queued while we held it
  handed = hand_off(KEYS[1], KEYS[2], KEYS[3], ARGV[2], tonumber(h[3]), redis.call('TIME'))
end
if not handed and KEYS[4] then
  wake_parked(KEYS[4], KEYS[5], KEYS[6], false)
end
return 0
