-- Renew an owner's lease on its slot (auto-extend while work runs).
-- KEYS[1] holders zset owner -> lease expiry (server ms); KEYS[2] counts hash; KEYS[3] by hash
-- ARGV[1] owner; ARGV[2] lease_ms
-- Returns 1 when renewed, 0 when the owner holds no slot (its lease lapsed)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
end
return 1
