-- Push a held lock's expiry out to ttl again (auto-extend while work runs).
-- KEYS[1] hold hash {owner, count, token}
-- ARGV[1] owner; ARGV[2] ttl_ms
-- Returns 1 when extended, 0 when the lock is no longer held by ARGV[1]
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
