-- Push the caller's level of a held lock out to ttl again (auto-extend while work runs).
-- KEYS[1] hold hash {owner, count, token, seq, level:<n>} (py_reactor:lock:{<key>}:hold)
-- ARGV[1] owner; ARGV[2] ttl_ms; ARGV[3] the hold's fencing token (a stale hold extends
-- nothing); ARGV[4] the caller's level (see _lock_levels): only that level is extended, and
-- one that lapsed stays lapsed
-- Returns 1 when extended, 0 when that level is no longer held
-- #include _now
-- #include _lock_levels
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'level:' .. ARGV[4])
if h[1] ~= ARGV[1] or tonumber(h[2]) ~= tonumber(ARGV[3]) then
  return 0
end
local now = now_ms()
if tonumber(h[3] or '0') <= now then  -- lapsed: it stays lapsed
  return 0
end
add_level(KEYS[1], ARGV[4], now, tonumber(ARGV[2]))
return 1
