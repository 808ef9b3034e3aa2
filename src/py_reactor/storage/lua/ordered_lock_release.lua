-- ordered_lock_release.lua: finish (or abandon) a position and pass the turn on.
--
-- The current position (done + 1) advances done to itself, records a failure when asked,
-- then skips the following positions that are abandoned (no heartbeat) or dead (heartbeat
-- older than the poison-pill timeout) and wakes the position that becomes current. When
-- nothing is left (done == issued) the sequence has drained: the counters reset and the epoch
-- increments, which fences off any straggler of the old epoch. A position released before its
-- turn is abandoned: its heartbeat is removed, so it is skipped the moment it comes up.
-- A position of an ended epoch, or one already released or skipped, changes nothing.
--
-- KEYS[1]  state   py_reactor:ordered_lock:{<key>}:state
-- KEYS[2]  beats   py_reactor:ordered_lock:{<key>}:beats
-- KEYS[3]  parked  py_reactor:ordered_lock:{<key>}:parked, execution ids parked on this
--                  ordered lock (optional); every one is woken when the turn passes on:
--                  each checks its own turn
-- ARGV[1]  epoch   the position's epoch (digits)
-- ARGV[2]  number  the position's number
-- ARGV[3]  failed  1 to record that this position failed (strict mode), else 0
-- ARGV[4]  poison  the poison-pill timeout, in milliseconds
-- ARGV[5]  ttl     expiry of every key written, in milliseconds
-- ARGV[6]  wake    py_reactor:ordered_lock:{<key>}:wake: (prefix of the wake lists; the one of
--                  the position that becomes current is <wake><epoch>:<number>)
-- KEYS[1..3] and the wake lists share the lock's hash tag; waking a parked execution writes
-- its namespace's due set and ready list (see _wake_parked), so this script is cross-slot when
-- it wakes parked executions: parking cannot run on Redis Cluster until they are sharded.
--
-- Reply:   {1, done}  the turn passed on; done is the new last completed position
--          {2, 0}     the turn passed on and the sequence drained (a new epoch began)
--          {3, 0}     abandoned before its turn
--          {0, 0}     nothing changed (ended epoch, already released or skipped)
--
-- Keys:
--   state  hash  epoch, issued, done, failed (see ordered_lock_take.lua)
--   beats  hash  <number> -> server time in milliseconds of that position's last heartbeat
--   <wake><epoch>:<number>  list  pushed to (one element at most) when <number> becomes the
--                current position; its waiter blocks on it

-- #include _wake_parked
local state, beats, wake = KEYS[1], KEYS[2], ARGV[6]
local function passed(reply)
  if KEYS[3] then
    wake_parked(KEYS[3], true)
  end
  return reply
end
local epoch, number = ARGV[1], tonumber(ARGV[2])
local failed, poison, ttl = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])

local current = redis.call('HMGET', state, 'epoch', 'issued', 'done')
if current[1] ~= epoch then
  return {0, 0}
end
local issued, done = tonumber(current[2]), tonumber(current[3])
if number <= done or number > issued then
  return {0, 0}
end

redis.call('HDEL', beats, number)
if number ~= done + 1 then
  redis.call('PEXPIRE', state, ttl)
  redis.call('PEXPIRE', beats, ttl)
  return {3, 0}
end

if failed == '1' then
  redis.call('HSET', state, 'failed', 1)
end
done = number

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while done < issued do
  local beat = redis.call('HGET', beats, done + 1)
  if beat and now - tonumber(beat) < poison then
    break
  end
  redis.call('HDEL', beats, done + 1)
  done = done + 1
end

if done == issued then
  redis.call('HINCRBY', state, 'epoch', 1)
  redis.call('HSET', state, 'issued', 0, 'done', 0, 'failed', 0)
  redis.call('DEL', beats)
  redis.call('PEXPIRE', state, ttl)
  return passed({2, 0})
end

redis.call('HSET', state, 'done', done)
local next_wake = wake .. epoch .. ':' .. (done + 1)
redis.call('DEL', next_wake)
redis.call('RPUSH', next_wake, 'turn')
redis.call('PEXPIRE', next_wake, ttl)
redis.call('PEXPIRE', state, ttl)
redis.call('PEXPIRE', beats, ttl)
return passed({1, done})
