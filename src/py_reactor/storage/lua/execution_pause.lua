-- Store an execution paused at an interrupt: created now (a run paused in the caller, never
-- stored before) or written by its runner (compare-and-set on the epoch).
-- KEYS[1] record hash; KEYS[2] index zset; KEYS[3] leases zset; KEYS[4] the set of every
-- namespace (its due set is its namespace's, see _layout)
-- ARGV[1] id; ARGV[2] epoch ("" to create it: refused if it exists); ARGV[3] reactor
-- (module:qualname); ARGV[4] context JSON; ARGV[5] waiting_on JSON; ARGV[6] ms until its
-- timeout ("" when none): then it is in the due set, and a worker may claim it once that time
-- has come (to fail the interrupt step); ARGV[7] the Celery queue ("" when none); ARGV[8]
-- "host:pid:<script path>" for a reactor of a __main__ script (only that script runs it), or "";
-- ARGV[9] its namespace (written when it is created here)
-- Returns 1 when written, 0 when the epoch moved on (or, creating, the id exists).
-- #include _now
-- #include _layout
local now = now_ms()
if ARGV[2] == '' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
  end
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'reactor', ARGV[3], 'epoch', 0, 'created_at', now,
    'parks', 0, 'pinned', ARGV[8], 'queue', ARGV[7], 'namespace', ARGV[9])
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('SADD', KEYS[4], ARGV[9])
elseif tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1') ~= tonumber(ARGV[2]) then
  return 0
end
local timeout_at = ''
if ARGV[6] ~= '' then
  timeout_at = now + tonumber(ARGV[6])
  redis.call('ZADD', (queues_of(KEYS[1])), timeout_at, ARGV[1])
else
  redis.call('ZREM', (queues_of(KEYS[1])), ARGV[1])
end
redis.call('HSET', KEYS[1], 'context', ARGV[4], 'status', 'paused', 'updated_at', now,
  'waiting_on', ARGV[5], 'outcome', '', 'timeout_at', timeout_at)
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
