-- Push a running execution's lease out, if the caller still owns it.
-- KEYS[1] record hash; KEYS[2] leases zset; ARGV[1] id; ARGV[2] epoch; ARGV[3] lease ms
-- Returns 1 when renewed, 0 when the epoch moved on.
-- #include _now
if tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1') ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
