-- Leave an execution whose reactor this worker cannot import for another worker: nothing is
-- claimed (the epoch does not move); it is made due again a little later, and the record
-- remembers when a worker first could not import it, so the grace is counted across workers.
-- KEYS[1] record hash; KEYS[2] leases zset (the due set is its namespace's)
-- ARGV[1] id; ARGV[2] the grace in ms (unimportable_grace); ARGV[3] ms until it is due again
-- (at most the grace left)
-- Returns 1 when left (within the grace); 0 when the grace is over (the caller claims it and
-- fails it) or it is not this worker's to leave (ended, paused, or another runner's lease is
-- live: the claim decides then); -1 when unknown.
-- #include _now
-- #include _layout
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return -1
end
local now = now_ms()
local lease = redis.call('ZSCORE', KEYS[2], ARGV[1])
if (status ~= 'pending' and status ~= 'waiting' and status ~= 'running')
    or (lease and tonumber(lease) > now) then
  return 0
end
local since = tonumber(redis.call('HGET', KEYS[1], 'unimportable_since') or '')
if not since then
  since = now
  redis.call('HSET', KEYS[1], 'unimportable_since', now)
end
local left = since + tonumber(ARGV[2]) - now
if left <= 0 then
  return 0
end
redis.call('ZADD', (queues_of(KEYS[1])), now + math.min(tonumber(ARGV[3]), left), ARGV[1])
return 1
