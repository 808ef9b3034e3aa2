-- Push a running execution's lease out, if the caller still owns it.
-- KEYS[1] record hash; KEYS[2] leases zset; ARGV[1] id; ARGV[2] epoch; ARGV[3] lease ms
-- Returns 1 when renewed, 0 when the epoch moved on or it is no longer running (it parked or
-- ended since the renewer looked: a lease put back then would keep wakes from claiming it).
-- #include _now
local h = redis.call('HMGET', KEYS[1], 'epoch', 'status')
if tonumber(h[1] or '-1') ~= tonumber(ARGV[2]) or h[2] ~= 'running'
    or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
