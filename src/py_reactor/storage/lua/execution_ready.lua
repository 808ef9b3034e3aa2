-- Make an execution due now and tell its namespace's dispatchers (a resumed run, say).
-- KEYS[1] record hash (its due set and ready list are its namespace's, see _layout)
-- ARGV[1] id
-- Returns 1, or 0 when the record is gone (nothing is made due).
-- #include _layout
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local due, ready = queues_of(KEYS[1])
redis.call('ZADD', due, 0, ARGV[1])
redis.call('RPUSH', ready, ARGV[1])
return 1
