-- ordered_lock_turn.lua: is it this position's turn? Skips dead blockers on the way.
--
-- A position passes when its number is done + 1. While an earlier position blocks it, every
-- blocker whose heartbeat is older than the poison-pill timeout (or missing: it was abandoned)
-- is skipped: done advances past it, not counted as a failure, and the position that becomes
-- current is woken. The caller's own heartbeat is refreshed (it is evidently alive).
--
-- KEYS[1]  state   py_reactor:ordered_lock:{<key>}:state
-- KEYS[2]  beats   py_reactor:ordered_lock:{<key>}:beats
-- KEYS[3]  mine    py_reactor:ordered_lock:{<key>}:wake:<epoch>:<number>, this position's wake
--                  list (deleted when the turn is taken)
-- ARGV[1]  epoch   the position's epoch (digits)
-- ARGV[2]  number  the position's number
-- ARGV[3]  poison  the poison-pill timeout, in milliseconds
-- ARGV[4]  ttl     expiry of every key written, in milliseconds
-- ARGV[5]  wake    py_reactor:ordered_lock:{<key>}:wake: (prefix of the wake lists; the one of
--                  the position that becomes current is <wake><epoch>:<number>, same hash tag)
--
-- Reply:   {1, failed, 0}            its turn; failed = 1 if an earlier position of this epoch
--                                    released as failed (strict)
--          {0, blocker, stale_in}    not yet: position `blocker` is current and turns stale in
--                                    `stale_in` milliseconds unless it heartbeats again
--          {-1, done, 0}             never: the position is of an ended epoch, or was skipped
--
-- Keys:
--   state  hash  epoch, issued, done, failed (see ordered_lock_take.lua)
--   beats  hash  <number> -> server time in milliseconds of that position's last heartbeat
--   <wake><epoch>:<number>  list  pushed to (one element at most) when <number> becomes the
--                current position; its waiter blocks on it. Deleted when the turn is taken.

local state, beats, mine, wake = KEYS[1], KEYS[2], KEYS[3], ARGV[5]
local epoch, number = ARGV[1], tonumber(ARGV[2])
local poison, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])

local current = redis.call('HMGET', state, 'epoch', 'issued', 'done', 'failed')
if current[1] ~= epoch then
  return {-1, 0, 0}
end
local issued, done = tonumber(current[2]), tonumber(current[3])
if number <= done or number > issued then
  return {-1, done, 0}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local skipped = false
local blocker_age = 0
while done + 1 < number do
  local beat = redis.call('HGET', beats, done + 1)
  if beat then
    blocker_age = now - tonumber(beat)
    if blocker_age < poison then
      break
    end
  end
  redis.call('HDEL', beats, done + 1)
  done = done + 1
  skipped = true
end

redis.call('HSET', beats, number, now)
if skipped then
  redis.call('HSET', state, 'done', done)
  if done + 1 < number then
    local next_wake = wake .. epoch .. ':' .. (done + 1)
    redis.call('DEL', next_wake)
    redis.call('RPUSH', next_wake, 'skip')
    redis.call('PEXPIRE', next_wake, ttl)
  end
end
redis.call('PEXPIRE', state, ttl)
redis.call('PEXPIRE', beats, ttl)

if done + 1 == number then
  redis.call('DEL', mine)
  return {1, tonumber(current[4]) or 0, 0}
end
return {0, done + 1, poison - blocker_age}
