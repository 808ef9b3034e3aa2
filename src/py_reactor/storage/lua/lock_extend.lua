-- Push a held lock's expiry out to ttl again (auto-extend while work runs).
-- KEYS[1] hold hash {owner, count, token} (py_reactor:lock:{<key>}:hold)
-- ARGV[1] owner; ARGV[2] ttl_ms; ARGV[3] the hold's fencing token (a stale hold extends nothing)
-- Returns 1 when extended, 0 when the lock is no longer held by ARGV[1]
local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if h[1] ~= ARGV[1] or (ARGV[3] and tonumber(h[2]) ~= tonumber(ARGV[3])) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
