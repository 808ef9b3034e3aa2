-- ordered_lock_state.lua: read an ordered lock's counters (tests, dashboards). Writes nothing.
--
-- KEYS[1]  state   py_reactor:ordered_lock:{<key>}:state
--
-- Reply:   {epoch, issued, done, failed}  epoch as a string of digits ('0' when the key has
--          never been used or has expired); issued, done and failed as integers
--
-- Keys:
--   state  hash  epoch, issued, done, failed (see ordered_lock_take.lua)

local current = redis.call('HMGET', KEYS[1], 'epoch', 'issued', 'done', 'failed')
return {
  current[1] or '0',
  tonumber(current[2]) or 0,
  tonumber(current[3]) or 0,
  tonumber(current[4]) or 0,
}
