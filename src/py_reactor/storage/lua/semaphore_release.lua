-- Release one level of an owner's slot; at zero, hand the slot to the oldest live waiter.
-- KEYS[1] holders zset owner -> lease expiry; KEYS[2] counts hash owner -> nesting count
-- KEYS[3] queue zset of waiters "<waiter>|<by>|<owner>|<lease_ms>|<wait_ms>" by enqueue time
-- KEYS[4] by hash owner -> the execution and step its slot was taken for
-- KEYS[5] parked list of execution ids parked on this semaphore (optional)
-- ARGV[1] owner
-- KEYS[1..5] and the wake lists share the semaphore's hash tag; a release that wakes a parked
-- execution writes its namespace's due set and ready list (see _wake_parked), so it is
-- cross-slot: parking cannot run on Redis Cluster until the due sets are sharded.
-- Writes on handoff: the new holder's lease, count and by, the waiter's wake list = "1" (a
-- waiter whose owner already holds a slot re-enters it, and the freed slot goes on to the next)
-- Returns the remaining count (> 0: still held), 0 when released, -1 when not held
-- #include _queue
-- #include _semaphore_handoff
-- #include _wake_parked
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return -1
end
local count = redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
if count > 0 then
  return count
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local free = hand_slots(KEYS[1], KEYS[2], KEYS[4], KEYS[3], 1)
if free > 0 and KEYS[5] then  -- no waiter took the slot: the oldest parked execution may
  wake_parked(KEYS[5], false)
end
return 0
