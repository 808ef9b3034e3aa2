-- ordered_lock_heartbeat.lua: tell the sequence a waiting or working position is alive.
--
-- Refreshes the position's heartbeat with the server time, so it is not skipped as a poison
-- pill, and pushes out the expiry of the lock's keys. Refuses (and writes nothing) once the
-- position is no longer pending: released, skipped, abandoned, or of an ended epoch.
--
-- KEYS[1]  state   py_reactor:ordered_lock:{<key>}:state
-- KEYS[2]  beats   py_reactor:ordered_lock:{<key>}:beats
-- ARGV[1]  epoch   the position's epoch (digits)
-- ARGV[2]  number  the position's number
-- ARGV[3]  ttl     expiry of every key written, in milliseconds
--
-- Reply:   1 refreshed; 0 the position is no longer pending (stop heartbeating)
--
-- Keys:
--   state  hash  epoch, issued, done, failed (see ordered_lock_take.lua)
--   beats  hash  <number> -> server time in milliseconds of that position's last heartbeat

local state, beats = KEYS[1], KEYS[2]
local epoch, number, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local current = redis.call('HMGET', state, 'epoch', 'done')
if current[1] ~= epoch or number <= tonumber(current[2]) then
  return 0
end
if redis.call('HEXISTS', beats, number) == 0 then
  return 0
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', beats, number, now)
redis.call('PEXPIRE', state, ttl)
redis.call('PEXPIRE', beats, ttl)
return 1
