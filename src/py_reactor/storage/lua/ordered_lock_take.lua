-- ordered_lock_take.lua: hand out the next position of an ordered lock's sequence.
--
-- Numbers a caller's place in line (INCR of the epoch's sequence) and records a first
-- heartbeat for it in the same step, so a position never exists without a heartbeat.
--
-- KEYS[1]  state   py_reactor:ordered_lock:{<key>}:state
-- KEYS[2]  beats   py_reactor:ordered_lock:{<key>}:beats
-- ARGV[1]  ttl     expiry of every key written, in milliseconds
--
-- Reply:   {epoch, number}  epoch as a string of digits, number an integer >= 1
--
-- Keys:
--   state  hash  epoch   the current epoch; created as the server time in microseconds, so an
--                        epoch created after the key expired is larger than every earlier one;
--                        +1 each time the sequence drains
--                issued  the last position number handed out in this epoch (0 = none)
--                done    the last position completed or skipped in this epoch (0 = none)
--                failed  1 once a position of this epoch released as failed in strict mode
--   beats  hash  <number> -> server time in milliseconds of that position's last heartbeat,
--                for positions of the current epoch not yet released, skipped or abandoned
--
-- Time is the server's (TIME), so clients with skewed clocks agree on staleness.

local state, beats = KEYS[1], KEYS[2]
local ttl = tonumber(ARGV[1])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local epoch = redis.call('HGET', state, 'epoch')
if not epoch then
  -- digits, not a Lua number: a double would print 16 digits in exponent notation
  epoch = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  redis.call('HSET', state, 'epoch', epoch, 'issued', 0, 'done', 0, 'failed', 0)
end
local number = redis.call('HINCRBY', state, 'issued', 1)
redis.call('HSET', beats, number, now)
redis.call('PEXPIRE', state, ttl)
redis.call('PEXPIRE', beats, ttl)
return {epoch, number}
