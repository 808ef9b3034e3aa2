-- Store a new execution before anything is enqueued, and make it due now.
-- KEYS[1] record hash py_reactor:exec:<id>; KEYS[2] index zset id -> created ms;
-- KEYS[3] its namespace's due zset id -> due ms; KEYS[4] its namespace's ready list, which
-- that namespace's dispatchers pop; KEYS[5] the set of every namespace
-- ARGV[1] id; ARGV[2] reactor (module:qualname); ARGV[3] context JSON; ARGV[4] status;
-- ARGV[5] "host:pid:<script path>" for a reactor of a __main__ script (only that script can
-- import it), or ""; ARGV[6] "0" when the caller sends the job itself (not pushed to the ready
-- list, and due only after ARGV[7] ms: the recovery loop sends it again if that job is lost);
-- ARGV[8] the queue its jobs go to ("" when none: the thread worker); ARGV[9] its namespace
-- Returns 1, or 0 when an execution with that id exists already (nothing is written).
-- #include _now
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local now = now_ms()
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'reactor', ARGV[2], 'context', ARGV[3],
  'status', ARGV[4], 'epoch', 0, 'created_at', now, 'updated_at', now, 'parks', 0,
  'pinned', ARGV[5] or '', 'queue', ARGV[8] or '', 'namespace', ARGV[9])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('SADD', KEYS[5], ARGV[9])
if ARGV[6] == '0' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[7]), ARGV[1])
else
  redis.call('ZADD', KEYS[3], now, ARGV[1])
  redis.call('RPUSH', KEYS[4], ARGV[1])
  redis.call('LTRIM', KEYS[4], -10000, -1)
end
return 1
