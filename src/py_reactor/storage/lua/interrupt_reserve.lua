-- Reserve an interrupt's correlation id for one paused execution: unique per reactor while
-- that run is paused.
-- KEYS[1] py_reactor:interrupt:{<reactor>}:{<correlation id>} (string: the execution id)
-- ARGV[1] execution id; ARGV[2] the prefix of execution records (py_reactor:exec:); ARGV[3]
-- ms the reservation lives (its deadline plus a margin), "" for ever (until a resume, a cancel
-- or a pause of another run that finds this one no longer paused)
-- The run holding it is read by the id it stores: a record outside KEYS, as execution records
-- are cross-slot until the due set is sharded.
-- Returns "" when it is now ARGV[1]'s, else the id of the paused run that holds it.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  if redis.call('HGET', ARGV[2] .. holder, 'status') == 'paused' then
    return holder
  end
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[3]))
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return ''
