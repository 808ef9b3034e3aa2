-- Recovery pass of the namespaces a worker serves: make executions whose runner's lease lapsed
-- due again (each in its own namespace's queues: the leases are shared by every application),
-- list what is due in the namespaces served, and drop from the index the executions whose
-- retention has passed (Redis expired their records).
-- KEYS[1] leases zset; KEYS[2] index zset; KEYS[3] expiring zset id -> when its record expires
-- (ms); KEYS[i], i >= 4: the due zset of each namespace served
-- ARGV[1] how many at most (of each kind)
-- Returns {ids due now in the namespaces served (not removed: a claim takes them), ids of those
-- namespaces recovered from lapsed leases}; a lapsed execution of another namespace is made due
-- in its own and pushed to its ready list, for its own workers to take and report.
-- #include _now
-- #include _layout
local now = now_ms()
local most = tonumber(ARGV[1])
local served = {}
for i = 4, #KEYS do
  served[KEYS[i]] = true
end
local lapsed = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, most)) do
  redis.call('ZREM', KEYS[1], id)
  local due, ready = queues_of(EXECUTION_PREFIX .. id)
  redis.call('ZADD', due, now, id)
  if served[due] then
    lapsed[#lapsed + 1] = id
  else  -- another application's: its own dispatchers take it from here
    redis.call('RPUSH', ready, id)
  end
end
local due = {}
for i = 4, #KEYS do
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now, 'LIMIT', 0, most)) do
    if redis.call('EXISTS', EXECUTION_PREFIX .. id) == 1 then
      due[#due + 1] = id
    else
      redis.call('ZREM', KEYS[i], id)  -- deleted by hand: nothing to run
    end
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, most)
if #expired > 0 then
  redis.call('ZREM', KEYS[2], unpack(expired))
  redis.call('ZREM', KEYS[3], unpack(expired))
end
return {due, lapsed}
